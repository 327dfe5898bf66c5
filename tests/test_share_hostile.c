/* The share point against peers that were never given the bytes, peers
 * that fail, peers that hoard, and processes in other namespaces:
 *  - guesser: an unrelated same-uid process connects to the share point
 *    and sends claims of random tokens, releases of the lease ids a real
 *    receiver holds, and give-backs: every claim is refused, nothing it
 *    sends ends the receiver's lease or the unclaimed hold, and the hold's
 *    bytes still attach afterwards;
 *  - a receiver that cannot import (the pool's GPU hidden from it) leaves
 *    the hold to the next receiver, which attaches;
 *  - a receiver that attaches and drops the message unused gives the hold
 *    back;
 *  - hoarders: 500 idle connections and one that stops half-way through a
 *    message: the exporter keeps at most max_peers of them and one
 *    thread, drops the half-sent one, and serves a real receiver meanwhile;
 *  - a consumer that outlives 10 exporters: once their objects are gone it
 *    holds no fd of theirs and no pool; their bytes then say the exporter
 *    is gone;
 *  - a SIGKILLed exporter's socket is removed by the next share point that
 *    starts in the directory;
 *  - a socket of another uid at the bytes' path: refused, naming the uid;
 *  - receivers in another PID namespace (with its own /proc: a mount
 *    namespace too) and another time namespace attach as any other, and
 *    in the PID namespace a cuc_buffer_wrap buffer of cuMemAlloc memory
 *    (legacy CUDA IPC) too (skipped, saying why, where unshare is
 *    refused). */
#include <errno.h>
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "pool_test.h"
#include "share_test.h"
#include "channel/channel.h"
#include "driver/driver.h"
#include "frame/frame.h"
#include "wire/records.h"

#define WAIT_MS 30000
#define BUF_BYTES 65536
#define N_IDLE 500
#define MAX_PEERS 64
#define N_EXPORTERS 10

static uint64_t seed_of(int k)
{
    return 104729ull + (uint64_t)k;
}

static cuc_pool *pool;

static cuc_buffer *new_buf(int k)
{
    cuc_buffer *b;

    CHECK_OK(cuc_buffer_alloc_async(pool, BUF_BYTES, NULL, &b));
    pt_fill(b, seed_of(k));
    return b;
}

static void detach_one(cuc_buffer *b, void **bytes, size_t *len)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_share_detach(m, bytes, len));
    cuc_msg_destroy(m);
}

static size_t pool_leases(void)
{
    size_t n;

    CHECK_OK(cuc_pool_lease_count(pool, &n));
    return n;
}

static size_t threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    size_t n = 0;

    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---- children ---- */

/* Attaches one buffer from stdin; mode 0: checks it (seed in argv), says
 * "ok", waits for stdin's end, frees; mode 1: says what the attach or the
 * get returned, frees, exits; mode 2: attaches, drops the message unused. */
static int child_receiver(char **argv)
{
    int k = atoi(argv[1]), mode = atoi(argv[2]), rc;
    cuc_buffer *b = NULL;
    size_t len;
    cuc_msg *m;
    void *bytes = get_blob(0, &len);
    char c;

    CHECK(bytes != NULL);
    rc = cuc_share_attach(bytes, len, &m);
    free(bytes);
    if (rc == 0 && mode == 2) {
        cuc_msg_destroy(m);
        printf("dropped\n");
        return 0;
    }
    if (rc == 0) {
        rc = cuc_msg_get_buffer(m, 0, &b);
        cuc_msg_destroy(m);
    }
    if (mode == 1) {
        printf("%s\n", cuc_errname(rc));
        fflush(stdout);
        if (b)
            CHECK_OK(cuc_buffer_unref_async(b, NULL));
        return 0;
    }
    CHECK_OK(rc);
    CHECK(pt_holds(b, seed_of(k)));
    printf("ok\n");
    fflush(stdout);
    while (read(0, &c, 1) > 0)
        ;
    CHECK(pt_holds(b, seed_of(k))); /* nothing freed it meanwhile */
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    return 0;
}

/* A message of claim records, each of a random token, or of give-backs. */
static cuc_msg *random_claims(size_t n, uint32_t flags)
{
    uint8_t token[16];
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < sizeof(token); j++)
            token[j] = (uint8_t)rand();
        CHECK_OK(cuc__claim_rec_put(m, token, flags));
    }
    return m;
}

/* The guesser: connects to the share point at argv[0], sends 1000 claims
 * of random tokens (each answered "not found"), releases of the lease ids
 * around argv[1] and 100 give-backs; says "done". */
