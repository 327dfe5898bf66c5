/* A virtual-memory allocation shared with another process, beside the raw
 * driver calls doing the same work, in the same run: per resource, for 2
 * chunks and for 8 chunks of the owner's granularity (2 MiB: sim/FACTS.md
 * F39).
 * The importer is another process (a fork + exec of this bench,
 * CUDA_VISIBLE_DEVICES the exporter's GPUs by UUID in reverse order:
 * bench_ipc.h). The resource is created once, untimed; the owner alone has
 * access (the one-GPU case).
 *
 *   cucore  cuc_msg_add_vmm (cuMemExportToShareableHandle per chunk: the
 *           message owns the fds), cuc_channel_send (SCM_RIGHTS); the
 *           importer's cuc_msg_get_vmm (cuMemImportFromShareableHandle per
 *           chunk, cuMemAddressReserve, cuMemMap per chunk, cuMemRelease,
 *           cuMemSetAccess), cuc_msg_destroy (its fds), cuc_vmm_unref
 *           (cuMemUnmap, cuMemAddressFree, the release); the clock stops
 *           when the exporter has seen the lease end (cuc_vmm_lease_wait).
 *   raw     cuMemExportToShareableHandle per chunk; the fds (SCM_RIGHTS),
 *           the owner's UUID and the chunk sizes in one datagram on a
 *           SOCK_SEQPACKET socket pair; the exporter closes its fds; the
 *           importer scans cuDeviceGet + cuDeviceGetUuid for the UUID,
 *           cuMemImportFromShareableHandle per chunk, closes the fds,
 *           cuMemAddressReserve, cuMemMap per chunk, cuMemRelease,
 *           cuMemSetAccess, cuMemUnmap, cuMemAddressFree, and acknowledges
 *           with a byte.
 *
 * Checks, on rounds that are not timed (the first and the last of each
 * figure): the exporter writes a stamp at the start of every chunk and the
 * importer reads it back through its own mapping; the resource and a
 * device record must arrive on the exporter's GPU (its UUID, at its ordinal
 * there), with the chunk sizes sent. A failed check, an importer that
 * fails, or a lease that has not ended after 60 s ends the bench with
 * status 1.
 *
 *   build/bench/bench_vmm [ROUNDS]        (default 2000)
 *   CUCORE_DRIVER=sim build/bench/bench_vmm
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_ipc.h"

#define MAX_CHUNKS 8
#define MAX_DEVICES 64
#define RAW_CHECK 1u

/* In front of the chunk sizes in a raw datagram. */
struct raw_hdr {
    uint32_t nchunks, flags;
    uint8_t owner[16];
};

struct raw_vmm {
    size_t nchunks, size;
    size_t sizes[MAX_CHUNKS];
    CUmemGenericAllocationHandle h[MAX_CHUNKS];
    CUdeviceptr base;
};

struct exporter {
    char self[4096], cvd[4096], uuid[CUC_UUID_STRLEN];
    int child_ordinal;
    cuc_device *dev;
    size_t granularity;
    CUstream stream; /* for the stamps */
    cuc_channel *ch;
    pid_t cuc_pid;
    uint64_t cuc_seq;
    int raw_sock;
    pid_t raw_pid;
    uint64_t raw_seq;
};

static void check_alive(pid_t pid, const char *who)
{
    int st;

    if (waitpid(pid, &st, WNOHANG) == pid)
        bench_fail("the %s (pid %ld) has exited during the figure (status 0x%x)", who,
                   (long)pid, st);
}

