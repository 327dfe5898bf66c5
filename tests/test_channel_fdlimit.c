/* A receiver at its fd limit.
 *  - An exec'd receiver under RLIMIT_NOFILE: a message of 300 fds whose
 *    first frame (253) fits and whose second does not; 40 fds to a limit
 *    of 32; one fd with no fd free; then one fd with exactly one free.
 *    Each refused receive is CUC_E_LIMIT naming RLIMIT_NOFILE, the fds the
 *    message needed and the fds free; the channel goes on (the next
 *    messages, with and without fds, arrive whole). The sender's
 *    cuc_channel_refused_count counts each refusal of a message with
 *    leases, and those leases end (its buffers' deferred frees run); the
 *    refusal of a message without leases ends and counts nothing.
 *  - SO_PASSCRED: a receiver with it set gets a legal 253-fd frame.
 *  - Hostile refused records: mixed with another record or with fds, the
 *    message is dropped (CUC_E_BADMSG) and no lease ends; one naming a
 *    sequence number of no leased message ends and counts nothing. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "pool_test.h"
#include "wire/records.h"
#include "wire/wire.h"
#include "channel_test.h"

#define RECV_MS 30000
#define TAG 0x7a00u

static void set_nofile(rlim_t n)
{
    struct rlimit rl;

    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = n;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
}

/* A message of nfds fd records (of /dev/null), tags TAG + i. */
static cuc_msg *fd_msg(size_t nfds)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cuc_msg *m;

    CHECK(fd >= 0);
    CHECK_OK(cuc_msg_create(&m));
    for (size_t i = 0; i < nfds; i++)
        CHECK_OK(cuc_msg_add_fd(m, fd, TAG + (uint32_t)i));
    close(fd);
    return m;
}

static void check_fd_msg(cuc_msg *m, size_t nfds)
{
    CHECK(cuc_msg_record_count(m) == nfds);
    CHECK(cuc_msg_fd_count(m) == nfds);
    for (size_t i = 0; i < nfds; i++) {
        uint32_t tag;
        int fd;
        CHECK_OK(cuc_msg_take_fd(m, i, &fd, &tag));
        CHECK(tag == TAG + i);
        CHECK(fd >= 0);
        close(fd);
    }
}

static void recv_empty(cuc_channel *ch)
{
    cuc_msg *m;

    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_msg_destroy(m);
}

static void check_limit_msg(unsigned long limit, size_t needed, const char *free_text)
{
    char want[96];

    snprintf(want, sizeof(want), "RLIMIT_NOFILE is %lu", limit);
    CHECK_ERRMSG(want);
    snprintf(want, sizeof(want), "needs %zu fds", needed);
    CHECK_ERRMSG(want);
    if (free_text)
        CHECK_ERRMSG(free_text);
    CHECK_ERRMSG(" free");
}

/* Opens /dev/null until EMFILE; returns how many. */
static int fill_fds(int *fds, int cap)
{
    int n = 0;

    while (n < cap) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            CHECK(errno == EMFILE);
            break;
        }
        fds[n++] = fd;
    }
    CHECK(n < cap);
    return n;
}

/* The exec'd receiver: no CUDA, only the channel. */
static int child_receiver(void)
{
    cuc_channel *ch = ct_child_channel();
    int fill[64], nfill;
    cuc_msg *m;

    /* 300 fds: frame 0 (253) fits under 280, frame 1 (47) does not */
    set_nofile(280);
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_LIMIT);
    check_limit_msg(280, 300, NULL);
    CHECK(test_fd_count() < 20); /* frame 0's 253 fds were closed */
    recv_empty(ch);              /* frame 1 was skipped, the next came */
    ct_send_empty(ch);              /* "next" */

    set_nofile(32);
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_LIMIT);
    check_limit_msg(32, 40, NULL);
    recv_empty(ch);
    ct_send_empty(ch);

    /* at the exact limit: no fd free */
    nfill = fill_fds(fill, 64);
    ct_send_empty(ch); /* full now */
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_LIMIT);
    check_limit_msg(32, 1, "0 free");
    /* one free: one fd fits */
    close(fill[--nfill]);
    ct_send_empty(ch);
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    check_fd_msg(m, 1);
    cuc_msg_destroy(m);
    while (nfill)
        close(fill[--nfill]);

    /* and the channel goes on: with fds, without */
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    check_fd_msg(m, 5);
    cuc_msg_destroy(m);
    recv_empty(ch);
    ct_send_empty(ch); /* done */
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    return test_finish();
}

/* A message of nfds fds that holds leases: an IPC pool (1 fd), two
 * buffers, nfds - 1 fd records. The buffers are unref'd: freed when the
 * leases end. */
static cuc_msg *leased_msg(cuc_pool *p, size_t nfds)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cuc_buffer *b[2];
    cuc_msg *m;

    CHECK(fd >= 0);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &b[i]));
        CHECK_OK(cuc_msg_add_buffer(m, b[i]));
    }
    for (size_t i = 0; i + 1 < nfds; i++)
        CHECK_OK(cuc_msg_add_fd(m, fd, TAG + (uint32_t)i));
    close(fd);
    CHECK(cuc_msg_fd_count(m) == nfds);
    for (int i = 0; i < 2; i++)
        CHECK_OK(cuc_buffer_unref_async(b[i], NULL));
    return m;
}

/* Sends a leased message of nfds that the receiver refuses: the refusal
 * is counted and the leases end. */
