/* Legacy-IPC memory (cuc_buffer_wrap of cuMemAlloc allocations) across
 * processes beside the raw legacy IPC calls, at the same number of
 * buffers a message. The importer is another process (fork + exec of this
 * bench, CUDA_VISIBLE_DEVICES reversed: bench_ipc.h).
 *
 *   first share of a base   n fresh cuMemAlloc allocations (made before
 *       the clock starts, freed after it stops): cuc_buffer_wrap each
 *       (cuPointerGetAttributes, cuMemGetAddressRange, cuIpcGetMemHandle),
 *       cuc_msg_add_buffer each, cuc_channel_send, the exporter's unrefs
 *       (deferred); the importer receives, cuc_msg_get_buffer each (one
 *       cuIpcOpenMemHandle a base), cuc_buffer_unref_many_async (one
 *       stream wait, a cuIpcCloseMemHandle a base, one release message);
 *       the clock stops when the exporter has seen the n leases end.
 *   later buffers in an opened base   n views (VIEW_BYTES each) of one
 *       wrapped allocation that the importer has opened already (it keeps
 *       one part of it from the start), as bench_view: no driver call.
 *   later wraps in an opened base   the same parts, each from
 *       cuc_buffer_wrap of its pointer (a base wrapped already: no driver
 *       call either).
 *   Raw (both lines): n fresh cuMemAlloc allocations: cuIpcGetMemHandle
 *       each, the handles over a SOCK_SEQPACKET pair (1024 a datagram),
 *       the importer's cuIpcOpenMemHandle each, cuIpcCloseMemHandle each, a
 *       one-byte acknowledgement.
 *   per buffer, for n = 1, 4, 16, 64, 256, 1024, 4096.
 *
 *   build/bench/bench_legacy [BUFFERS]   BUFFERS per figure (rounds =
 *       BUFFERS / n, at least 3; default 16384)
 *   CUCORE_DRIVER=sim build/bench/bench_legacy
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_ipc.h"

#define VIEW_BYTES 64
#define BASE_BYTES 4096
#define MAX_N 4096
#define PER_PART 1024

struct raw_hdr {
    uint32_t n, part;
};

/* ---- the importer ---- */