static void access_desc(CUmemAccessDesc *d, CUdevice dev)
{
    memset(d, 0, sizeof(*d));
    d->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d->location.id = dev;
    d->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

static void check_stamps(CUdeviceptr base, const size_t *sizes, size_t n, uint64_t seq,
                         CUstream s, const char *who)
{
    size_t off = 0;

    for (size_t i = 0; i < n; i++) {
        uint64_t v = bench_get8(base + off, s), want = bench_stamp(seq, i);
        if (v != want)
            bench_fail("%s importer: chunk %zu of message %llu holds %016llx, the exporter "
                       "wrote %016llx", who, i, (unsigned long long)seq,
                       (unsigned long long)v, (unsigned long long)want);
        off += sizes[i];
    }
}

/* ------------------------------------------------------------ importer -- */

static int importer_cucore(int fd, const char *uuid, int ord)
{
    cuc_stream *s = NULL;
    uint64_t seq = 0;
    cuc_channel *ch;
    cuc_msg *m;
    int rc;

    bench_ok(cuc_channel_from_fd(fd, &ch), "importer channel");
    while ((rc = cuc_channel_recv(ch, -1, &m)) == 0) {
        size_t cnt = cuc_msg_record_count(m), sizes[MAX_CHUNKS], n, g;
        int check = cnt == 2;
        cuc_vmm *v;
        if (cnt != 1 && cnt != 2)
            bench_fail("cucore importer: a message of %zu records", cnt);
        bench_ok(cuc_msg_get_vmm(m, 0, &v), "cuc_msg_get_vmm");
        if (check) {
            cuc_device *d;
            bench_ok(cuc_msg_get_device(m, 1, &d), "cuc_msg_get_device");
            bench_expect_device(d, uuid, ord, "the device record");
        }
        cuc_msg_destroy(m);
        n = cuc_vmm_chunk_count(v);
        if (check) {
            if (!cuc_vmm_is_imported(v) || n == 0 || n > MAX_CHUNKS)
                bench_fail("cucore importer: not an import of 1..%d chunks", MAX_CHUNKS);
            bench_expect_device(cuc_vmm_device(v), uuid, ord, "the VMM resource");
            if (!s)
                bench_ok(cuc_stream_legacy(cuc_vmm_device(v), &s), "legacy stream");
            bench_ok(cuc_device_set_current(cuc_vmm_device(v)), "set current");
            bench_ok(cuc_vmm_granularity(cuc_vmm_device(v), &g), "granularity");
            for (size_t i = 0; i < n; i++) {
                sizes[i] = cuc_vmm_chunk_size(v, i);
                if (sizes[i] != g)
                    bench_fail("cucore importer: chunk %zu is %zu bytes, want %zu", i,
                               sizes[i], g);
            }
            check_stamps((CUdeviceptr)(uintptr_t)cuc_vmm_ptr(v), sizes, n, seq,
                         (CUstream)cuc_stream_handle(s), "cucore");
        }
        cuc_vmm_unref(v);
        seq++;
    }
    if (rc != CUC_E_PEER_CLOSED)
        bench_ok(rc, "cucore importer receive");
    cuc_channel_destroy(ch);
    return 0;
}

static void raw_map(int sock, const struct raw_hdr *h, const uint64_t *sizes, const int *fds,
                    int ord, CUcontext *ctxs, CUstream *s, uint64_t seq)
{
    CUmemGenericAllocationHandle hs[MAX_CHUNKS];
    size_t total = 0, off = 0, sz[MAX_CHUNKS];
    CUdeviceptr base = 0;
    CUmemAccessDesc d;
    CUdevice dev;
    int o = bench_raw_device(h->owner, ctxs, MAX_DEVICES);

    if (o != ord)
        bench_fail("raw importer: the allocation arrived on ordinal %d, want %d", o, ord);
    if (!*s)
        bench_cu(CUC_DRV->cuStreamCreateWithPriority(s, CU_STREAM_NON_BLOCKING, 0),
                 "cuStreamCreateWithPriority");
    for (uint32_t i = 0; i < h->nchunks; i++) {
        bench_cu(CUC_DRV->cuMemImportFromShareableHandle(
                     &hs[i], (void *)(intptr_t)fds[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                 "cuMemImportFromShareableHandle");
        close(fds[i]);
        sz[i] = (size_t)sizes[i];
        total += sz[i];
    }
    bench_cu(CUC_DRV->cuMemAddressReserve(&base, total, 0, 0, 0), "cuMemAddressReserve");
    for (uint32_t i = 0; i < h->nchunks; i++) {
        bench_cu(CUC_DRV->cuMemMap(base + off, sz[i], 0, hs[i], 0), "cuMemMap");
        bench_cu(CUC_DRV->cuMemRelease(hs[i]), "cuMemRelease");
        off += sz[i];
    }
    bench_cu(CUC_DRV->cuDeviceGet(&dev, o), "cuDeviceGet");
    access_desc(&d, dev);
    bench_cu(CUC_DRV->cuMemSetAccess(base, total, &d, 1), "cuMemSetAccess");
    if (h->flags & RAW_CHECK)
        check_stamps(base, sz, h->nchunks, seq, *s, "raw");
    bench_cu(CUC_DRV->cuMemUnmap(base, total), "cuMemUnmap");
    bench_cu(CUC_DRV->cuMemAddressFree(base, total), "cuMemAddressFree");
    bench_ack_send(sock);
}

static int importer_raw(int sock, const char *uuid, int ord)
{
    CUcontext ctxs[MAX_DEVICES] = {0};
    const struct cuc__driver *drv;
    uint64_t sizes[MAX_CHUNKS], seq = 0;
    int fds[MAX_CHUNKS];
    CUstream s = NULL;
    struct raw_hdr h;
    cuc_uuid want;
    size_t nfds;
    ssize_t len;

    bench_ok(cuc__driver_get(&drv), "driver");
    bench_ok(cuc_uuid_parse(uuid, &want), "UUID");
    while ((len = bench_raw_recv(sock, &h, sizeof(h), sizes, sizeof(sizes), fds, MAX_CHUNKS,
                                 &nfds)) >= 0) {
        if (h.nchunks == 0 || h.nchunks > MAX_CHUNKS || nfds != h.nchunks ||
            (size_t)len != h.nchunks * sizeof(sizes[0]) || memcmp(h.owner, want.bytes, 16))
            bench_fail("raw importer: a malformed datagram (%u chunks, %zu fds, %zd bytes)",
                       h.nchunks, nfds, len);
        raw_map(sock, &h, sizes, fds, ord, ctxs, &s, seq++);
    }
    if (s)
        CUC_DRV->cuStreamDestroy(s);
    close(sock);
    return 0;
}

/* ------------------------------------------------------------ exporter -- */

static void setup(struct exporter *x)
{
    memset(x, 0, sizeof(*x));
    x->raw_sock = -1;
    bench_self(x->self, sizeof(x->self));
    bench_ok(cuc_device_get(0, &x->dev), "device 0");
    if ((cuc_device_caps(x->dev) & (CUC_DEVICE_CAP_VMM | CUC_DEVICE_CAP_VMM_POSIX_FD)) !=
        (CUC_DEVICE_CAP_VMM | CUC_DEVICE_CAP_VMM_POSIX_FD)) {
        printf("%s: device 0 (%s) lacks VMM with POSIX fd handles: skipped\n", bench_name,
               cuc_device_uuid_string(x->dev));
        exit(77);
    }
    snprintf(x->uuid, sizeof(x->uuid), "%s", cuc_device_uuid_string(x->dev));
    x->child_ordinal = bench_child_ordinal(0);
    bench_child_cvd(x->cvd, sizeof(x->cvd));
    bench_ok(cuc_vmm_granularity(x->dev, &x->granularity), "granularity");
    bench_ok(cuc_device_set_current(x->dev), "set current");
    bench_cu(CUC_DRV->cuStreamCreateWithPriority(&x->stream, CU_STREAM_NON_BLOCKING, 0),
             "cuStreamCreateWithPriority");
}

static pid_t spawn_importer(struct exporter *x, const char *mode, int fd)
{
    char fd_s[16], ord_s[16];
    const char *args[] = {"--importer", mode, fd_s, x->uuid, ord_s, NULL};

    snprintf(fd_s, sizeof(fd_s), "%d", fd);
    snprintf(ord_s, sizeof(ord_s), "%d", x->child_ordinal);
    return bench_spawn(x->self, args, x->cvd, fd, -1);
}

static void start(struct exporter *x)
{
    cuc_channel *theirs;
    int sv[2];

    bench_socketpair(sv);
    x->raw_pid = spawn_importer(x, "raw", sv[1]);
    close(sv[1]);
    x->raw_sock = sv[0];
    bench_ok(cuc_channel_pair(&x->ch, &theirs), "channel pair");
    x->cuc_pid = spawn_importer(x, "cucore", cuc_channel_fd(theirs));
    cuc_channel_destroy(theirs);
}

static void stop(struct exporter *x)
{
    cuc_channel_destroy(x->ch);
    bench_wait(x->cuc_pid, "cucore importer");
    close(x->raw_sock);
    bench_wait(x->raw_pid, "raw importer");
}

static void raw_create(const struct exporter *x, size_t nchunks, struct raw_vmm *r)
{
    CUmemAllocationProp p;
    CUmemAccessDesc d;
    size_t off = 0;

    memset(r, 0, sizeof(*r));
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = bench_cu_device(x->dev);
    r->nchunks = nchunks;
    for (size_t i = 0; i < nchunks; i++) {
        r->sizes[i] = x->granularity;
        r->size += x->granularity;
        bench_cu(CUC_DRV->cuMemCreate(&r->h[i], r->sizes[i], &p, 0), "cuMemCreate");
    }
    bench_cu(CUC_DRV->cuMemAddressReserve(&r->base, r->size, 0, 0, 0), "cuMemAddressReserve");
    for (size_t i = 0; i < nchunks; i++) {
        bench_cu(CUC_DRV->cuMemMap(r->base + off, r->sizes[i], 0, r->h[i], 0), "cuMemMap");
        off += r->sizes[i];
    }
    access_desc(&d, bench_cu_device(x->dev));
    bench_cu(CUC_DRV->cuMemSetAccess(r->base, r->size, &d, 1), "cuMemSetAccess");
}

static void raw_destroy(struct raw_vmm *r)
{
    CUC_DRV->cuMemUnmap(r->base, r->size);
    CUC_DRV->cuMemAddressFree(r->base, r->size);
    for (size_t i = 0; i < r->nchunks; i++)
        CUC_DRV->cuMemRelease(r->h[i]);
}

static void put_stamps(const struct exporter *x, CUdeviceptr base, const size_t *sizes,
                       size_t n, uint64_t seq)
{
    size_t off = 0;

    for (size_t i = 0; i < n; i++) {
        bench_put8(base + off, bench_stamp(seq, i), x->stream);
        off += sizes[i];
    }
}

static double cuc_round(struct exporter *x, cuc_vmm *v, const size_t *sizes, size_t n,
                        int check)
{
    double t0;
    cuc_msg *m;

    if (check)
        put_stamps(x, (CUdeviceptr)(uintptr_t)cuc_vmm_ptr(v), sizes, n, x->cuc_seq);
    t0 = bench_now_ns();
    bench_ok(cuc_msg_create(&m), "message");
    bench_ok(cuc_msg_add_vmm(m, v), "cuc_msg_add_vmm");
    if (check)
        bench_ok(cuc_msg_add_device(m, x->dev), "cuc_msg_add_device");
    bench_ok(cuc_channel_send(x->ch, m), "cuc_channel_send");
    cuc_msg_destroy(m);
    bench_ok(cuc_vmm_lease_wait(v, x->ch, 0, BENCH_TIMEOUT_MS),
             "waiting for the importer's lease to end");
    t0 = bench_now_ns() - t0;
    x->cuc_seq++;
    return t0;
}

static double raw_round(struct exporter *x, const struct raw_vmm *r, int check)
{
    struct raw_hdr h;
    uint64_t sizes[MAX_CHUNKS];
    int fds[MAX_CHUNKS];
    double t0;

    if (check)
        put_stamps(x, r->base, r->sizes, r->nchunks, x->raw_seq);
    t0 = bench_now_ns();
    h.nchunks = (uint32_t)r->nchunks;
    h.flags = check ? RAW_CHECK : 0;
    memcpy(h.owner, cuc_device_uuid(x->dev)->bytes, 16);
    for (size_t i = 0; i < r->nchunks; i++) {
        bench_cu(CUC_DRV->cuMemExportToShareableHandle(
                     &fds[i], r->h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                 "cuMemExportToShareableHandle");
        sizes[i] = r->sizes[i];
    }
    bench_raw_send(x->raw_sock, &h, sizeof(h), sizes, r->nchunks * sizeof(sizes[0]), fds,
                   r->nchunks);
    for (size_t i = 0; i < r->nchunks; i++)
        close(fds[i]);
    bench_ack_recv(x->raw_sock);
    t0 = bench_now_ns() - t0;
    x->raw_seq++;
    return t0;
}

/* ns per resource of nchunks chunks, each side: rounds timed after warm
 * untimed ones; the first and the last round (untimed) are checked. */
static void figure(struct exporter *x, size_t nchunks, long rounds)
{
    long warm = rounds / 10 > 1 ? rounds / 10 : 1;
    size_t sizes[MAX_CHUNKS];
    double raw_ns = 0, cuc_ns = 0;
    struct raw_vmm r;
    cuc_vmm *v;
    char fig[64];

    for (size_t i = 0; i < nchunks; i++)
        sizes[i] = x->granularity;
    raw_create(x, nchunks, &r);
    bench_ok(cuc_vmm_create(x->dev, NULL, 0, sizes, nchunks, &v), "cuc_vmm_create");
    for (long k = -warm - 1; k <= rounds; k++) {
        double t = raw_round(x, &r, k == -warm - 1 || k == rounds);
        if (k >= 0 && k < rounds)
            raw_ns += t;
    }
    check_alive(x->raw_pid, "raw importer");
    for (long k = -warm - 1; k <= rounds; k++) {
        double t = cuc_round(x, v, sizes, nchunks, k == -warm - 1 || k == rounds);
        if (k >= 0 && k < rounds)
            cuc_ns += t;
    }
    check_alive(x->cuc_pid, "cucore importer");
    cuc_vmm_unref(v);
    raw_destroy(&r);
    snprintf(fig, sizeof(fig), "vmm share, %zu x %zu MiB chunks", nchunks,
             x->granularity >> 20);
    bench_line(fig, raw_ns / (double)rounds, cuc_ns / (double)rounds,
               "%ld rounds; export, fds, import, map, access, unmap, release; %.1f us a chunk "
               "(cucore)", rounds, cuc_ns / (double)rounds / (double)nchunks / 1e3);
}

int main(int argc, char **argv)
{
    struct exporter x;
    long rounds;

    bench_name = "bench_vmm";
    if (argc == 6 && !strcmp(argv[1], "--importer"))
        return !strcmp(argv[2], "raw") ? importer_raw(atoi(argv[3]), argv[4], atoi(argv[5]))
                                       : importer_cucore(atoi(argv[3]), argv[4], atoi(argv[5]));
    rounds = argc > 1 ? atol(argv[1]) : 2000;
    if (rounds < 1) {
        fprintf(stderr, "usage: bench_vmm [ROUNDS]\n");
        return 2;
    }
    if (bench_header("bench_vmm"))
        return 1;
    setup(&x);
    start(&x);
    printf("exporter: device 0 = %s; importers see CUDA_VISIBLE_DEVICES=%s (ordinal %d "
           "there); granularity %zu bytes\n", x.uuid, x.cvd, x.child_ordinal, x.granularity);
    figure(&x, 2, rounds);
    figure(&x, 8, rounds);
    stop(&x);
    bench_cu(CUC_DRV->cuStreamDestroy(x.stream), "cuStreamDestroy");
    return 0;
}
