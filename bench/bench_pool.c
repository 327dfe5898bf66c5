/* Pool buffers and pools across processes, each beside the raw driver calls
 * doing the same work, in the same run. The importer is another process (a
 * fork + exec of this bench, CUDA_VISIBLE_DEVICES the exporter's GPUs by
 * UUID in reverse order: bench_ipc.h).
 *
 *   pool buffers, first send   n fresh buffers (allocated before the clock
 *       starts) in one message: cuc_msg_add_buffer each (the driver's
 *       cuMemPoolExportPointer, computed now and cached), cuc_channel_send;
 *       the importer receives, cuc_msg_get_buffers for all of them
 *       (cuMemPoolImportPointer each), frees them all (cuc_buffer_unref_many_async:
 *       cuMemFreeAsync each, one cuStreamSynchronize, one release
 *       message); the clock stops when the exporter has seen every
 *       lease end (cuc_pool_lease_wait). Raw: cuMemPoolExportPointer each,
 *       the 64-byte export data over a SOCK_SEQPACKET socket pair (1024 a
 *       datagram at most: 64 KiB, as cucore's frames), the importer's
 *       cuMemPoolImportPointer each, cuMemFreeAsync each, one
 *       cuStreamSynchronize, a one-byte acknowledgement.
 *   pool buffers, again (cached)   the same n buffers sent again: the export
 *       data is cached, so the exporter makes no driver call. Raw: the
 *       program keeps the export data and writes it again; the note also
 *       gives the ratio to raw exporting each time.
 *   both per buffer, for n = 1, 4, 16, 64, 256, 1024, 4096 (up to MAX_N).
 *   pool share   an IPC pool sent and imported: cuc_msg_add_pool (a dup of
 *       the fd the pool keeps), cuc_channel_send; the importer's
 *       cuc_msg_get_pool (cuMemPoolImportFromShareableHandle), cuc_pool_unref
 *       (its destroy), an empty message back. Raw:
 *       cuMemPoolExportToShareableHandle, the fd (SCM_RIGHTS) and the
 *       owner's UUID, a cuDeviceGet + cuDeviceGetUuid scan,
 *       cuMemPoolImportFromShareableHandle, cuMemPoolDestroy, close, an
 *       acknowledgement.
 *   MAX_N buffers in one message: the bytes on the socket; and, for MAX_N
 *       and MAX_N / 4, the growth of peak RSS on each side over one
 *       first-send round (the kernel's high-water mark, reset before the
 *       round: bench_ipc.h), each mode in a fresh exporter + importer pair
 *       (the --memory role).
 *
 * Checks, on rounds that are not timed (the first and the last of each
 * figure): the exporter writes a stamp into buffers 0, n/2 and n-1 and the
 * importer reads it back; the pool, a device record and the buffers must
 * arrive on the exporter's GPU (its UUID, at its ordinal there). A failed
 * check, an importer that fails, or a lease that has not ended after 60 s
 * ends the bench with status 1.
 *
 *   build/bench/bench_pool [BUFFERS [MAX_N [SHARE_ROUNDS]]]
 *       BUFFERS per figure (rounds = BUFFERS / n, at least 3; default
 *       16384), MAX_N (default 4096), SHARE_ROUNDS (default 2000)
 *   CUCORE_DRIVER=sim build/bench/bench_pool
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_ipc.h"

#define BUF_BYTES 4096
#define MAX_N 4096
#define RAW_PER_PART 1024 /* export data per datagram: 64 KiB */
#define MAX_DEVICES 64
#define TARGET 1.10

enum raw_kind { RAW_POOL_SETUP = 1, RAW_POOL_SHARE = 2, RAW_BUFFERS = 3 };
#define RAW_CHECK 1u

/* In front of every raw datagram; a pool's is followed by the owner's
 * UUID, a buffer message's by export data. */
struct raw_hdr {
    uint32_t kind, n, flags, part;
};

struct exporter {
    char self[4096], cvd[4096], uuid[CUC_UUID_STRLEN];
    int child_ordinal;
    cuc_device *dev;
    /* cucore */
    cuc_stream *legacy;
    cuc_pool *pool, *share_pool;
    cuc_channel *ch;
    pid_t cuc_pid;
    uint64_t cuc_seq; /* buffer messages sent on ch */
    /* raw */
    CUmemoryPool raw_pool, raw_share_pool;
    CUstream raw_stream;
    int raw_sock;
    pid_t raw_pid;
    uint64_t raw_seq;
};

