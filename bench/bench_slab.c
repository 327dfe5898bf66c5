/* Buffers carved out of slabs (cucore/slab.h) across processes beside the
 * driver's per-pointer export, at the same number of buffers a message.
 * The importer is another process (fork + exec of this bench,
 * CUDA_VISIBLE_DEVICES reversed: bench_ipc.h).
 *
 *   slab, imported   n buffers (BUF_BYTES each) of a slab allocator whose
 *       slab the importer has imported already (it keeps one buffer of it
 *       from the start): cuc_slab_alloc_async each (reusing the ranges of
 *       the round before, once their leases ended and their free's event
 *       completed), cuc_msg_add_buffer each, cuc_channel_send, the
 *       exporter's unrefs (deferred); the importer receives,
 *       cuc_msg_get_buffer each (no driver call), cuc_buffer_unref_many_async;
 *       the clock stops when the exporter has seen the n leases end.
 *   slab, fresh      the same with an allocator of which nothing is kept:
 *       every round allocates a new slab, exports it once and the importer
 *       imports it once (the first send of n small buffers).
 *   Raw: n fresh pool allocations (made before the clock starts):
 *       cuMemPoolExportPointer each, the export data over a SOCK_SEQPACKET
 *       pair (1024 a datagram), the importer's cuMemPoolImportPointer each,
 *       cuMemFreeAsync each, one cuStreamSynchronize, a one-byte
 *       acknowledgement.
 *   per buffer, for n = 1, 4, 16, 64, 256, 1024, 4096.
 *
 *   build/bench/bench_slab [BUFFERS]   BUFFERS per figure (rounds =
 *       BUFFERS / n, at least 3; default 16384)
 *   CUCORE_DRIVER=sim build/bench/bench_slab
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_ipc.h"

#define VIEW_BYTES 64 /* BUF_BYTES: the raw allocations' size too */
#define SLAB_BYTES (2u << 20)
#define MAX_N 4096
#define PER_PART 1024

#include "bench_view_importer.h"

/* ---- the exporter ---- */

struct exporter {
    cuc_pool *pool;
    cuc_slab *warm, *cold;
    cuc_channel *ch;
    int sock;
};

static void send_msg(cuc_channel *ch, cuc_msg *m)
{
    bench_ok(cuc_channel_send(ch, m), "cuc_channel_send");
    cuc_msg_destroy(m);
}

static double slab_round(struct exporter *e, cuc_slab *slab, size_t n)
{
    cuc_buffer *v[MAX_N];
    cuc_msg *m;
    double t0 = bench_now_ns();

    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    for (size_t i = 0; i < n; i++) {
        bench_ok(cuc_slab_alloc_async(slab, VIEW_BYTES, NULL, &v[i]), "cuc_slab_alloc_async");
        bench_ok(cuc_msg_add_buffer(m, v[i]), "cuc_msg_add_buffer");
    }
    send_msg(e->ch, m);
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_unref_async(v[i], NULL), "cuc_buffer_unref_async");
    bench_ok(cuc_pool_lease_wait(e->pool, e->ch, 1, BENCH_TIMEOUT_MS), "lease wait");
    return bench_now_ns() - t0;
}

static double raw_round(struct exporter *e, size_t n, CUstream s)
{
    static CUmemPoolPtrExportData d[PER_PART];
    CUdeviceptr p[MAX_N];
    cuc_msg *m;
    double t0;

    for (size_t i = 0; i < n; i++)
        bench_cu(CUC_DRV->cuMemAllocFromPoolAsync(&p[i], VIEW_BYTES,
                                                  (CUmemoryPool)cuc_pool_handle(e->pool), s),
                 "cuMemAllocFromPoolAsync");
    bench_cu(CUC_DRV->cuStreamSynchronize(s), "cuStreamSynchronize");
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    send_msg(e->ch, m); /* "a raw round follows" */
    t0 = bench_now_ns();
    for (size_t done = 0; done < n;) {
        struct raw_hdr h = {(uint32_t)n, (uint32_t)(done / PER_PART)};
        size_t k = n - done < PER_PART ? n - done : PER_PART;
        memset(d, 0, k * sizeof(*d));
        for (size_t i = 0; i < k; i++)
            bench_cu(CUC_DRV->cuMemPoolExportPointer(&d[i], p[done + i]),
                     "cuMemPoolExportPointer");
        bench_raw_send(e->sock, &h, sizeof(h), d, k * sizeof(*d), NULL, 0);
        done += k;
    }
    bench_ack_recv(e->sock);
    t0 = bench_now_ns() - t0;
    for (size_t i = 0; i < n; i++)
        bench_cu(CUC_DRV->cuMemFreeAsync(p[i], s), "cuMemFreeAsync");
    return t0;
}

