/* Peers in another user namespace without a uid map (`unshare --user`,
 * util-linux): there every uid from outside reads as the overflow uid
 * (/proc/sys/kernel/overflowuid), and so does the process's own, so a
 * plain "same uid" compare would let anyone in. Both ends refuse a peer
 * whose uid reads so, with CUC_E_PERMISSION saying why:
 *  - connect: a child in the namespace connects to our listener; its
 *    connect refuses us (before, the listener's uid and its own both read
 *    as the overflow uid, and it was accepted);
 *  - accept: a child in the namespace listens, we connect from outside
 *    (root, when the suite runs as root); its accept refuses us (before:
 *    accepted), and we see the close.
 * Skipped (77) where `unshare --user` is refused (no user namespaces for
 * this user, seccomp, no unshare). */
#include <sys/stat.h>

#include "check.h"
#include "cucore.h"
#include "os/proc.h"

#define WAIT_MS 10000

/* In the namespace: this process's uid reads as the overflow uid. */
static void check_unmapped(void)
{
    if (geteuid() != cuc__overflow_uid()) {
        fprintf(stderr, "child: euid %lu, not the overflow uid %lu: not in an unmapped "
                "user namespace\n", (unsigned long)geteuid(),
                (unsigned long)cuc__overflow_uid());
        exit(5);
    }
}

static int child_connect(const char *path)
{
    cuc_channel *ch;
    int rc;

    check_unmapped();
    rc = cuc_channel_connect(path, WAIT_MS, &ch);
    if (rc == 0)
        cuc_channel_destroy(ch);
    if (rc != CUC_E_PERMISSION || !strstr(cuc_errmsg(), "overflow uid")) {
        fprintf(stderr, "connect from the namespace: %s: %s\n", cuc_errname(rc),
                cuc_errmsg());
        return 4;
    }
    return 0;
}

static int child_listen(const char *path)
{
    cuc_listener *l;
    cuc_channel *ch;
    int rc;

    check_unmapped();
    CHECK_OK(cuc_channel_listen(path, &l));
    rc = cuc_listener_accept(l, WAIT_MS, &ch);
    if (rc == 0)
        cuc_channel_destroy(ch);
    cuc_listener_destroy(l);
    if (rc != CUC_E_PERMISSION || !strstr(cuc_errmsg(), "overflow uid") ||
        !strstr(cuc_errmsg(), "user namespace")) {
        fprintf(stderr, "accept in the namespace: %s: %s\n", cuc_errname(rc), cuc_errmsg());
        return 4;
    }
    return 0;
}

/* `unshare --user ARGV...`: this binary as `--child ROLE PATH`. */
static pid_t spawn_unshared(const char *role, const char *path)
{
    const char *argv[] = {"unshare", "--user", test_self_path(), "--child", role, path,
                          NULL};
    pid_t pid = fork();

    if (pid == 0) {
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* SKIPs unless `unshare --user` runs a program here. */
static void need_unshare(void)
{
    const char *argv[] = {"unshare", "--user", "true", NULL};
    pid_t pid = fork();
    int st;

    CHECK(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    st = wait_child(pid);
    if (st == 127)
        SKIP("no unshare program (util-linux)");
    if (st != 0)
        SKIP("`unshare --user true` exited %d: user namespaces are refused here", st);
}

/* A child in the namespace connects to our listener. Its uid here is
 * its real one, ours (the kernel maps it back), so we accept; it is the
 * child that must refuse. */
static void test_connect_from_namespace(const char *path)
{
    cuc_listener *l;
    cuc_channel *ch;
    pid_t pid;

    CHECK_OK(cuc_channel_listen(path, &l));
    pid = spawn_unshared("connect", path);
    CHECK(pid > 0);
    CHECK_OK(cuc_listener_accept(l, WAIT_MS, &ch));
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    cuc_listener_destroy(l);
}

/* A listener in the namespace; we connect from outside. */
static void test_accept_in_namespace(const char *path)
{
    cuc_channel *ch;
    cuc_msg *m;
    pid_t pid;

    pid = spawn_unshared("listen", path);
    CHECK(pid > 0);
    CHECK_OK(cuc_channel_connect(path, WAIT_MS, &ch));
    CHECK_RC(cuc_channel_recv(ch, WAIT_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/cuc_userns_XXXXXX", path[256];

    if (argc == 4 && !strcmp(argv[1], "--child"))
        return !strcmp(argv[2], "connect")  ? child_connect(argv[3])
               : !strcmp(argv[2], "listen") ? child_listen(argv[3])
                                            : 2;
    need_unshare();
    FD_BASELINE();
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/sock", dir);
    test_connect_from_namespace(path);
    test_accept_in_namespace(path);
    unlink(path);
    CHECK(rmdir(dir) == 0);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
