/* Legacy-IPC memory (cuc_buffer_wrap of cuMemAlloc allocations) across
 * processes beside the raw legacy IPC calls, at the same number of
 * buffers a message. The importer is another process (fork + exec of this
 * bench, CUDA_VISIBLE_DEVICES reversed: bench_ipc.h).
 *
 *   first share of a base   n fresh cuMemAlloc allocations (made before
 *       the clock starts, freed after it stops): cuc_buffer_wrap each
 *       (cuPointerGetAttributes, cuIpcGetMemHandle),
 *       cuc_msg_add_buffer each, cuc_channel_send, the exporter's unrefs
 *       (deferred); the importer receives, cuc_msg_get_buffers for all of
 *       them (one cuIpcOpenMemHandle a base), cuc_buffer_unref_many_async (one
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
 *   breakdown of the first share (after the figures): "driver call:"
 *       figures, what each driver call that cucore adds costs on this
 *       driver (CALL_ITERS calls each, on a cuMemAlloc base at the
 *       exporter, on an opened one at the importer); then for each n,
 *       untimed rounds (SPLIT_BUFFERS buffers of cucore's and of raw's,
 *       alternating) with each side's parts timed beside raw's (wrap + add
 *       vs cuIpcGetMemHandle, send + unref vs the datagrams, get_buffer vs
 *       open, unref_many with its release vs close and ack; the rest of the
 *       gap is receiving and waiting), the driver calls cucore makes a base
 *       beyond raw's in them (counted on this driver: bench_calls.h) times
 *       their cost, and what is left of the parts' excess: cucore's own
 *       CPU.
 *
 *   build/bench/bench_legacy [BUFFERS [MAX_N]]   BUFFERS per figure (rounds =
 *       BUFFERS / n, at least 3; default 16384); n up to MAX_N (default 4096)
 *   CUCORE_DRIVER=sim build/bench/bench_legacy 2048 1024   (the simulator's
 *       cuMemAlloc is slow with thousands of blocks: at n=4096 the importer
 *       times out there)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_ipc.h"
#include "bench_calls.h"

#define VIEW_BYTES 64
#define BASE_BYTES 4096
#define MAX_N 4096
#define PER_PART 1024
#define CALL_ITERS 20000    /* per driver call timed for the breakdown */
#define SPLIT_BUFFERS 1024  /* per n in the breakdown's rounds (at least 3 rounds) */

/* n = 0: not a raw round but a breakdown request, part one of these */
enum { REQ_COSTS, REQ_COUNT_ON, REQ_COUNTS };

struct raw_hdr {
    uint32_t n, part;
};

/* What the importer's driver calls cost, ns a call (its side of the
 * breakdown): on a pointer opened from the exporter's handle, with the
 * device current and nothing queued. */
struct imp_costs {
    double ctx_get, ctx_set, range, range_attr, sync_idle, open_close;
};

/* The attributes classify() (src/memory/buffer_ipc.c) asks for first, then
 * the three it asks for only to name a refusal: the cost of a prefix of k
 * is what a call with k of them costs. */
static CUpointer_attribute attr_list[7] = {
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,           CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE,                CU_POINTER_ATTRIBUTE_IS_MANAGED,
    CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};

/* ns a call of what the statement does, CALL_ITERS times (after a warm-up) */
#define TIME_CALL(out, stmt)                                                           \
    do {                                                                               \
        double t_;                                                                     \
        for (int i_ = 0; i_ < 100; i_++)                                               \
            stmt;                                                                      \
        t_ = bench_now_ns();                                                           \
        for (int i_ = 0; i_ < CALL_ITERS; i_++)                                        \
            stmt;                                                                      \
        (out) = (bench_now_ns() - t_) / CALL_ITERS;                                    \
    } while (0)

/* ---- the breakdown, the importer's side ---- */

/* The importer's side of the breakdown's rounds (from REQ_COUNT_ON, or the
 * last REQ_COUNTS): its driver calls in cucore's rounds, and how long
 * cucore's calls and raw's took, ns in all. */
struct imp_report {
    struct bench_calls calls;
    double get, drop;      /* cuc_msg_get_buffers; unref_many + msg destroy */
    double open, close;    /* raw: cuIpcOpenMemHandle each; cuIpcCloseMemHandle each + ack */
    uint64_t cuc_rounds, raw_rounds;
};

