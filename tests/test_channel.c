/* Channels between real processes: a pair inherited by an exec'd child,
 * listen/accept/connect at a path, messages with and without fds, timeouts,
 * 10,000 round trips with fds both ways, and messages split in frames
 * (1500 and 4096 fds, 2 MiB of bytes) rejoined. */
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include "check.h"
#include "devices_test.h"
#include "cucore.h"
#include "device/device.h"
#include "wire/records.h"

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void raise_nofile(void)
{
    struct rlimit rl;

    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = rl.rlim_max;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
}

static rlim_t nofile(void)
{
    struct rlimit rl;

    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    return rl.rlim_cur;
}

/* ---- children ---- */

/* Sends back every message as it came, fds included, until the peer goes;
 * then checks that it leaked no fd. */
static int child_echo(cuc_channel *ch)
{
    long n = 0;
    cuc_msg *m;
    int rc;

    for (;;) {
        rc = cuc_channel_recv(ch, 30000, &m);
        if (rc)
            break;
        rc = cuc_channel_send(ch, m);
        cuc_msg_destroy(m);
        if (rc)
            break;
        n++;
    }
    if (rc != CUC_E_PEER_CLOSED) {
        fprintf(stderr, "echo child: %s after %ld messages: %s\n", cuc_errname(rc), n,
                cuc_errmsg());
        return 1;
    }
    CHECK_RC(cuc_channel_recv(ch, 0, &m), CUC_E_PEER_CLOSED); /* it sticks */
    cuc_channel_destroy(ch);
    FD_CHECK_NO_LEAK();
    return 0;
}

static int child_main(const char *role, int argc, char **argv)
{
    cuc_channel *ch;
    int n;

    raise_nofile();
    CHECK_OK(cuc_device_count(&n));
    if (!strcmp(role, "echo")) {
        const char *fd = getenv("CUC_TEST_FD");
        FD_BASELINE();
        test_fd_baseline_--; /* the inherited channel fd, closed at the end */
        CHECK(fd);
        CHECK_OK(cuc_channel_from_fd(atoi(fd), &ch));
        return child_echo(ch);
    }
    if (!strcmp(role, "connect")) {
        FD_BASELINE();
        CHECK(argc == 1);
        CHECK_OK(cuc_channel_connect(argv[0], 5000, &ch));
        return child_echo(ch);
    }
    return 2;
}

/* ---- helpers ---- */

static int null_fd;
static int ndev;

#define device_msg test_device_msg

static int same_file(int a, int b)
{
    struct stat sa, sb;

    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Spawns an echo child on one end of a fresh pair; returns our end. */
static cuc_channel *start_echo(pid_t *pid)
{
    cuc_channel *a, *b;

    CHECK_OK(cuc_channel_pair(&a, &b));
    *pid = spawn_self("echo", NULL, NULL, cuc_channel_fd(b));
    CHECK(*pid > 0);
    cuc_channel_destroy(b);
    return a;
}

static void stop_echo(cuc_channel *a, pid_t pid)
{
    cuc_channel_destroy(a);
    CHECK(wait_child(pid) == 0);
}

/* ---- tests ---- */

static void test_pair_in_process(void)
{
    cuc_channel *a, *b;
    cuc_device *d, *got;
    cuc_msg *m, *r;
    uint32_t tag;
    pid_t pid;
    uid_t uid;
    int fd;

    CHECK_OK(cuc_channel_pair(&a, &b));
    CHECK(cuc_channel_fd(a) >= 0 && cuc_channel_fd(a) != cuc_channel_fd(b));
    CHECK((fcntl(cuc_channel_fd(a), F_GETFD) & FD_CLOEXEC) != 0);
    CHECK_OK(cuc_channel_peer_pid(a, &pid));
    CHECK_OK(cuc_channel_peer_uid(a, &uid));
    CHECK(pid == getpid() && uid == geteuid());

    m = device_msg(1);
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 77));
    CHECK_OK(cuc_channel_send(a, m));
    CHECK(cuc_msg_fd_count(m) == 1); /* the sender keeps its own */
    CHECK_OK(cuc_channel_recv(b, 1000, &r));
    CHECK(cuc_msg_record_count(r) == 2 && cuc_msg_fd_count(r) == 1);
    CHECK_OK(cuc_device_get(1 % ndev, &d));
    CHECK_OK(cuc_msg_get_device(r, 0, &got));
    CHECK(got == d);
    CHECK_OK(cuc_msg_take_fd(r, 1, &fd, &tag));
    CHECK(tag == 77 && same_file(fd, null_fd));
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    close(fd);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);

    /* and back, with no fd at all */
    m = device_msg(0);
    CHECK_OK(cuc_channel_send(b, m));
    CHECK_OK(cuc_channel_recv(a, 1000, &r));
    CHECK_OK(cuc_msg_get_device(r, 0, &got));
    CHECK_OK(cuc_device_get(0, &d));
    CHECK(got == d);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);

    /* an empty message is a message */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_channel_send(a, m));
    CHECK_OK(cuc_channel_recv(b, 1000, &r));
    CHECK(cuc_msg_record_count(r) == 0);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);

    CHECK_RC(cuc_channel_recv(a, -2, &r), CUC_E_INVALID);
    CHECK_RC(cuc_channel_send(a, NULL), CUC_E_INVALID);
    cuc_channel_destroy(a);
    CHECK_RC(cuc_channel_recv(b, 1000, &r), CUC_E_PEER_CLOSED);
    CHECK_RC(cuc_channel_send(b, m = device_msg(0)), CUC_E_PEER_CLOSED);
    cuc_msg_destroy(m);
    cuc_channel_destroy(b);
    cuc_channel_destroy(NULL);
}