static cuc_buffer *cbufs[MAX_N];
static CUdeviceptr rptrs[MAX_N];
static CUmemPoolPtrExportData rdata[MAX_N];

/* Buffers a check looks at: 0, n/2, n-1. */
static size_t spots(size_t n, size_t out[3])
{
    size_t k = 0;

    out[k++] = 0;
    if (n / 2 != 0)
        out[k++] = n / 2;
    if (n - 1 != n / 2 && n - 1 != 0)
        out[k++] = n - 1;
    return k;
}

static void check_alive(pid_t pid, const char *who)
{
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);

    if (r == pid)
        bench_fail("the %s (pid %ld) has exited during the figure (status 0x%x)", who,
                   (long)pid, st);
}

/* ------------------------------------------------------------ importer -- */

static int importer_cucore(int fd, const char *uuid, int ord, int report)
{
    static cuc_buffer *bufs[MAX_N];
    long rss_before = 0, rss_peak = 0, rss_mark = report >= 0 ? bench_rss_mark() : 0;
    cuc_pool *pool = NULL;
    uint64_t seq = 0;
    cuc_channel *ch;
    cuc_msg *m;
    int rc;

    bench_ok(cuc_channel_from_fd(fd, &ch), "importer channel");
    while ((rc = cuc_channel_recv(ch, -1, &m)) == 0) {
        size_t cnt = cuc_msg_record_count(m), n, sp[3], k;
        int first = 0, last = 0, check;
        if (cnt == 0)
            bench_fail("cucore importer: an empty message");
        bench_ok(cuc_msg_record_type(m, 0, &first), "record type");
        bench_ok(cuc_msg_record_type(m, cnt - 1, &last), "record type");
        if (first == CUC_RECORD_POOL) {
            cuc_pool *p;
            cuc_msg *ack;
            bench_ok(cuc_msg_get_pool(m, 0, &p), "cuc_msg_get_pool");
            bench_expect_device(cuc_pool_device(p), uuid, ord, "the pool");
            if (!cuc_pool_is_imported(p))
                bench_fail("cucore importer: the pool was not imported anew");
            if (cnt == 2 && last == CUC_RECORD_DEVICE && !pool) {
                cuc_device *d;
                bench_ok(cuc_msg_get_device(m, 1, &d), "cuc_msg_get_device");
                bench_expect_device(d, uuid, ord, "the device record");
                pool = p; /* the buffers' pool: kept */
            } else if (cnt == 1) {
                cuc_pool_unref(p); /* a pool share round: destroyed */
            } else {
                bench_fail("cucore importer: an unexpected pool message");
            }
            cuc_msg_destroy(m);
            bench_ok(cuc_msg_create(&ack), "message");
            bench_ok(cuc_channel_send(ch, ack), "acknowledgement");
            cuc_msg_destroy(ack);
            continue;
        }
        check = last == CUC_RECORD_DEVICE;
        n = cnt - (size_t)check;
        if (!pool || n == 0 || n > MAX_N)
            bench_fail("cucore importer: %zu buffers in a message (pool %s)", n,
                       pool ? "imported" : "not yet imported");
        bench_ok(cuc_msg_get_buffers(m, 0, n, bufs), "cuc_msg_get_buffers");
        if (check) {
            cuc_device *d;
            cuc_stream *s;
            bench_ok(cuc_msg_get_device(m, n, &d), "cuc_msg_get_device");
            bench_expect_device(d, uuid, ord, "the device record");
            bench_ok(cuc_stream_legacy(d, &s), "legacy stream");
            for (size_t i = 0; i < n; i++)
                if (cuc_buffer_pool(bufs[i]) != pool || cuc_buffer_size(bufs[i]) != BUF_BYTES ||
                    !cuc_buffer_is_imported(bufs[i]))
                    bench_fail("cucore importer: buffer %zu of %zu is not a %d-byte import "
                               "of the pool", i, n, BUF_BYTES);
            k = spots(n, sp);
            for (size_t j = 0; j < k; j++) {
                uint64_t v = 0, want = bench_stamp(seq, sp[j]);
                bench_ok(cuc_memcpy(&v, cuc_buffer_ptr(bufs[sp[j]]), sizeof(v), s), "read back");
                if (v != want)
                    bench_fail("cucore importer: buffer %zu of message %llu holds %016llx, "
                               "the exporter wrote %016llx", sp[j], (unsigned long long)seq,
                               (unsigned long long)v, (unsigned long long)want);
            }
        }
        cuc_msg_destroy(m);
        bench_ok(cuc_buffer_unref_many_async(bufs, n, NULL), "cuc_buffer_unref_many_async");
        seq++;
        if (report >= 0) {
            rss_peak = bench_rss_peak();
            rss_before = rss_mark;
            rss_mark = bench_rss_mark();
        }
    }
    if (rc != CUC_E_PEER_CLOSED)
        bench_ok(rc, "cucore importer receive");
    if (report >= 0)
        dprintf(report, "importer %ld %ld %s\n", rss_before, rss_peak, bench_rss_method);
    cuc_pool_unref(pool);
    cuc_channel_destroy(ch);
    return 0;
}

