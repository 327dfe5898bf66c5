/* Channels by filesystem path: listen, accept and connect (same-uid
 * peers only, checked in one place: check_peer). */
#include "channel/channel.h"
#include "base/error.h"
#include "os/clock.h"
#include "os/proc.h"
#include "os/sock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct cuc_listener {
    int fd;
    pid_t owner; /* the process that listens; a fork child's copy is inert */
    dev_t dev;
    ino_t ino;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

static int make_addr(const char *path, struct sockaddr_un *a)
{
    size_t n;

    if (!path)
        return cuc__seterr(CUC_E_INVALID, "socket path is NULL");
    n = strlen(path);
    if (n == 0 || n >= sizeof(a->sun_path))
        return cuc__seterr(CUC_E_INVALID, "socket path \"%.64s%s\" is %zu bytes; a "
                           "Unix socket path is 1..%zu bytes", path, n > 64 ? "..." : "",
                           n, sizeof(a->sun_path) - 1);
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    memcpy(a->sun_path, path, n + 1);
    return 0;
}

/* Something exists at path: a stale socket is removed, anything else is
 * left alone and refused. */
static int clear_stale(const char *path, const struct sockaddr_un *a)
{
    struct stat st;
    int fd, rc, err;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : cuc__errno_err(errno, "lstat(\"%s\")", path);
    if (!S_ISSOCK(st.st_mode))
        return cuc__seterr(CUC_E_BUSY, "\"%s\" exists and is not a socket: refusing "
                           "to replace it; choose another path", path);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return cuc__errno_err(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
    rc = connect(fd, (const struct sockaddr *)a, sizeof(*a));
    err = errno;
    close(fd);
    if (rc == 0 || err == EAGAIN || err == EPROTOTYPE)
        return cuc__seterr(CUC_E_BUSY, "another process listens at \"%s\"", path);
    if (err == ECONNREFUSED) {
        if (unlink(path) < 0 && errno != ENOENT)
            return cuc__errno_err(errno, "cannot remove the stale socket \"%s\"", path);
        return 0;
    }
    return cuc__errno_err(err, "probing the socket \"%s\"", path);
}

int cuc_channel_listen(const char *path, cuc_listener **out)
{
    struct sockaddr_un a;
    cuc_listener *l;
    struct stat st;
    int rc, fd;

    if (!out)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_listen: l is NULL");
    rc = make_addr(path, &a);
    if (!rc)
        rc = clear_stale(path, &a);
    if (rc)
        return rc;
    l = calloc(1, sizeof(*l));
    if (!l)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a listener");
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = cuc__errno_err(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
        goto free_l;
    }
    if (bind(fd, (const struct sockaddr *)&a, sizeof(a)) < 0) {
        rc = errno == EADDRINUSE
                 ? cuc__seterr(CUC_E_BUSY, "\"%s\" appeared while cucore was binding "
                               "it: another process listens there", path)
                 : cuc__errno_err(errno, "bind(\"%s\")", path);
        goto close_fd;
    }
    /* Nobody can connect before listen(), so the mode is 0600 before the
     * first peer can try, whatever the umask was. */
    if (chmod(path, 0600) < 0 || stat(path, &st) < 0) {
        rc = cuc__errno_err(errno, "chmod(\"%s\", 0600)", path);
        goto unlink_path;
    }
    if (listen(fd, 64) < 0) {
        rc = cuc__errno_err(errno, "listen(\"%s\")", path);
        goto unlink_path;
    }
    l->fd = fd;
    l->owner = cuc__pid();
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    memcpy(l->path, a.sun_path, sizeof(l->path));
    *out = l;
    return 0;
unlink_path:
    unlink(path);
close_fd:
    close(fd);
free_l:
    free(l);
    return rc;
}

/* 0 if the peer of fd, a connected socket to or from path, may talk to
 * this process: its uid (SO_PEERCRED) is this process's effective uid,
 * and not the overflow uid. A uid that has no mapping in this process's
 * user namespace reads as the overflow uid, whoever it is outside (root
 * included), and in a namespace without a uid map so does this process's
 * own: that uid names nobody for sure, and matches nothing. accepting:
 * this process is the listener. Otherwise CUC_E_PERMISSION, fd closed. */
static int check_peer(int fd, const char *path, int accepting)
{
    uid_t self = geteuid(), over = cuc__overflow_uid(), uid;
    const char *who = accepting ? "a peer that connected to" : "the listener at";
    pid_t pid;
    int rc = cuc__sock_peer(fd, &pid, &uid);

    if (!rc && uid == over)
        rc = cuc__seterr(CUC_E_PERMISSION, "%s \"%s\" (pid %ld) has uid %lu here, the "
                         "overflow uid (/proc/sys/kernel/overflowuid): it runs in another "
                         "user namespace without a uid map for it (or this process does: "
                         "its own uid reads %lu), so who it is cannot be told: refused",
                         who, path, (long)pid, (unsigned long)uid, (unsigned long)self);
    else if (!rc && uid != self && accepting)
        rc = cuc__seterr(CUC_E_PERMISSION, "a peer (pid %ld, uid %lu) connected to "
                         "\"%s\", but only uid %lu may: it was disconnected",
                         (long)pid, (unsigned long)uid, path, (unsigned long)self);
    else if (!rc && uid != self)
        rc = cuc__seterr(CUC_E_PERMISSION, "the listener at \"%s\" runs as uid %lu "
                         "(pid %ld), not as this process's uid %lu: refused", path,
                         (unsigned long)uid, (long)pid, (unsigned long)self);
    if (rc)
        close(fd);
    return rc;
}

int cuc_listener_accept(cuc_listener *l, int timeout_ms, cuc_channel **ch)
{
    int64_t deadline = cuc__deadline(timeout_ms);
    int fd, rc;

    if (!l || !ch || timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "cuc_listener_accept: %s",
                           l && ch ? "timeout below -1" : "NULL argument");
    if (cuc__check_owner(l->owner, "cuc_listener_accept", "listener"))
        return CUC_E_FORKED; /* its peers are the parent's */
    for (;;) {
        fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            break;
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno != EAGAIN)
            return cuc__errno_err(errno, "accept on \"%s\"", l->path);
        rc = cuc__poll_until(l->fd, POLLIN, deadline);
        if (rc == CUC_E_TIMEOUT)
            return cuc__seterr(rc, "no peer connected to \"%s\" within %d ms",
                               l->path, timeout_ms);
        if (rc)
            return rc;
    }
    rc = check_peer(fd, l->path, 1);
    return rc ? rc : cuc__channel_wrap(fd, ch);
}

