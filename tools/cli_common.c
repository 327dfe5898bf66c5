/* Failure reporting and JSON string escaping for the subcommands. */
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *what, int status)
{
    fprintf(stderr, "cucore: %s: %s (%s)\n", what, cuc_errmsg(), cuc_errname(status));
    return 1;
}

void json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void cli_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 0xf];
    }
    out[2 * n] = '\0';
}

void cli_note_driver(FILE *f)
{
    struct cuc_driver_info info;

    if (cuc_driver_load(&info) == 0 && info.simulated)
        fprintf(f, "note: using the simulated CUDA driver (%s): no GPU involved\n",
                info.path);
}

int cli_read_file(const char *cmd, const char *path, uint8_t **data, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    size_t n = 0, cap = 0;
    uint8_t *buf = NULL;
    int rc = 0;

    if (!f) {
        fprintf(stderr, "cucore: %s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return 1;
    }
    /* One byte past the largest message tells a file that is too large. */
    while (!rc && n <= CUC_MSG_MAX_BYTES) {
        size_t got;
        if (n == cap) {
            uint8_t *nb;
            cap = cap ? cap * 2 : 65536;
            if (cap > (size_t)CUC_MSG_MAX_BYTES + 1)
                cap = (size_t)CUC_MSG_MAX_BYTES + 1;
            if (!(nb = realloc(buf, cap))) {
                fprintf(stderr, "cucore: %s: out of memory reading %s\n", cmd, path);
                rc = 1;
                break;
            }
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "cucore: %s: reading %s failed\n", cmd, path);
        rc = 1;
    } else if (!rc && n > CUC_MSG_MAX_BYTES) {
        fprintf(stderr, "cucore: %s: %s is larger than a message can hold (%u bytes)\n",
                cmd, path, CUC_MSG_MAX_BYTES);
        rc = 1;
    }
    if (f != stdin)
        fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    *data = buf;
    *len = n;
    return 0;
}
