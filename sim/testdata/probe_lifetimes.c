/* Three lifetime cases (keys finding1, finding2, finding7) through
 * cucore's public API, against whatever driver cucore loads (CUCORE_DRIVER
 * unset: libcuda.so.1; CUCORE_DRIVER=sim: the simulator), and prints one
 * "key value" line per observation:
 *
 *   cc -std=c11 -D_GNU_SOURCE -Iinclude sim/testdata/probe_lifetimes.c \
 *      -o probe_lifetimes -L$build/src -lcucore -Wl,-rpath,$build/src
 *   ./probe_lifetimes                       # the real driver
 *   CUCORE_DRIVER=sim CUCORE_SIM_GPUS=1 ./probe_lifetimes
 *
 *  1  the exporter sends n buffers of an IPC pool (filled with 0x5a),
 *     frees them and closes the channel; only then does the importer
 *     receive and import them: how many imports succeed, how many hold
 *     0x5a (n = 1 and n = 20);
 *  2  the importer imports a buffer and fork()s; the forked child frees
 *     the inherited buffer and _exit()s; the exporter, which freed the
 *     buffer after sending it, looks for releases; the importer then reads
 *     the buffer and sends another message: what the exporter receives;
 *  7  a buffer record of a 64-byte allocation edited to claim 6400 bytes
 *     (docs/wire-format.md: buffer payload offset 16), sent after its pool:
 *     does the import succeed, and with what size.
 *
 * It reports what happens and asserts nothing (cases 1 and 2 hand out
 * freed memory where leases are not kept). Importers are exec'd copies of
 * this program (channel on fd 3, a "go" byte on stdin, their lines on
 * stdout, which the exporter prints); the child of finding 2 is forked
 * only, and uses cucore there on purpose. Every wait is bounded. Not part
 * of the test suite. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cucore.h"

#define FILL 0x5a
#define BUF_BYTES 4096
#define MAX_BUFS 20
#define F7_REAL 64
#define F7_CLAIMED 6400
#define RECV_MS 10000
#define LINES_MS 15000
#define EXIT_MS 10000
#define ALARM_PARENT_S 55
#define ALARM_CHILD_S 40
#define ALARM_FORKED_S 10
#define CHILD_CHANNEL_FD 3

/* ---- reporting ---------------------------------------------------------------- */

/* "pre.what STATUS", and for a failure the message and the driver's code. */
static void report(const char *pre, const char *what, int rc)
{
    printf("%s.%s %s\n", pre, what, cuc_errname(rc));
    if (rc != 0)
        printf("%s.%s.errmsg %s (cuda %d)\n", pre, what, cuc_errmsg(), cuc_errcuda());
}

/* Waits up to ms for pid; its exit status, 128+signal, or -2 after a
 * timeout (it is then killed). */
static int wait_bounded(pid_t pid, int ms)
{
    struct timespec ts = {0, 10 * 1000 * 1000};
    int st = 0;

    for (int i = 0; i < ms / 10; i++) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
        if (w < 0 && errno != EINTR)
            return -1;
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -2;
}

/* ---- the exporter's importer child ---------------------------------------------- */

struct kid {
    pid_t pid;
    int go;  /* write end: a byte lets the child go on */
    int out; /* read end of the child's stdout */
    cuc_channel *ch;
    char buf[16384];
    size_t len;
};

/* In the forked child, before exec: channel on fd 3, go on 0, out on 1. */
static void kid_exec(const char *self, const char *role, const char *arg, int chfd, int go,
                     int out)
{
    int c = fcntl(chfd, F_DUPFD_CLOEXEC, 10);
    int g = fcntl(go, F_DUPFD_CLOEXEC, 10);
    int o = fcntl(out, F_DUPFD_CLOEXEC, 10);
    const char *argv[] = {self, "--child", role, arg, NULL};

    if (c < 0 || g < 0 || o < 0 || dup2(c, CHILD_CHANNEL_FD) < 0 || dup2(g, 0) < 0 ||
        dup2(o, 1) < 0)
        _exit(126);
    execv(self, (char *const *)argv);
    _exit(127);
}

