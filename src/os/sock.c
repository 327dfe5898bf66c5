/* sendmsg / recvmsg with fds, poll, peer credentials. */
#include "os/sock.h"
#include "os/clock.h"
#include "os/fd.h"
#include "base/error.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* Room for a full frame's fds and, beside them, the credentials the
 * kernel adds to every datagram on a socket with SO_PASSCRED set (without
 * it a legal 253-fd frame arrives cut short). */
union fd_cmsg {
    struct cmsghdr h;
    char buf[CMSG_SPACE(CUC__SOCK_MAX_FDS * sizeof(int)) +
             CMSG_SPACE(sizeof(struct ucred))];
};

int cuc__poll_until(int fd, short events, int64_t deadline)
{
    struct pollfd p = {fd, events, 0};
    int n;

    for (;;) {
        int wait = cuc__remaining(deadline);
        if (wait == 0)
            return CUC_E_TIMEOUT;
        n = poll(&p, 1, wait);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return cuc__errno_err(errno, "poll on socket %d", fd);
    }
}

static int send_failed(int fd, int err, size_t total)
{
    switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ENOTCONN:
        return cuc__seterr(CUC_E_PEER_CLOSED, "the peer closed the channel "
                           "(sendmsg: %s)", strerror(err));
    case ETOOMANYREFS:
        return cuc__seterr(CUC_E_LIMIT, "the kernel refuses more fds in flight "
                           "on Unix sockets for this user (sendmsg: ETOOMANYREFS; "
                           "the limit is RLIMIT_NOFILE): let the peer receive, "
                           "or raise the limit");
    default:
        return cuc__errno_err(err, "sendmsg of a %zu-byte frame on channel "
                              "socket %d", total, fd);
    }
}

static int send_all(int fd, struct msghdr *mh, size_t total)
{
    int rc;

    for (;;) {
        ssize_t n = sendmsg(fd, mh, MSG_NOSIGNAL);

        if (n >= 0) {
            if ((size_t)n != total)
                return cuc__seterr(CUC_E_IO, "sendmsg sent %zd of a %zu-byte frame",
                                   n, total);
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return send_failed(fd, errno, total);
        rc = cuc__poll_until(fd, POLLOUT, -1);
        if (rc)
            return rc;
    }
}

int cuc__sock_send(int fd, const void *hdr, size_t hlen, const void *data, size_t len,
                   const int *fds, size_t nfds)
{
    struct iovec iov[2] = {{(void *)hdr, hlen}, {(void *)data, len}};
    struct msghdr mh;
    union fd_cmsg cm;

    if (nfds > CUC__SOCK_MAX_FDS)
        return cuc__seterr(CUC_E_INVALID, "%zu fds in one datagram: at most %u",
                           nfds, CUC__SOCK_MAX_FDS);
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    if (nfds) {
        memset(&cm, 0, sizeof(cm));
        mh.msg_control = cm.buf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        cm.h.cmsg_level = SOL_SOCKET;
        cm.h.cmsg_type = SCM_RIGHTS;
        cm.h.cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(&cm.h), fds, nfds * sizeof(int));
    }
    return send_all(fd, &mh, hlen + len);
}

/* Moves every fd of the control data into fds (at most CUC__SOCK_MAX_FDS;
 * any beyond are closed at once). Returns how many were stored; *over is
 * set if some had to be closed. */
static size_t take_fds(struct msghdr *mh, int *fds, int *over)
{
    struct cmsghdr *c;
    size_t k = 0;

    *over = 0;
    for (c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        size_t n, i;
        int *p;
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        p = (int *)CMSG_DATA(c);
        for (i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, p + i, sizeof(fd));
            if (k < CUC__SOCK_MAX_FDS) {
                fds[k++] = fd;
            } else {
                cuc__close_fds(&fd, 1);
                *over = 1;
            }
        }
    }
    return k;
}

