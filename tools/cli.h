/* Shared declarations of the `cucore` command's subcommands.
 *
 * Exit status, the same for every subcommand (main.c's --help says it):
 *   0  success
 *   1  failure: the reason on stderr ("cucore: ..."), and with --json an
 *      error object {"error":{"code":"CUC_E_...","message":"..."}} as the
 *      JSON output
 *   2  usage error: the word at fault named, then the subcommand's usage,
 *      on stderr (with --json anywhere on the command line, an unknown
 *      command or one without --json too, also as
 *      {"error":{"code":"usage",...}})
 * --json output goes to stdout, except for `pack`, whose stdout is the
 * message: its JSON goes to stderr, which then holds nothing else. */
#ifndef CUC_CLI_H
#define CUC_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "cucore.h"

#define CLI_OK 0
#define CLI_FAILURE 1
#define CLI_USAGE 2

/* Each subcommand gets argv after its own name; returns the exit code. */
int cli_devices(int argc, char **argv);
int cli_demo(int argc, char **argv);
int cli_pack(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_connect(int argc, char **argv);

/* Each subcommand's usage text (its `cucore X --help`), in its cmd_X.c. */
extern const char cli_devices_usage[], cli_demo_usage[], cli_pack_usage[],
    cli_inspect_usage[], cli_serve_usage[], cli_connect_usage[];

/* Where --json output goes: out for the command's output and its
 * failures (NULL: no --json, the default; stdout, or stderr for pack),
 * usage for a usage error's JSON (NULL: none). Set by main.c before the
 * subcommand runs: when --json appears anywhere on the command line, a
 * usage error is JSON also for a command that has no --json (on stdout),
 * and so is an unknown command. */
void cli_set_json(FILE *out, FILE *usage);
FILE *cli_json(void);

/* Reports a failure: "cucore: <message>" on stderr (unless the JSON output
 * is stderr) and the JSON error object with code on the JSON output.
 * Returns CLI_FAILURE. */
int cli_error(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* cli_error() for a failed cucore call: "<what>: <cuc_errmsg()>", code the
 * status's name. Returns CLI_FAILURE. */
int cli_fail(const char *what, int status);

/* Reports a usage error of subcommand cmd: "cucore CMD: <message>" and the
 * usage on stderr (unless the usage JSON goes to stderr), the JSON error
 * object with code "usage" on the usage JSON output. cmd NULL: an error
 * of the command line itself ("cucore: <message>"). Returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* JSON string output with escaping. */
void json_str(FILE *f, const char *s);

/* "ptx", "cubin", "fatbin" (the spelling of `pack --kind`), or "unknown". */
const char *cli_image_kind_name(int kind);

/* Parses a device ordinal: decimal, no sign, at most 1000000. 0 or -1. */
int cli_parse_ordinal(const char *s, int *ordinal);

/* Reads all of path ("-": stdin) into a malloc'd buffer, at most
 * CUC_MSG_MAX_BYTES; reports why through cli_error() ("CMD: ...", with the
 * system's reason; CUC_E_LIMIT for a larger file) and returns CLI_FAILURE
 * otherwise. */
int cli_read_file(const char *cmd, const char *path, uint8_t **data, size_t *len);
/* As cli_read_file, but a file larger than CUC_MSG_MAX_BYTES is not a
 * failure: its first CUC_MSG_MAX_BYTES + 1 bytes are read (*len says so),
 * and the reader decides (inspect hands them to the library, which
 * refuses any input of that size as a message would be). */
int cli_read_upto(const char *cmd, const char *path, uint8_t **data, size_t *len);

/* Lower-case hex of n bytes into out (2n + 1 bytes with the NUL). */
void cli_hex(const uint8_t *bytes, size_t n, char *out);

/* Says on stderr which driver is in use when it is the simulator. */
void cli_note_driver(FILE *f);

#endif
