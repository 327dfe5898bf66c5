/* One producer, N consumer processes: the cost of a round in which the
 * producer records an IPC event, sends every consumer a message naming a
 * device and that event, and every consumer resolves the device, waits for
 * the event on a stream of its own and answers with the device. N goes
 * from 1 to the number of online CPUs (or MAX_N).
 *
 *   cucore   cuc_event_record; one message (device + event records) sent
 *            on N channels (socket pairs); consumers: cuc_channel_recv,
 *            cuc_msg_get_device, cuc_msg_get_event (opened once, then the
 *            same object), cuc_stream_wait_event + cuc_stream_synchronize,
 *            an answer message with the device; the producer receives N
 *            answers and resolves each.
 *   raw      the same work by hand: cuEventRecord; 16 UUID bytes + the
 *            64-byte IPC handle (cuIpcGetEventHandle, fetched once) written
 *            to N SOCK_SEQPACKET socket pairs; consumers read, scan
 *            cuDeviceGet + cuDeviceGetUuid for the UUID, open the handle
 *            the first time they see it (cuIpcOpenEventHandle), wait
 *            (cuStreamWaitEvent + cuStreamSynchronize) and write the UUID
 *            back; the producer reads N answers and compares them.
 * Pool buffers join the message once cucore's pools land (issue #6).
 *
 *   CUCORE_DRIVER=sim build/bench/bench_fanout [ROUNDS [MAX_N]]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_ipc.h"
#include "bench_report.h"
#include "cucore.h"

#define MAX_CONSUMERS 512
#define MAX_DEVICES 64
#define RAW_MSG 80 /* uuid[16] + CUipcEventHandle[64] */
#define TIMEOUT_MS 30000

static const struct cuc__driver *drv;

static void io_ok(ssize_t got, ssize_t want, const char *what)
{
    if (got != want) {
        fprintf(stderr, "bench_fanout: %s: %zd of %zd bytes (%s)\n", what, got, want,
                strerror(errno));
        exit(1);
    }
}

/* ---------------------------------------------------------- consumers -- */

static int consumer_cucore(int fd)
{
    cuc_event *events[MAX_DEVICES] = {0};
    cuc_stream *streams[MAX_DEVICES] = {0};
    cuc_channel *ch;
    cuc_msg *m, *a;
    int rc;

    rc = cuc_channel_from_fd(fd, &ch);
    if (rc)
        bench_ok(rc, "consumer channel");
    while ((rc = cuc_channel_recv(ch, TIMEOUT_MS, &m)) == 0) {
        cuc_device *dev;
        cuc_event *ev;
        int ord;
        rc = cuc_msg_get_device(m, 0, &dev);
        if (rc == 0)
            rc = cuc_msg_get_event(m, 1, &ev);
        cuc_msg_destroy(m);
        if (rc)
            bench_ok(rc, "consumer get");
        ord = cuc_device_ordinal(dev);
        if (events[ord])
            cuc_event_unref(ev); /* the same object, as a new reference */
        else
            events[ord] = ev;
        if (!streams[ord] && (rc = cuc_stream_create(dev, CUC_STREAM_NON_BLOCKING, 0,
                                                     &streams[ord])) != 0)
            bench_ok(rc, "consumer stream");
        rc = cuc_stream_wait_event(streams[ord], events[ord]);
        if (rc == 0)
            rc = cuc_stream_synchronize(streams[ord]);
        if (rc == 0)
            rc = cuc_msg_create(&a);
        if (rc == 0) {
            rc = cuc_msg_add_device(a, dev);
            if (rc == 0)
                rc = cuc_channel_send(ch, a);
            cuc_msg_destroy(a);
        }
        if (rc)
            bench_ok(rc, "consumer answer");
    }
    if (rc != CUC_E_PEER_CLOSED)
        bench_ok(rc, "consumer receive");
    for (int i = 0; i < MAX_DEVICES; i++) {
        cuc_stream_destroy(streams[i]);
        cuc_event_unref(events[i]);
    }
    cuc_channel_destroy(ch);
    return 0;
}

struct raw_dev {
    CUcontext ctx;
    CUstream stream;
    CUevent ev;
    CUipcEventHandle handle; /* of ev */
};

