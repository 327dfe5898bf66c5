/* The importer side that bench_view and bench_slab share: a child that
 * takes the pool, then either messages of view records (imported and
 * released as one batch) or, after an empty message, raw rounds of
 * cuMemPoolExportPointer data on the socket (imported, freed, acked).
 * The includer defines MAX_N and PER_PART first. */
#ifndef CUC_BENCH_VIEW_IMPORTER_H
#define CUC_BENCH_VIEW_IMPORTER_H

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
            for (size_t i = 0; i < n; i++)
                bench_ok(cuc_msg_get_buffer(m, i, &bufs[i]), "cuc_msg_get_buffer");
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

#endif