static struct imp_report imp_acc;
static int imp_splitting;

static void imp_measure(int sock, CUipcMemHandle h)
{
    struct imp_costs c;
    CUcontext ctx = NULL;
    CUdeviceptr p = 0, base = 0, q = 0;
    size_t size = 0;

    bench_cu(CUC_DRV->cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    bench_cu(CUC_DRV->cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
             "cuIpcOpenMemHandle");
    TIME_CALL(c.ctx_get, bench_cu(CUC_DRV->cuCtxGetCurrent(&ctx), "cuCtxGetCurrent"));
    TIME_CALL(c.ctx_set, bench_cu(CUC_DRV->cuCtxSetCurrent(ctx), "cuCtxSetCurrent"));
    TIME_CALL(c.range, bench_cu(CUC_DRV->cuMemGetAddressRange(&base, &size, p),
                                "cuMemGetAddressRange"));
    TIME_CALL(c.range_attr, bench_cu(CUC_DRV->cuPointerGetAttribute(
                                         &size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p),
                                     "cuPointerGetAttribute"));
    TIME_CALL(c.sync_idle, bench_cu(CUC_DRV->cuStreamSynchronize(CU_STREAM_LEGACY),
                                    "cuStreamSynchronize"));
    bench_cu(CUC_DRV->cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
    /* (the exporter's handle again: the driver maps it anew each time) */
    c.open_close = 0;
    for (int i = 0; i < 100; i++) {
        double t = bench_now_ns();
        bench_cu(CUC_DRV->cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                 "cuIpcOpenMemHandle");
        bench_cu(CUC_DRV->cuIpcCloseMemHandle(q), "cuIpcCloseMemHandle");
        c.open_close += (bench_now_ns() - t) / 100;
    }
    bench_raw_send(sock, &c, sizeof(c), NULL, 0, NULL, 0);
}

/* A cucore round of the breakdown: what the timed rounds do, its calls
 * counted and its two parts timed. Destroys m. */
static void imp_round(cuc_msg *m, cuc_buffer **bufs, size_t n)
{
    struct bench_calls c;
    double t0, t1;

    bench_calls_on();
    t0 = bench_now_ns();
    bench_ok(cuc_msg_get_buffers(m, 0, n, bufs), "cuc_msg_get_buffers");
    t1 = bench_now_ns();
    bench_ok(cuc_buffer_unref_many_async(bufs, n, NULL), "unref_many");
    cuc_msg_destroy(m);
    imp_acc.drop += bench_now_ns() - t1;
    imp_acc.get += t1 - t0;
    bench_calls_get(&c);
    bench_calls_off();
    for (int i = 0; i < BC_COUNT; i++)
        imp_acc.calls.n[i] += c.n[i];
    imp_acc.calls.attrs += c.attrs;
    imp_acc.cuc_rounds++;
}

static void imp_request(int sock, const struct raw_hdr *hd, CUipcMemHandle h)
{
    switch (hd->part) {
    case REQ_COSTS:
        imp_measure(sock, h);
        break;
    case REQ_COUNT_ON:
        memset(&imp_acc, 0, sizeof(imp_acc));
        imp_splitting = 1;
        bench_ack_send(sock);
        break;
    case REQ_COUNTS:
        bench_raw_send(sock, &imp_acc, sizeof(imp_acc), NULL, 0, NULL, 0);
        memset(&imp_acc, 0, sizeof(imp_acc));
        break;
    default:
        bench_fail("breakdown request %u", hd->part);
    }
}

/* ---- the importer ---- */

static void raw_import(int sock, CUipcMemHandle *h, CUdeviceptr *ptrs)
{
    struct raw_hdr hd;
    size_t got = 0, total = 0;
    double t = 0, opening = 0;

    do {
        ssize_t len = bench_raw_recv(sock, &hd, sizeof(hd), h, PER_PART * sizeof(*h), NULL,
                                     0, NULL);
        if (len < 0)
            exit(0); /* the end */
        if (hd.n == 0) {
            imp_request(sock, &hd, h[0]);
            return;
        }
        total = hd.n;
        if (imp_splitting)
            t = bench_now_ns();
        for (size_t i = 0; i < (size_t)len / sizeof(*h); i++)
            bench_cu(CUC_DRV->cuIpcOpenMemHandle(&ptrs[got++], h[i],
                                                 CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                     "cuIpcOpenMemHandle");
        if (imp_splitting)
            opening += bench_now_ns() - t;
    } while (got < total);
    if (imp_splitting)
        t = bench_now_ns();
    for (size_t i = 0; i < got; i++)
        bench_cu(CUC_DRV->cuIpcCloseMemHandle(ptrs[i]), "cuIpcCloseMemHandle");
    bench_ack_send(sock); /* raw's release message */
    if (imp_splitting) {
        imp_acc.close += bench_now_ns() - t;
        imp_acc.open += opening;
        imp_acc.raw_rounds++;
    }
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
        } else if (imp_splitting) {
            imp_round(m, bufs, n);
            continue;
        } else {
            bench_ok(cuc_msg_get_buffers(m, 0, n, bufs), "cuc_msg_get_buffers");
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

/* The exporter's side of the breakdown's rounds: its driver calls in
 * cucore's rounds, and the parts of cucore's and raw's rounds, ns in all. */
struct exp_acc {
    struct bench_calls calls;
    double wrap, send, wait, total; /* wrap + add each; send + unref each; lease wait */
    double get, put, raw_total;     /* raw: cuIpcGetMemHandle each; the sends; the round */
    uint64_t cuc_rounds, raw_rounds;
};

/* acc: NULL (a timed round), or where a breakdown round's calls and parts
 * go */
static double first_round(struct exporter *e, size_t n, struct exp_acc *acc)
{
    cuc_buffer *b[MAX_N];
    struct bench_calls c;
    double start, t0, t1 = 0, t2 = 0;
    cuc_msg *m;

    alloc_bases(e, n);
    if (acc)
        bench_calls_on();
    start = t0 = bench_now_ns();
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    for (size_t i = 0; i < n; i++) {
        bench_ok(cuc_buffer_wrap(e->dev, (void *)(uintptr_t)e->bases[i], BASE_BYTES, &b[i]),
                 "cuc_buffer_wrap");
        bench_ok(cuc_msg_add_buffer(m, b[i]), "cuc_msg_add_buffer");
    }
    if (acc)
        t1 = bench_now_ns();
    send_msg(e->ch, m);
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_unref_async(b[i], NULL), "cuc_buffer_unref_async");
    if (acc)
        t2 = bench_now_ns();
    bench_ok(cuc_pool_lease_wait(e->legacy, e->ch, 1, BENCH_TIMEOUT_MS), "lease wait");
    t0 = bench_now_ns() - t0;
    if (acc) {
        bench_calls_get(&c);
        bench_calls_off();
        for (int i = 0; i < BC_COUNT; i++)
            acc->calls.n[i] += c.n[i];
        acc->calls.attrs += c.attrs;
        acc->wrap += t1 - start;
        acc->send += t2 - t1;
        acc->wait += start + t0 - t2;
        acc->total += t0;
        acc->cuc_rounds++;
    }
    free_bases(e, n);
    return t0;
}

/* n parts of the base the importer holds: views of it (cuc_buffer_view),
 * or, wrap set, each wrapped from its pointer (what a program with
 * cudaMalloc'ed pointers does: a part of a base wrapped already). */
static double parts_round(struct exporter *e, size_t n, int wrap)
{
    cuc_buffer *v[MAX_N];
    cuc_msg *m;
    double t0 = bench_now_ns();

    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    for (size_t i = 0; i < n; i++) {
        if (wrap)
            bench_ok(cuc_buffer_wrap(e->dev, (void *)(uintptr_t)(e->slab_ptr + i * VIEW_BYTES),
                                     VIEW_BYTES, &v[i]), "cuc_buffer_wrap");
        else
            bench_ok(cuc_buffer_view(e->slab, i * VIEW_BYTES, VIEW_BYTES, &v[i]),
                     "cuc_buffer_view");
        bench_ok(cuc_msg_add_buffer(m, v[i]), "cuc_msg_add_buffer");
    }
    send_msg(e->ch, m);
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_unref_async(v[i], NULL), "cuc_buffer_unref_async");
    bench_ok(cuc_pool_lease_wait(e->legacy, e->ch, 1, BENCH_TIMEOUT_MS), "lease wait");
    return bench_now_ns() - t0;
}

static double raw_round(struct exporter *e, size_t n, struct exp_acc *acc)
{
    static CUipcMemHandle h[PER_PART];
    double t0, getting = 0, putting = 0;
    cuc_msg *m;

    alloc_bases(e, n);
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    send_msg(e->ch, m); /* "a raw round follows" */
    t0 = bench_now_ns();
    for (size_t done = 0; done < n;) {
        struct raw_hdr hd = {(uint32_t)n, (uint32_t)(done / PER_PART)};
        size_t k = n - done < PER_PART ? n - done : PER_PART;
        double t = acc ? bench_now_ns() : 0;
        for (size_t i = 0; i < k; i++)
            bench_cu(CUC_DRV->cuIpcGetMemHandle(&h[i], e->bases[done + i]),
                     "cuIpcGetMemHandle");
        if (acc)
            getting += bench_now_ns() - t;
        bench_raw_send(e->sock, &hd, sizeof(hd), h, k * sizeof(*h), NULL, 0);
        if (acc)
            putting += bench_now_ns() - t;
        done += k;
    }
    bench_ack_recv(e->sock);
    t0 = bench_now_ns() - t0;
    if (acc) {
        acc->get += getting;
        acc->put += putting - getting;
        acc->raw_total += t0;
        acc->raw_rounds++;
    }
    free_bases(e, n);
    return t0;
}

/* ---- the breakdown, the exporter's side ---- */

struct exp_costs {
    double ctx_get, ctx_set, get_handle, attrs[8]; /* attrs[k]: a call of k attributes */
};

static void exp_measure(struct exporter *e, struct exp_costs *c)
{
    CUcontext ctx = NULL;
    CUdeviceptr p;
    CUipcMemHandle h;
    uint64_t slot[7];
    void *data[7];

    for (int i = 0; i < 7; i++)
        data[i] = &slot[i];
    alloc_bases(e, 1);
    p = e->bases[0];
    bench_cu(CUC_DRV->cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    TIME_CALL(c->ctx_get, bench_cu(CUC_DRV->cuCtxGetCurrent(&ctx), "cuCtxGetCurrent"));
    TIME_CALL(c->ctx_set, bench_cu(CUC_DRV->cuCtxSetCurrent(ctx), "cuCtxSetCurrent"));
    TIME_CALL(c->get_handle, bench_cu(CUC_DRV->cuIpcGetMemHandle(&h, p), "cuIpcGetMemHandle"));
    c->attrs[0] = 0;
    for (unsigned k = 1; k <= 7; k++)
        TIME_CALL(c->attrs[k], bench_cu(CUC_DRV->cuPointerGetAttributes(k, attr_list, data, p),
                                        "cuPointerGetAttributes"));
    free_bases(e, 1);
}

/* Sends the importer breakdown request part (after an empty message: "a
 * raw round follows"), with handle h where it needs one. */
static void exp_request(struct exporter *e, uint32_t part, const CUipcMemHandle *h)
{
    struct raw_hdr hd = {0, part};
    CUipcMemHandle none;
    cuc_msg *m;

    memset(&none, 0, sizeof(none));
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    send_msg(e->ch, m);
    bench_raw_send(e->sock, &hd, sizeof(hd), h ? h : &none, sizeof(none), NULL, 0);
}

static void exp_reply(struct exporter *e, void *out, size_t len)
{
    if (bench_raw_recv(e->sock, out, len, NULL, 0, NULL, 0, NULL) != 0)
        bench_fail("breakdown: no reply from the importer");
}

static void imp_costs_get(struct exporter *e, struct imp_costs *c)
{
    CUipcMemHandle h;

    alloc_bases(e, 1);
    bench_cu(CUC_DRV->cuIpcGetMemHandle(&h, e->bases[0]), "cuIpcGetMemHandle");
    exp_request(e, REQ_COSTS, &h);
    exp_reply(e, c, sizeof(*c));
    free_bases(e, 1);
}

/* The calls of one side a base beyond raw's (raw: one cuIpcGetMemHandle
 * at the exporter, one open and one close at the importer), what they
 * cost, printed; returns that cost, ns a base. */
static double side_calls(const char *side, const struct bench_calls *c, size_t n,
                         const double cost[BC_COUNT], const unsigned long long raw[BC_COUNT],
                         char *text, size_t cap)
{
    double sum = 0;
    size_t used = 0;

    used += (size_t)snprintf(text + used, cap - used, "%s", side);
    for (int i = 0; i < BC_COUNT && used < cap; i++) {
        double per = ((double)c->n[i] - (double)raw[i] * (double)n) / (double)n;
        if ((double)c->n[i] == (double)raw[i] * (double)n)
            continue; /* as many as raw's */
        if (cost[i] >= 0)
            sum += per * cost[i];
        used += (size_t)snprintf(text + used, cap - used, " %+.3g %s", per, bench_call_names[i]);
        if (i == BC_cuPointerGetAttributes && c->n[i])
            used += (size_t)snprintf(text + used, cap - used, " (%.3g attributes)",
                                     (double)c->attrs / (double)c->n[i]);
        if (cost[i] < 0 && per != 0 && used < cap)
            used += (size_t)snprintf(text + used, cap - used, " (not timed)");
    }
    if (used < cap)
        snprintf(text + used, cap - used, " = %.0f ns", sum);
    return sum;
}

static void breakdown(struct exporter *e, const size_t *ns, size_t count)
{
    struct exp_costs ec;
    struct imp_costs ic;
    double ecost[BC_COUNT], icost[BC_COUNT];
    unsigned long long eraw[BC_COUNT] = {0}, iraw[BC_COUNT] = {0};

    exp_measure(e, &ec);
    imp_costs_get(e, &ic);
    bench_line("driver call: cuCtxGetCurrent (exporter)", -1, ec.ctx_get, "ns a call, %d calls",
               CALL_ITERS);
    bench_line("driver call: cuCtxSetCurrent (exporter)", -1, ec.ctx_set, "ns a call, the "
               "current context again");
    bench_line("driver call: cuIpcGetMemHandle", -1, ec.get_handle, "ns a call, one base "
               "again (raw's exporter call)");
    for (unsigned k = 1; k <= 7; k++) {
        char fig[64];
        snprintf(fig, sizeof(fig), "driver call: cuPointerGetAttributes, %u attr%s", k,
                 k == 1 ? "" : "s");
        bench_line(fig, -1, ec.attrs[k], "ns a call on a cuMemAlloc base (4: what cuc_buffer_wrap "
                   "asks; 7: what it asked before)");
    }
    bench_line("driver call: cuCtxGetCurrent (importer)", -1, ic.ctx_get, "ns a call");
    bench_line("driver call: cuCtxSetCurrent (importer)", -1, ic.ctx_set, "ns a call");
    bench_line("driver call: cuMemGetAddressRange", -1, ic.range, "ns a call on an opened "
               "IPC pointer (the importer's size check)");
    bench_line("driver call: cuPointerGetAttribute RANGE_SIZE", -1, ic.range_attr, "ns a call "
               "on an opened IPC pointer (the same answer another way)");
    bench_line("driver call: cuStreamSynchronize, idle", -1, ic.sync_idle, "ns a call, the "
               "legacy stream with nothing queued");
    bench_line("driver call: cuIpcOpenMemHandle+Close", -1, ic.open_close, "ns a pair, one "
               "handle again (raw's importer calls)");
    for (int i = 0; i < BC_COUNT; i++)
        ecost[i] = icost[i] = -1;
    ecost[BC_cuCtxGetCurrent] = ec.ctx_get, icost[BC_cuCtxGetCurrent] = ic.ctx_get;
    ecost[BC_cuCtxSetCurrent] = ec.ctx_set, icost[BC_cuCtxSetCurrent] = ic.ctx_set;
    ecost[BC_cuIpcGetMemHandle] = ec.get_handle;
    icost[BC_cuMemGetAddressRange] = ic.range;
    icost[BC_cuStreamSynchronize] = ic.sync_idle;
    icost[BC_cuIpcOpenMemHandle] = icost[BC_cuIpcCloseMemHandle] = ic.open_close / 2;
    eraw[BC_cuIpcGetMemHandle] = 1;
    iraw[BC_cuIpcOpenMemHandle] = iraw[BC_cuIpcCloseMemHandle] = 1;
    exp_request(e, REQ_COUNT_ON, NULL);
    bench_ack_recv(e->sock);
    printf("breakdown of the first share, ns a base, in untimed rounds of each n "
           "(cucore's and raw's alternating, %d buffers of each): the gap (cucore - raw); "
           "the parts of each side beside raw's (the rest of the gap: the messages, "
           "cucore's send, receive and release against raw's datagrams and ack, and "
           "waiting); the driver calls cucore makes beyond raw's in those parts "
           "(counted on this driver) times their cost above, and what is left of the "
           "parts' excess: cucore's own CPU\n", SPLIT_BUFFERS);
    for (size_t k = 0; k < count; k++) {
        size_t n = ns[k], rounds = SPLIT_BUFFERS / n < 3 ? 3 : SPLIT_BUFFERS / n;
        struct exp_acc ex;
        struct imp_report im;
        char et[512], it[512];
        double ed, id, per = (double)(rounds * n), gap, parts;

        memset(&ex, 0, sizeof(ex));
        for (size_t r = 0; r < rounds; r++) {
            first_round(e, n, &ex);
            raw_round(e, n, &ex);
        }
        exp_request(e, REQ_COUNTS, NULL);
        exp_reply(e, &im, sizeof(im));
        if (im.cuc_rounds != rounds || im.raw_rounds != rounds)
            bench_fail("breakdown: the importer saw %llu and %llu rounds, not %zu",
                       (unsigned long long)im.cuc_rounds, (unsigned long long)im.raw_rounds,
                       rounds);
        if (ex.calls.n[BC_cuPointerGetAttributes]) {
            unsigned kk = (unsigned)(ex.calls.attrs / ex.calls.n[BC_cuPointerGetAttributes]);
            ecost[BC_cuPointerGetAttributes] = kk >= 1 && kk <= 7 ? ec.attrs[kk] : -1;
        }
        ed = side_calls("exporter", &ex.calls, rounds * n, ecost, eraw, et, sizeof(et));
        id = side_calls("importer", &im.calls, rounds * n, icost, iraw, it, sizeof(it));
        gap = (ex.total - ex.raw_total) / per;
        parts = (ex.wrap - ex.get + ex.send - ex.put + im.get - im.open + im.drop - im.close) / per;
        printf("  n=%-5zu gap %6.0f: exporter wrap+add %6.0f vs raw's cuIpcGetMemHandle "
               "%6.0f (%+.0f), send+unref %6.0f vs raw's sends %6.0f (%+.0f); importer "
               "cuc_msg_get_buffers %6.0f vs raw's open %6.0f (%+.0f), unref_many with its "
               "release %6.0f vs raw's close and ack %6.0f (%+.0f); the rest (receiving, "
               "waiting) %+.0f\n", n, gap, ex.wrap / per, ex.get / per,
               (ex.wrap - ex.get) / per, ex.send / per, ex.put / per, (ex.send - ex.put) / per,
               im.get / per, im.open / per, (im.get - im.open) / per, im.drop / per,
               im.close / per, (im.drop - im.close) / per, gap - parts);
        printf("          driver calls beyond raw's %5.0f (%s; %s); cucore's own in the parts "
               "above %+.0f\n", ed + id, et, it, parts - ed - id);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    static const size_t ns[] = {1, 4, 16, 64, 256, 1024, 4096};
#define NS (sizeof(ns) / sizeof(ns[0]))
    char self[4096], cvd[4096];
    const char *args[5];
    char a1[16], a2[16];
    static struct exporter e;
    CUdeviceptr slab;
    cuc_channel *theirs;
    cuc_buffer *keep;
    cuc_msg *m;
    size_t budget = argc > 1 ? strtoul(argv[1], NULL, 10) : 16384;
    size_t max_n = argc > 2 ? strtoul(argv[2], NULL, 10) : MAX_N, nn = 0;
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
    for (size_t k = 0; k < NS && ns[k] <= max_n; k++, nn++) {
        size_t n = ns[k], rounds = budget / n < 3 ? 3 : budget / n;
        double tf = 0, tv = 0, tw = 0, tr = 0;
        char fig[64];
        first_round(&e, n, NULL); /* warm */
        parts_round(&e, n, 0);
        parts_round(&e, n, 1);
        raw_round(&e, n, NULL);
        for (size_t r = 0; r < rounds; r++) {
            tf += first_round(&e, n, NULL);
            tv += parts_round(&e, n, 0);
            tw += parts_round(&e, n, 1);
            tr += raw_round(&e, n, NULL);
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
    breakdown(&e, ns, nn);
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