static void raw_import(int sock, CUipcMemHandle *h, CUdeviceptr *ptrs)
{
    struct raw_hdr hd;
    size_t got = 0, total = 0;

    do {
        ssize_t len = bench_raw_recv(sock, &hd, sizeof(hd), h, PER_PART * sizeof(*h), NULL,
                                     0, NULL);
        if (len < 0)
            exit(0); /* the end */
        total = hd.n;
        for (size_t i = 0; i < (size_t)len / sizeof(*h); i++)
            bench_cu(CUC_DRV->cuIpcOpenMemHandle(&ptrs[got++], h[i],
                                                 CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                     "cuIpcOpenMemHandle");
    } while (got < total);
    for (size_t i = 0; i < got; i++)
        bench_cu(CUC_DRV->cuIpcCloseMemHandle(ptrs[i]), "cuIpcCloseMemHandle");
    bench_ack_send(sock);
}

static int importer(int chfd, int sock)
{
    CUipcMemHandle *h = calloc(PER_PART, sizeof(*h));
    cuc_buffer **bufs = calloc(MAX_N, sizeof(*bufs)), *keep = NULL;
    CUdeviceptr *ptrs = calloc(MAX_N, sizeof(*ptrs));
    cuc_channel *ch;
    cuc_msg *m;

    if (!h || !bufs || !ptrs)
        bench_fail("out of memory");
    bench_ok(cuc_channel_from_fd(chfd, &ch), "cuc_channel_from_fd");
    for (;;) {
        size_t n;

        bench_ok(cuc_channel_recv(ch, BENCH_TIMEOUT_MS, &m), "cuc_channel_recv");
        n = cuc_msg_record_count(m);
        if (n == 0) { /* a raw round follows, or the end */
            cuc_msg_destroy(m);
            if (!keep)
                break;
            bench_ok(cuc_device_set_current(cuc_buffer_device(keep)), "set current");
            raw_import(sock, h, ptrs);
            continue;
        }
        if (!keep) {
            bench_ok(cuc_msg_get_buffer(m, 0, &keep), "cuc_msg_get_buffer");
        } else {
            for (size_t i = 0; i < n; i++)
                bench_ok(cuc_msg_get_buffer(m, i, &bufs[i]), "cuc_msg_get_buffer");
            bench_ok(cuc_buffer_unref_many_async(bufs, n, NULL), "unref_many");
        }
        cuc_msg_destroy(m);
    }
    cuc_buffer_unref_async(keep, NULL);
    cuc_channel_destroy(ch);
    free(h);
    free(bufs);
    free(ptrs);
    return 0;
}

/* ---- the exporter ---- */

struct exporter {
    cuc_device *dev;
    cuc_buffer *slab; /* a wrapped allocation the importer keeps open */
    CUdeviceptr slab_ptr;
    cuc_pool *legacy; /* the pool wrapped buffers belong to */
    cuc_channel *ch;
    int sock;
    CUdeviceptr bases[MAX_N];
};

static void send_msg(cuc_channel *ch, cuc_msg *m)
{
    bench_ok(cuc_channel_send(ch, m), "cuc_channel_send");
    cuc_msg_destroy(m);
}

static void alloc_bases(struct exporter *e, size_t n)
{
    bench_ok(cuc_device_set_current(e->dev), "set current");
    for (size_t i = 0; i < n; i++)
        bench_cu(CUC_DRV->cuMemAlloc(&e->bases[i], BASE_BYTES), "cuMemAlloc");
}

static void free_bases(struct exporter *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bench_cu(CUC_DRV->cuMemFree(e->bases[i]), "cuMemFree");
}

static double first_round(struct exporter *e, size_t n)
{
    cuc_buffer *b[MAX_N];
    cuc_msg *m;
    double t0;

    alloc_bases(e, n);
    t0 = bench_now_ns();
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    for (size_t i = 0; i < n; i++) {
        bench_ok(cuc_buffer_wrap(e->dev, (void *)(uintptr_t)e->bases[i], BASE_BYTES, &b[i]),
                 "cuc_buffer_wrap");
        bench_ok(cuc_msg_add_buffer(m, b[i]), "cuc_msg_add_buffer");
    }
    send_msg(e->ch, m);
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_unref_async(b[i], NULL), "cuc_buffer_unref_async");
    bench_ok(cuc_pool_lease_wait(e->legacy, e->ch, 1, BENCH_TIMEOUT_MS), "lease wait");
    t0 = bench_now_ns() - t0;
    free_bases(e, n);
    return t0;
}

static double views_round(struct exporter *e, size_t n)
{
    cuc_buffer *v[MAX_N];
    cuc_msg *m;
    double t0 = bench_now_ns();

    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    for (size_t i = 0; i < n; i++) {
        bench_ok(cuc_buffer_view(e->slab, i * VIEW_BYTES, VIEW_BYTES, &v[i]), "cuc_buffer_view");
        bench_ok(cuc_msg_add_buffer(m, v[i]), "cuc_msg_add_buffer");
    }
    send_msg(e->ch, m);
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_unref_async(v[i], NULL), "cuc_buffer_unref_async");
    bench_ok(cuc_pool_lease_wait(e->legacy, e->ch, 1, BENCH_TIMEOUT_MS), "lease wait");
    return bench_now_ns() - t0;
}

/* The same parts, each wrapped from its pointer (what a program with
 * cudaMalloc'ed pointers does): a part of a base wrapped already. */
static double wraps_round(struct exporter *e, size_t n)
{
    cuc_buffer *v[MAX_N];
    cuc_msg *m;
    double t0 = bench_now_ns();

    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    for (size_t i = 0; i < n; i++) {
        bench_ok(cuc_buffer_wrap(e->dev, (void *)(uintptr_t)(e->slab_ptr + i * VIEW_BYTES),
                                 VIEW_BYTES, &v[i]), "cuc_buffer_wrap");
        bench_ok(cuc_msg_add_buffer(m, v[i]), "cuc_msg_add_buffer");
    }
    send_msg(e->ch, m);
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_unref_async(v[i], NULL), "cuc_buffer_unref_async");
    bench_ok(cuc_pool_lease_wait(e->legacy, e->ch, 1, BENCH_TIMEOUT_MS), "lease wait");
    return bench_now_ns() - t0;
}

