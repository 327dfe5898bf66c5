/* Failure reporting and JSON string escaping for the subcommands. */
#include "cli.h"

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

void cli_note_driver(FILE *f)
{
    struct cuc_driver_info info;

    if (cuc_driver_load(&info) == 0 && info.simulated)
        fprintf(f, "note: using the simulated CUDA driver (%s): no GPU involved\n",
                info.path);
}
