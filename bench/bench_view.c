/* Buffer views across processes beside the driver's per-pointer export,
 * at the same number of buffers a message. The importer is another process
 * (fork + exec of this bench, CUDA_VISIBLE_DEVICES reversed: bench_ipc.h).
 *
 *   views, allocation imported   n views (VIEW_BYTES each) of one
 *       allocation that the importer has imported already (it keeps one
 *       view of it from the start): cuc_buffer_view each, cuc_msg_add_buffer
 *       each, cuc_channel_send, the exporter's unrefs (deferred); the
 *       importer receives, cuc_msg_get_buffers for all (no driver call),
 *       cuc_buffer_unref_many_async; the clock stops when the exporter has
 *       seen the n leases end (cuc_pool_lease_wait).
 *   Raw: n fresh pool allocations (made before the clock starts):
 *       cuMemPoolExportPointer each, the export data over a SOCK_SEQPACKET
 *       pair (1024 a datagram), the importer's cuMemPoolImportPointer each,
 *       cuMemFreeAsync each, one cuStreamSynchronize, a one-byte
 *       acknowledgement.
 *   per buffer, for n = 1, 4, 16, 64, 256, 1024, 4096.
 *
 *   build/bench/bench_view [BUFFERS]   BUFFERS per figure (rounds =
 *       BUFFERS / n, at least 3; default 16384)
 *   CUCORE_DRIVER=sim build/bench/bench_view
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_ipc.h"

#define VIEW_BYTES 64
#define MAX_N 4096
#define PER_PART 1024

#include "bench_view_pair.h"

/* ---- the exporter ---- */

/* n views of parent (the allocation the importer holds a part of). */
static double views_round(struct bv_pair *e, cuc_buffer *parent, size_t n)
{
    cuc_buffer *v[MAX_N];
    cuc_msg *m;
    double t0 = bench_now_ns();

    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    for (size_t i = 0; i < n; i++) {
        bench_ok(cuc_buffer_view(parent, i * VIEW_BYTES, VIEW_BYTES, &v[i]), "cuc_buffer_view");
        bench_ok(cuc_msg_add_buffer(m, v[i]), "cuc_msg_add_buffer");
    }
    bv_send(e->ch, m);
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_unref_async(v[i], NULL), "cuc_buffer_unref_async");
    bench_ok(cuc_pool_lease_wait(e->pool, e->ch, 1, BENCH_TIMEOUT_MS), "lease wait");
    return bench_now_ns() - t0;
}

int main(int argc, char **argv)
{
    static const size_t ns[] = {1, 4, 16, 64, 256, 1024, 4096};
    struct cuc_pool_props pr;
    struct bv_pair e;
    cuc_device *dev;
    cuc_stream *s;
    cuc_buffer *parent, *keep;
    size_t budget = argc > 1 ? strtoul(argv[1], NULL, 10) : 16384;

    if (argc == 4 && !strcmp(argv[1], "--import"))
        return importer(atoi(argv[2]), atoi(argv[3]));
    if (bench_header("bench_view"))
        return 1;
    bench_ok(cuc_device_get(0, &dev), "cuc_device_get");
    cuc_pool_props_init(&pr);
    pr.flags = CUC_POOL_IPC;
    bench_ok(cuc_pool_create(dev, &pr, &e.pool), "cuc_pool_create");
    bench_ok(cuc_stream_legacy(dev, &s), "cuc_stream_legacy");
    bench_ok(cuc_buffer_alloc_async(e.pool, MAX_N * VIEW_BYTES, s, &parent), "alloc");
    bench_ok(cuc_stream_synchronize(s), "synchronize");
    /* the importer keeps one view: the allocation stays imported there */
    bench_ok(cuc_buffer_view(parent, 0, 1, &keep), "cuc_buffer_view");
    bv_start(&e, keep);
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        size_t n = ns[k], rounds = budget / n < 3 ? 3 : budget / n;
        double tv = 0, tr = 0;
        char fig[64];
        views_round(&e, parent, n); /* warm */
        bv_raw_round(&e, n, (CUstream)cuc_stream_handle(s));
        for (size_t r = 0; r < rounds; r++) {
            tv += views_round(&e, parent, n);
            tr += bv_raw_round(&e, n, (CUstream)cuc_stream_handle(s));
        }
        snprintf(fig, sizeof(fig), "views, allocation imported, n=%zu", n);
        bench_line(fig, tr / (double)(rounds * n), tv / (double)(rounds * n),
                   "per buffer; raw: per-pointer export+import, %zu rounds", rounds);
    }
    bv_end(&e);
    cuc_buffer_unref_async(keep, NULL);
    cuc_buffer_unref_async(parent, NULL);
    cuc_pool_unref(e.pool);
    return 0;
}