static void test_timeout(void)
{
    cuc_channel *a, *b;
    cuc_msg *r;
    double t0, dt;

    CHECK_OK(cuc_channel_pair(&a, &b));
    t0 = now_ms();
    CHECK_RC(cuc_channel_recv(a, 0, &r), CUC_E_TIMEOUT);
    CHECK(now_ms() - t0 < 50);
    t0 = now_ms();
    CHECK_RC(cuc_channel_recv(a, 150, &r), CUC_E_TIMEOUT);
    dt = now_ms() - t0;
    CHECK(dt >= 140 && dt < 1000);
    CHECK(strstr(cuc_errmsg(), "timed out") != NULL);
    /* a timeout does not break the channel */
    CHECK_OK(cuc_channel_send(b, r = device_msg(0)));
    cuc_msg_destroy(r);
    CHECK_OK(cuc_channel_recv(a, 1000, &r));
    cuc_msg_destroy(r);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

static void test_from_fd_checks(void)
{
    cuc_channel *ch;
    int sv[2];

    CHECK_RC(cuc_channel_from_fd(-1, &ch), CUC_E_INVALID);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_RC(cuc_channel_from_fd(sv[0], &ch), CUC_E_INVALID); /* closes it */
    CHECK(fcntl(sv[0], F_GETFD) < 0);
    close(sv[1]);
    CHECK_RC(cuc_channel_from_fd(dup(null_fd), &ch), CUC_E_IO);
}

/* The exec'd child made a channel from the inherited fd; 10,000 messages
 * with fds go there and back. */
static void test_echo_10000(void)
{
    int i, fd, probe = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    cuc_channel *a;
    cuc_msg *m, *r;
    uint32_t tag;
    pid_t pid, peer;

    CHECK(probe >= 0);
    a = start_echo(&pid);
    CHECK_OK(cuc_channel_peer_pid(a, &peer));
    CHECK(peer == getpid()); /* the pair was made here */
    for (i = 0; i < 10000; i++) {
        m = device_msg(i % 4);
        CHECK_OK(cuc_msg_add_fd(m, null_fd, (uint32_t)i));
        CHECK_OK(cuc_msg_add_fd(m, probe, (uint32_t)i + 1));
        CHECK_OK(cuc_channel_send(a, m));
        cuc_msg_destroy(m);
        CHECK_OK(cuc_channel_recv(a, 10000, &r));
        CHECK(cuc_msg_record_count(r) == 3 && cuc_msg_fd_count(r) == 2);
        CHECK_OK(cuc_msg_take_fd(r, 2, &fd, &tag));
        CHECK(tag == (uint32_t)i + 1);
        if (i % 1000 == 0)
            CHECK(same_file(fd, probe));
        close(fd);
        cuc_msg_destroy(r); /* closes the other */
    }
    stop_echo(a, pid);
    close(probe);
}

/* One message with nfds fds (split in frames of 253) there and back. */
static void big_fd_message(cuc_channel *a, int nfds)
{
    int files[3], i, fd;
    cuc_msg *m, *r;
    uint32_t tag;
    double t0 = now_ms();

    files[0] = null_fd;
    files[1] = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    files[2] = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(files[1] >= 0 && files[2] >= 0);
    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < nfds; i++)
        CHECK_OK(cuc_msg_add_fd(m, files[i % 3], (uint32_t)i));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(a, 30000, &r));
    CHECK(cuc_msg_record_count(r) == (size_t)nfds && cuc_msg_fd_count(r) == (size_t)nfds);
    for (i = 0; i < nfds; i++) {
        CHECK_OK(cuc_msg_take_fd(r, (size_t)i, &fd, &tag));
        CHECK(tag == (uint32_t)i && same_file(fd, files[i % 3]));
        close(fd);
    }
    cuc_msg_destroy(r);
    close(files[1]);
    close(files[2]);
    fprintf(stderr, "  %d fds there and back in %.1f ms\n", nfds, now_ms() - t0);
}