static int consumer_raw(int fd)
{
    static struct raw_dev devs[MAX_DEVICES];
    uint8_t msg[RAW_MSG];
    int n, rc;
    ssize_t got;

    rc = cuc__driver_get(&drv);
    if (rc)
        bench_ok(rc, "consumer driver");
    bench_cu(drv->cuDeviceGetCount(&n), "cuDeviceGetCount");
    while ((got = read(fd, msg, sizeof(msg))) == (ssize_t)sizeof(msg)) {
        struct raw_dev *rd = NULL;
        int i;
        for (i = 0; i < n && i < MAX_DEVICES; i++) {
            CUdevice d;
            CUuuid u;
            bench_cu(drv->cuDeviceGet(&d, i), "cuDeviceGet");
            bench_cu(drv->cuDeviceGetUuid(&u, d), "cuDeviceGetUuid");
            if (memcmp(u.bytes, msg, 16) == 0) {
                rd = &devs[i];
                if (!rd->ctx)
                    bench_cu(drv->cuDevicePrimaryCtxRetain(&rd->ctx, d),
                          "cuDevicePrimaryCtxRetain");
                break;
            }
        }
        if (!rd) {
            fprintf(stderr, "bench_fanout: raw consumer: UUID not visible\n");
            return 1;
        }
        bench_cu(drv->cuCtxSetCurrent(rd->ctx), "cuCtxSetCurrent");
        if (!rd->stream)
            bench_cu(drv->cuStreamCreateWithPriority(&rd->stream, CU_STREAM_NON_BLOCKING, 0),
                  "cuStreamCreateWithPriority");
        if (!rd->ev || memcmp(rd->handle.reserved, msg + 16, 64)) {
            if (rd->ev)
                bench_cu(drv->cuEventDestroy(rd->ev), "cuEventDestroy");
            memcpy(rd->handle.reserved, msg + 16, 64);
            bench_cu(drv->cuIpcOpenEventHandle(&rd->ev, rd->handle), "cuIpcOpenEventHandle");
        }
        bench_cu(drv->cuStreamWaitEvent(rd->stream, rd->ev, 0), "cuStreamWaitEvent");
        bench_cu(drv->cuStreamSynchronize(rd->stream), "cuStreamSynchronize");
        io_ok(write(fd, msg, 16), 16, "raw consumer answer");
    }
    io_ok(got, 0, "raw consumer receive");
    for (int i = 0; i < MAX_DEVICES; i++) {
        if (!devs[i].ctx)
            continue;
        drv->cuCtxSetCurrent(devs[i].ctx);
        if (devs[i].stream)
            drv->cuStreamDestroy(devs[i].stream);
        if (devs[i].ev)
            drv->cuEventDestroy(devs[i].ev);
    }
    close(fd);
    return 0;
}

/* ----------------------------------------------------------- producer -- */

struct fanout {
    int n;
    int fds[MAX_CONSUMERS];            /* raw: our socket ends */
    cuc_channel *chans[MAX_CONSUMERS]; /* cucore */
    pid_t pids[MAX_CONSUMERS];
};

static pid_t spawn(const char *self, const char *mode, int fd)
{
    char fdarg[16];
    pid_t pid;

    snprintf(fdarg, sizeof(fdarg), "%d", fd);
    pid = fork();
    if (pid == 0) {
        fcntl(fd, F_SETFD, 0); /* the one fd the consumer inherits */
        execl(self, self, "--consumer", mode, fdarg, (char *)NULL);
        _exit(127);
    }
    if (pid < 0) {
        perror("bench_fanout: fork");
        exit(1);
    }
    return pid;
}

static void start(struct fanout *f, const char *self, int raw)
{
    for (int i = 0; i < f->n; i++) {
        if (raw) {
            int sv[2];
            if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                perror("bench_fanout: socketpair");
                exit(1);
            }
            f->pids[i] = spawn(self, "raw", sv[1]);
            close(sv[1]);
            f->fds[i] = sv[0];
        } else {
            cuc_channel *theirs;
            int rc = cuc_channel_pair(&f->chans[i], &theirs);
            if (rc)
                bench_ok(rc, "channel pair");
            f->pids[i] = spawn(self, "cucore", cuc_channel_fd(theirs));
            cuc_channel_destroy(theirs);
        }
    }
}

static void stop(struct fanout *f, int raw)
{
    for (int i = 0; i < f->n; i++) {
        if (raw)
            close(f->fds[i]);
        else
            cuc_channel_destroy(f->chans[i]);
    }
    for (int i = 0; i < f->n; i++) {
        int st = 0;
        while (waitpid(f->pids[i], &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "bench_fanout: consumer %d failed (status 0x%x)\n", i, st);
            exit(1);
        }
    }
}

static void round_raw(struct fanout *f, cuc_device *dev, cuc_event *ev, CUstream s,
                      const uint8_t msg[RAW_MSG])
{
    uint8_t back[16];

    bench_cu(drv->cuEventRecord((CUevent)cuc_event_handle(ev), s), "cuEventRecord");
    for (int i = 0; i < f->n; i++)
        io_ok(write(f->fds[i], msg, RAW_MSG), RAW_MSG, "raw send");
    for (int i = 0; i < f->n; i++) {
        io_ok(read(f->fds[i], back, sizeof(back)), sizeof(back), "raw answer");
        if (memcmp(back, cuc_device_uuid(dev)->bytes, 16)) {
            fprintf(stderr, "bench_fanout: raw consumer %d answered another UUID\n", i);
            exit(1);
        }
    }
}