/* The rest of a raw buffer message after its first datagram: *got export
 * data so far, n in all. */
static void raw_recv_parts(int sock, uint32_t n, size_t got)
{
    for (uint32_t part = 1; got < n; part++) {
        struct raw_hdr h;
        size_t cap = (n - got < RAW_PER_PART ? n - got : RAW_PER_PART) * sizeof(rdata[0]);
        ssize_t len = bench_raw_recv(sock, &h, sizeof(h), &rdata[got], cap, NULL, 0, NULL);
        if (len <= 0 || len % (ssize_t)sizeof(rdata[0]) || h.kind != RAW_BUFFERS ||
            h.n != n || h.part != part)
            bench_fail("raw importer: part %u of a %u-buffer message is malformed", part, n);
        got += (size_t)len / sizeof(rdata[0]);
    }
}

static void raw_import_buffers(int sock, CUmemoryPool pool, CUstream s,
                               const struct raw_hdr *h, ssize_t len, uint64_t seq)
{
    size_t sp[3], k;

    if (!pool || h->n == 0 || h->n > MAX_N || h->part != 0 || len <= 0 ||
        len % (ssize_t)sizeof(rdata[0]) || (size_t)len / sizeof(rdata[0]) > h->n)
        bench_fail("raw importer: a malformed buffer message (%u buffers)", h->n);
    raw_recv_parts(sock, h->n, (size_t)len / sizeof(rdata[0]));
    for (uint32_t i = 0; i < h->n; i++)
        bench_cu(CUC_DRV->cuMemPoolImportPointer(&rptrs[i], pool, &rdata[i]),
                 "cuMemPoolImportPointer");
    k = (h->flags & RAW_CHECK) ? spots(h->n, sp) : 0;
    for (size_t j = 0; j < k; j++) {
        uint64_t v = bench_get8(rptrs[sp[j]], s), want = bench_stamp(seq, sp[j]);
        if (v != want)
            bench_fail("raw importer: buffer %zu of message %llu holds %016llx, the "
                       "exporter wrote %016llx", sp[j], (unsigned long long)seq,
                       (unsigned long long)v, (unsigned long long)want);
    }
    for (uint32_t i = 0; i < h->n; i++)
        bench_cu(CUC_DRV->cuMemFreeAsync(rptrs[i], s), "cuMemFreeAsync");
    bench_cu(CUC_DRV->cuStreamSynchronize(s), "cuStreamSynchronize");
    bench_ack_send(sock);
}

static int importer_raw(int sock, const char *uuid, int ord, int report)
{
    CUcontext ctxs[MAX_DEVICES] = {0};
    const struct cuc__driver *drv;
    long rss_before = 0, rss_peak = 0, rss_mark = report >= 0 ? bench_rss_mark() : 0;
    CUmemoryPool pool = NULL;
    CUstream s = NULL;
    uint64_t seq = 0;
    cuc_uuid want;
    struct raw_hdr h;
    ssize_t len;
    size_t nfds;
    int fd;

    bench_ok(cuc__driver_get(&drv), "driver");
    bench_ok(cuc_uuid_parse(uuid, &want), "UUID");
    while ((len = bench_raw_recv(sock, &h, sizeof(h), rdata, RAW_PER_PART * sizeof(rdata[0]),
                                 &fd, 1, &nfds)) >= 0) {
        if (h.kind == RAW_BUFFERS && nfds == 0) {
            raw_import_buffers(sock, pool, s, &h, len, seq++);
            if (report >= 0) {
                rss_peak = bench_rss_peak();
                rss_before = rss_mark;
                rss_mark = bench_rss_mark();
            }
        } else if ((h.kind == RAW_POOL_SETUP || h.kind == RAW_POOL_SHARE) && len == 16 &&
                   nfds == 1) {
            CUmemoryPool p;
            if (memcmp(rdata, want.bytes, 16) != 0 ||
                bench_raw_device((const uint8_t *)rdata, ctxs, MAX_DEVICES) != ord)
                bench_fail("raw importer: the pool is not on %s at ordinal %d", uuid, ord);
            bench_cu(CUC_DRV->cuMemPoolImportFromShareableHandle(
                         &p, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                     "cuMemPoolImportFromShareableHandle");
            close(fd);
            if (h.kind == RAW_POOL_SHARE) {
                bench_cu(CUC_DRV->cuMemPoolDestroy(p), "cuMemPoolDestroy");
            } else {
                if (pool)
                    bench_fail("raw importer: a second setup");
                pool = p;
                bench_cu(CUC_DRV->cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0),
                         "cuStreamCreateWithPriority");
            }
            bench_ack_send(sock);
        } else {
            bench_fail("raw importer: unexpected datagram (kind %u, %zd bytes, %zu fds)",
                       h.kind, len, nfds);
        }
    }
    if (report >= 0)
        dprintf(report, "importer %ld %ld %s\n", rss_before, rss_peak, bench_rss_method);
    if (s)
        CUC_DRV->cuStreamDestroy(s);
    if (pool)
        CUC_DRV->cuMemPoolDestroy(pool);
    close(sock);
    return 0;
}

