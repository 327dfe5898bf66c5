/* What every benchmark prints, and its clock.
 *
 * One line per figure: the raw driver calls (or, where there is no driver
 * call, the least a hand-written program must do) and cucore doing the same
 * work, measured in the same run, side by side:
 *
 *   <figure>                          raw   <ns> ns   cucore   <ns> ns   x<cucore/raw>   <note>
 *
 * A figure that is not a time (bytes, memory) uses the same layout with
 * its unit in place of "ns" (bench_line_unit).
 *
 * bench/compare_cuda_core.py prints its figures in the same layout, with
 * cuda.core in the cucore column. A header line names the driver and the
 * device count. docs/PERFORMANCE.md says what bounds each figure.
 *
 * With CUCORE_BENCH_JSONL=FILE set, every figure is also appended to FILE
 * as one JSON object a line (what bench/make_performance.py, which writes
 * docs/PERFORMANCE.md, and bench/plot.py read):
 *   {"bench": "bench_pool", "driver": "cuda"|"sim", "figure": "...",
 *    "unit": "ns"|"B", "raw": <number or null>, "cucore": <number>,
 *    "note": "..."}
 * The Python benches write the same shape with their own columns
 * ("python", "cuda_core", "torch": make_performance.py's docstring).
 */
#ifndef CUC_BENCH_REPORT_H
#define CUC_BENCH_REPORT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cucore.h"

static inline double bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static const char *bench_report_bench = "bench";
static int bench_report_sim;

/* A JSON string of s (quotes, backslashes and control bytes escaped). */
static inline void bench_json_str(FILE *f, const char *s)
{
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

/* The figure as a JSON line, where CUCORE_BENCH_JSONL names a file. */
static inline void bench_json(const char *figure, double raw, double cuc, const char *unit,
                              const char *note)
{
    const char *path = getenv("CUCORE_BENCH_JSONL");
    FILE *f;

    if (!path || !*path || !(f = fopen(path, "a")))
        return;
    fputs("{\"bench\": ", f);
    bench_json_str(f, bench_report_bench);
    fprintf(f, ", \"driver\": \"%s\", \"figure\": ", bench_report_sim ? "sim" : "cuda");
    bench_json_str(f, figure);
    fprintf(f, ", \"unit\": \"%s\", \"raw\": ", unit);
    if (raw >= 0)
        fprintf(f, "%.3f", raw);
    else
        fputs("null", f);
    fprintf(f, ", \"cucore\": %.3f, \"note\": ", cuc);
    bench_json_str(f, note);
    fputs("}\n", f);
    fclose(f);
}

/* The header: which driver the figures are of. */
static inline int bench_header(const char *bench)
{
    struct cuc_driver_info info;
    int n = 0, rc = cuc_driver_load(&info);

    if (rc == 0)
        rc = cuc_device_count(&n);
    if (rc) {
        fprintf(stderr, "%s: %s: %s\n", bench, cuc_errname(rc), cuc_errmsg());
        return rc;
    }
    bench_report_bench = bench;
    bench_report_sim = info.simulated;
    printf("%s: %s driver %s (version %d), %d device%s\n", bench,
           info.simulated ? "SIMULATED" : "CUDA", info.path, info.version, n,
           n == 1 ? "" : "s");
    return 0;
}

/* One figure. raw_ns < 0 prints "-" (no raw counterpart). */
static inline void bench_line(const char *figure, double raw_ns, double cuc_ns,
                              const char *note_fmt, ...)
{
    char note[256];
    va_list ap;

    va_start(ap, note_fmt);
    vsnprintf(note, sizeof(note), note_fmt, ap);
    va_end(ap);
    if (raw_ns >= 0)
        printf("%-46s raw %12.1f ns   cucore %12.1f ns   x%-6.2f  %s\n", figure, raw_ns,
               cuc_ns, raw_ns > 0 ? cuc_ns / raw_ns : 0.0, note);
    else
        printf("%-46s raw %12s ns   cucore %12.1f ns   %-7s  %s\n", figure, "-", cuc_ns, "",
               note);
    fflush(stdout);
    bench_json(figure, raw_ns, cuc_ns, "ns", note);
}

/* One figure in another unit ("B" for bytes), in the same layout. */
static inline void bench_line_unit(const char *figure, double raw, double cuc,
                                   const char *unit, const char *note_fmt, ...)
    __attribute__((format(printf, 5, 6)));
static inline void bench_line_unit(const char *figure, double raw, double cuc,
                                   const char *unit, const char *note_fmt, ...)
{
    char note[256];
    va_list ap;

    va_start(ap, note_fmt);
    vsnprintf(note, sizeof(note), note_fmt, ap);
    va_end(ap);
    if (raw > 0)
        printf("%-46s raw %12.1f %-2s   cucore %12.1f %-2s   x%-6.2f  %s\n", figure, raw, unit,
               cuc, unit, cuc / raw, note);
    else
        printf("%-46s raw %12.1f %-2s   cucore %12.1f %-2s   %-7s  %s\n", figure, raw, unit,
               cuc, unit, "", note);
    fflush(stdout);
    bench_json(figure, raw, cuc, unit, note);
}

#endif
