/* What the cross-process benchmarks (bench_pool, bench_vmm) share.
 *
 * The importer is a separate process: a fork + exec of the bench itself in
 * a role, whose CUDA_VISIBLE_DEVICES names the exporter's devices by UUID,
 * in reverse order, so that the exporter's device has another ordinal
 * there wherever it can (one GPU: its UUID alone). The raw side talks over
 * a plain SOCK_SEQPACKET socket pair: datagrams of a small header and
 * bytes, with fds as SCM_RIGHTS. Spot checks write and read an 8-byte
 * stamp that both sides derive from the message's sequence number. Every
 * failure ends the process with status 1. Benches include src/ (they link
 * cucore_static) for the driver table.
 */
#ifndef CUC_BENCH_IPC_H
#define CUC_BENCH_IPC_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cucore.h"
/* The driver table, for the raw-driver baselines: the one internal header
 * a bench uses. */
#include "driver/driver.h"

#define BENCH_TIMEOUT_MS 60000
/* fds one raw datagram carries at most (the kernel's SCM_MAX_FD). */
#define BENCH_MAX_FDS 253

/* The bench's name in messages; each bench sets it first thing. */
static const char *bench_name = "bench";

static inline void bench_fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
static inline void bench_fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s [pid %ld]: ", bench_name, (long)getpid());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* A cucore call that must succeed. */
static inline void bench_ok(int rc, const char *what)
{
    if (rc)
        bench_fail("%s: %s: %s", what, cuc_errname(rc), cuc_errmsg());
}

/* A driver call that must succeed. */
static inline void bench_cu(CUresult r, const char *call)
{
    if (r != CUDA_SUCCESS)
    {
        const char *name = NULL;
        if (!CUC_DRV || CUC_DRV->cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
            name = "CUDA_ERROR_?";
        bench_fail("%s failed: %s", call, name);
    }
}

/* The driver's CUdevice of a cucore device (its ordinal: one process). */
static inline CUdevice bench_cu_device(const cuc_device *dev)
{
    CUdevice cu;

    bench_cu(CUC_DRV->cuDeviceGet(&cu, cuc_device_ordinal(dev)), "cuDeviceGet");
    return cu;
}

static inline void bench_self(char *out, size_t cap)
{
    ssize_t len = readlink("/proc/self/exe", out, cap - 1);

    if (len <= 0)
        bench_fail("readlink /proc/self/exe: %s", strerror(errno));
    out[len] = '\0';
}

/* "GPU-<last>,...,GPU-<first>": every device this process sees, by UUID,
 * last first. */
static inline void bench_child_cvd(char *out, size_t cap)
{
    size_t len = 0;
    int n;

    bench_ok(cuc_device_count(&n), "device count");
    out[0] = '\0';
    for (int i = n - 1; i >= 0; i--) {
        cuc_device *d;
        bench_ok(cuc_device_get(i, &d), "device");
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s",
                                cuc_device_uuid_string(d), i ? "," : "");
        if (len >= cap)
            bench_fail("CUDA_VISIBLE_DEVICES for %d devices is over %zu bytes", n, cap);
    }
}

/* The ordinal that the device at ordinal ord here has in such a child. */
static inline int bench_child_ordinal(int ord)
{
    int n;

    bench_ok(cuc_device_count(&n), "device count");
    return n - 1 - ord;
}

static inline void bench_keep_fd(int fd)
{
    int fl = fcntl(fd, F_GETFD);

    if (fl < 0 || fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) < 0)
        _exit(127);
}

/* fork + exec of self with args (NULL-terminated, after argv[0]); the
 * child inherits keep_fd and keep_fd2 (-1: none) and, with cvd non-NULL,
 * gets CUDA_VISIBLE_DEVICES=cvd. */