static int child_guesser(char **argv)
{
    uint64_t id = strtoull(argv[1], NULL, 0), ids[4096];
    size_t answered = 0, refused = 0;
    cuc_channel *ch;
    cuc_msg *m;

    srand((unsigned)getpid());
    CHECK_OK(cuc_channel_connect(argv[0], 10000, &ch));
    CHECK_OK(cuc_channel_recv(ch, 10000, &m)); /* the hello */
    cuc_msg_destroy(m);
    m = random_claims(1000, 0);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    while (answered < 1000) {
        uint8_t token[16];
        int status;
        CHECK_OK(cuc_channel_recv(ch, 10000, &m));
        for (size_t i = 0; i < cuc_msg_record_count(m); i++) {
            CHECK_OK(cuc__confirm_rec_read(m, i, token, &status));
            answered++;
            refused += status == CUC_E_NOT_FOUND;
        }
        cuc_msg_destroy(m);
    }
    CHECK(refused == 1000);
    /* the real receiver's lease ids and their neighbours, released here */
    for (size_t i = 0; i < CUC_ARRAY_LEN(ids); i++)
        ids[i] = id - 2048 * CUC__LEASE_PER_BLOCK + i * CUC__LEASE_PER_BLOCK + (i % 4);
    CHECK_OK(cuc_channel_release(ch, ids, CUC_ARRAY_LEN(ids)));
    m = random_claims(100, CUC__CLAIM_GIVE_BACK);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    /* a sync: one more claim, answered after all of the above was read */
    m = random_claims(1, 0);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(ch, 10000, &m));
    cuc_msg_destroy(m);
    cuc_channel_destroy(ch);
    printf("done\n");
    return 0;
}

/* 500 idle connections and one that sends the first frame of a 2-frame
 * message and nothing more; says "connected", holds them until stdin's end. */
static int child_hoarder(char **argv)
{
    struct rlimit rl = {N_IDLE + 64, N_IDLE + 64};
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    static uint8_t frame[CUC__FRAME_HDR + CUC__FRAME_MAX_DATA];
    struct cuc__frame f = {0, 0, 2, CUC__FRAME_MAX_DATA, 0, CUC__FRAME_MAX_DATA + 16, 0};
    int fds[N_IDLE], half;
    char c;

    (void)setrlimit(RLIMIT_NOFILE, &rl);
    strncpy(a.sun_path, argv[0], sizeof(a.sun_path) - 1);
    for (int i = 0; i < N_IDLE; i++) {
        fds[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        CHECK(fds[i] >= 0);
        CHECK(connect(fds[i], (struct sockaddr *)&a, sizeof(a)) == 0);
    }
    half = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(connect(half, (struct sockaddr *)&a, sizeof(a)) == 0);
    cuc__frame_write(frame, &f);
    /* the share point may have dropped it already, every place being taken
     * by newer peers: that is a refusal too */
    CHECK(send(half, frame, sizeof(frame), MSG_NOSIGNAL) == (ssize_t)sizeof(frame) ||
          errno == EPIPE || errno == ECONNRESET);
    printf("connected\n");
    fflush(stdout);
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}

/* An exporter: a pool buffer of seed argv[0], detached; the bytes on
 * stdout; at stdin's end, once its lease ended, exits (the share point
 * stops at exit), or, argv[1] "k", waits to be killed. */
static int child_exporter(char **argv)
{
    struct cuc_share_opts o;
    cuc_buffer *b;
    size_t len;
    void *bytes;
    char c;

    cuc_share_opts_init(&o);
    CHECK_OK(cuc_share_start(&o));
    pool = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    b = new_buf(atoi(argv[0]));
    detach_one(b, &bytes, &len);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    put_blob(1, bytes, len);
    free(bytes);
    while (read(0, &c, 1) > 0)
        ;
    CHECK_OK(cuc_pool_lease_wait(pool, NULL, 0, WAIT_MS)); /* the receiver released */
    if (argv[1][0] == 'k') /* wait to be killed, socket and all */
        for (;;)
            pause();
    return 0;
}

/* ---- the parent's scenarios ---- */

/* A receiver child of mode for k, given bytes; returns its pid. */
static pid_t receiver(const char *const *prefix, int k, int mode, const void *bytes,
                      size_t len, int *to, FILE **from)
{
    pid_t pid = start_child(prefix, "receiver", k, mode, to, from);

    put_blob(*to, bytes, len);
    return pid;
}

static void finish_receiver(pid_t pid, int to, FILE *from)
{
    close(to);
    fclose(from);
    CHECK(wait_child(pid) == 0);
}

static void scenario_guesser(void)
{
    cuc_buffer *b1 = new_buf(1), *b2 = new_buf(2);
    void *bytes1, *bytes2;
    size_t len1, len2;
    struct cuc_buffer_record rec;
    char path[128], id[32], out[256];
    const char *args[] = {path, id, NULL};
    const char *argv[32];
    FILE *from;
    cuc_msg *m;
    pid_t pid;
    int to;

    detach_one(b1, &bytes1, &len1);
    detach_one(b2, &bytes2, &len2); /* its hold stays unclaimed */
    CHECK_OK(cuc_msg_from_bytes(bytes1, len1, &m));
    CHECK_OK(cuc_msg_read_buffer(m, 1, &rec));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(b1, NULL));
    CHECK_OK(cuc_buffer_unref_async(b2, NULL));
    pid = receiver(NULL, 1, 0, bytes1, len1, &to, &from);
    expect_line(from, "ok");
    CHECK(pool_leases() == 2); /* the receiver's lease, the unclaimed hold */
    CHECK_OK(cuc_share_path(path, sizeof(path)));
    snprintf(id, sizeof(id), "%llu", (unsigned long long)rec.lease_id);
    child_argv("guesser", args, argv);
    CHECK(run_capture(argv, NULL, out, sizeof(out)) == 0);
    CHECK(strstr(out, "done") != NULL);
    EXPECT(pool_leases() == 2);
    finish_receiver(pid, to, from); /* it checked its bytes again */
    pid = receiver(NULL, 2, 0, bytes2, len2, &to, &from);
    expect_line(from, "ok");
    finish_receiver(pid, to, from);
    CHECK_OK(cuc_pool_lease_wait(pool, NULL, 0, WAIT_MS));
    free(bytes1);
    free(bytes2);
    printf("guesser: ok\n");
}

