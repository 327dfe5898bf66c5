/* A peer with another uid is turned away at accept (SO_PEERCRED), even when
 * the socket file's mode would let it in; the peer learns nothing but a
 * closed connection. Needs root (to drop a child to nobody). */
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>

#include "check.h"
#include "cucore.h"
#include "device/device.h"

/* Runs as nobody: connects, expecting the listener (root) to be refused on
 * this side too; reports its uid. */
static int child_main(const char *role, int argc, char **argv)
{
    cuc_channel *ch;
    int rc;

    if (strcmp(role, "connect") || argc != 2)
        return 2;
    if (getuid() != (uid_t)atol(argv[1]) || geteuid() != (uid_t)atol(argv[1]))
        return 3;
    rc = cuc_channel_connect(argv[0], 5000, &ch);
    if (rc != CUC_E_PERMISSION) {
        fprintf(stderr, "nobody's connect: %s: %s\n", cuc_errname(rc), cuc_errmsg());
        if (rc == 0)
            cuc_channel_destroy(ch);
        return 4;
    }
    return 0;
}

/* fork, drop to uid/gid, then exec this binary as `--child connect PATH UID`. */
static pid_t spawn_as(uid_t uid, gid_t gid, const char *path)
{
    char uidbuf[32];
    const char *argv[6];
    pid_t pid;

    snprintf(uidbuf, sizeof(uidbuf), "%lu", (unsigned long)uid);
    argv[0] = test_self_path();
    argv[1] = "--child";
    argv[2] = "connect";
    argv[3] = path;
    argv[4] = uidbuf;
    argv[5] = NULL;
    pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
            _exit(125);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/cuc_peercred_XXXXXX", path[256];
    struct passwd *pw;
    cuc_listener *l;
    cuc_channel *ch;
    char uidtext[64];
    pid_t pid;
    int rc;

    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return child_main(argv[2], argc - 3, argv + 3);
    if (geteuid() != 0)
        SKIP("not root: this test drops a child to user nobody, which needs root");
    pw = getpwnam("nobody");
    if (!pw)
        SKIP("no user nobody on this system");
    FD_BASELINE();
    CHECK(mkdtemp(dir) != NULL);
    CHECK(chmod(dir, 0711) == 0); /* nobody may reach the socket... */
    snprintf(path, sizeof(path), "%s/sock", dir);
    CHECK_OK(cuc_channel_listen(path, &l));
    CHECK(chmod(path, 0666) == 0); /* ...and connect: only the uid check is left */

    pid = spawn_as(pw->pw_uid, pw->pw_gid, path);
    CHECK(pid > 0);
    rc = cuc_listener_accept(l, 10000, &ch);
    if (rc == 0)
        cuc_channel_destroy(ch);
    CHECK_RC(rc, CUC_E_PERMISSION);
    snprintf(uidtext, sizeof(uidtext), "uid %lu", (unsigned long)pw->pw_uid);
    CHECK(strstr(cuc_errmsg(), uidtext) != NULL);
    CHECK(wait_child(pid) == 0);
    /* the listener still serves its own uid afterwards */
    {
        cuc_channel *c2;
        CHECK_OK(cuc_channel_connect(path, 1000, &c2));
        CHECK_OK(cuc_listener_accept(l, 1000, &ch));
        cuc_channel_destroy(c2);
        cuc_channel_destroy(ch);
    }
    cuc_listener_destroy(l);
    CHECK(rmdir(dir) == 0);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