static inline pid_t bench_spawn(const char *self, const char *const *args, const char *cvd,
                                int keep_fd, int keep_fd2)
{
    const char *argv[16];
    int argc = 0;
    pid_t pid;

    argv[argc++] = self;
    for (; *args && argc < 15; args++)
        argv[argc++] = *args;
    argv[argc] = NULL;
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        bench_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        if (cvd && setenv("CUDA_VISIBLE_DEVICES", cvd, 1) != 0)
            _exit(127);
        if (keep_fd >= 0)
            bench_keep_fd(keep_fd);
        if (keep_fd2 >= 0)
            bench_keep_fd(keep_fd2);
        execv(self, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static inline void bench_wait(pid_t pid, const char *who)
{
    int st = 0;

    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            bench_fail("waitpid for the %s: %s", who, strerror(errno));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bench_fail("the %s (pid %ld) failed: %s %d", who, (long)pid,
                   WIFEXITED(st) ? "exit status" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* A raw socket pair; the exporter's end, sv[0], gives up on a receive
 * after BENCH_TIMEOUT_MS (an importer that hangs fails the bench). */
static inline void bench_socketpair(int sv[2])
{
    struct timeval tv = {BENCH_TIMEOUT_MS / 1000, (BENCH_TIMEOUT_MS % 1000) * 1000};

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        bench_fail("socketpair: %s", strerror(errno));
    if (setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
        bench_fail("SO_RCVTIMEO: %s", strerror(errno));
}

/* One datagram: hdr, then body, with nfds fds. */
static inline void bench_raw_send(int sock, const void *hdr, size_t hlen, const void *body,
                                  size_t blen, const int *fds, size_t nfds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(BENCH_MAX_FDS * sizeof(int))];
    } cm;
    struct iovec iov[2] = {{(void *)hdr, hlen}, {(void *)body, blen}};
    struct msghdr mh;
    ssize_t n;

    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = blen ? 2 : 1;
    if (nfds) {
        if (nfds > BENCH_MAX_FDS)
            bench_fail("%zu fds in one datagram (at most %d)", nfds, BENCH_MAX_FDS);
        memset(&cm, 0, sizeof(cm));
        mh.msg_control = cm.buf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        cm.h.cmsg_level = SOL_SOCKET;
        cm.h.cmsg_type = SCM_RIGHTS;
        cm.h.cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(&cm.h), fds, nfds * sizeof(int));
    }
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)(hlen + blen))
        bench_fail("raw send of %zu bytes: %zd (%s)", hlen + blen, n,
                   n < 0 ? strerror(errno) : "short");
}

/* One datagram into hdr (exactly hlen bytes, or EOF) and body (up to
 * bcap); its fds into fds. Returns the body's length, or -1 at EOF. */
static inline ssize_t bench_raw_recv(int sock, void *hdr, size_t hlen, void *body, size_t bcap,
                                     int *fds, size_t maxfds, size_t *nfds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(BENCH_MAX_FDS * sizeof(int))];
    } cm;
    struct iovec iov[2] = {{hdr, hlen}, {body, bcap}};
    struct cmsghdr *c;
    struct msghdr mh;
    size_t k = 0;
    ssize_t n;

    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = bcap ? 2 : 1;
    mh.msg_control = cm.buf;
    mh.msg_controllen = sizeof(cm.buf);
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        bench_fail("raw receive: nothing from the peer in %d ms", BENCH_TIMEOUT_MS);
    if (n < 0)
        bench_fail("raw receive: %s", strerror(errno));
    for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        size_t m = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        if (k + m > maxfds)
            bench_fail("raw receive: %zu fds, expected at most %zu", k + m, maxfds);
        memcpy(fds + k, CMSG_DATA(c), m * sizeof(int));
        k += m;
    }
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
        bench_fail("raw receive: datagram or its fds truncated");
    if (nfds)
        *nfds = k;
    else if (k)
        bench_fail("raw receive: %zu unexpected fds", k);
    if (n == 0 && k == 0)
        return -1;
    if ((size_t)n < hlen)
        bench_fail("raw receive: %zd bytes, shorter than the %zu-byte header", n, hlen);
    return n - (ssize_t)hlen;
}

static inline void bench_ack_send(int sock)
{
    static const uint8_t ack = 'k';

    bench_raw_send(sock, &ack, 1, NULL, 0, NULL, 0);
}

static inline void bench_ack_recv(int sock)
{
    uint8_t ack = 0;

    if (bench_raw_recv(sock, &ack, 1, NULL, 0, NULL, 0, NULL) != 0 || ack != 'k')
        bench_fail("raw side: no acknowledgement from the importer");
}

/* The stamp the exporter writes at spot i of message seq. */
static inline uint64_t bench_stamp(uint64_t seq, uint64_t i)
{
    uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull;

    x ^= x >> 31;
    return x ? x : 1;
}

