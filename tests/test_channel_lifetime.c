/* Channel lifetimes that cannot lie.
 *  - send, unref, close: the exporter destroys its channel with N
 *    buffers still in flight; the exec'd importer imports them all
 *    afterwards and reads the exporter's bytes; its frees end the
 *    leases on the lingering link and the exporter's frees run
 *    (1 and 20 buffers).
 *  - fork: an importer forks a plain child that unrefs the inherited
 *    buffer (no driver call, nothing sent) and whose channel calls fail
 *    with CUC_E_FORKED naming both pids; the parent still reads the
 *    bytes, the exporter's channel still works, and the parent's
 *    release ends the lease.
 *  - a 0-byte datagram from a live peer: a protocol error, not a close.
 *  - destroy after the peer's death: the exporter destroys its channel once
 *  the importer (which imported nothing) has exited; the destroy ends the
 *  leases then and there: the deferred frees have run and the socket is
 *  closed when it returns, with no lease wait, pump or receive after it,
 *  and nothing lingers. */
#include <dlfcn.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "pool_test.h"
#include "lease/linger.h"
#include "channel_test.h"

#define RECV_MS 30000
#define SEED 0x5a

static cuc_channel *start(const char *role, const char *const *args, pid_t *pid)
{
    cuc_channel *mine, *theirs;
    char env[512];
    const char *envs[2] = {env, NULL};

    pt_child_cvd(env, sizeof(env));
    CHECK_OK(cuc_channel_pair(&mine, &theirs));
    *pid = spawn_self(role, args, envs, cuc_channel_fd(theirs));
    CHECK(*pid > 0);
    cuc_channel_destroy(theirs);
    return mine;
}

static void wait_file(const char *path)
{
    struct stat st;

    for (int i = 0; i < 6000 && stat(path, &st) != 0; i++)
        usleep(5000);
    CHECK(stat(path, &st) == 0);
}

/* ---- the importer imports after the exporter's close ---- */

static int child_late_importer(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    int n = argc >= 2 ? atoi(argv[1]) : 0;
    cuc_buffer *bufs[32];
    cuc_pool *p;
    cuc_msg *m;

    CHECK(n > 0 && n <= 32);
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    wait_file(argv[0]); /* the exporter has destroyed its channel */
    CHECK_OK(cuc_msg_get_pool(m, 0, &p));
    for (int i = 0; i < n; i++) {
        CHECK_OK(cuc_msg_get_buffer(m, (size_t)i + 1, &bufs[i]));
        CHECK(pt_holds(bufs[i], SEED + (uint64_t)i)); /* not freed memory */
    }
    cuc_msg_destroy(m);
    for (int i = 0; i < n; i++)
        CHECK_OK(cuc_buffer_unref_async(bufs[i], NULL));
    cuc_pool_unref(p);
    cuc_channel_destroy(ch);
    return test_finish();
}

static void test_close_then_import(int n)
{
    char mark[256], nb[16];
    const char *args[3] = {mark, nb, NULL};
    cuc_buffer *bufs[32];
    cuc_channel *ch;
    cuc_pool *p;
    cuc_msg *m;
    pid_t pid;
    int fd;

    snprintf(mark, sizeof(mark), "/tmp/cuc-lifetime-%ld-%d", (long)getpid(), n);
    unlink(mark);
    snprintf(nb, sizeof(nb), "%d", n);
    ch = start("late", args, &pid);
    p = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    for (int i = 0; i < n; i++) {
        CHECK_OK(cuc_buffer_alloc_async(p, 4096 + (size_t)i, NULL, &bufs[i]));
        pt_fill(bufs[i], SEED + (uint64_t)i);
        CHECK_OK(cuc_msg_add_buffer(m, bufs[i]));
    }
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    for (int i = 0; i < n; i++)
        CHECK_OK(cuc_buffer_unref_async(bufs[i], NULL)); /* deferred */
    cuc_channel_destroy(ch); /* ends no lease: the peer has not imported */
    CHECK(pt_used(p) > 0);
    CHECK(cuc__linger_count() == 1);
    fd = open(mark, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    close(fd);
    /* no channel to pump: the wait reads the lingering link */
    CHECK_OK(cuc_pool_lease_wait(p, NULL, 0, RECV_MS));
    CHECK(pt_used(p) == 0); /* the exporter's frees ran */
    CHECK(wait_child(pid) == 0);
    unlink(mark);
    for (int i = 0; i < 100 && cuc__linger_count(); i++)
        cuc__linger_pump(50);
    CHECK(cuc__linger_count() == 0);
    cuc_pool_unref(p);
}

/* ---- destroy after the peer's death ---- */

static int child_taker(void)
{
    cuc_channel *ch = ct_child_channel();
    cuc_msg *m = ct_recv(ch);

    cuc_msg_destroy(m); /* imports nothing: the exporter's leases stay */
    cuc_channel_destroy(ch);
    return test_finish();
}

static void test_destroy_after_death(void)
{
    cuc_pool *p = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *bufs[2];
    cuc_channel *ch;
    cuc_msg *m;
    size_t n = 0;
    pid_t pid;
    int fds;

    ch = start("taker", NULL, &pid);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &bufs[i]));
        CHECK_OK(cuc_msg_add_buffer(m, bufs[i]));
    }
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    for (int i = 0; i < 2; i++)
        CHECK_OK(cuc_buffer_unref_async(bufs[i], NULL)); /* deferred */
    CHECK(wait_child(pid) == 0); /* the peer is gone; nothing read its close yet */
    CHECK_OK(cuc_pool_lease_count(p, &n));
    CHECK(n == 2 && pt_used(p) > 0);
    fds = test_fd_count();
    cuc_channel_destroy(ch);
    CHECK(test_fd_count() == fds - 1); /* its socket */
    CHECK(cuc__linger_count() == 0);
    CHECK_OK(cuc_pool_lease_count(p, &n));
    CHECK(n == 0 && pt_used(p) == 0); /* the deferred frees ran */
    cuc_pool_unref(p);
}

