/* The share point against the channel, per buffer, in the same run: n
 * pool buffers (of 4 KiB, allocated before the clock starts) to an
 * importer process (a fork + exec of this bench, CUDA_VISIBLE_DEVICES the
 * exporter's GPUs by UUID in reverse order: bench_ipc.h) and back to the
 * exporter's memory being free of leases:
 *
 *   channel (the "raw" column)   a message of the n buffers,
 *       cuc_channel_send; the importer's cuc_channel_recv,
 *       cuc_msg_get_buffers, cuc_buffer_ptr of each, cuc_buffer_unref_many_async
 *       and an empty message back; the exporter's receive of it and
 *       cuc_pool_lease_wait (pumping the channel) to no lease;
 *   detach + attach (the "cucore" column)   the same message,
 *       cuc_share_detach, the bytes through a pipe; the importer's
 *       cuc_share_attach, cuc_msg_get_buffers, cuc_buffer_ptr of each (each
 *       waits for the exporter's confirm), cuc_buffer_unref_many_async and
 *       the empty message back on the channel; the exporter's receive of
 *       it and cuc_pool_lease_wait (its share point's thread reads the
 *       releases) to no lease.
 *   for n = 1, 4, 16, 64, 256, 1024, 4096; rounds = max(3, BUFFERS / n),
 *   alternating the two, after a warm-up round of each (the importer has
 *   the pool, the exporter has the export data).
 *
 *   build/bench/bench_share [BUFFERS]     (default 16384; BENCH_SHARE_N=N: that n only)
 *   CUCORE_DRIVER=sim build/bench/bench_share
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "bench_ipc.h"

#define BUF_BYTES 4096
#define MAX_N 4096
#define WAIT_MS 60000

enum { MODE_CHANNEL = 1, MODE_SHARE = 2 };

static cuc_buffer *bufs[MAX_N];

static void write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;

    while (n) {
        ssize_t k = write(fd, b, n);
        if (k <= 0)
            bench_fail("write to the importer's pipe: %s", strerror(errno));
        b += k;
        n -= (size_t)k;
    }
}

static int read_all(int fd, void *p, size_t n)
{
    uint8_t *b = p;

    while (n) {
        ssize_t k = read(fd, b, n);
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ------------------------------------------------------------ importer -- */

/* Gets the n buffers of m, uses each pointer, drops them, answers. */
static void take(cuc_channel *ch, cuc_msg *m)
{
    static cuc_buffer *got[MAX_N];
    size_t n = cuc_msg_record_count(m);
    cuc_msg *ack;

    bench_ok(cuc_msg_get_buffers(m, 0, n, got), "cuc_msg_get_buffers");
    cuc_msg_destroy(m);
    for (size_t i = 0; i < n; i++)
        if (!cuc_buffer_ptr(got[i]))
            bench_fail("an attached buffer's memory: %s", cuc_errmsg());
    bench_ok(cuc_buffer_unref_many_async(got, n, NULL), "cuc_buffer_unref_many_async");
    bench_ok(cuc_msg_create(&ack), "cuc_msg_create");
    bench_ok(cuc_channel_send(ch, ack), "the answer");
    cuc_msg_destroy(ack);
}

static int importer(int chfd, int pipefd)
{
    cuc_channel *ch;
    cuc_msg *m;
    uint64_t len;

    bench_ok(cuc_channel_from_fd(chfd, &ch), "the importer's channel");
    for (;;) {
        uint32_t mode;
        if (read_all(pipefd, &mode, sizeof(mode)) != 0)
            break; /* the exporter is done */
        if (mode == MODE_CHANNEL) {
            int type = 0;
            bench_ok(cuc_channel_recv(ch, WAIT_MS, &m), "cuc_channel_recv");
            if (cuc_msg_record_type(m, 0, &type) == 0 && type == CUC_RECORD_POOL) {
                cuc_pool *p; /* the first message: kept imported for the bench */
                bench_ok(cuc_msg_get_pool(m, 0, &p), "the pool");
                cuc_msg_destroy(m);
                bench_ok(cuc_channel_recv(ch, WAIT_MS, &m), "cuc_channel_recv");
            }
            take(ch, m);
        } else {
            void *bytes;
            if (read_all(pipefd, &len, sizeof(len)) != 0 || !(bytes = malloc(len)) ||
                read_all(pipefd, bytes, len) != 0)
                bench_fail("the bytes from the exporter");
            bench_ok(cuc_share_attach(bytes, len, &m), "cuc_share_attach");
            free(bytes);
            take(ch, m);
        }
    }
    cuc_channel_destroy(ch);
    return 0;
}

/* ------------------------------------------------------------ exporter -- */

struct exporter {
    cuc_pool *pool;
    cuc_channel *ch;
    int pipe; /* to the importer */
};

static cuc_msg *buffers_msg(size_t n)
{
    cuc_msg *m;

    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    for (size_t i = 0; i < n; i++)
        bench_ok(cuc_msg_add_buffer(m, bufs[i]), "cuc_msg_add_buffer");
    return m;
}

static void wait_answer(struct exporter *e, cuc_channel *pump)
{
    cuc_msg *ack;

    bench_ok(cuc_channel_recv(e->ch, WAIT_MS, &ack), "the importer's answer");
    cuc_msg_destroy(ack);
    bench_ok(cuc_pool_lease_wait(e->pool, pump, 0, WAIT_MS), "cuc_pool_lease_wait");
}