/* ------------------------------------------------------------ exporter -- */

static CUmemoryPool raw_pool_create(const cuc_device *dev)
{
    CUmemPoolProps p;
    CUmemoryPool pool;

    memset(&p, 0, sizeof(p));
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = bench_cu_device(dev);
    bench_cu(CUC_DRV->cuMemPoolCreate(&pool, &p), "cuMemPoolCreate");
    return pool;
}

/* The device, pools and streams; exits 77 where pools cannot be shared. */
static void setup(struct exporter *x)
{
    struct cuc_pool_props pr = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};

    memset(x, 0, sizeof(*x));
    x->raw_sock = -1;
    bench_self(x->self, sizeof(x->self));
    bench_ok(cuc_device_get(0, &x->dev), "device 0");
    if (!(cuc_device_caps(x->dev) & CUC_DEVICE_CAP_POOL_POSIX_FD)) {
        printf("%s: device 0 (%s) cannot export pools as POSIX fds: skipped\n", bench_name,
               cuc_device_uuid_string(x->dev));
        exit(77);
    }
    snprintf(x->uuid, sizeof(x->uuid), "%s", cuc_device_uuid_string(x->dev));
    x->child_ordinal = bench_child_ordinal(0);
    bench_child_cvd(x->cvd, sizeof(x->cvd));
    bench_ok(cuc_device_set_current(x->dev), "set current");
    bench_ok(cuc_stream_legacy(x->dev, &x->legacy), "legacy stream");
    bench_ok(cuc_pool_create(x->dev, &pr, &x->pool), "pool");
    bench_ok(cuc_pool_create(x->dev, &pr, &x->share_pool), "pool");
    x->raw_pool = raw_pool_create(x->dev);
    x->raw_share_pool = raw_pool_create(x->dev);
    bench_cu(CUC_DRV->cuStreamCreateWithPriority(&x->raw_stream, CU_STREAM_NON_BLOCKING, 0),
             "cuStreamCreateWithPriority");
}

static void teardown(struct exporter *x)
{
    bench_ok(cuc_device_set_current(x->dev), "set current");
    bench_cu(CUC_DRV->cuStreamSynchronize(x->raw_stream), "cuStreamSynchronize");
    CUC_DRV->cuStreamDestroy(x->raw_stream);
    CUC_DRV->cuMemPoolDestroy(x->raw_pool);
    CUC_DRV->cuMemPoolDestroy(x->raw_share_pool);
    cuc_pool_unref(x->pool);
    cuc_pool_unref(x->share_pool);
}

static pid_t spawn_importer(struct exporter *x, const char *mode, int fd, int report_fd)
{
    char fd_s[16], ord_s[16], rep_s[16];
    const char *args[] = {"--importer", mode, fd_s, x->uuid, ord_s, rep_s, NULL};

    snprintf(fd_s, sizeof(fd_s), "%d", fd);
    snprintf(ord_s, sizeof(ord_s), "%d", x->child_ordinal);
    snprintf(rep_s, sizeof(rep_s), "%d", report_fd);
    return bench_spawn(x->self, args, x->cvd, fd, report_fd);
}