static void round_cucore(struct fanout *f, cuc_device *dev, cuc_event *ev, cuc_stream *s)
{
    cuc_msg *m = NULL;
    int rc = cuc_event_record(ev, s);

    if (rc == 0)
        rc = cuc_msg_create(&m);
    if (rc)
        bench_ok(rc, "record / message");
    rc = cuc_msg_add_device(m, dev);
    if (rc == 0)
        rc = cuc_msg_add_event(m, ev);
    for (int i = 0; rc == 0 && i < f->n; i++)
        rc = cuc_channel_send(f->chans[i], m);
    cuc_msg_destroy(m);
    if (rc)
        bench_ok(rc, "send");
    for (int i = 0; i < f->n; i++) {
        cuc_device *back = NULL;
        cuc_msg *a;
        rc = cuc_channel_recv(f->chans[i], TIMEOUT_MS, &a);
        if (rc == 0) {
            rc = cuc_msg_get_device(a, 0, &back);
            cuc_msg_destroy(a);
        }
        if (rc)
            bench_ok(rc, "answer");
        if (back != dev) {
            fprintf(stderr, "bench_fanout: consumer %d answered another device\n", i);
            exit(1);
        }
    }
}

/* ns per round with n consumers; the first rounds/10 are warm-up (the
 * consumers open the event and create their streams then). */
static double run(const char *self, int n, long rounds, int raw, cuc_device *dev,
                  cuc_event *ev, cuc_stream *s)
{
    static struct fanout f;
    uint8_t msg[RAW_MSG];
    CUipcEventHandle h;
    double t0 = 0;

    memset(&f, 0, sizeof(f));
    f.n = n;
    memcpy(msg, cuc_device_uuid(dev)->bytes, 16);
    if (raw) {
        bench_cu(drv->cuIpcGetEventHandle(&h, (CUevent)cuc_event_handle(ev)),
              "cuIpcGetEventHandle");
        memcpy(msg + 16, h.reserved, 64);
    }
    start(&f, self, raw);
    for (long r = -(rounds / 10 + 1); r < rounds; r++) {
        if (r == 0)
            t0 = bench_now_ns();
        if (raw)
            round_raw(&f, dev, ev, (CUstream)cuc_stream_handle(s), msg);
        else
            round_cucore(&f, dev, ev, s);
    }
    t0 = (bench_now_ns() - t0) / (double)rounds;
    stop(&f, raw);
    return t0;
}

int main(int argc, char **argv)
{
    long rounds, ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int max_n, ndev, rc;
    char self[4096], name[64];
    cuc_device *dev = NULL;
    cuc_stream *s = NULL;
    cuc_event *ev = NULL;
    ssize_t len;

    bench_name = "bench_fanout";
    if (argc == 4 && !strcmp(argv[1], "--consumer"))
        return !strcmp(argv[2], "raw") ? consumer_raw(atoi(argv[3]))
                                       : consumer_cucore(atoi(argv[3]));
    rounds = argc > 1 ? atol(argv[1]) : 2000;
    max_n = argc > 2 ? atoi(argv[2]) : (int)(ncpu > 0 ? ncpu : 1);
    if (rounds < 1 || max_n < 1 || max_n > MAX_CONSUMERS) {
        fprintf(stderr, "usage: bench_fanout [ROUNDS [MAX_N (1..%d)]]\n", MAX_CONSUMERS);
        return 2;
    }
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) {
        perror("bench_fanout: /proc/self/exe");
        return 1;
    }
    self[len] = '\0';
    if (bench_header("bench_fanout"))
        return 1;
    rc = cuc__driver_get(&drv);
    if (rc == 0)
        rc = cuc_device_count(&ndev);
    if (rc == 0) /* the last device: the raw scan's worst case */
        rc = cuc_device_get(ndev - 1, &dev);
    if (rc == 0)
        rc = cuc_event_create(dev, CUC_EVENT_IPC, &ev);
    if (rc == 0)
        rc = cuc_stream_create(dev, CUC_STREAM_NON_BLOCKING, 0, &s);
    if (rc)
        bench_ok(rc, "setup");
    for (int n = 1;; n = n * 2 > max_n && n < max_n ? max_n : n * 2) {
        double raw_ns = run(self, n, rounds, 1, dev, ev, s);
        double cuc_ns = run(self, n, rounds, 0, dev, ev, s);
        snprintf(name, sizeof(name), "fan-out round, %d consumer%s", n, n == 1 ? "" : "s");
        bench_line(name, raw_ns, cuc_ns, "%ld rounds, %.1f ns per consumer (cucore); "
                   "device + IPC event", rounds, cuc_ns / n);
        if (n >= max_n)
            break;
    }
    cuc_stream_destroy(s);
    cuc_event_unref(ev);
    return 0;
}