static double round_channel(struct exporter *e, size_t n)
{
    uint32_t mode = MODE_CHANNEL;
    double t0 = bench_now_ns();
    cuc_msg *m = buffers_msg(n);

    write_all(e->pipe, &mode, sizeof(mode));
    bench_ok(cuc_channel_send(e->ch, m), "cuc_channel_send");
    cuc_msg_destroy(m);
    wait_answer(e, e->ch);
    return bench_now_ns() - t0;
}

static double round_share(struct exporter *e, size_t n)
{
    uint32_t mode = MODE_SHARE;
    double t0 = bench_now_ns();
    cuc_msg *m = buffers_msg(n);
    uint64_t len;
    size_t blen;
    void *bytes;

    bench_ok(cuc_share_detach(m, &bytes, &blen), "cuc_share_detach");
    cuc_msg_destroy(m);
    len = blen;
    write_all(e->pipe, &mode, sizeof(mode));
    write_all(e->pipe, &len, sizeof(len));
    write_all(e->pipe, bytes, blen);
    free(bytes);
    wait_answer(e, NULL);
    return bench_now_ns() - t0;
}

static void figures(struct exporter *e, size_t budget)
{
    static const size_t ns[] = {1, 4, 16, 64, 256, 1024, 4096};
    const char *only = getenv("BENCH_SHARE_N"); /* one n (for a profiler) */

    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        size_t n = ns[k], rounds = budget / n < 3 ? 3 : budget / n;
        if (only && (size_t)strtoull(only, NULL, 10) != n)
            continue;
        double tc = 0, ts = 0;
        char fig[64];

        (void)round_channel(e, n); /* warm: the exports cached, the imports made once */
        (void)round_share(e, n);
        for (size_t r = 0; r < rounds; r++) {
            tc += round_channel(e, n);
            ts += round_share(e, n);
        }
        snprintf(fig, sizeof(fig), "pool buffers, n=%zu (per buffer)", n);
        bench_line(fig, tc / rounds / n, ts / rounds / n,
                   "raw: channel send; cucore: detach + pipe + attach; %zu rounds", rounds);
    }
}

static int exporter(size_t budget)
{
    struct cuc_pool_props pr;
    struct exporter e;
    char self[4096], cvd[4096], chfd[16], pfd[16];
    const char *args[] = {"--importer", chfd, pfd, NULL};
    cuc_channel *child;
    cuc_device *dev;
    int pipefd[2];
    pid_t pid;
    cuc_msg *m;

    bench_ok(cuc_share_start(NULL), "cuc_share_start");
    bench_ok(cuc_device_get(0, &dev), "device 0");
    cuc_pool_props_init(&pr);
    pr.flags = CUC_POOL_IPC;
    bench_ok(cuc_pool_create(dev, &pr, &e.pool), "cuc_pool_create");
    for (size_t i = 0; i < MAX_N; i++)
        bench_ok(cuc_buffer_alloc_async(e.pool, BUF_BYTES, NULL, &bufs[i]), "allocate");
    bench_ok(cuc_channel_pair(&e.ch, &child), "cuc_channel_pair");
    /* Both ends close-on-exec: the importer inherits the read end only
     * (bench_spawn keeps it), so that closing the write end here is the
     * importer's end of input. */
    if (pipe(pipefd) != 0 || fcntl(pipefd[0], F_SETFD, FD_CLOEXEC) != 0 ||
        fcntl(pipefd[1], F_SETFD, FD_CLOEXEC) != 0)
        bench_fail("pipe: %s", strerror(errno));
    bench_self(self, sizeof(self));
    bench_child_cvd(cvd, sizeof(cvd));
    snprintf(chfd, sizeof(chfd), "%d", cuc_channel_fd(child));
    snprintf(pfd, sizeof(pfd), "%d", pipefd[0]);
    pid = bench_spawn(self, args, cvd, cuc_channel_fd(child), pipefd[0]);
    cuc_channel_destroy(child);
    close(pipefd[0]);
    e.pipe = pipefd[1];
    /* the pool first, on the channel, then a round: the importer has it */
    bench_ok(cuc_msg_create(&m), "cuc_msg_create");
    bench_ok(cuc_msg_add_pool(m, e.pool), "cuc_msg_add_pool");
    write_all(e.pipe, &(uint32_t){MODE_CHANNEL}, sizeof(uint32_t));
    bench_ok(cuc_channel_send(e.ch, m), "the pool");
    cuc_msg_destroy(m);
    m = buffers_msg(1);
    bench_ok(cuc_channel_send(e.ch, m), "the first buffer");
    cuc_msg_destroy(m);
    wait_answer(&e, e.ch);
    figures(&e, budget);
    close(e.pipe);
    bench_wait(pid, "importer");
    for (size_t i = 0; i < MAX_N; i++)
        bench_ok(cuc_buffer_unref_async(bufs[i], NULL), "free");
    cuc_channel_destroy(e.ch);
    cuc_pool_unref(e.pool);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--importer") == 0)
        return importer(atoi(argv[2]), atoi(argv[3]));
    if (bench_header("bench_share"))
        return 1;
    return exporter(argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 16384);
}