static void recv_empty(cuc_channel *ch)
{
    cuc_msg *m;

    bench_ok(cuc_channel_recv(ch, BENCH_TIMEOUT_MS, &m), "acknowledgement");
    if (cuc_msg_record_count(m) != 0)
        bench_fail("the importer answered with %zu records", cuc_msg_record_count(m));
    cuc_msg_destroy(m);
}

/* The importer, with the buffers' pool and a device record (untimed). */
static void start_cucore(struct exporter *x, int report_fd)
{
    cuc_channel *theirs;
    cuc_msg *m;

    bench_ok(cuc_channel_pair(&x->ch, &theirs), "channel pair");
    x->cuc_pid = spawn_importer(x, "cucore", cuc_channel_fd(theirs), report_fd);
    cuc_channel_destroy(theirs);
    bench_ok(cuc_msg_create(&m), "message");
    bench_ok(cuc_msg_add_pool(m, x->pool), "cuc_msg_add_pool");
    bench_ok(cuc_msg_add_device(m, x->dev), "cuc_msg_add_device");
    bench_ok(cuc_channel_send(x->ch, m), "send the pool");
    cuc_msg_destroy(m);
    recv_empty(x->ch);
}

static void raw_send_pool(struct exporter *x, CUmemoryPool pool, uint32_t kind)
{
    struct raw_hdr h = {kind, 0, 0, 0};
    int fd = -1;

    bench_cu(CUC_DRV->cuMemPoolExportToShareableHandle(
                 &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             "cuMemPoolExportToShareableHandle");
    bench_raw_send(x->raw_sock, &h, sizeof(h), cuc_device_uuid(x->dev)->bytes, 16, &fd, 1);
    close(fd);
    bench_ack_recv(x->raw_sock);
}

static void start_raw(struct exporter *x, int report_fd)
{
    int sv[2];

    bench_socketpair(sv);
    x->raw_pid = spawn_importer(x, "raw", sv[1], report_fd);
    close(sv[1]);
    x->raw_sock = sv[0];
    raw_send_pool(x, x->raw_pool, RAW_POOL_SETUP);
}

static void stop_cucore(struct exporter *x)
{
    cuc_channel_destroy(x->ch);
    x->ch = NULL;
    bench_wait(x->cuc_pid, "cucore importer");
}

static void stop_raw(struct exporter *x)
{
    close(x->raw_sock);
    x->raw_sock = -1;
    bench_wait(x->raw_pid, "raw importer");
}

/* ---- the buffer rounds ---- */

static void cuc_alloc(struct exporter *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_alloc_async(x->pool, BUF_BYTES, NULL, &cbufs[i]), "cuc_buffer_alloc_async");
    bench_ok(cuc_stream_synchronize(x->legacy), "synchronize");
}

static void cuc_free(size_t n)
{
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_buffer_unref_async(cbufs[i], NULL), "cuc_buffer_unref_async");
}

static void raw_alloc(struct exporter *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bench_cu(CUC_DRV->cuMemAllocFromPoolAsync(&rptrs[i], BUF_BYTES, x->raw_pool,
                                                  x->raw_stream),
                 "cuMemAllocFromPoolAsync");
    bench_cu(CUC_DRV->cuStreamSynchronize(x->raw_stream), "cuStreamSynchronize");
}

static void raw_free(struct exporter *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bench_cu(CUC_DRV->cuMemFreeAsync(rptrs[i], x->raw_stream), "cuMemFreeAsync");
}

/* One message of cbufs[0..n) and the end of its leases: ns. */
static double cuc_round(struct exporter *x, size_t n, int check)
{
    size_t sp[3], k = check ? spots(n, sp) : 0;
    double t0;
    cuc_msg *m;

    for (size_t j = 0; j < k; j++)
        bench_put8((CUdeviceptr)(uintptr_t)cuc_buffer_ptr(cbufs[sp[j]]),
                   bench_stamp(x->cuc_seq, sp[j]), x->raw_stream);
    t0 = bench_now_ns();
    bench_ok(cuc_msg_create(&m), "message");
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_msg_add_buffer(m, cbufs[i]), "cuc_msg_add_buffer");
    if (check)
        bench_ok(cuc_msg_add_device(m, x->dev), "cuc_msg_add_device");
    bench_ok(cuc_channel_send(x->ch, m), "cuc_channel_send");
    cuc_msg_destroy(m);
    bench_ok(cuc_pool_lease_wait(x->pool, x->ch, 0, BENCH_TIMEOUT_MS),
             "waiting for the importer's leases to end");
    t0 = bench_now_ns() - t0;
    x->cuc_seq++;
    return t0;
}