static void send_refused(cuc_channel *ch, cuc_pool *p, size_t nfds, uint64_t *refused)
{
    cuc_msg *m = leased_msg(p, nfds);
    size_t leases;
    uint64_t n;

    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_send_empty(ch);
    CHECK(pt_used(p) > 0); /* deferred: leased */
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pt_used(p) == 0); /* the refusal ended the leases: frees ran */
    CHECK_OK(cuc_channel_lease_count(ch, &leases));
    CHECK(leases == 0);
    recv_empty(ch); /* the receiver goes on */
    CHECK_OK(cuc_channel_refused_count(ch, &n));
    CHECK(n == ++*refused);
}

static void test_fd_limit(void)
{
    const char *envs[2];
    char env[512];
    cuc_channel *mine, *theirs;
    uint64_t refused = 0;
    cuc_pool *p;
    cuc_msg *m;
    pid_t pid;

    pt_child_cvd(env, sizeof(env));
    envs[0] = env;
    envs[1] = NULL;
    CHECK_OK(cuc_channel_pair(&mine, &theirs));
    pid = spawn_self("receiver", NULL, envs, cuc_channel_fd(theirs));
    CHECK(pid > 0);
    cuc_channel_destroy(theirs);
    p = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);

    send_refused(mine, p, 300, &refused);
    send_refused(mine, p, 40, &refused);

    recv_empty(mine); /* the receiver is full */
    m = fd_msg(1);
    CHECK_OK(cuc_channel_send(mine, m));
    cuc_msg_destroy(m);
    recv_empty(mine); /* one free */
    m = fd_msg(1);
    CHECK_OK(cuc_channel_send(mine, m));
    cuc_msg_destroy(m);
    m = fd_msg(5);
    CHECK_OK(cuc_channel_send(mine, m));
    cuc_msg_destroy(m);
    ct_send_empty(mine);
    recv_empty(mine);
    CHECK_OK(cuc_channel_refused_count(mine, &refused));
    CHECK(refused == 2); /* fd_msg(5) was refused too, but held no lease */
    cuc_channel_destroy(mine);
    CHECK(wait_child(pid) == 0);
    cuc_pool_unref(p);
}

/* A receiver with SO_PASSCRED set gets a full 253-fd frame. */
static void test_passcred(void)
{
    cuc_channel *a, *b;
    cuc_msg *m;
    int on = 1;

    CHECK_OK(cuc_channel_pair(&a, &b));
    CHECK(setsockopt(cuc_channel_fd(b), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) == 0);
    m = fd_msg(253);
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(b, RECV_MS, &m));
    check_fd_msg(m, 253);
    cuc_msg_destroy(m);
    /* two frames (253 + 1) too */
    m = fd_msg(254);
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(b, RECV_MS, &m));
    check_fd_msg(m, 254);
    cuc_msg_destroy(m);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

static void add_refused(cuc_msg *m, uint32_t seq)
{
    uint8_t p[8] = {0};

    cuc__put32(p, seq);
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_REFUSED, CUC_RECORD_REFUSED_VERSION, p,
                                 sizeof(p), NULL, 0));
}

/* The exporter holds a leased message; the peer's forged refusals. */
static void test_hostile_refused(void)
{
    cuc_channel *exp, *imp;
    cuc_pool *p;
    cuc_msg *m;
    size_t leases;
    uint64_t n;
    int fd;

    CHECK_OK(cuc_channel_pair(&exp, &imp));
    p = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    m = leased_msg(p, 1); /* the exporter's frame 0 */
    CHECK_OK(cuc_channel_send(exp, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(imp, RECV_MS, &m));
    cuc_msg_destroy(m); /* imports nothing: the leases stay */

    /* frame 0's refusal beside another record */
    CHECK_OK(cuc_msg_create(&m));
    add_refused(m, 0);
    CHECK_OK(cuc_msg_add_device(m, devs[0]));
    CHECK_OK(cuc_channel_send(imp, m));
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_recv(exp, RECV_MS, &m), CUC_E_BADMSG);
    CHECK_ERRMSG("travel alone");
    /* with an fd */
    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_OK(cuc_msg_create(&m));
    add_refused(m, 0);
    CHECK_OK(cuc_msg_add_fd(m, fd, 1));
    close(fd);
    CHECK_OK(cuc_channel_send(imp, m));
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_recv(exp, RECV_MS, &m), CUC_E_BADMSG);
    /* a sequence number of no leased message: nothing ends, nothing counted */
    CHECK_OK(cuc_msg_create(&m));
    add_refused(m, 12345);
    CHECK_OK(cuc_channel_send(imp, m));
    cuc_msg_destroy(m);
    ct_send_empty(imp);
    recv_empty(exp);
    CHECK_OK(cuc_channel_lease_count(exp, &leases));
    CHECK(leases == 2); /* the two buffers */
    CHECK(pt_used(p) > 0);
    CHECK_OK(cuc_channel_refused_count(exp, &n));
    CHECK(n == 0);
    /* the channel still works both ways; the close ends the leases */
    ct_send_empty(exp);
    recv_empty(imp);
    cuc_channel_destroy(imp);
    CHECK_RC(cuc_channel_recv(exp, RECV_MS, &m), CUC_E_PEER_CLOSED);
    CHECK(pt_used(p) == 0);
    cuc_channel_destroy(exp);
    cuc_pool_unref(p);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        signal(SIGPIPE, SIG_IGN);
        if (!strcmp(argv[2], "receiver"))
            return child_receiver();
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    FD_BASELINE();
    test_passcred();
    FD_CHECK_NO_LEAK();
    test_hostile_refused();
    FD_CHECK_NO_LEAK();
    test_fd_limit();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