/* CUDA_VISIBLE_DEVICES without the parent's device 0. */
static void blind_cvd(char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "CUDA_VISIBLE_DEVICES=");

    for (int i = 1; i < n_dev; i++)
        len += (size_t)snprintf(out + len, n - len, "%d%s", i, i + 1 < n_dev ? "," : "");
}

static void scenario_failed_receivers(void)
{
    cuc_buffer *b = new_buf(3);
    char cvd[128];
    void *bytes;
    size_t len;
    FILE *from;
    pid_t pid;
    int to;

    if (n_dev < 2) {
        printf("failed receivers: skipped (one GPU: none can be hidden)\n");
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
        return;
    }
    detach_one(b, &bytes, &len);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    /* blind: the pool's GPU is not visible to it */
    blind_cvd(cvd, sizeof(cvd));
    share_test_cvd = cvd;
    pid = receiver(NULL, 3, 1, bytes, len, &to, &from);
    share_test_cvd = NULL;
    expect_line(from, "CUC_E_NOT_VISIBLE");
    finish_receiver(pid, to, from);
    /* it gave the claim back: the hold waits for the next */
    CHECK(pool_leases() == 1);
    pid = receiver(NULL, 3, 2, bytes, len, &to, &from); /* attaches, drops unused */
    expect_line(from, "dropped");
    finish_receiver(pid, to, from);
    CHECK(pool_leases() == 1);
    pid = receiver(NULL, 3, 0, bytes, len, &to, &from);
    expect_line(from, "ok");
    finish_receiver(pid, to, from);
    CHECK_OK(cuc_pool_lease_wait(pool, NULL, 0, WAIT_MS));
    free(bytes);
    printf("failed receivers: ok\n");
}