/* One raw message of rptrs[0..n) (exported now, or the export data kept
 * in rdata) and its acknowledgement: ns. */
static double raw_round(struct exporter *x, size_t n, int do_export, int check)
{
    size_t sp[3], k = check ? spots(n, sp) : 0;
    double t0;

    for (size_t j = 0; j < k; j++)
        bench_put8(rptrs[sp[j]], bench_stamp(x->raw_seq, sp[j]), x->raw_stream);
    t0 = bench_now_ns();
    for (size_t i = 0; do_export && i < n; i++)
        bench_cu(CUC_DRV->cuMemPoolExportPointer(&rdata[i], rptrs[i]), "cuMemPoolExportPointer");
    for (size_t off = 0, part = 0; off < n; part++) {
        size_t m = n - off < RAW_PER_PART ? n - off : RAW_PER_PART;
        struct raw_hdr h = {RAW_BUFFERS, (uint32_t)n, check ? RAW_CHECK : 0, (uint32_t)part};
        bench_raw_send(x->raw_sock, &h, sizeof(h), &rdata[off], m * sizeof(rdata[0]), NULL, 0);
        off += m;
    }
    bench_ack_recv(x->raw_sock);
    t0 = bench_now_ns() - t0;
    x->raw_seq++;
    return t0;
}

static void alloc_n(struct exporter *x, int raw, size_t n)
{
    if (raw)
        raw_alloc(x, n);
    else
        cuc_alloc(x, n);
}

static void free_n(struct exporter *x, int raw, size_t n)
{
    if (raw)
        raw_free(x, n);
    else
        cuc_free(n);
}

/* Per buffer, over rounds timed rounds after warm untimed ones; the first
 * and the last round (untimed) are checked. fresh: new buffers every round;
 * else the same ones, exported (raw) or added (cucore) the first time. */
static double phase(struct exporter *x, int raw, int fresh, size_t n, long rounds, long warm)
{
    double total = 0;

    if (!fresh)
        alloc_n(x, raw, n);
    for (long r = -warm - 1; r <= rounds; r++) {
        int check = r == -warm - 1 || r == rounds;
        double t;
        if (fresh)
            alloc_n(x, raw, n);
        t = raw ? raw_round(x, n, fresh || r == -warm - 1, check) : cuc_round(x, n, check);
        if (fresh)
            free_n(x, raw, n);
        if (r >= 0 && r < rounds)
            total += t;
    }
    if (!fresh)
        free_n(x, raw, n);
    check_alive(raw ? x->raw_pid : x->cuc_pid, raw ? "raw importer" : "cucore importer");
    return total / (double)rounds / (double)n;
}

static void target_note(char *out, size_t cap, double ratio)
{
    if (ratio <= TARGET)
        snprintf(out, cap, "1.10x target met");
    else
        snprintf(out, cap, "1.10x target MISSED by %.0f%%", (ratio / TARGET - 1) * 100);
}

static void buffer_figures(struct exporter *x, long buffers, size_t max_n)
{
    for (size_t n = 1; n <= max_n; n = n * 4 > max_n && n < max_n ? max_n : n * 4) {
        long rounds = buffers / (long)n > 3 ? buffers / (long)n : 3;
        long warm = rounds / 10 > 1 ? rounds / 10 : 1;
        double raw_e = phase(x, 1, 1, n, rounds, warm);
        double cuc_f = phase(x, 0, 1, n, rounds, warm);
        double raw_k = phase(x, 1, 0, n, rounds, warm);
        double cuc_a = phase(x, 0, 0, n, rounds, warm);
        char fig[64], t1[64], t2[64];
        target_note(t1, sizeof(t1), cuc_f / raw_e);
        target_note(t2, sizeof(t2), cuc_a / raw_k);
        snprintf(fig, sizeof(fig), "pool buffers, first send, %zu/message", n);
        bench_line(fig, raw_e, cuc_f, "per buffer, %ld rounds; %s", rounds, t1);
        snprintf(fig, sizeof(fig), "pool buffers, again (cached), %zu/message", n);
        bench_line(fig, raw_k, cuc_a, "per buffer; raw keeps the export data; x%.2f of raw "
                   "exporting each time; %s", cuc_a / raw_e, t2);
        if (n >= max_n)
            break;
    }
}

/* ---- pool share ---- */

