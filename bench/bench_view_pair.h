/* What bench_view and bench_slab share: the importer, a child that takes
 * the pool, then either messages of buffer records (imported and released
 * as one batch) or, after an empty message, raw rounds of
 * cuMemPoolExportPointer data on the socket (imported, freed, acked); and
 * the exporter's side of that pair: starting the importer, the raw round
 * (per-pointer export of VIEW_BYTES pool allocations), the end. The
 * includer defines MAX_N, PER_PART and VIEW_BYTES first. */
#ifndef CUC_BENCH_VIEW_PAIR_H
#define CUC_BENCH_VIEW_PAIR_H

#include "bench_report.h"
#include "bench_ipc.h"

struct raw_hdr {
    uint32_t n, part;
};

/* ---- the importer ---- */

static int importer(int chfd, int sock)
{
    CUmemPoolPtrExportData *d = calloc(PER_PART, sizeof(*d));
    cuc_buffer **bufs = calloc(MAX_N, sizeof(*bufs)), *keep = NULL;
    CUdeviceptr *ptrs = calloc(MAX_N, sizeof(*ptrs));
    cuc_pool *pool = NULL;
    cuc_channel *ch;
    cuc_msg *m;

    if (!d || !bufs || !ptrs)
        bench_fail("out of memory");
    bench_ok(cuc_channel_from_fd(chfd, &ch), "cuc_channel_from_fd");
    for (;;) {
        size_t n;
        int type;

        bench_ok(cuc_channel_recv(ch, BENCH_TIMEOUT_MS, &m), "cuc_channel_recv");
        n = cuc_msg_record_count(m);
        if (n == 0) { /* a raw round follows, or the end */
            struct raw_hdr h;
            size_t got = 0, total = 0;
            cuc_msg_destroy(m);
            if (!pool)
                break;
            do {
                ssize_t len = bench_raw_recv(sock, &h, sizeof(h), d, PER_PART * sizeof(*d), NULL, 0, NULL);
                if (len < 0)
                    goto done;
                total = h.n;
                bench_ok(cuc_device_set_current(cuc_pool_device(pool)), "set current");
                for (size_t i = 0; i < (size_t)len / sizeof(*d); i++)
                    bench_cu(CUC_DRV->cuMemPoolImportPointer(&ptrs[got++],
                                                             (CUmemoryPool)cuc_pool_handle(pool),
                                                             &d[i]),
                             "cuMemPoolImportPointer");
            } while (got < total);
            for (size_t i = 0; i < got; i++)
                bench_cu(CUC_DRV->cuMemFreeAsync(ptrs[i], CU_STREAM_LEGACY), "cuMemFreeAsync");
            bench_cu(CUC_DRV->cuStreamSynchronize(CU_STREAM_LEGACY), "cuStreamSynchronize");
            bench_ack_send(sock);
            continue;
        }
        bench_ok(cuc_msg_record_type(m, 0, &type), "record type");
        if (type == CUC_RECORD_POOL) {
            bench_ok(cuc_msg_get_pool(m, 0, &pool), "cuc_msg_get_pool");
        } else if (!keep) {
            bench_ok(cuc_msg_get_buffer(m, 0, &keep), "cuc_msg_get_buffer");
        } else {
            bench_ok(cuc_msg_get_buffers(m, 0, n, bufs), "cuc_msg_get_buffers");
            bench_ok(cuc_buffer_unref_many_async(bufs, n, NULL), "unref_many");
        }
        cuc_msg_destroy(m);
    }
done:
    cuc_buffer_unref_async(keep, NULL);
    cuc_pool_unref(pool);
    cuc_channel_destroy(ch);
    free(d);
    free(bufs);
    free(ptrs);
    return 0;
}

/* ---- the exporter ---- */

struct bv_pair {
    cuc_pool *pool; /* the IPC pool whose buffers cross */
    cuc_channel *ch;
    int sock;       /* the raw rounds' socket */
    pid_t pid;      /* the importer */
};

static void bv_send(cuc_channel *ch, cuc_msg *m)
{
    bench_ok(cuc_channel_send(ch, m), "cuc_channel_send");
    cuc_msg_destroy(m);
}

/* Starts the importer (this bench again, with --import) and sends it the
 * pool, then keep, a buffer it holds from then on (what it has imported
 * stays imported there). */
static void bv_start(struct bv_pair *e, cuc_buffer *keep)
{
    char self[4096], cvd[4096], a1[16], a2[16];
    const char *args[4];
    cuc_channel *theirs;
    cuc_msg *m;
    int sv[2];

    bench_ok(cuc_channel_pair(&e->ch, &theirs), "cuc_channel_pair");
    bench_socketpair(sv);
    e->sock = sv[0];
    bench_self(self, sizeof(self));
    bench_child_cvd(cvd, sizeof(cvd));
    snprintf(a1, sizeof(a1), "%d", cuc_channel_fd(theirs));
    snprintf(a2, sizeof(a2), "%d", sv[1]);
    args[0] = "--import", args[1] = a1, args[2] = a2, args[3] = NULL;
    e->pid = bench_spawn(self, args, cvd, cuc_channel_fd(theirs), sv[1]);
    cuc_channel_destroy(theirs);
    close(sv[1]);
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    bench_ok(cuc_msg_add_pool(m, e->pool), "cuc_msg_add_pool");
    bv_send(e->ch, m);
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    bench_ok(cuc_msg_add_buffer(m, keep), "cuc_msg_add_buffer");
    bv_send(e->ch, m);
}

/* Raw: n fresh pool allocations (before the clock), exported one by one,
 * the export data on the socket, until the importer's acknowledgement. */
static double bv_raw_round(struct bv_pair *e, size_t n, CUstream s)
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
    bv_send(e->ch, m); /* "a raw round follows" */
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

/* Ends the importer: an empty message announces a raw round that never
 * comes (its socket closes). */
static void bv_end(struct bv_pair *e)
{
    cuc_msg *m;

    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    bv_send(e->ch, m);
    close(e->sock);
    cuc_channel_destroy(e->ch);
    bench_wait(e->pid, "importer");
}

#endif