/* Starts `self --child role arg` with the other end of a new channel. */
static int kid_start(struct kid *k, const char *role, const char *arg)
{
    static char self[4096];
    cuc_channel *theirs = NULL;
    int go[2], out[2], rc;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

    memset(k, 0, sizeof(*k));
    k->pid = -1;
    if (n <= 0)
        return CUC_E_IO;
    self[n] = '\0';
    if ((rc = cuc_channel_pair(&k->ch, &theirs)) != 0)
        return rc;
    rc = CUC_E_IO;
    if (pipe2(go, O_CLOEXEC) != 0)
        goto close_channels;
    if (pipe2(out, O_CLOEXEC) != 0)
        goto close_go;
    fflush(stdout);
    k->pid = fork();
    if (k->pid == 0)
        kid_exec(self, role, arg, cuc_channel_fd(theirs), go[0], out[1]);
    if (k->pid < 0)
        goto close_out;
    cuc_channel_destroy(theirs);
    close(go[0]);
    close(out[1]);
    k->go = go[1];
    k->out = out[0];
    return 0;

close_out:
    close(out[0]);
    close(out[1]);
close_go:
    close(go[0]);
    close(go[1]);
close_channels:
    cuc_channel_destroy(theirs);
    cuc_channel_destroy(k->ch);
    k->ch = NULL;
    return rc;
}

/* Prints the child's lines until one is "@sync" (not printed) or its
 * output ends; 0 at "@sync". */
static int kid_lines(struct kid *k, const char *pre)
{
    for (;;) {
        char *nl;
        struct pollfd pf = {k->out, POLLIN, 0};
        ssize_t r;

        while ((nl = memchr(k->buf, '\n', k->len)) != NULL) {
            size_t line = (size_t)(nl - k->buf) + 1;
            int sync = line == 6 && memcmp(k->buf, "@sync", 5) == 0;
            if (!sync)
                fwrite(k->buf, 1, line, stdout);
            memmove(k->buf, k->buf + line, k->len - line);
            k->len -= line;
            if (sync)
                return 0;
        }
        if (poll(&pf, 1, LINES_MS) <= 0) {
            printf("%s.child-output timeout\n", pre);
            return -1;
        }
        r = read(k->out, k->buf + k->len, sizeof(k->buf) - 1 - k->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || k->len + (size_t)r == sizeof(k->buf) - 1) {
            fwrite(k->buf, 1, k->len + (r > 0 ? (size_t)r : 0), stdout);
            k->len = 0;
            return -1;
        }
        k->len += (size_t)r;
    }
}

static void kid_go(struct kid *k)
{
    if (write(k->go, "g", 1) != 1)
        printf("kid.go-write failed\n");
}

/* Lets the child finish: closes the channel (if still open) and the go
 * pipe, prints the rest of its lines and how it ended. */
static void kid_end(struct kid *k, const char *pre)
{
    cuc_channel_destroy(k->ch);
    k->ch = NULL;
    if (k->pid <= 0) {
        printf("%s.child not-started\n", pre);
        return;
    }
    close(k->go);
    while (kid_lines(k, pre) == 0)
        ;
    close(k->out);
    printf("%s.child-exit %d\n", pre, wait_bounded(k->pid, EXIT_MS));
}

/* ---- the child's side ------------------------------------------------------------- */

static void child_sync(void)
{
    char c;

    printf("@sync\n");
    fflush(stdout);
    while (read(0, &c, 1) < 0 && errno == EINTR)
        ;
}

static cuc_channel *child_channel(void)
{
    cuc_channel *ch = NULL;
    int rc = cuc_channel_from_fd(CHILD_CHANNEL_FD, &ch);

    if (rc != 0) {
        report("child", "channel", rc);
        exit(1);
    }
    return ch;
}

/* ---- shared by both sides ---------------------------------------------------------- */

/* Copies buf's first n bytes to host: the copy's status; *intact is 1 when
 * all are FILL, *first their first byte. */
static int read_back(const cuc_buffer *b, size_t n, int *intact, int *first)
{
    unsigned char *host = malloc(n);
    cuc_stream *s = NULL;
    int rc = host ? cuc_stream_legacy(cuc_buffer_device(b), &s) : CUC_E_NOMEM;

    if (rc == 0) {
        memset(host, 0xee, n);
        rc = cuc_memcpy(host, cuc_buffer_ptr(b), n, s);
    }
    if (rc == 0) {
        *intact = 1;
        for (size_t i = 0; i < n; i++)
            *intact &= host[i] == FILL;
        *first = host[0];
    }
    free(host);
    return rc;
}