static double share(struct exporter *x, int raw, long rounds)
{
    long warm = rounds / 10 > 1 ? rounds / 10 : 1;
    double total = 0;

    for (long r = -warm; r < rounds; r++) {
        double t0 = bench_now_ns();
        if (raw) {
            raw_send_pool(x, x->raw_share_pool, RAW_POOL_SHARE);
        } else {
            cuc_msg *m;
            bench_ok(cuc_msg_create(&m), "message");
            bench_ok(cuc_msg_add_pool(m, x->share_pool), "cuc_msg_add_pool");
            bench_ok(cuc_channel_send(x->ch, m), "send the pool");
            cuc_msg_destroy(m);
            recv_empty(x->ch);
        }
        if (r >= 0)
            total += bench_now_ns() - t0;
    }
    return total / (double)rounds;
}

/* ---- memory: one large message in fresh processes ---- */

/* The --memory role: a fresh exporter with an importer of one mode; writes
 * its peak RSS before and after one round of n fresh buffers to report. */
static int memory_main(const char *mode, size_t n, int report)
{
    struct exporter x;
    int raw = strcmp(mode, "raw") == 0;
    long before, after;

    if (n == 0 || n > MAX_N)
        bench_fail("--memory: %zu buffers (1..%d)", n, MAX_N);
    setup(&x);
    if (raw)
        start_raw(&x, report);
    else
        start_cucore(&x, report);
    /* one checked round of one buffer: first-use costs out of the way */
    alloc_n(&x, raw, 1);
    if (raw)
        raw_round(&x, 1, 1, 1);
    else
        cuc_round(&x, 1, 1);
    free_n(&x, raw, 1);
    alloc_n(&x, raw, n);
    before = bench_rss_mark();
    if (raw)
        raw_round(&x, n, 1, 0);
    else
        cuc_round(&x, n, 0);
    after = bench_rss_peak();
    free_n(&x, raw, n);
    dprintf(report, "exporter %ld %ld %s\n", before, after, bench_rss_method);
    if (raw)
        stop_raw(&x);
    else
        stop_cucore(&x);
    teardown(&x);
    return 0;
}

struct rss {
    long exp_before, exp_peak, imp_before, imp_peak;
    char method[16];
};

static struct rss memory_run(struct exporter *x, const char *mode, size_t n)
{
    char n_s[16], fd_s[16], buf[512];
    const char *args[] = {"--memory", mode, n_s, fd_s, NULL};
    struct rss r = {-1, -1, -1, -1, ""};
    size_t len = 0;
    ssize_t got;
    int p[2];
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) != 0)
        bench_fail("pipe: %s", strerror(errno));
    snprintf(n_s, sizeof(n_s), "%zu", n);
    snprintf(fd_s, sizeof(fd_s), "%d", p[1]);
    pid = bench_spawn(x->self, args, NULL, p[1], -1);
    close(p[1]);
    while (len < sizeof(buf) - 1 && (got = read(p[0], buf + len, sizeof(buf) - 1 - len)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            bench_fail("reading the memory report: %s", strerror(errno));
        len += (size_t)got;
    }
    buf[len] = '\0';
    close(p[0]);
    bench_wait(pid, "memory exporter");
    snprintf(r.method, sizeof(r.method), "?");
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char who[16], method[16];
        long a, b;
        if (sscanf(line, "%15s %ld %ld %15s", who, &a, &b, method) != 4)
            continue;
        if (strcmp(who, "exporter") == 0) {
            r.exp_before = a;
            r.exp_peak = b;
        } else if (strcmp(who, "importer") == 0) {
            r.imp_before = a;
            r.imp_peak = b;
        }
        if (strcmp(method, "VmHWM") != 0 || strcmp(r.method, "?") == 0)
            snprintf(r.method, sizeof(r.method), "%s", method);
    }
    if (r.exp_before < 0 || r.imp_before < 0)
        bench_fail("the %s memory run reported no figures", mode);
    return r;
}