/* ---- a 0-byte datagram from a live peer is a protocol error ---- */

static void test_empty_datagram(void)
{
    cuc_channel *ch;
    cuc_msg *m;
    int sv[2];

    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_OK(cuc_channel_from_fd(sv[0], &ch));
    CHECK(send(sv[1], "", 0, 0) == 0);
    CHECK_RC(cuc_channel_recv(ch, 5000, &m), CUC_E_BADMSG);
    CHECK_ERRMSG("0-byte datagram");
    /* unusable from now on, also once the peer really closes */
    CHECK(close(sv[1]) == 0);
    CHECK_RC(cuc_channel_recv(ch, 100, &m), CUC_E_BADMSG);
    CHECK_ERRMSG("0-byte datagram");
    cuc_channel_destroy(ch);
    /* a real close is still a close */
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_OK(cuc_channel_from_fd(sv[0], &ch));
    CHECK(close(sv[1]) == 0);
    CHECK_RC(cuc_channel_recv(ch, 5000, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
}

/* ---- fork of an importer ---- */

static int child_exporter(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_buffer *b;
    cuc_pool *p;
    cuc_msg *m;

    (void)argc;
    (void)argv;
    CHECK_OK(cuc_device_get(0, &devs[0]));
    p = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    CHECK_OK(cuc_buffer_alloc_async(p, 8192, NULL, &b));
    pt_fill(b, SEED);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(b, NULL)); /* deferred: leased */
    /* after the importer's fork: its next message arrives intact */
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_msg_destroy(m);
    CHECK(pt_used(p) > 0); /* the child's unref released nothing */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_channel_send(ch, m)); /* ack */
    /* the parent's release ends the lease: the free runs */
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pt_used(p) == 0);
    CHECK_OK(cuc_channel_send(ch, m)); /* freed */
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    cuc_pool_unref(p);
    return test_finish();
}

typedef int (*calls_fn)(const char *name, unsigned long long *out);

static calls_fn sim_calls(void)
{
    void *h = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_NOLOAD);

    return h ? (calls_fn)(uintptr_t)dlsym(h, "cucore_sim_calls") : NULL;
}

/* The plain fork's child: no CUDA, no exec. */
static void forked_child(cuc_channel *ch, cuc_buffer *b, cuc_msg *held, pid_t parent)
{
    unsigned long long before = 0, after = 1;
    calls_fn calls = sim_calls();
    char want[64];
    cuc_msg *m;

    if (test_on_sim())
        CHECK(calls != NULL && calls("*", &before) == 0);
    CHECK_OK(cuc_buffer_unref_async(b, NULL)); /* inert */
    cuc_msg_destroy(held); /* held b: the child's copy goes, quietly */
    if (calls) {
        CHECK(calls("*", &after) == 0);
        CHECK(after == before); /* no driver call */
    }
    CHECK_OK(cuc_msg_create(&m));
    CHECK_RC(cuc_channel_send(ch, m), CUC_E_FORKED);
    snprintf(want, sizeof(want), "process %ld", (long)parent);
    CHECK(strstr(cuc_errmsg(), want) != NULL);
    snprintf(want, sizeof(want), "(pid %ld)", (long)getpid());
    CHECK(strstr(cuc_errmsg(), want) != NULL);
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_recv(ch, 0, &m), CUC_E_FORKED);
    CHECK_RC(cuc_channel_pump(ch, 0), CUC_E_FORKED);
    _exit(test_finish());
}

static void test_fork_importer(void)
{
    cuc_msg *held;
    cuc_channel *ch;
    cuc_buffer *b;
    cuc_pool *p;
    cuc_msg *m;
    pid_t pid, kid;

    ch = start("exporter", NULL, &pid);
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    CHECK_OK(cuc_msg_get_pool(m, 0, &p));
    CHECK_OK(cuc_msg_get_buffer(m, 1, &b));
    cuc_msg_destroy(m);
    CHECK(pt_holds(b, SEED));
    CHECK_OK(cuc_msg_create(&held));
    CHECK_OK(cuc_msg_add_buffer(held, b)); /* a message holding it */
    fflush(NULL);
    kid = fork();
    CHECK(kid >= 0);
    if (kid == 0)
        forked_child(ch, b, held, getppid());
    CHECK(wait_child(kid) == 0);
    CHECK(pt_holds(b, SEED)); /* still the exporter's bytes */
    cuc_msg_destroy(held);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_channel_send(ch, m)); /* the exporter must get it: no BADMSG */
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m)); /* ack */
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(b, NULL)); /* the release */
    cuc_pool_unref(p);
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m)); /* the exporter freed */
    cuc_msg_destroy(m);
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        signal(SIGPIPE, SIG_IGN);
        if (!strcmp(argv[2], "late"))
            return child_late_importer(argc - 3, argv + 3);
        if (!strcmp(argv[2], "exporter"))
            return child_exporter(argc - 3, argv + 3);
        if (!strcmp(argv[2], "taker"))
            return child_taker();
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    FD_BASELINE();
    test_empty_datagram();
    test_close_then_import(1);
    test_close_then_import(20);
    FD_CHECK_NO_LEAK();
    test_destroy_after_death();
    FD_CHECK_NO_LEAK();
    test_fork_importer();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
