/* Frames on the socket: sendmsg with SCM_RIGHTS, and a receive that checks
 * every frame and closes every fd it refuses (after systemd's recvmsg_safe
 * and libwayland's connection.c: MSG_CMSG_CLOEXEC, MSG_CTRUNC means fds were
 * lost, so the frame is refused and what did arrive is closed). */
#include "internal.h"
#include "channel_impl.h"
#include "wire.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

union fd_cmsg {
    struct cmsghdr h;
    char buf[CMSG_SPACE(CUC__FRAME_MAX_FDS * sizeof(int))];
};

/* ---- send ---- */

static int send_one(int fd, struct msghdr *mh, size_t total)
{
    for (;;) {
        ssize_t n = sendmsg(fd, mh, MSG_NOSIGNAL);
        struct pollfd p = {fd, POLLOUT, 0};

        if (n >= 0) {
            if ((size_t)n != total)
                return cuc__seterr(CUC_E_IO, "sendmsg sent %zd of a %zu-byte frame",
                                   n, total);
            return 0;
        }
        switch (errno) {
        case EINTR:
            continue;
        case EAGAIN:
            if (poll(&p, 1, -1) < 0 && errno != EINTR)
                return cuc__errno_err(errno, "poll on channel socket %d", fd);
            continue;
        case EPIPE:
        case ECONNRESET:
        case ENOTCONN:
            return cuc__seterr(CUC_E_PEER_CLOSED, "the peer closed the channel "
                               "(sendmsg: %s)", strerror(errno));
        case ETOOMANYREFS:
            return cuc__seterr(CUC_E_LIMIT, "the kernel refuses more fds in flight "
                               "on Unix sockets for this user (sendmsg: ETOOMANYREFS; "
                               "the limit is RLIMIT_NOFILE): let the peer receive, "
                               "or raise the limit");
        default:
            return cuc__errno_err(errno, "sendmsg of a %zu-byte frame on channel "
                                  "socket %d", total, fd);
        }
    }
}

static int send_part(cuc_channel *ch, const uint8_t *bytes, uint32_t len,
                     const int *fds, uint32_t nfds, uint32_t part, uint32_t nparts)
{
    uint8_t hdr[CUC__FRAME_HDR];
    struct cuc__frame f;
    union fd_cmsg cm;
    struct iovec iov[2];
    struct msghdr mh;
    uint32_t off, plen, fd_off, pnfds;

    cuc__frame_slice(len, nfds, part, &off, &plen, &fd_off, &pnfds);
    f.seq = ch->send_seq;
    f.part = part;
    f.nparts = nparts;
    f.len = plen;
    f.nfds = pnfds;
    f.msg_len = len;
    f.msg_nfds = nfds;
    cuc__frame_write(hdr, &f);
    iov[0].iov_base = hdr;
    iov[0].iov_len = sizeof(hdr);
    iov[1].iov_base = (void *)(bytes + off);
    iov[1].iov_len = plen;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    if (pnfds) {
        memset(&cm, 0, sizeof(cm));
        mh.msg_control = cm.buf;
        mh.msg_controllen = CMSG_SPACE(pnfds * sizeof(int));
        cm.h.cmsg_level = SOL_SOCKET;
        cm.h.cmsg_type = SCM_RIGHTS;
        cm.h.cmsg_len = CMSG_LEN(pnfds * sizeof(int));
        memcpy(CMSG_DATA(&cm.h), fds + fd_off, pnfds * sizeof(int));
    }
    return send_one(ch->fd, &mh, sizeof(hdr) + plen);
}

int cuc__channel_send_frames(cuc_channel *ch, const cuc_msg *m)
{
    const int *fds;
    size_t len, nfds;
    uint32_t part, nparts;
    uint8_t *bytes;
    int rc;

    rc = cuc__msg_encode(m, &bytes, &len, &fds, &nfds);
    if (rc)
        return rc;
    nparts = cuc__frame_parts((uint32_t)len, (uint32_t)nfds);
    pthread_mutex_lock(&ch->send_lock);
    rc = cuc__sticky_get(&ch->send_err);
    if (!rc && ch->fd < 0)
        rc = cuc__seterr(CUC_E_INVALID, "the channel was closed by this process");
    for (part = 0; !rc && part < nparts; part++) {
        rc = send_part(ch, bytes, (uint32_t)len, fds, (uint32_t)nfds, part, nparts);
        if (!rc)
            ch->send_seq++;
        else if (part > 0 || rc == CUC_E_PEER_CLOSED)
            /* the peer holds part of a message: nothing can follow it */
            cuc__sticky_set(&ch->send_err, rc);
    }
    pthread_mutex_unlock(&ch->send_lock);
    free(bytes);
    return rc;
}

