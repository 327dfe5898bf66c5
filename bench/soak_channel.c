/* Soak of the channel under load: CLIENTS client
 * processes (fork + exec of this program) connect THREADS channels each to
 * one listening path. Every client thread sends its share of MESSAGES
 * messages, each an IPC pool (its fd travels) and 1..3 buffers freshly
 * allocated from it and unref'd right after the send (the free waits for
 * the lease), a window of WINDOW messages in flight. The server (this
 * process, one thread per channel) imports every buffer, checks its
 * header (client, thread, sequence number, index: nothing lost, nothing
 * reordered), unrefs it (the release) and answers.
 *
 * Checks, each failure exits 1: every message arrives, in order; the
 * clients' lease counts drop to 0 and their pools' leases end; client and
 * server fd counts are back to their baselines; the server's file
 * mappings (its imports) are back to theirs. Prints messages/s, the server's peak fd count and each side's
 * baseline; while it runs, one progress line a second on stderr.
 *
 *   CUCORE_DRIVER=sim build/bench/soak_channel [MESSAGES [CLIENTS [THREADS]]]
 *
 * Defaults: 1000000 messages, 16 clients, 8 threads. ctest runs a small
 * setting (label "soak"): eight server threads import and drop one
 * client's pool at once, which the simulator aborts on unless imports
 * and destroys are serialized (sim/FACTS.md F47). A crash prints its
 * backtrace; a server fd left open is named. */
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cucore.h"

#define MAX_CLIENTS 64
#define MAX_THREADS 64
#define WINDOW 4
#define HDR 16 /* u32 client, thread, seq, index */
#define BUF_SIZE 4096
#define TIMEOUT_MS 120000

#define DIE(...)                                                           \
    do {                                                                   \
        fprintf(stderr, "soak_channel: " __VA_ARGS__);                     \
        fprintf(stderr, " (%s)\n", cuc_errmsg());                          \
        exit(1);                                                           \
    } while (0)
#define OK(call)                                                           \
    do {                                                                   \
        int rc_ = (call);                                                  \
        if (rc_)                                                           \
            DIE("%s:%d: %s = %d", __FILE__, __LINE__, #call, rc_);         \
    } while (0)

static int fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

/* What fd refers to ("?" when it cannot be read), into out[cap]. */
static void fd_target(int fd, char *out, size_t cap)
{
    char link[64];
    ssize_t n;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, out, cap - 1);
    out[n < 0 ? 0 : n] = 0;
    if (n < 0)
        snprintf(out, cap, "?");
}

#define MAX_FDS 1024
static char fd_was[MAX_FDS][96]; /* the server's fds at its start */