struct src {
    cuc_device *dev;
    cuc_stream *stream;
    cuc_pool *pool;
    cuc_buffer *bufs[MAX_BUFS];
    int n;
};

/* An IPC device pool on device 0 and n buffers of size bytes, all FILL. */
static int src_make(const char *pre, struct src *s, int n, size_t size)
{
    struct cuc_pool_props pr = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    int rc;

    memset(s, 0, sizeof(*s));
    if ((rc = cuc_device_get(0, &s->dev)) != 0 ||
        (rc = cuc_stream_legacy(s->dev, &s->stream)) != 0 ||
        (rc = cuc_pool_create(s->dev, &pr, &s->pool)) != 0) {
        report(pre, "setup", rc);
        return rc;
    }
    for (s->n = 0; s->n < n; s->n++) {
        if ((rc = cuc_buffer_alloc_async(s->pool, size, s->stream, &s->bufs[s->n])) != 0)
            break;
        if ((rc = cuc_memset_async(cuc_buffer_ptr(s->bufs[s->n]), FILL, size, s->stream))) {
            s->n++;
            break;
        }
    }
    if (rc == 0)
        rc = cuc_stream_synchronize(s->stream);
    if (rc == 0)
        return 0;
    report(pre, "setup-buffers", rc);
    for (int i = 0; i < s->n; i++)
        cuc_buffer_unref_async(s->bufs[i], s->stream);
    cuc_pool_unref(s->pool);
    return rc;
}

static size_t pool_leases(const cuc_pool *p)
{
    size_t n = 0;

    return cuc_pool_lease_count(p, &n) == 0 ? n : (size_t)-1;
}