static void test_split(void)
{
    cuc_msg *m, *r;
    cuc_device *d;
    cuc_channel *a;
    pid_t pid;
    double t0;
    size_t i;

    a = start_echo(&pid);
    CHECK(nofile() >= 3 * 1500 + 100);
    big_fd_message(a, 1500);
    if (nofile() >= 3 * CUC_MSG_MAX_FDS + 100)
        big_fd_message(a, CUC_MSG_MAX_FDS);
    /* 2 MiB of bytes: 33 frames */
    t0 = now_ms();
    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < CUC_MSG_MAX_RECORDS; i++) {
        CHECK_OK(cuc_device_get((int)(i % (size_t)ndev), &d));
        CHECK_OK(cuc_msg_add_device(m, d));
    }
    CHECK_OK(cuc_channel_send(a, m));
    CHECK_OK(cuc_channel_recv(a, 30000, &r));
    CHECK(cuc_msg_record_count(r) == CUC_MSG_MAX_RECORDS);
    for (i = 0; i < CUC_MSG_MAX_RECORDS; i += 997) {
        cuc_device *got;
        CHECK_OK(cuc_device_get((int)(i % (size_t)ndev), &d));
        CHECK_OK(cuc_msg_get_device(r, i, &got));
        CHECK(got == d);
    }
    fprintf(stderr, "  %u records (%zu frames) there and back in %.1f ms\n",
            CUC_MSG_MAX_RECORDS, (size_t)(24 + 32 * (size_t)CUC_MSG_MAX_RECORDS) / 65536 + 1,
            now_ms() - t0);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
    stop_echo(a, pid);
}

struct sender {
    cuc_channel *ch;
    int n;
    uint32_t base; /* tags base, base+1, ... */
};

static void *send_many(void *arg)
{
    struct sender *s = arg;
    int i;

    for (i = 0; i < s->n; i++) {
        cuc_msg *m = device_msg(i);
        CHECK_OK(cuc_msg_add_fd(m, null_fd, s->base + (uint32_t)i));
        CHECK_OK(cuc_channel_send(s->ch, m));
        cuc_msg_destroy(m);
    }
    return NULL;
}

/* Two threads send while a third receives on the same channel: every
 * message arrives whole (frames never interleave), each sender's in its
 * order. */
static void test_threads(void)
{
    struct sender s1, s2;
    uint32_t next[2] = {0, 100000}, tag;
    pthread_t t1, t2;
    cuc_channel *a;
    cuc_msg *r;
    pid_t pid;
    int i, fd;

    a = start_echo(&pid);
    s1.ch = s2.ch = a;
    s1.n = s2.n = 2000;
    s1.base = 0;
    s2.base = 100000;
    CHECK(pthread_create(&t1, NULL, send_many, &s1) == 0);
    CHECK(pthread_create(&t2, NULL, send_many, &s2) == 0);
    for (i = 0; i < 4000; i++) {
        CHECK_OK(cuc_channel_recv(a, 10000, &r));
        CHECK(cuc_msg_record_count(r) == 2 && cuc_msg_fd_count(r) == 1);
        CHECK_OK(cuc_msg_take_fd(r, 1, &fd, &tag));
        close(fd);
        CHECK(tag == next[tag >= 100000]);
        next[tag >= 100000]++;
        cuc_msg_destroy(r);
    }
    CHECK(pthread_join(t1, NULL) == 0 && pthread_join(t2, NULL) == 0);
    CHECK(next[0] == 2000 && next[1] == 102000);
    CHECK_RC(cuc_channel_recv(a, 0, &r), CUC_E_TIMEOUT);
    stop_echo(a, pid);
}