static double raw_round(struct exporter *e, size_t n)
{
    static CUipcMemHandle h[PER_PART];
    cuc_msg *m;
    double t0;

    alloc_bases(e, n);
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    send_msg(e->ch, m); /* "a raw round follows" */
    t0 = bench_now_ns();
    for (size_t done = 0; done < n;) {
        struct raw_hdr hd = {(uint32_t)n, (uint32_t)(done / PER_PART)};
        size_t k = n - done < PER_PART ? n - done : PER_PART;
        for (size_t i = 0; i < k; i++)
            bench_cu(CUC_DRV->cuIpcGetMemHandle(&h[i], e->bases[done + i]),
                     "cuIpcGetMemHandle");
        bench_raw_send(e->sock, &hd, sizeof(hd), h, k * sizeof(*h), NULL, 0);
        done += k;
    }
    bench_ack_recv(e->sock);
    t0 = bench_now_ns() - t0;
    free_bases(e, n);
    return t0;
}

int main(int argc, char **argv)
{
    static const size_t ns[] = {1, 4, 16, 64, 256, 1024, 4096};
    char self[4096], cvd[4096];
    const char *args[5];
    char a1[16], a2[16];
    static struct exporter e;
    CUdeviceptr slab;
    cuc_channel *theirs;
    cuc_buffer *keep;
    cuc_msg *m;
    size_t budget = argc > 1 ? strtoul(argv[1], NULL, 10) : 16384;
    int sv[2];
    pid_t pid;

    if (argc == 4 && !strcmp(argv[1], "--import"))
        return importer(atoi(argv[2]), atoi(argv[3]));
    if (bench_header("bench_legacy"))
        return 1;
    bench_ok(cuc_device_get(0, &e.dev), "cuc_device_get");
    bench_ok(cuc_device_set_current(e.dev), "set current");
    bench_cu(CUC_DRV->cuMemAlloc(&slab, MAX_N * VIEW_BYTES), "cuMemAlloc");
    bench_ok(cuc_buffer_wrap(e.dev, (void *)(uintptr_t)slab, MAX_N * VIEW_BYTES, &e.slab),
             "cuc_buffer_wrap");
    e.legacy = cuc_buffer_pool(e.slab);
    e.slab_ptr = slab;
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
    /* the importer keeps one part: the allocation stays open there */
    bench_ok(cuc_buffer_view(e.slab, 0, 1, &keep), "cuc_buffer_view");
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    bench_ok(cuc_msg_add_buffer(m, keep), "cuc_msg_add_buffer");
    send_msg(e.ch, m);
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        size_t n = ns[k], rounds = budget / n < 3 ? 3 : budget / n;
        double tf = 0, tv = 0, tw = 0, tr = 0;
        char fig[64];
        first_round(&e, n); /* warm */
        views_round(&e, n);
        wraps_round(&e, n);
        raw_round(&e, n);
        for (size_t r = 0; r < rounds; r++) {
            tf += first_round(&e, n);
            tv += views_round(&e, n);
            tw += wraps_round(&e, n);
            tr += raw_round(&e, n);
        }
        snprintf(fig, sizeof(fig), "first share of a base, n=%zu", n);
        bench_line(fig, tr / (double)(rounds * n), tf / (double)(rounds * n),
                   "per buffer; raw: cuIpcGetMemHandle+cuIpcOpenMemHandle+close, %zu rounds",
                   rounds);
        snprintf(fig, sizeof(fig), "later buffers in an opened base, n=%zu", n);
        bench_line(fig, tr / (double)(rounds * n), tv / (double)(rounds * n),
                   "per buffer, cuc_buffer_view; raw: the same per-base IPC, %zu rounds",
                   rounds);
        snprintf(fig, sizeof(fig), "later wraps in an opened base, n=%zu", n);
        bench_line(fig, tr / (double)(rounds * n), tw / (double)(rounds * n),
                   "per buffer, cuc_buffer_wrap of a pointer in it (no driver call); raw: "
                   "the same per-base IPC, %zu rounds", rounds);
    }
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    send_msg(e.ch, m); /* a raw round... */
    close(e.sock);     /* ...that never comes: the importer ends */
    cuc_channel_destroy(e.ch);
    bench_wait(pid, "importer");
    cuc_buffer_unref_async(keep, NULL);
    cuc_buffer_unref_async(e.slab, NULL);
    bench_cu(CUC_DRV->cuMemFree(slab), "cuMemFree");
    return 0;
}