/* recvmsg without waiting; errno is recvmsg's. */
static ssize_t recv_now(int fd, struct msghdr *mh, struct iovec *iov, union fd_cmsg *cm)
{
    memset(mh, 0, sizeof(*mh));
    mh->msg_iov = iov;
    mh->msg_iovlen = 1;
    mh->msg_control = cm->buf;
    mh->msg_controllen = sizeof(cm->buf);
    return recvmsg(fd, mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
}

/* recvmsg returned 0 bytes and no fds: end of file, or a 0-byte datagram
 * from a peer still connected (a cucore peer never sends one, and taking
 * it for a close would end leases the peer still maps). */
static int empty_datagram(int fd)
{
    struct pollfd p = {fd, POLLRDHUP, 0};

    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP)))
        return CUC_E_PEER_CLOSED;
    return cuc__seterr(CUC_E_BADMSG, "the peer sent a 0-byte datagram on channel "
                       "socket %d while still connected: a cucore peer never does "
                       "(protocol error); the channel is unusable", fd);
}

int cuc__sock_recv(int fd, void *buf, size_t cap, int64_t deadline, int *fds,
                   size_t *len, size_t *nfds)
{
    struct iovec iov = {buf, cap};
    int reset = 0, over, rc;
    union fd_cmsg cm;
    struct msghdr mh;
    ssize_t n;
    size_t k;

    for (;;) {
        n = recv_now(fd, &mh, &iov, &cm);
        if (n >= 0)
            break;
        if (errno == EINTR)
            continue;
        if (errno == ECONNRESET) {
            /* The kernel reports the reset before the datagrams still
             * queued for us: read those first, EOF follows them. */
            reset = 1;
            continue;
        }
        if (errno != EAGAIN)
            return cuc__errno_err(errno, "recvmsg on channel socket %d", fd);
        if (reset)
            return CUC_E_PEER_CLOSED;
        rc = cuc__poll_until(fd, POLLIN, deadline);
        if (rc)
            return rc;
    }
    k = take_fds(&mh, fds, &over);
    if (over) {
        cuc__close_fds(fds, k);
        return cuc__seterr(CUC_E_BADMSG, "the peer sent more fds with one frame "
                           "than the %u a frame may carry; the %zu that arrived "
                           "were closed", CUC__SOCK_MAX_FDS, k);
    }
    if (mh.msg_flags & MSG_TRUNC) {
        cuc__close_fds(fds, k);
        return cuc__seterr(CUC_E_BADMSG, "the peer sent a frame larger than %zu "
                           "bytes", cap);
    }
    if (mh.msg_flags & MSG_CTRUNC) {
        /* The buffer holds any frame's control data, so the kernel cut it
         * because it could not install the fds here (RLIMIT_NOFILE): the
         * bytes are whole, the caller decides what the frame needed. */
        cuc__close_fds(fds, k);
        *len = (size_t)n;
        return CUC_E_LIMIT;
    }
    if (n == 0 && k == 0)
        return empty_datagram(fd);
    *len = (size_t)n;
    *nfds = k;
    return 0;
}

int cuc__sock_peer(int fd, pid_t *pid, uid_t *uid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return cuc__errno_err(errno, "getsockopt(SO_PEERCRED) on fd %d", fd);
    *pid = cred.pid;
    *uid = cred.uid;
    return 0;
}

int cuc__sock_check_seqpacket(int fd)
{
    int type = 0, domain = 0;
    socklen_t len = sizeof(type);

    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
        return cuc__errno_err(errno, "fd %d is not a socket", fd);
    len = sizeof(domain);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
        return cuc__errno_err(errno, "getsockopt(SO_DOMAIN) on fd %d", fd);
    if (domain != AF_UNIX || type != SOCK_SEQPACKET)
        return cuc__seterr(CUC_E_INVALID, "fd %d is not an AF_UNIX SOCK_SEQPACKET "
                           "socket (domain %d, type %d): a channel needs one end of "
                           "cuc_channel_pair() or cuc_channel_connect()", fd, domain,
                           type);
    return 0;
}