static void scenario_hoarders(void)
{
    struct cuc_share_stats st;
    cuc_buffer *b = new_buf(4);
    char path[128];
    const char *args[] = {path, NULL};
    size_t len, threads = threads_now();
    void *bytes;
    FILE *hf, *from;
    pid_t hp, pid;
    int ht, to;

    detach_one(b, &bytes, &len);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK_OK(cuc_share_path(path, sizeof(path)));
    {
        int in[2], out[2];
        const char *argv[32];
        CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
        child_argv("hoarder", args, argv);
        hp = fork();
        CHECK(hp >= 0);
        if (hp == 0) {
            dup2(in[0], 0);
            dup2(out[1], 1);
            execv(argv[0], (char *const *)argv);
            _exit(127);
        }
        close(in[0]);
        close(out[1]);
        ht = in[1];
        hf = fdopen(out[0], "r");
    }
    expect_line(hf, "connected");
    /* the thread took them all (each newcomer past the limit evicts the
     * idlest) before the receiver's connection comes */
    for (int i = 0; i < 200; i++) {
        CHECK_OK(cuc_share_stats(&st));
        if (st.peers == MAX_PEERS)
            break;
        usleep(10000);
    }
    EXPECT(st.peers <= MAX_PEERS);
    EXPECT(test_fd_count() < 3 * MAX_PEERS);
    pid = receiver(NULL, 4, 0, bytes, len, &to, &from);
    expect_line(from, "ok");
    EXPECT(threads_now() == threads);
    finish_receiver(pid, to, from);
    close(ht);
    fclose(hf);
    CHECK(wait_child(hp) == 0);
    CHECK_OK(cuc_pool_lease_wait(pool, NULL, 0, WAIT_MS));
    free(bytes);
    printf("hoarders: ok\n");
}

/* The half-sent message alone: dropped after the share point's timeout. */
static void scenario_half_sent(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    static uint8_t frame[CUC__FRAME_HDR + CUC__FRAME_MAX_DATA];
    struct cuc__frame f = {0, 0, 2, CUC__FRAME_MAX_DATA, 0, CUC__FRAME_MAX_DATA + 16, 0};
    uint8_t hello[4096], c;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

    CHECK_OK(cuc_share_path(a.sun_path, sizeof(a.sun_path)));
    CHECK(connect(s, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(read(s, hello, sizeof(hello)) > 0);
    cuc__frame_write(frame, &f);
    CHECK(write(s, frame, sizeof(frame)) == (ssize_t)sizeof(frame));
    /* the share point's timeout in this test is 2 s: it closes then */
    CHECK(read(s, &c, 1) == 0);
    close(s);
    printf("half-sent: ok\n");
}

/* The fds once the earlier scenarios' peers are gone: the thread drops a
 * peer that closed, and closes its socket, a moment after it goes. */
static int settled_fds(void)
{
    struct cuc_share_stats st;
    int n = test_fd_count(), now;

    for (int i = 0; i < 200; i++) {
        usleep(20000);
        CHECK_OK(cuc_share_stats(&st));
        now = test_fd_count();
        if (st.peers == 0 && now == n)
            break;
        n = now;
    }
    return n;
}

static void scenario_exporters(void)
{
    int fds0 = settled_fds();
    struct cuc_share_stats st;
    uint8_t ids[N_EXPORTERS][CUC_POOL_ID_LEN];
    void *last = NULL;
    size_t last_len = 0;

    for (int k = 0; k < N_EXPORTERS; k++) {
        char seed[16];
        const char *args[] = {seed, "x", NULL};
        const char *argv[32];
        int in[2], out[2], rc;
        struct cuc_buffer_record rec;
        cuc_buffer *b;
        size_t len;
        void *bytes;
        cuc_msg *m;
        pid_t pid;

        snprintf(seed, sizeof(seed), "%d", 100 + k);
        CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
        child_argv("exporter", args, argv);
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            dup2(in[0], 0);
            dup2(out[1], 1);
            execv(argv[0], (char *const *)argv);
            _exit(127);
        }
        close(in[0]);
        close(out[1]);
        bytes = get_blob(out[0], &len);
        CHECK(bytes != NULL);
        CHECK_OK(cuc_share_attach(bytes, len, &m));
        CHECK_OK(cuc_msg_read_buffer(m, 0, &rec));
        memcpy(ids[k], rec.pool_id, CUC_POOL_ID_LEN);
        CHECK_OK(cuc_msg_get_buffer(m, 0, &b));
        cuc_msg_destroy(m);
        CHECK(pt_holds(b, seed_of(100 + k)));
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
        close(in[1]); /* the exporter may go */
        close(out[0]);
        rc = wait_child(pid);
        CHECK(rc == 0);
        free(last);
        last = bytes;
        last_len = len;
    }
    /* the thread saw each go: nothing of theirs is kept */
    for (int i = 0; i < 200; i++) {
        CHECK_OK(cuc_share_stats(&st));
        if (st.exporters == 0 && test_fd_count() == fds0)
            break;
        usleep(10000);
    }
    EXPECT(st.exporters == 0);
    if (test_fd_count() != fds0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)getpid());
        fprintf(stderr, "fds: %d, were %d; exporters %zu peers %zu\n", test_fd_count(), fds0,
                st.exporters, st.peers);
        if (system(cmd)) {}
    }
    EXPECT(test_fd_count() == fds0);
    for (int k = 0; k < N_EXPORTERS; k++) {
        cuc_pool *p = NULL;
        EXPECT(cuc_pool_get_by_id(ids[k], &p) == CUC_E_POOL_NOT_IMPORTED);
        cuc_pool_unref(p);
    }
    {
        cuc_msg *m;
        CHECK_RC(cuc_share_attach(last, last_len, &m), CUC_E_EXPORTER_GONE);
        CHECK_ERRMSG("gone");
    }
    free(last);
    printf("10 exporters gone: ok\n");
}