int cuc_listener_fd(const cuc_listener *l)
{
    if (!l)
        return cuc__seterr(CUC_E_INVALID, "cuc_listener_fd: NULL listener");
    return l->fd;
}

void cuc_listener_destroy(cuc_listener *l)
{
    struct stat st;

    if (!l)
        return;
    /* remove the file only if it is still ours, not a successor's, nor
     * the parent's when a fork child frees its copy */
    if (l->owner == cuc__pid() && lstat(l->path, &st) == 0 && st.st_dev == l->dev &&
        st.st_ino == l->ino)
        unlink(l->path);
    close(l->fd);
    free(l);
}

static int connect_fail(const char *path, int timeout_ms, int err)
{
    if (err == EACCES || err == EPERM)
        return cuc__errno_err(err, "not allowed to connect to \"%s\" (the socket "
                              "belongs to another user?)", path);
    if (err == EAGAIN)
        return cuc__seterr(timeout_ms ? CUC_E_TIMEOUT : CUC_E_BUSY, "the listener "
                           "at \"%s\" has a full backlog%s", path,
                           timeout_ms ? " for the whole timeout" : "");
    if (timeout_ms)
        return cuc__seterr(CUC_E_TIMEOUT, "nothing listened at \"%s\" within %d ms "
                           "(connect: %s)", path, timeout_ms, strerror(err));
    return cuc__seterr(CUC_E_NOT_FOUND, "nothing listens at \"%s\" (connect: %s)",
                       path, strerror(err));
}

static int connect_once(const struct sockaddr_un *a, int *out)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int err;

    if (fd < 0)
        return errno;
    if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0) {
        *out = fd;
        return 0;
    }
    err = errno;
    close(fd);
    return err;
}

int cuc_channel_connect(const char *path, int timeout_ms, cuc_channel **ch)
{
    int64_t deadline = cuc__deadline(timeout_ms);
    struct sockaddr_un a;
    int fd = -1, err, rc;

    if (!ch || timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_connect: %s",
                           ch ? "timeout below -1" : "ch is NULL");
    rc = make_addr(path, &a);
    if (rc)
        return rc;
    for (;;) {
        err = connect_once(&a, &fd);
        if (!err)
            break;
        if (err == EINTR)
            continue;
        if ((err != ENOENT && err != ECONNREFUSED && err != EAGAIN) ||
            cuc__remaining(deadline) == 0)
            return connect_fail(path, timeout_ms, err);
        cuc__nap(10, deadline);
    }
    /* the channel blocks on send; receives use MSG_DONTWAIT */
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
        rc = cuc__errno_err(errno, "fcntl on the socket to \"%s\"", path);
        close(fd);
        return rc;
    }
    rc = check_peer(fd, path, 0);
    return rc ? rc : cuc__channel_wrap(fd, ch);
}