static void test_listen_connect(void)
{
    char dir[] = "/tmp/cuc_chan_XXXXXX", path[256], file[256];
    const char *args[2];
    cuc_listener *l, *l2;
    cuc_channel *ch;
    struct stat st;
    cuc_msg *m, *r;
    pid_t pid, peer;
    uid_t uid;
    double t0;
    int fd;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/sock", dir);
    snprintf(file, sizeof(file), "%s/file", dir);

    /* nothing there yet */
    CHECK_RC(cuc_channel_connect(path, 0, &ch), CUC_E_NOT_FOUND);
    t0 = now_ms();
    CHECK_RC(cuc_channel_connect(path, 120, &ch), CUC_E_TIMEOUT);
    CHECK(now_ms() - t0 >= 110 && now_ms() - t0 < 2000);

    CHECK_OK(cuc_channel_listen(path, &l));
    CHECK(stat(path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0600);
    CHECK_RC(cuc_channel_listen(path, &l2), CUC_E_BUSY); /* a live one */
    /* whose accept sees the probe: a peer that closed at once */
    CHECK_OK(cuc_listener_accept(l, 1000, &ch));
    CHECK_RC(cuc_channel_recv(ch, 1000, &r), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    t0 = now_ms();
    CHECK_RC(cuc_listener_accept(l, 100, &ch), CUC_E_TIMEOUT);
    CHECK(now_ms() - t0 >= 90);

    args[0] = path;
    args[1] = NULL;
    pid = spawn_self("connect", args, NULL, -1);
    CHECK(pid > 0);
    CHECK_OK(cuc_listener_accept(l, 10000, &ch));
    CHECK_OK(cuc_channel_peer_pid(ch, &peer));
    CHECK_OK(cuc_channel_peer_uid(ch, &uid));
    CHECK(peer == pid && uid == geteuid());
    m = device_msg(3);
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 9));
    CHECK_OK(cuc_channel_send(ch, m));
    CHECK_OK(cuc_channel_recv(ch, 10000, &r));
    CHECK(cuc_msg_record_count(r) == 2 && cuc_msg_fd_count(r) == 1);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    cuc_listener_destroy(l);
    CHECK(lstat(path, &st) < 0 && errno == ENOENT); /* removed */

    /* a stale socket (its listener gone without unlinking) is replaced */
    {
        struct sockaddr_un a = {0};
        int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        a.sun_family = AF_UNIX;
        strcpy(a.sun_path, path);
        CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
        close(s);
    }
    CHECK_OK(cuc_channel_listen(path, &l));
    cuc_listener_destroy(l);

    /* a file that is not a socket is never touched */
    fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, "keep", 4) == 4);
    close(fd);
    CHECK_RC(cuc_channel_listen(file, &l), CUC_E_BUSY);
    CHECK(strstr(cuc_errmsg(), "not a socket") != NULL);
    CHECK(stat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 4);
    unlink(file);

    /* a path too long for sun_path */
    {
        char longp[200];
        memset(longp, 'a', sizeof(longp) - 1);
        longp[0] = '/';
        longp[sizeof(longp) - 1] = '\0';
        CHECK_RC(cuc_channel_listen(longp, &l), CUC_E_INVALID);
        CHECK_RC(cuc_channel_connect(longp, 0, &ch), CUC_E_INVALID);
    }
    CHECK(rmdir(dir) == 0);
}

/* A fork child's copy of a listener is inert: its accept would take the
 * parent's peers (CUC_E_FORKED), and its destroy closes only the child's
 * fd, leaving the parent listening at the file (no CUDA in the child). */
static void test_listener_fork_child(void)
{
    char dir[] = "/tmp/cuc_chan_XXXXXX", path[256];
    cuc_channel *ch, *peer;
    cuc_listener *l;
    struct stat st;
    int status;
    pid_t pid;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/sock", dir);
    CHECK_OK(cuc_channel_listen(path, &l));
    CHECK(cuc_listener_fd(l) >= 0 && cuc_listener_fd(NULL) == CUC_E_INVALID);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int rc = cuc_listener_accept(l, 0, &ch);
        int named = strstr(cuc_errmsg(), "inherited by this process") != NULL;

        cuc_listener_destroy(l);
        _exit(rc == CUC_E_FORKED && named && lstat(path, &st) == 0 ? 0 : 1);
    }
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)); /* the parent's file stays */
    CHECK_OK(cuc_channel_connect(path, 1000, &peer));
    CHECK_OK(cuc_listener_accept(l, 1000, &ch)); /* and it still listens */
    cuc_channel_destroy(ch);
    cuc_channel_destroy(peer);
    cuc_listener_destroy(l);
    CHECK(lstat(path, &st) < 0 && errno == ENOENT);
    CHECK(rmdir(dir) == 0);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return child_main(argv[2], argc - 3, argv + 3);
    raise_nofile();
    CHECK_OK(cuc_device_count(&ndev));
    FD_BASELINE();
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(null_fd >= 0);
    test_pair_in_process();
    test_timeout();
    test_from_fd_checks();
    test_echo_10000();
    test_split();
    test_threads();
    test_listen_connect();
    test_listener_fork_child();
    close(null_fd);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