static void fd_remember(void)
{
    for (int fd = 0; fd < MAX_FDS; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            fd_target(fd, fd_was[fd], sizeof(fd_was[fd]));
}

/* Names each fd open now that was not, or was another file, at the start:
 * what a leak is made of. */
static void fd_print_new(void)
{
    char now[96];

    for (int fd = 0; fd < MAX_FDS; fd++) {
        if (fcntl(fd, F_GETFD) < 0)
            continue;
        fd_target(fd, now, sizeof(now));
        if (strcmp(now, fd_was[fd]) != 0)
            fprintf(stderr, "soak_channel: server: fd %d -> %s, new\n", fd, now);
    }
}

/* Mappings of files (memfds and device files: what an import maps). */
static int maps_count(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int n = 0;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        n += strchr(line, '/') != NULL;
    fclose(f);
    return n;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return v;
}

/* ---- client ---- */

struct client_thread {
    pthread_t t;
    const char *path;
    cuc_pool *pool;
    uint32_t client, thread, n;
};

static void recv_reply(cuc_channel *ch)
{
    cuc_msg *m;

    OK(cuc_channel_recv(ch, TIMEOUT_MS, &m));
    if (cuc_msg_record_count(m) != 0)
        DIE("a reply with %zu records", cuc_msg_record_count(m));
    cuc_msg_destroy(m);
}

static void send_one(cuc_channel *ch, struct client_thread *c, uint32_t seq,
                     cuc_stream *s)
{
    uint32_t nb = 1 + seq % 3;
    cuc_buffer *b[3];
    uint8_t hdr[HDR];
    cuc_msg *m;

    OK(cuc_msg_create(&m));
    OK(cuc_msg_add_pool(m, c->pool));
    for (uint32_t i = 0; i < nb; i++) {
        OK(cuc_buffer_alloc_async(c->pool, BUF_SIZE, NULL, &b[i]));
        put32(hdr, c->client);
        put32(hdr + 4, c->thread);
        put32(hdr + 8, seq);
        put32(hdr + 12, i);
        OK(cuc_memcpy(cuc_buffer_ptr(b[i]), hdr, HDR, s));
        OK(cuc_msg_add_buffer(m, b[i]));
    }
    OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    for (uint32_t i = 0; i < nb; i++)
        OK(cuc_buffer_unref_async(b[i], NULL)); /* deferred: leased */
}

static void *client_run(void *arg)
{
    struct client_thread *c = arg;
    uint32_t inflight = 0;
    cuc_channel *ch;
    cuc_stream *s;
    size_t left;

    OK(cuc_stream_legacy(cuc_pool_device(c->pool), &s));
    OK(cuc_channel_connect(c->path, TIMEOUT_MS, &ch));
    for (uint32_t seq = 0; seq < c->n; seq++) {
        send_one(ch, c, seq, s);
        if (++inflight == WINDOW) {
            recv_reply(ch);
            inflight--;
        }
    }
    while (inflight--)
        recv_reply(ch);
    /* every release was sent before its reply */
    OK(cuc_channel_lease_count(ch, &left));
    if (left)
        DIE("client %u thread %u: %zu leases left after every reply", c->client,
            c->thread, left);
    cuc_channel_destroy(ch);
    return NULL;
}

static int client_main(uint32_t id, const char *path, uint32_t nthreads, uint32_t per)
{
    struct client_thread ct[MAX_THREADS];
    struct cuc_pool_props pr;
    cuc_device *d;
    cuc_pool *p;
    size_t left;
    int base;

    OK(cuc_device_get(0, &d));
    cuc_pool_props_init(&pr);
    pr.kind = CUC_POOL_DEVICE;
    pr.flags = CUC_POOL_IPC;
    OK(cuc_pool_create(d, &pr, &p));
    base = fd_count();
    for (uint32_t t = 0; t < nthreads; t++) {
        ct[t] = (struct client_thread){0, path, p, id, t, per};
        if (pthread_create(&ct[t].t, NULL, client_run, &ct[t]))
            DIE("pthread_create");
    }
    for (uint32_t t = 0; t < nthreads; t++)
        pthread_join(ct[t].t, NULL);
    OK(cuc_pool_lease_wait(p, NULL, 0, TIMEOUT_MS));
    OK(cuc_pool_lease_count(p, &left));
    if (left)
        DIE("client %u: %zu pool leases left", id, left);
    if (fd_count() != base)
        DIE("client %u: %d fds open, %d before the channels", id, fd_count(), base);
    cuc_pool_unref(p);
    return 0;
}

/* ---- server ---- */

struct server_chan {
    pthread_t t;
    cuc_channel *ch;
    uint32_t expect; /* messages */
    uint32_t got;
    int client, thread; /* learnt from the first message */
};

static _Atomic int peak_fds;
static _Atomic int sampling = 1;
static _Atomic uint64_t delivered; /* messages the server has answered */

/* Samples the fd count, and prints how far the soak got once a second on
 * stderr, so that a run cut short by a timeout still says where it was. */
static void *sampler(void *arg)
{
    const double *t0 = arg;
    double next = *t0 + 1.0;

    while (atomic_load(&sampling)) {
        int n = fd_count();
        if (n > atomic_load(&peak_fds))
            atomic_store(&peak_fds, n);
        if (now_s() >= next) {
            fprintf(stderr, "soak_channel: %.0f s: %llu messages, %d fds\n",
                    next - *t0, (unsigned long long)atomic_load(&delivered), n);
            next += 1.0;
        }
        usleep(2000);
    }
    return NULL;
}

static void check_buffer(struct server_chan *sc, cuc_buffer *b, uint32_t i, cuc_stream *s)
{
    uint8_t hdr[HDR];

    OK(cuc_memcpy(hdr, cuc_buffer_ptr(b), HDR, s));
    if (sc->client < 0) {
        sc->client = (int)get32(hdr);
        sc->thread = (int)get32(hdr + 4);
    }
    if (get32(hdr) != (uint32_t)sc->client || get32(hdr + 4) != (uint32_t)sc->thread ||
        get32(hdr + 8) != sc->got || get32(hdr + 12) != i)
        DIE("channel of client %d thread %d: buffer %u of message %u says client %u "
            "thread %u message %u buffer %u", sc->client, sc->thread, i, sc->got,
            get32(hdr), get32(hdr + 4), get32(hdr + 8), get32(hdr + 12));
}

static void *server_run(void *arg)
{
    struct server_chan *sc = arg;
    cuc_stream *s = NULL;
    cuc_msg *m, *reply;
    int rc;

    OK(cuc_msg_create(&reply));
    for (;;) {
        cuc_pool *p;
        size_t n;
        rc = cuc_channel_recv(sc->ch, TIMEOUT_MS, &m);
        if (rc == CUC_E_PEER_CLOSED)
            break;
        OK(rc);
        n = cuc_msg_record_count(m);
        if (n < 2 || n > 4)
            DIE("message %u has %zu records", sc->got, n);
        OK(cuc_msg_get_pool(m, 0, &p));
        if (!s)
            OK(cuc_stream_legacy(cuc_pool_device(p), &s));
        for (size_t i = 1; i < n; i++) {
            cuc_buffer *b;
            OK(cuc_msg_get_buffer(m, i, &b));
            check_buffer(sc, b, (uint32_t)i - 1, s);
            OK(cuc_buffer_unref_async(b, NULL)); /* the release */
        }
        cuc_pool_unref(p);
        cuc_msg_destroy(m);
        sc->got++;
        atomic_fetch_add(&delivered, 1);
        OK(cuc_channel_send(sc->ch, reply));
    }
    cuc_msg_destroy(reply);
    return NULL;
}

static pid_t spawn_client(const char *self, uint32_t id, const char *path,
                          uint32_t nthreads, uint32_t per)
{
    char a[3][32];
    pid_t pid;

    snprintf(a[0], sizeof(a[0]), "%u", id);
    snprintf(a[1], sizeof(a[1]), "%u", nthreads);
    snprintf(a[2], sizeof(a[2]), "%u", per);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", self, "--client", a[0], path, a[1], a[2], (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* What the driver and the first pool import keep for good, before the
 * baseline: one IPC pool exported and dropped. */
static void warm_up(void)
{
    struct cuc_pool_props pr;
    cuc_device *d;
    cuc_buffer *b;
    cuc_pool *p;
    cuc_msg *m;

    OK(cuc_device_get(0, &d));
    cuc_pool_props_init(&pr);
    pr.flags = CUC_POOL_IPC;
    OK(cuc_pool_create(d, &pr, &p));
    OK(cuc_buffer_alloc_async(p, BUF_SIZE, NULL, &b));
    OK(cuc_msg_create(&m));
    OK(cuc_msg_add_pool(m, p));
    cuc_msg_destroy(m);
    OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

static int server_main(const char *self, uint64_t total, uint32_t nclients,
                       uint32_t nthreads)
{
    uint32_t nch = nclients * nthreads, per = (uint32_t)(total / nch);
    struct server_chan *sc = calloc(nch, sizeof(*sc));
    pid_t pids[MAX_CLIENTS];
    cuc_listener *l;
    pthread_t samp;
    char path[108];
    double t0, t1;
    uint64_t got = 0;
    int base, maps, failed = 0;

    if (!sc || per == 0)
        DIE("%llu messages over %u channels", (unsigned long long)total, nch);
    warm_up();
    base = fd_count();
    fd_remember();
    maps = maps_count();
    atomic_store(&peak_fds, base);
    snprintf(path, sizeof(path), "/tmp/cuc-soak-%ld.sock", (long)getpid());
    OK(cuc_channel_listen(path, &l));
    t0 = now_s();
    pthread_create(&samp, NULL, sampler, &t0);
    for (uint32_t c = 0; c < nclients; c++)
        if ((pids[c] = spawn_client(self, c, path, nthreads, per)) < 0)
            DIE("fork");
    for (uint32_t i = 0; i < nch; i++) {
        OK(cuc_listener_accept(l, TIMEOUT_MS, &sc[i].ch));
        sc[i].expect = per;
        sc[i].client = sc[i].thread = -1;
        if (pthread_create(&sc[i].t, NULL, server_run, &sc[i]))
            DIE("pthread_create");
    }
    for (uint32_t i = 0; i < nch; i++) {
        pthread_join(sc[i].t, NULL);
        if (sc[i].got != sc[i].expect) {
            fprintf(stderr, "soak_channel: client %d thread %d: %u of %u messages\n",
                    sc[i].client, sc[i].thread, sc[i].got, sc[i].expect);
            failed = 1;
        }
        got += sc[i].got;
    }
    t1 = now_s();
    for (uint32_t c = 0; c < nclients; c++) {
        int st = 0;
        if (waitpid(pids[c], &st, 0) != pids[c] || !WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "soak_channel: client %u failed (status 0x%x)\n", c, st);
            failed = 1;
        }
    }
    for (uint32_t i = 0; i < nch; i++)
        cuc_channel_destroy(sc[i].ch);
    cuc_listener_destroy(l);
    atomic_store(&sampling, 0);
    pthread_join(samp, NULL);
    if (fd_count() != base) {
        fprintf(stderr, "soak_channel: server: %d fds open, %d at the start\n",
                fd_count(), base);
        fd_print_new();
        failed = 1;
    }
    if (maps_count() != maps) {
        fprintf(stderr, "soak_channel: server: %d file mappings, %d at the start\n",
                maps_count(), maps);
        failed = 1;
    }
    printf("soak_channel: %llu messages (%u clients x %u threads x %u), %.3f s, "
           "%.0f messages/s; server fds: %d at start, peak %d, %d at end; file "
           "mappings %d at start, %d at end\n",
           (unsigned long long)got, nclients, nthreads, per, t1 - t0,
           (double)got / (t1 - t0), base, atomic_load(&peak_fds), fd_count(), maps,
           maps_count());
    free(sc);
    return failed;
}

/* A crash prints where (addresses for addr2line: a soak's crash seldom
 * repeats under a debugger), then dies of its signal. */
static void on_crash(int sig, siginfo_t *si, void *uc)
{
    void *frames[48];
    char line[96];
    int n = backtrace(frames, 48), k;

    (void)uc;
    k = snprintf(line, sizeof(line), "soak_channel: pid %ld: signal %d at address %p\n",
                 (long)getpid(), sig, si->si_addr);
    if (k > 0 && write(2, line, (size_t)k) < 0)
        _exit(128 + sig);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_crashes(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGABRT, &sa, NULL);
}

int main(int argc, char **argv)
{
    uint64_t total = 1000000;
    uint32_t nclients = 16, nthreads = 8;

    signal(SIGPIPE, SIG_IGN);
    catch_crashes();
    if (argc == 6 && !strcmp(argv[1], "--client"))
        return client_main((uint32_t)atoi(argv[2]), argv[3], (uint32_t)atoi(argv[4]),
                           (uint32_t)atoi(argv[5]));
    if (argc > 1)
        total = strtoull(argv[1], NULL, 10);
    if (argc > 2)
        nclients = (uint32_t)atoi(argv[2]);
    if (argc > 3)
        nthreads = (uint32_t)atoi(argv[3]);
    if (nclients < 1 || nclients > MAX_CLIENTS || nthreads < 1 || nthreads > MAX_THREADS)
        DIE("1..%d clients and 1..%d threads", MAX_CLIENTS, MAX_THREADS);
    return server_main(argv[0], total, nclients, nthreads);
}
