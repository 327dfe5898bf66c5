/* Failure and usage reporting (text and JSON), JSON string escaping, the
 * argument parsers and file reading the subcommands share. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static FILE *json_out, *usage_json_out;

void cli_set_json(FILE *out, FILE *usage)
{
    json_out = out;
    usage_json_out = usage;
}

FILE *cli_json(void)
{
    return json_out;
}

static void json_error(FILE *f, const char *code, const char *msg)
{
    if (!f)
        return;
    fputs("{\"error\":{\"code\":", f);
    json_str(f, code);
    fputs(",\"message\":", f);
    json_str(f, msg);
    fputs("}}\n", f);
    fflush(f);
}

int cli_error(const char *code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (json_out != stderr)
        fprintf(stderr, "cucore: %s\n", msg);
    json_error(json_out, code, msg);
    return CLI_FAILURE;
}

int cli_fail(const char *what, int status)
{
    return cli_error(cuc_errname(status), "%s: %s (%s)", what, cuc_errmsg(),
                     cuc_errname(status));
}

int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (usage_json_out != stderr)
        fprintf(stderr, "cucore%s%s: %s\n%s", cmd ? " " : "", cmd ? cmd : "", msg, usage);
    json_error(usage_json_out, "usage", msg);
    return CLI_USAGE;
}

/* Bytes of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * forms, no surrogates, at most U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n, i;
    unsigned long cp;

    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

void json_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    while (*p) {
        size_t n;
        if (*p == '"' || *p == '\\') {
            fprintf(f, "\\%c", *p++);
        } else if (*p < 0x20 || *p == 0x7f) {
            fprintf(f, "\\u%04x", *p++);
        } else if (*p < 0x80) {
            fputc(*p++, f);
        } else if ((n = utf8_len(p)) != 0) {
            fwrite(p, 1, n, f);
            p += n;
        } else { /* a byte that is not UTF-8 (a path, say): U+FFFD */
            fputs("\\ufffd", f);
            p++;
        }
    }
    fputc('"', f);
}

const char *cli_image_kind_name(int kind)
{
    switch (kind) {
    case CUC_IMAGE_PTX: return "ptx";
    case CUC_IMAGE_CUBIN: return "cubin";
    case CUC_IMAGE_FATBIN: return "fatbin";
    default: return "unknown";
    }
}

int cli_parse_ordinal(const char *s, int *ordinal)
{
    unsigned long v;
    char *end;

    if (s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end || v > 1000000)
        return -1;
    *ordinal = (int)v;
    return 0;
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

/* Reads f to its end into a buffer of at most CUC_MSG_MAX_BYTES + 1 bytes
 * (one byte past the largest message tells a file that is too large).
 * 0, or the errno of the failure. */
static int slurp(FILE *f, uint8_t **data, size_t *len)
{
    size_t n = 0, cap = 0;
    uint8_t *buf = NULL;

    while (n <= CUC_MSG_MAX_BYTES) {
        size_t got;
        if (n == cap) {
            uint8_t *nb;
            cap = cap ? cap * 2 : 65536;
            if (cap > (size_t)CUC_MSG_MAX_BYTES + 1)
                cap = (size_t)CUC_MSG_MAX_BYTES + 1;
            if (!(nb = realloc(buf, cap))) {
                free(buf);
                return ENOMEM;
            }
            buf = nb;
        }
        errno = 0;
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            int err = ferror(f) ? (errno ? errno : EIO) : 0;
            if (err) {
                free(buf);
                return err;
            }
            break;
        }
    }
    *data = buf;
    *len = n;
    return 0;
}

int cli_read_upto(const char *cmd, const char *path, uint8_t **data, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    int err;

    if (!f)
        return cli_error("CUC_E_IO", "%s: cannot open %s: %s", cmd, path, strerror(errno));
    err = slurp(f, data, len);
    if (f != stdin)
        fclose(f);
    if (err)
        return cli_error(err == ENOMEM ? "CUC_E_NOMEM" : "CUC_E_IO", "%s: reading %s failed: %s",
                         cmd, path, strerror(err));
    return 0;
}

int cli_read_file(const char *cmd, const char *path, uint8_t **data, size_t *len)
{
    uint8_t *buf;
    size_t n;

    if (cli_read_upto(cmd, path, &buf, &n))
        return CLI_FAILURE;
    if (n > CUC_MSG_MAX_BYTES) {
        free(buf);
        return cli_error("CUC_E_LIMIT", "%s: %s is larger than a message can hold (%u bytes)",
                         cmd, path, CUC_MSG_MAX_BYTES);
    }
    *data = buf;
    *len = n;
    return 0;
}