/* The 8 bytes at dev (device or pinned memory), through the driver. */
static inline uint64_t bench_get8(CUdeviceptr dev, CUstream s)
{
    uint64_t v = 0;

    bench_cu(CUC_DRV->cuMemcpyDtoHAsync(&v, dev, sizeof(v), s), "cuMemcpyDtoHAsync");
    bench_cu(CUC_DRV->cuStreamSynchronize(s), "cuStreamSynchronize");
    return v;
}

static inline void bench_put8(CUdeviceptr dev, uint64_t v, CUstream s)
{
    bench_cu(CUC_DRV->cuMemcpyHtoDAsync(dev, &v, sizeof(v), s), "cuMemcpyHtoDAsync");
    bench_cu(CUC_DRV->cuStreamSynchronize(s), "cuStreamSynchronize");
}

/* Peak RSS over a stretch of work, in KiB: bench_rss_mark() resets the
 * kernel's high-water mark to the current RSS (writing 5 to
 * /proc/self/clear_refs) and returns the current RSS; bench_rss_peak() is
 * the high-water mark since (VmHWM). getrusage's ru_maxrss cannot be
 * reset, and in an exec'd process it starts at its parent's RSS at the
 * fork, which hides growth below that. Where clear_refs cannot be written,
 * both return ru_maxrss, and bench_rss_method says so. */
static const char *bench_rss_method = "VmHWM";

static inline long bench_status_kib(const char *key)
{
    char line[256];
    size_t klen = strlen(key);
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (!f)
        return -1;
    while (v < 0 && fgets(line, sizeof(line), f))
        if (strncmp(line, key, klen) == 0)
            v = strtol(line + klen, NULL, 10);
    fclose(f);
    return v;
}

static inline long bench_maxrss_kib(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        bench_fail("getrusage: %s", strerror(errno));
    return ru.ru_maxrss;
}

static inline long bench_rss_mark(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    int ok = fd >= 0 && write(fd, "5", 1) == 1;
    long rss = ok ? bench_status_kib("VmRSS:") : -1;

    if (fd >= 0)
        close(fd);
    if (rss < 0) {
        bench_rss_method = "ru_maxrss";
        return bench_maxrss_kib();
    }
    return rss;
}

static inline long bench_rss_peak(void)
{
    long v = strcmp(bench_rss_method, "VmHWM") == 0 ? bench_status_kib("VmHWM:") : -1;

    return v >= 0 ? v : bench_maxrss_kib();
}

/* The raw side's hand-written device lookup: cuDeviceGet + cuDeviceGetUuid
 * until the UUID matches; the primary context is retained once and made
 * current. Returns the ordinal. */
static inline int bench_raw_device(const uint8_t uuid[16], CUcontext ctxs[], int max)
{
    int n;

    bench_cu(CUC_DRV->cuDeviceGetCount(&n), "cuDeviceGetCount");
    for (int i = 0; i < n && i < max; i++) {
        CUdevice d;
        CUuuid u;
        bench_cu(CUC_DRV->cuDeviceGet(&d, i), "cuDeviceGet");
        bench_cu(CUC_DRV->cuDeviceGetUuid(&u, d), "cuDeviceGetUuid");
        if (memcmp(u.bytes, uuid, 16) != 0)
            continue;
        if (!ctxs[i])
            bench_cu(CUC_DRV->cuDevicePrimaryCtxRetain(&ctxs[i], d), "cuDevicePrimaryCtxRetain");
        bench_cu(CUC_DRV->cuCtxSetCurrent(ctxs[i]), "cuCtxSetCurrent");
        return i;
    }
    bench_fail("raw importer: the exporter's UUID is not visible here");
}

/* The expected device of an importer: UUID text and ordinal from argv. */
static inline void bench_expect_device(const cuc_device *got, const char *uuid, int ordinal,
                                       const char *what)
{
    if (strcmp(cuc_device_uuid_string(got), uuid) != 0 ||
        cuc_device_ordinal(got) != ordinal)
        bench_fail("%s arrived on %s (ordinal %d here), want %s (ordinal %d)", what,
                   cuc_device_uuid_string(got), cuc_device_ordinal(got), uuid, ordinal);
}

#endif
