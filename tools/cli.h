/* Shared declarations of the `cucore` command's subcommands. */
#ifndef CUC_CLI_H
#define CUC_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "cucore.h"

/* Each subcommand gets argv after its own name; returns the exit code. */
int cli_devices(int argc, char **argv);
int cli_demo(int argc, char **argv);
int cli_pack(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_connect(int argc, char **argv);

/* Prints "cucore: <what>: <cuc_errmsg()>" to stderr; returns exit code 1. */
int cli_fail(const char *what, int status);

/* JSON string output with escaping. */
void json_str(FILE *f, const char *s);

/* Reads all of path ("-": stdin) into a malloc'd buffer, at most
 * CUC_MSG_MAX_BYTES; says why on stderr ("cucore: CMD: ...") and returns 1
 * otherwise. */
int cli_read_file(const char *cmd, const char *path, uint8_t **data, size_t *len);

/* Lower-case hex of n bytes into out (2n + 1 bytes with the NUL). */
void cli_hex(const uint8_t *bytes, size_t n, char *out);

/* Says on stderr which driver is in use when it is the simulator. */
void cli_note_driver(FILE *f);

#endif