/* The bytes a message of n buffers puts on the socket, each side. */
static void bytes_figure(struct exporter *x, size_t n)
{
    size_t parts = (n + RAW_PER_PART - 1) / RAW_PER_PART, msg_len, sock_len;
    double raw_bytes = (double)(n * sizeof(rdata[0]) + parts * sizeof(struct raw_hdr));
    uint32_t frames;
    cuc_msg *m;
    char fig[64];

    cuc_alloc(x, n);
    bench_ok(cuc_msg_create(&m), "message");
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_msg_add_buffer(m, cbufs[i]), "cuc_msg_add_buffer");
    msg_len = cuc_msg_wire_size(m);
    cuc_msg_destroy(m);
    cuc_free(n);
    /* docs/wire-format.md, "Channel frames": a 40-byte header in front of
     * each 64 KiB of message (no fds here) */
    frames = (uint32_t)((msg_len + 65535) / 65536);
    sock_len = msg_len + frames * 40u;
    snprintf(fig, sizeof(fig), "pool buffers, %zu/msg: bytes on the socket", n);
    bench_line_unit(fig, raw_bytes, (double)sock_len, "B",
                    "%.1f vs %.1f bytes per buffer; cucore message %zu bytes in %u frames",
                    raw_bytes / (double)n, (double)sock_len / (double)n, msg_len, frames);
}

/* Bytes from KiB figures; the kernel counts pages, and the page the
 * reading itself touches can make a round without growth read -1 page. */
static double growth(long before_kib, long peak_kib)
{
    return peak_kib > before_kib ? (double)(peak_kib - before_kib) * 1024 : 0;
}

/* Peak RSS growth over one round of n buffers, each side, for n and n/4:
 * a constant per buffer is O(n). */
static void memory_figures(struct exporter *x, size_t max_n)
{
    for (size_t n = max_n >= 4 ? max_n / 4 : max_n;; n = max_n) {
        struct rss raw = memory_run(x, "raw", n), cuc = memory_run(x, "cucore", n);
        double re = growth(raw.exp_before, raw.exp_peak);
        double ce = growth(cuc.exp_before, cuc.exp_peak);
        double ri = growth(raw.imp_before, raw.imp_peak);
        double ci = growth(cuc.imp_before, cuc.imp_peak);
        char fig[64];

        snprintf(fig, sizeof(fig), "pool buffers, %zu/msg: exporter RSS growth", n);
        bench_line_unit(fig, re, ce, "B", "peak over one round (%s), fresh processes: %.0f "
                        "vs %.0f bytes per buffer", cuc.method, re / (double)n, ce / (double)n);
        snprintf(fig, sizeof(fig), "pool buffers, %zu/msg: importer RSS growth", n);
        bench_line_unit(fig, ri, ci, "B", "peak over one round (%s), fresh processes: %.0f "
                        "vs %.0f bytes per buffer", cuc.method, ri / (double)n, ci / (double)n);
        if (n == max_n)
            break;
    }
    bytes_figure(x, max_n);
}

int main(int argc, char **argv)
{
    struct exporter x;
    long buffers, share_rounds;
    size_t max_n;

    bench_name = "bench_pool";
    if (argc == 7 && !strcmp(argv[1], "--importer"))
        return !strcmp(argv[2], "raw")
                   ? importer_raw(atoi(argv[3]), argv[4], atoi(argv[5]), atoi(argv[6]))
                   : importer_cucore(atoi(argv[3]), argv[4], atoi(argv[5]), atoi(argv[6]));
    if (argc == 5 && !strcmp(argv[1], "--memory"))
        return memory_main(argv[2], (size_t)atol(argv[3]), atoi(argv[4]));
    buffers = argc > 1 ? atol(argv[1]) : 16384;
    max_n = argc > 2 ? (size_t)atol(argv[2]) : MAX_N;
    share_rounds = argc > 3 ? atol(argv[3]) : 2000;
    if (buffers < 1 || max_n < 1 || max_n > MAX_N || share_rounds < 1) {
        fprintf(stderr, "usage: bench_pool [BUFFERS [MAX_N (1..%d) [SHARE_ROUNDS]]]\n",
                MAX_N);
        return 2;
    }
    if (bench_header("bench_pool"))
        return 1;
    setup(&x);
    start_raw(&x, -1);
    start_cucore(&x, -1);
    printf("exporter: device 0 = %s; importers see CUDA_VISIBLE_DEVICES=%s (ordinal %d "
           "there); %d-byte buffers\n", x.uuid, x.cvd, x.child_ordinal, BUF_BYTES);
    buffer_figures(&x, buffers, max_n);
    {
        double raw_ns = share(&x, 1, share_rounds), cuc_ns = share(&x, 0, share_rounds);
        bench_line("pool share: send, import, destroy", raw_ns, cuc_ns,
                   "%ld rounds; fd + record, the importer's pool import and destroy",
                   share_rounds);
    }
    stop_cucore(&x);
    stop_raw(&x);
    memory_figures(&x, max_n);
    teardown(&x);
    return 0;
}