int main(int argc, char **argv)
{
    static const size_t ns[] = {1, 4, 16, 64, 256, 1024, 4096};
    struct cuc_pool_props pr;
    char self[4096], cvd[4096];
    const char *args[5];
    char a1[16], a2[16];
    struct exporter e;
    cuc_channel *theirs;
    cuc_device *dev;
    cuc_stream *s;
    cuc_buffer *keep;
    cuc_msg *m;
    size_t budget = argc > 1 ? strtoul(argv[1], NULL, 10) : 16384;
    int sv[2];
    pid_t pid;

    if (argc == 4 && !strcmp(argv[1], "--import"))
        return importer(atoi(argv[2]), atoi(argv[3]));
    if (bench_header("bench_slab"))
        return 1;
    bench_ok(cuc_device_get(0, &dev), "cuc_device_get");
    cuc_pool_props_init(&pr);
    pr.flags = CUC_POOL_IPC;
    bench_ok(cuc_pool_create(dev, &pr, &e.pool), "cuc_pool_create");
    bench_ok(cuc_stream_legacy(dev, &s), "cuc_stream_legacy");
    bench_ok(cuc_slab_create(e.pool, SLAB_BYTES, &e.warm), "cuc_slab_create");
    bench_ok(cuc_slab_create(e.pool, SLAB_BYTES, &e.cold), "cuc_slab_create");
    bench_ok(cuc_channel_pair(&e.ch, &theirs), "cuc_channel_pair");
    bench_socketpair(sv);
    e.sock = sv[0];
    bench_self(self, sizeof(self));
    bench_child_cvd(cvd, sizeof(cvd));
    snprintf(a1, sizeof(a1), "%d", cuc_channel_fd(theirs));
    snprintf(a2, sizeof(a2), "%d", sv[1]);
    args[0] = "--import", args[1] = a1, args[2] = a2, args[3] = NULL;
    pid = bench_spawn(self, args, cvd, cuc_channel_fd(theirs), sv[1]);
    cuc_channel_destroy(theirs);
    close(sv[1]);
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    bench_ok(cuc_msg_add_pool(m, e.pool), "cuc_msg_add_pool");
    send_msg(e.ch, m);
    /* the importer keeps one buffer: the warm slab stays imported there */
    bench_ok(cuc_slab_alloc_async(e.warm, 1, NULL, &keep), "cuc_slab_alloc_async");
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    bench_ok(cuc_msg_add_buffer(m, keep), "cuc_msg_add_buffer");
    send_msg(e.ch, m);
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        size_t n = ns[k], rounds = budget / n < 3 ? 3 : budget / n;
        double tw = 0, tc = 0, tr = 0;
        char fig[64];
        slab_round(&e, e.warm, n); /* warm */
        raw_round(&e, n, (CUstream)cuc_stream_handle(s));
        for (size_t r = 0; r < rounds; r++) {
            tw += slab_round(&e, e.warm, n);
            tc += slab_round(&e, e.cold, n);
            tr += raw_round(&e, n, (CUstream)cuc_stream_handle(s));
        }
        snprintf(fig, sizeof(fig), "slab, imported, n=%zu", n);
        bench_line(fig, tr / (double)(rounds * n), tw / (double)(rounds * n),
                   "per buffer; raw: per-pointer export+import, %zu rounds", rounds);
        snprintf(fig, sizeof(fig), "slab, fresh, n=%zu", n);
        bench_line(fig, tr / (double)(rounds * n), tc / (double)(rounds * n),
                   "per buffer, one slab export+import a round; raw as above");
    }
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    send_msg(e.ch, m); /* a raw round... */
    close(e.sock);     /* ...that never comes: the importer ends */
    cuc_channel_destroy(e.ch);
    bench_wait(pid, "importer");
    cuc_buffer_unref_async(keep, NULL);
    cuc_slab_unref(e.cold);
    cuc_slab_unref(e.warm);
    cuc_pool_unref(e.pool);
    return 0;
}