/* A message of the pool and then s's buffers. */
static int src_msg(const struct src *s, cuc_msg **out)
{
    cuc_msg *m;
    int rc = cuc_msg_create(&m);

    if (rc)
        return rc;
    rc = cuc_msg_add_pool(m, s->pool);
    for (int i = 0; i < s->n && rc == 0; i++)
        rc = cuc_msg_add_buffer(m, s->bufs[i]);
    if (rc) {
        cuc_msg_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* ---- finding 1: send, free, close; the importer receives afterwards ------------------- */

static void finding1(int n)
{
    char pre[32], arg[16];
    struct src s;
    struct kid k;
    cuc_msg *m = NULL;
    int rc, errs = 0;

    snprintf(pre, sizeof(pre), "finding1.n%d", n);
    snprintf(arg, sizeof(arg), "%d", n);
    if (src_make(pre, &s, n, BUF_BYTES) != 0)
        return;
    if ((rc = kid_start(&k, "f1", arg)) != 0) {
        report(pre, "spawn", rc);
        return;
    }
    rc = src_msg(&s, &m);
    if (rc == 0)
        rc = cuc_channel_send(k.ch, m);
    report(pre, "send", rc);
    cuc_msg_destroy(m);
    for (int i = 0; i < s.n; i++)
        errs += cuc_buffer_unref_async(s.bufs[i], s.stream) != 0;
    printf("%s.exporter.free-errors %d\n", pre, errs);
    printf("%s.exporter.leases-before-close %zu\n", pre, pool_leases(s.pool));
    cuc_channel_destroy(k.ch);
    k.ch = NULL;
    printf("%s.exporter.leases-after-close %zu\n", pre, pool_leases(s.pool));
    report(pre, "exporter.sync-after-close", cuc_stream_synchronize(s.stream));
    kid_go(&k);
    kid_end(&k, pre);
    cuc_pool_unref(s.pool);
}

struct f1_count {
    int imported, copied, intact, free_errors, first_bad;
};

static void f1_one(const char *pre, const cuc_msg *m, size_t i, struct f1_count *c)
{
    cuc_buffer *b = NULL;
    int rc = cuc_msg_get_buffer(m, i, &b), intact = 0, first = -1;

    if (rc != 0) {
        if (c->imported == (int)i - 1) /* the first failure only */
            report(pre, "importer.first-import-failure", rc);
        return;
    }
    c->imported++;
    if (cuc_buffer_size(b) != BUF_BYTES)
        printf("%s.importer.size[%zu] %zu\n", pre, i, cuc_buffer_size(b));
    rc = read_back(b, BUF_BYTES, &intact, &first);
    if (rc == 0) {
        c->copied++;
        c->intact += intact;
        if (!intact && c->first_bad < 0)
            c->first_bad = first;
    } else if (c->copied == c->imported - 1) {
        report(pre, "importer.first-copy-failure", rc);
    }
    c->free_errors += cuc_buffer_unref_async(b, NULL) != 0;
}

static int child_f1(const char *arg)
{
    char pre[32];
    cuc_channel *ch = child_channel();
    cuc_msg *m = NULL;
    cuc_pool *pool = NULL;
    struct f1_count c = {0, 0, 0, 0, -1};
    int rc;

    snprintf(pre, sizeof(pre), "finding1.n%s", arg);
    child_sync();
    rc = cuc_channel_recv(ch, RECV_MS, &m);
    report(pre, "importer.recv", rc);
    if (rc == 0) {
        printf("%s.importer.records %zu\n", pre, cuc_msg_record_count(m));
        rc = cuc_msg_get_pool(m, 0, &pool);
        report(pre, "importer.pool", rc);
        for (size_t i = 1; i < cuc_msg_record_count(m) && rc == 0; i++)
            f1_one(pre, m, i, &c);
        printf("%s.imported %d\n%s.copied %d\n%s.intact %d\n", pre, c.imported, pre, c.copied,
               pre, c.intact);
        printf("%s.first-bad-byte %s%02x\n", pre, c.first_bad < 0 ? "none-" : "0x",
               c.first_bad < 0 ? 0 : c.first_bad);
        printf("%s.importer.free-errors %d\n", pre, c.free_errors);
    }
    cuc_msg_destroy(m);
    cuc_pool_unref(pool);
    cuc_channel_destroy(ch);
    return 0;
}

/* ---- finding 2: fork() of an importer ------------------------------------------------ */

static void finding2(void)
{
    const char *pre = "finding2";
    struct src s;
    struct kid k;
    cuc_msg *m = NULL;
    int rc;

    if (src_make(pre, &s, 1, BUF_BYTES) != 0)
        return;
    if ((rc = kid_start(&k, "f2", "-")) != 0) {
        report(pre, "spawn", rc);
        return;
    }
    rc = src_msg(&s, &m);
    if (rc == 0)
        rc = cuc_channel_send(k.ch, m);
    report(pre, "send", rc);
    cuc_msg_destroy(m);
    m = NULL;
    report(pre, "exporter.free", cuc_buffer_unref_async(s.bufs[0], s.stream));
    printf("%s.exporter.leases-after-free %zu\n", pre, pool_leases(s.pool));
    /* 1: the importer imported, forked, and its child freed and exited */
    kid_lines(&k, pre);
    report(pre, "exporter.lease-wait-after-fork-child", cuc_pool_lease_wait(s.pool, k.ch, 0, 200));
    printf("%s.exporter.leases-after-fork-child %zu\n", pre, pool_leases(s.pool));
    report(pre, "exporter.sync", cuc_stream_synchronize(s.stream));
    kid_go(&k);
    /* 2: the importer read the buffer and sent another message */
    kid_lines(&k, pre);
    rc = cuc_channel_recv(k.ch, RECV_MS, &m);
    report(pre, "exporter.recv-next", rc);
    if (rc == 0)
        printf("%s.exporter.recv-next-records %zu\n", pre, cuc_msg_record_count(m));
    cuc_msg_destroy(m);
    kid_go(&k);
    /* 3: the importer freed its buffer */
    kid_lines(&k, pre);
    report(pre, "exporter.lease-wait-after-importer-free",
           cuc_pool_lease_wait(s.pool, k.ch, 0, 2000));
    printf("%s.exporter.leases-end %zu\n", pre, pool_leases(s.pool));
    kid_go(&k);
    kid_end(&k, pre);
    cuc_pool_unref(s.pool);
}

/* The forked child: frees what it inherited, then leaves without running
 * anything else (no atexit, no stdio flush). */
static void f2_forked(cuc_buffer *b)
{
    int rc;

    alarm(ALARM_FORKED_S);
    rc = cuc_buffer_unref_async(b, NULL);
    dprintf(1, "finding2.forkchild.free %s\n", cuc_errname(rc));
    _exit(0);
}

static void f2_read(const char *what, const cuc_buffer *b)
{
    int intact = 0, first = -1, rc = read_back(b, BUF_BYTES, &intact, &first);

    report("finding2", what, rc);
    if (rc == 0)
        printf("finding2.%s-intact %d\nfinding2.%s-byte0 0x%02x\n", what, intact, what, first);
}

/* Another message after the fork: one device record. */
static int f2_send_next(cuc_channel *ch)
{
    cuc_device *dev = NULL;
    cuc_msg *m = NULL;
    int rc = cuc_device_get(0, &dev);

    if (rc == 0)
        rc = cuc_msg_create(&m);
    if (rc == 0)
        rc = cuc_msg_add_device(m, dev);
    if (rc == 0)
        rc = cuc_channel_send(ch, m);
    cuc_msg_destroy(m);
    return rc;
}

static int child_f2(void)
{
    cuc_channel *ch = child_channel();
    cuc_msg *m = NULL;
    cuc_pool *pool = NULL;
    cuc_buffer *b = NULL;
    pid_t pid;
    int rc = cuc_channel_recv(ch, RECV_MS, &m);

    report("finding2", "importer.recv", rc);
    if (rc == 0 && (rc = cuc_msg_get_pool(m, 0, &pool)) == 0)
        rc = cuc_msg_get_buffer(m, 1, &b);
    report("finding2", "importer.import", rc);
    if (rc == 0) {
        f2_read("importer.before-fork", b);
        fflush(stdout);
        pid = fork();
        if (pid == 0)
            f2_forked(b);
        printf("finding2.forkchild.exit %d\n", pid > 0 ? wait_bounded(pid, EXIT_MS) : -1);
    }
    child_sync();
    if (b)
        f2_read("importer.after-fork", b);
    report("finding2", "importer.send-next", f2_send_next(ch));
    child_sync();
    report("finding2", "importer.free", cuc_buffer_unref_async(b, NULL));
    child_sync();
    cuc_msg_destroy(m);
    cuc_pool_unref(pool);
    cuc_channel_destroy(ch);
    return 0;
}

/* ---- finding 7: a buffer record that claims more than its allocation ------------------- */

/* The size field of the first buffer record in a message's bytes
 * (docs/wire-format.md: 24-byte header, 16-byte record header, the buffer
 * payload's size at offset 16), or NULL. */
static unsigned char *f7_size_field(unsigned char *bytes, size_t len)
{
    size_t off = 24;

    while (off + 16 <= len) {
        unsigned type = bytes[off] | (unsigned)bytes[off + 1] << 8;
        uint32_t plen = (uint32_t)bytes[off + 4] | (uint32_t)bytes[off + 5] << 8 |
                        (uint32_t)bytes[off + 6] << 16 | (uint32_t)bytes[off + 7] << 24;
        if (type == CUC_RECORD_BUFFER && plen == 104 && off + 16 + plen <= len)
            return bytes + off + 16 + 16;
        off += 16 + (((size_t)plen + 7) & ~(size_t)7);
    }
    return NULL;
}

/* The buffer record of buf with its size field set to claimed, decoded
 * again from the edited bytes. */
static int f7_forge(const char *pre, const cuc_buffer *buf, uint64_t claimed, cuc_msg **out)
{
    cuc_msg *m = NULL;
    void *bytes = NULL;
    size_t len = 0;
    unsigned char *f;
    int rc = cuc_msg_create(&m);

    if (rc == 0)
        rc = cuc_msg_add_buffer(m, buf);
    if (rc == 0)
        rc = cuc_msg_to_bytes(m, &bytes, &len);
    report(pre, "to-bytes", rc);
    if (rc == 0 && (f = f7_size_field(bytes, len)) != NULL) {
        for (int i = 0; i < 8; i++)
            f[i] = (unsigned char)(claimed >> (8 * i));
        rc = cuc_msg_from_bytes(bytes, len, out);
        report(pre, "from-bytes", rc);
    } else if (rc == 0) {
        printf("%s.record-found 0\n", pre);
        rc = CUC_E_BADMSG;
    }
    free(bytes);
    cuc_msg_destroy(m);
    return rc;
}

/* The pool's own process resolving the forged record. */
static void f7_self(const char *pre, const cuc_msg *forged)
{
    cuc_buffer *b = NULL;
    int rc = cuc_msg_get_buffer(forged, 0, &b);

    report(pre, "exporter-self-get", rc);
    if (rc == 0) {
        printf("%s.exporter-self-get-size %zu\n", pre, cuc_buffer_size(b));
        cuc_buffer_unref_async(b, NULL);
    }
}

static int f7_send(struct kid *k, const cuc_msg *m, const char *pre, const char *what)
{
    int rc = cuc_channel_send(k->ch, m);

    report(pre, what, rc);
    return rc;
}

static void finding7(void)
{
    const char *pre = "finding7";
    struct src s;
    struct kid k;
    cuc_msg *pm = NULL, *forged = NULL, *plain = NULL;
    int rc;

    if (src_make(pre, &s, 1, F7_REAL) != 0)
        return;
    if ((rc = kid_start(&k, "f7", "-")) != 0) {
        report(pre, "spawn", rc);
        return;
    }
    if (cuc_msg_create(&pm) == 0 && cuc_msg_add_pool(pm, s.pool) == 0)
        f7_send(&k, pm, pre, "send-pool");
    if (f7_forge(pre, s.bufs[0], F7_CLAIMED, &forged) == 0) {
        f7_self(pre, forged);
        f7_send(&k, forged, pre, "send-forged");
    }
    if (cuc_msg_create(&plain) == 0 && cuc_msg_add_buffer(plain, s.bufs[0]) == 0)
        f7_send(&k, plain, pre, "send-plain");
    kid_lines(&k, pre);
    cuc_msg_destroy(pm);
    cuc_msg_destroy(forged);
    cuc_msg_destroy(plain);
    kid_go(&k);
    kid_end(&k, pre);
    cuc_buffer_unref_async(s.bufs[0], s.stream);
    cuc_pool_unref(s.pool);
}

/* Receives one message and gets its record 0 as a buffer. */
static int f7_get(cuc_channel *ch, const char *what, cuc_msg **m, cuc_buffer **b)
{
    int rc = cuc_channel_recv(ch, RECV_MS, m);

    if (rc == 0)
        rc = cuc_msg_get_buffer(*m, 0, b);
    report("finding7", what, rc);
    if (rc == 0)
        printf("finding7.%s-size %zu\n", what, cuc_buffer_size(*b));
    return rc;
}

static int child_f7(void)
{
    cuc_channel *ch = child_channel();
    cuc_msg *pm = NULL, *fm = NULL, *qm = NULL;
    cuc_pool *pool = NULL;
    cuc_buffer *fb = NULL, *qb = NULL;
    int rc = cuc_channel_recv(ch, RECV_MS, &pm), intact = 0, first = -1;

    if (rc == 0)
        rc = cuc_msg_get_pool(pm, 0, &pool);
    report("finding7", "importer.pool", rc);
    if (f7_get(ch, "import-forged", &fm, &fb) == 0) {
        rc = read_back(fb, F7_REAL, &intact, &first);
        report("finding7", "copy-real-size", rc);
        if (rc == 0)
            printf("finding7.copy-real-size-intact %d\n", intact);
    }
    f7_get(ch, "import-plain", &qm, &qb);
    /* last: a copy of the claimed size may fault on a GPU */
    if (fb)
        report("finding7", "copy-claimed-size", read_back(fb, F7_CLAIMED, &intact, &first));
    child_sync();
    cuc_buffer_unref_async(qb, NULL);
    cuc_buffer_unref_async(fb, NULL);
    cuc_msg_destroy(pm);
    cuc_msg_destroy(fm);
    cuc_msg_destroy(qm);
    cuc_pool_unref(pool);
    cuc_channel_destroy(ch);
    return 0;
}

/* ---- main ----------------------------------------------------------------------------- */

static int child_main(const char *role, const char *arg)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(ALARM_CHILD_S);
    if (strcmp(role, "f1") == 0)
        return child_f1(arg);
    if (strcmp(role, "f2") == 0)
        return child_f2();
    if (strcmp(role, "f7") == 0)
        return child_f7();
    return 2;
}

int main(int argc, char **argv)
{
    struct cuc_driver_info info;
    int rc;

    signal(SIGPIPE, SIG_IGN);
    if (argc >= 4 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2], argv[3]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(ALARM_PARENT_S);
    rc = cuc_driver_load(&info);
    report("driver", "load", rc);
    if (rc != 0)
        return 1;
    printf("driver.version %d\ndriver.simulated %d\n", info.version, info.simulated);
    finding1(1);
    finding1(MAX_BUFS);
    finding2();
    finding7();
    printf("done\n");
    return 0;
}