static void scenario_stale_socket(const cuc_share_opts *o)
{
    const char *args[] = {"7", "k", NULL};
    const char *argv[32];
    char dir[4096], path[512];
    struct cuc_share_record r;
    size_t len;
    void *bytes;
    cuc_msg *m;
    pid_t pid;
    int in[2], out[2];

    CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    child_argv("exporter", args, argv);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    bytes = get_blob(out[0], &len);
    CHECK(bytes != NULL);
    CHECK_OK(cuc_msg_from_bytes(bytes, len, &m));
    CHECK_OK(cuc_msg_read_share(m, 0, &r));
    cuc_msg_destroy(m);
    snprintf(path, sizeof(path), "%s", r.path);
    close(in[1]);
    kill(pid, SIGKILL);
    wait_child(pid);
    close(out[0]);
    free(bytes);
    CHECK(access(path, F_OK) == 0); /* left behind */
    CHECK_OK(cuc_share_stop(WAIT_MS));
    CHECK_OK(cuc_share_start(o));
    EXPECT(access(path, F_OK) != 0);
    (void)dir;
    printf("stale socket: ok\n");
}

/* The bytes of b with their share record's path replaced, and its point
 * (another share point's: not this process's). */
static void *with_path(const void *bytes, size_t len, const char *path, size_t *outlen)
{
    struct cuc_share_record r;
    cuc_msg *m, *o;
    void *out;

    CHECK_OK(cuc_msg_from_bytes(bytes, len, &m));
    CHECK_OK(cuc_msg_read_share(m, 0, &r));
    CHECK(strlen(path) < sizeof(r.path));
    memcpy(r.path, path, strlen(path) + 1);
    r.point[0] ^= 0xff;
    CHECK_OK(cuc_msg_create(&o));
    CHECK_OK(cuc__share_rec_put(o, &r));
    for (size_t i = 1; i < cuc_msg_record_count(m); i++) {
        struct cuc__record rec;
        CHECK_OK(cuc__msg_record(m, i, &rec));
        CHECK_OK(cuc__msg_add_record(o, rec.type, rec.version, rec.payload, rec.len, NULL, 0));
    }
    CHECK_OK(cuc_msg_to_bytes(o, &out, outlen));
    cuc_msg_destroy(o);
    cuc_msg_destroy(m);
    return out;
}

/* A socket another uid listens on at the bytes' path: refused, naming it. */
static void scenario_other_uid(void)
{
    char dir[] = "/tmp/cucore-test-foreign-XXXXXX", path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    cuc_buffer *b = new_buf(60);
    int ready[2], s;
    size_t len, flen;
    void *bytes, *forged;
    cuc_msg *m;
    pid_t pid;
    char c;

    if (geteuid() != 0) {
        printf("another uid's socket: skipped (not root: cannot run as another uid)\n");
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
        return;
    }
    CHECK(mkdtemp(dir) != NULL && chmod(dir, 0777) == 0);
    snprintf(path, sizeof(path), "%s/cucore-share-0000000000000000.sock", dir);
    memcpy(a.sun_path, path, sizeof(a.sun_path));
    CHECK(pipe2(ready, O_CLOEXEC) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) { /* nobody, listening where the bytes will point */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (setgid(65534) || setuid(65534))
            _exit(1);
        s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 4))
            _exit(2);
        (void)!write(ready[1], "r", 1);
        for (;;)
            close(accept(s, NULL, NULL));
    }
    close(ready[1]);
    CHECK(read(ready[0], &c, 1) == 1);
    close(ready[0]);
    detach_one(b, &bytes, &len);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    forged = with_path(bytes, len, path, &flen);
    CHECK_RC(cuc_share_attach(forged, flen, &m), CUC_E_PERMISSION);
    CHECK_ERRMSG("uid 65534");
    kill(pid, SIGKILL);
    wait_child(pid);
    unlink(path);
    rmdir(dir);
    free(forged);
    /* the hold stayed for a real receiver: attached here, it ends */
    CHECK_OK(cuc_share_attach(bytes, len, &m));
    cuc_msg_destroy(m);
    CHECK(pool_leases() == 0);
    free(bytes);
    printf("another uid's socket: ok\n");
}