/* ---- receive ---- */

/* Moves every fd of the control data into fds (at most
 * CUC__FRAME_MAX_FDS; any beyond are closed at once). Returns how many
 * were stored; *over is set if some had to be closed. */
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
            if (k < CUC__FRAME_MAX_FDS) {
                fds[k++] = fd;
            } else {
                close(fd);
                *over = 1;
            }
        }
    }
    return k;
}

static int peer_gone(const cuc_channel *ch)
{
    const struct cuc__reasm *r = &ch->rx;

    if (cuc__reasm_partial(r))
        return cuc__seterr(CUC_E_PEER_CLOSED, "the peer (pid %ld) closed the channel "
                           "in the middle of a message: %u of its %u frames "
                           "arrived", (long)ch->peer_pid, r->next_part,
                           r->first.nparts);
    return cuc__seterr(CUC_E_PEER_CLOSED, "the peer (pid %ld) closed the channel",
                       (long)ch->peer_pid);
}

static int timed_out(const cuc_channel *ch)
{
    const struct cuc__reasm *r = &ch->rx;

    if (cuc__reasm_partial(r))
        return cuc__seterr(CUC_E_TIMEOUT, "timed out with %u of the %u frames of a "
                           "message from the peer (pid %ld) received; the next "
                           "receive goes on with it", r->next_part,
                           r->first.nparts, (long)ch->peer_pid);
    return cuc__seterr(CUC_E_TIMEOUT, "timed out: no message from the peer (pid %ld)",
                       (long)ch->peer_pid);
}

/* One datagram into ch->rxbuf, parsed; its fds in fds[0..*nfds). */
static int read_frame(cuc_channel *ch, int64_t deadline, struct cuc__frame *f,
                      int *fds, size_t *nfds)
{
    struct iovec iov = {ch->rxbuf, CUC__FRAME_HDR + CUC__FRAME_MAX_DATA};
    int reset = 0, over, rc;
    union fd_cmsg cm;
    struct msghdr mh;
    ssize_t n;
    size_t k;

    for (;;) {
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cm.buf;
        mh.msg_controllen = sizeof(cm.buf);
        n = recvmsg(ch->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n >= 0)
            break;
        if (errno == EINTR)
            continue;
        if (errno == ECONNRESET) {
            /* The kernel reports the reset before the frames still queued
             * for us: read those first, EOF follows them. */
            reset = 1;
            continue;
        }
        if (errno != EAGAIN)
            return cuc__errno_err(errno, "recvmsg on channel socket %d", ch->fd);
        if (reset)
            return peer_gone(ch);
        rc = cuc__poll_until(ch->fd, POLLIN, deadline);
        if (rc)
            return rc;
    }
    k = take_fds(&mh, fds, &over);
    if ((mh.msg_flags & MSG_CTRUNC) || over) {
        cuc__close_fds(fds, k);
        return cuc__seterr(CUC_E_BADMSG, "the peer sent more fds with one frame "
                           "than the %u a frame may carry (control data truncated); "
                           "the %zu that arrived were closed", CUC__FRAME_MAX_FDS, k);
    }
    if (mh.msg_flags & MSG_TRUNC) {
        cuc__close_fds(fds, k);
        return cuc__seterr(CUC_E_BADMSG, "the peer sent a frame larger than %u "
                           "bytes", CUC__FRAME_HDR + CUC__FRAME_MAX_DATA);
    }
    if (n == 0 && k == 0)
        return peer_gone(ch);
    rc = cuc__frame_parse(ch->rxbuf, (size_t)n, f);
    if (rc) {
        cuc__close_fds(fds, k);
        return rc;
    }
    *nfds = k;
    return 0;
}

int cuc__channel_read_msg(cuc_channel *ch, int64_t deadline, cuc_msg **m)
{
    int fds[CUC__FRAME_MAX_FDS];
    struct cuc__frame f;
    cuc_msg *msg;
    size_t nfds = 0;
    int rc, drc;

    rc = cuc__sticky_get(&ch->recv_err);
    while (!rc) {
        rc = read_frame(ch, deadline, &f, fds, &nfds);
        if (rc == CUC_E_TIMEOUT)
            return timed_out(ch);
        if (!rc)
            rc = cuc__reasm_push(&ch->rx, &f, ch->rxbuf + CUC__FRAME_HDR, fds, nfds,
                                 &msg, &drc);
        if (rc)
            break;
        if (msg) {
            *m = msg;
            return 0;
        }
        if (drc)
            return drc; /* a sound frame with a bad message: dropped */
    }
    if (!ch->recv_err.status) {
        cuc__sticky_set(&ch->recv_err, rc);
        cuc__reasm_reset(&ch->rx);
    }
    return rc;
}