/* A cuc_buffer_wrap buffer of cuMemAlloc memory to a receiver under
 * prefix: the driver opens legacy IPC there too (sim/FACTS.md F48); its
 * lease ends with the receiver, then the memory is freed. */
static void legacy_receiver(const char *const *prefix, int k)
{
    CUdeviceptr p = 0;
    cuc_buffer *b;
    cuc_pool *legacy;
    void *bytes;
    size_t len;
    FILE *from;
    pid_t pid;
    int to;

    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK(CUC_DRV->cuMemAlloc(&p, BUF_BYTES) == CUDA_SUCCESS);
    CHECK_OK(cuc_buffer_wrap(devs[0], (void *)(uintptr_t)p, BUF_BYTES, &b));
    pt_fill(b, seed_of(k));
    legacy = cuc_pool_ref(cuc_buffer_pool(b));
    detach_one(b, &bytes, &len);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    pid = receiver(prefix, k, 0, bytes, len, &to, &from);
    expect_line(from, "ok");
    finish_receiver(pid, to, from);
    CHECK_OK(cuc_pool_lease_wait(legacy, NULL, 0, WAIT_MS));
    cuc_pool_unref(legacy);
    free(bytes);
    CHECK(CUC_DRV->cuMemFree(p) == CUDA_SUCCESS);
}

/* Receivers in other namespaces: prefix is the unshare command. */
static void scenario_namespaces(void)
{
    static const char *const pidns[] = {"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", NULL};
    static const char *const timens[] = {"/usr/bin/unshare", "--time", "--fork", "--monotonic",
                                         "86400", "--boottime", "86400", NULL};
    static const char *const *prefixes[] = {pidns, timens};
    static const char *const names[] = {"PID and mount namespaces", "a time namespace"};
    char out[256];

    for (int i = 0; i < 2; i++) {
        const char *probe[16];
        size_t n = 0;
        cuc_buffer *b;
        void *bytes;
        size_t len;
        FILE *from;
        pid_t pid;
        int to;
        for (; prefixes[i][n]; n++)
            probe[n] = prefixes[i][n];
        probe[n++] = "/bin/true";
        probe[n] = NULL;
        if (access("/usr/bin/unshare", X_OK) != 0 ||
            run_capture((const char *const *)probe, NULL, out, sizeof(out)) != 0) {
            printf("%s: skipped (unshare refused here)\n", names[i]);
            continue;
        }
        b = new_buf(50 + i);
        detach_one(b, &bytes, &len);
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
        pid = receiver(prefixes[i], 50 + i, 0, bytes, len, &to, &from);
        expect_line(from, "ok");
        finish_receiver(pid, to, from);
        CHECK_OK(cuc_pool_lease_wait(pool, NULL, 0, WAIT_MS));
        free(bytes);
        printf("receiver in %s: ok\n", names[i]);
        if (prefixes[i] == pidns) {
            legacy_receiver(pidns, 52);
            printf("receiver of legacy IPC memory in %s: ok\n", names[i]);
        }
    }
}

int main(int argc, char **argv)
{
    cuc_share_opts o;

    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "hoarder") == 0)
            return child_hoarder(argv + 3);
        if (strcmp(argv[2], "guesser") == 0)
            return child_guesser(argv + 3);
        open_all();
        if (strcmp(argv[2], "receiver") == 0)
            return child_receiver(argv + 3);
        if (strcmp(argv[2], "exporter") == 0)
            return child_exporter(argv + 3);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    private_share_dir();
    pt_start(CUC_DEVICE_CAP_MEMORY_POOLS | CUC_DEVICE_CAP_POOL_POSIX_FD, "lacks IPC pools");
    cuc_share_opts_init(&o);
    o.max_peers = MAX_PEERS;
    o.timeout_ms = 2000;
    CHECK_OK(cuc_share_start(&o));
    pool = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    scenario_guesser();
    scenario_failed_receivers();
    scenario_hoarders();
    scenario_half_sent();
    scenario_exporters();
    scenario_stale_socket(&o);
    scenario_other_uid();
    scenario_namespaces();
    CHECK_OK(cuc_share_stop(WAIT_MS));
    cuc_pool_unref(pool);
    return test_finish();
}
