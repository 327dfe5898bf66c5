/* Channels: creation over a socket, the message queue between pump and
 * recv, send and receive entry points.
 *
 * SOCK_SEQPACKET rather than SOCK_STREAM: the kernel keeps frame
 * boundaries, and the fds of one sendmsg arrive with exactly that frame's
 * bytes. With a byte stream, fds attach to whichever read covers the first
 * byte of their sendmsg, a peer can stop half-way through a header, and
 * every read has to be reassembled; here a frame is all or nothing, and a
 * truncated or oversized one is flagged (MSG_TRUNC) instead of shifting
 * every frame after it. */
#include "internal.h"
#include "channel_impl.h"
#include "wire.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int64_t cuc__deadline(int timeout_ms)
{
    struct timespec ts;

    if (timeout_ms < 0)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
}

int cuc__remaining(int64_t deadline)
{
    struct timespec ts;
    int64_t now, left;

    if (deadline < 0)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    left = deadline - now;
    if (left <= 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

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

int cuc__sticky_set(struct cuc__sticky *s, int status)
{
    s->status = status;
    snprintf(s->msg, sizeof(s->msg), "%s", cuc_errmsg());
    return status;
}

int cuc__sticky_get(const struct cuc__sticky *s)
{
    if (!s->status)
        return 0;
    return cuc__restore_err(s->status, 0, s->msg);
}

static int check_socket(int fd)
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

int cuc__channel_wrap(int fd, cuc_channel **out)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    cuc_channel *ch;
    int rc;

    rc = check_socket(fd);
    if (rc)
        goto close_fd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        rc = cuc__errno_err(errno, "getsockopt(SO_PEERCRED) on fd %d", fd);
        goto close_fd;
    }
    ch = calloc(1, sizeof(*ch));
    if (!ch) {
        rc = cuc__seterr(CUC_E_NOMEM, "out of memory for a channel");
        goto close_fd;
    }
    ch->rxbuf = malloc(CUC__FRAME_HDR + CUC__FRAME_MAX_DATA);
    if (!ch->rxbuf) {
        rc = cuc__seterr(CUC_E_NOMEM, "out of memory for a channel's frame buffer");
        goto free_ch;
    }
    atomic_init(&ch->refs, 1);
    ch->fd = fd;
    ch->peer_pid = cred.pid;
    ch->peer_uid = cred.uid;
    ch->lease_next = 1;
    pthread_mutex_init(&ch->send_lock, NULL);
    pthread_mutex_init(&ch->recv_lock, NULL);
    pthread_mutex_init(&ch->lease_lock, NULL);
    *out = ch;
    return 0;
free_ch:
    free(ch);
close_fd:
    close(fd);
    return rc;
}

int cuc_channel_pair(cuc_channel **a, cuc_channel **b)
{
    cuc_channel *ca;
    int sv[2], rc;

    if (!a || !b)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_pair: NULL argument");
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return cuc__errno_err(errno, "socketpair(AF_UNIX, SOCK_SEQPACKET)");
    rc = cuc__channel_wrap(sv[0], &ca);
    if (rc) {
        close(sv[1]);
        return rc;
    }
    rc = cuc__channel_wrap(sv[1], b);
    if (rc) {
        cuc_channel_close(ca);
        return rc;
    }
    *a = ca;
    return 0;
}

int cuc_channel_from_fd(int fd, cuc_channel **ch)
{
    int fl;

    if (!ch || fd < 0) {
        if (fd >= 0)
            close(fd);
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_from_fd: %s",
                           ch ? "negative fd" : "ch is NULL");
    }
    fl = fcntl(fd, F_GETFD);
    if (fl < 0)
        return cuc__errno_err(errno, "cuc_channel_from_fd: fd %d", fd);
    if (fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0) {
        int err = errno;
        close(fd);
        return cuc__errno_err(err, "cuc_channel_from_fd: F_SETFD on fd %d", fd);
    }
    return cuc__channel_wrap(fd, ch);
}

int cuc_channel_fd(const cuc_channel *ch)
{
    if (!ch)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_fd: ch is NULL");
    return ch->fd;
}

static void queue_free(cuc_channel *ch)
{
    while (ch->qhead) {
        struct cuc__qnode *q = ch->qhead;
        ch->qhead = q->next;
        cuc_msg_destroy(q->m);
        free(q);
    }
    ch->qtail = NULL;
    ch->qlen = 0;
}

void cuc__channel_ref(cuc_channel *ch)
{
    atomic_fetch_add_explicit(&ch->refs, 1, memory_order_relaxed);
}

void cuc__channel_unref(cuc_channel *ch)
{
    if (atomic_fetch_sub_explicit(&ch->refs, 1, memory_order_acq_rel) != 1)
        return;
    cuc__leases_free(ch);
    cuc__reasm_reset(&ch->rx);
    free(ch->rxbuf);
    pthread_mutex_destroy(&ch->send_lock);
    pthread_mutex_destroy(&ch->recv_lock);
    pthread_mutex_destroy(&ch->lease_lock);
    free(ch);
}

void cuc_channel_close(cuc_channel *ch)
{
    if (!ch)
        return;
    pthread_mutex_lock(&ch->send_lock);
    close(ch->fd);
    ch->fd = -1;
    pthread_mutex_unlock(&ch->send_lock);
    cuc__leases_end_all(ch, CUC__LEASE_CHANNEL_CLOSED);
    pthread_mutex_lock(&ch->recv_lock);
    queue_free(ch);
    pthread_mutex_unlock(&ch->recv_lock);
    cuc__channel_unref(ch);
}

int cuc_channel_send(cuc_channel *ch, const cuc_msg *m)
{
    int rc;

    if (!ch || !m)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_send: NULL argument");
    rc = cuc__leases_begin_msg(ch, m);
    if (rc)
        return rc;
    rc = cuc__channel_send_frames(ch, m);
    if (rc)
        cuc__leases_abort_msg(ch, m);
    return rc;
}

static int check_timeout(const char *fn, int timeout_ms)
{
    if (timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "%s: timeout %d ms (use -1 to wait "
                           "forever)", fn, timeout_ms);
    return 0;
}

/* The next message that is not a release, processing releases on the
 * way. The peer's end ends its leases. recv_lock held. */
static int next_user_msg(cuc_channel *ch, int64_t deadline, cuc_msg **out)
{
    cuc_msg *m;
    int rc;

    for (;;) {
        rc = cuc__channel_read_msg(ch, deadline, &m);
        if (rc == CUC_E_PEER_CLOSED)
            cuc__leases_end_all(ch, CUC__LEASE_PEER_CLOSED);
        if (rc)
            return rc;
        rc = cuc__leases_take_release(ch, m);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            *out = m;
            return 0;
        }
    }
}

int cuc_channel_recv(cuc_channel *ch, int timeout_ms, cuc_msg **out)
{
    struct cuc__qnode *q;
    cuc_msg *m;
    int rc;

    if (!ch || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_recv: NULL argument");
    rc = check_timeout("cuc_channel_recv", timeout_ms);
    if (rc)
        return rc;
    pthread_mutex_lock(&ch->recv_lock);
    q = ch->qhead;
    if (q) {
        ch->qhead = q->next;
        if (!ch->qhead)
            ch->qtail = NULL;
        ch->qlen--;
        m = q->m;
        free(q);
        pthread_mutex_unlock(&ch->recv_lock);
        cuc__msg_set_channel(m, ch);
        *out = m;
        return 0;
    }
    rc = next_user_msg(ch, cuc__deadline(timeout_ms), &m);
    pthread_mutex_unlock(&ch->recv_lock);
    if (!rc) {
        cuc__msg_set_channel(m, ch);
        *out = m;
    }
    return rc;
}

static int enqueue(cuc_channel *ch, cuc_msg *m)
{
    struct cuc__qnode *q = malloc(sizeof(*q));

    if (!q) {
        cuc_msg_destroy(m);
        return cuc__seterr(CUC_E_NOMEM, "out of memory queueing a message");
    }
    q->m = m;
    q->next = NULL;
    if (ch->qtail)
        ch->qtail->next = q;
    else
        ch->qhead = q;
    ch->qtail = q;
    ch->qlen++;
    return 0;
}

/* recv_lock held. */
static int pump_locked(cuc_channel *ch, int timeout_ms)
{
    int64_t deadline = cuc__deadline(timeout_ms);
    int processed = 0, rc;
    cuc_msg *m;

    for (;;) {
        if (ch->qlen >= CUC_CHANNEL_MAX_QUEUED)
            return cuc__seterr(CUC_E_BUSY, "%zu received messages wait in the "
                               "channel's queue: call cuc_channel_recv()", ch->qlen);
        /* after the first message, take only what has already arrived */
        rc = cuc__channel_read_msg(ch, processed ? 0 : deadline, &m);
        if (rc == CUC_E_PEER_CLOSED)
            cuc__leases_end_all(ch, CUC__LEASE_PEER_CLOSED);
        if (rc == CUC_E_TIMEOUT && processed)
            return 0;
        if (rc)
            return rc;
        processed++;
        rc = cuc__leases_take_release(ch, m);
        if (rc == 0)
            rc = enqueue(ch, m);
        if (rc < 0)
            return rc;
    }
}

int cuc_channel_pump(cuc_channel *ch, int timeout_ms)
{
    int rc;

    if (!ch)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_pump: ch is NULL");
    rc = check_timeout("cuc_channel_pump", timeout_ms);
    if (rc)
        return rc;
    pthread_mutex_lock(&ch->recv_lock);
    rc = pump_locked(ch, timeout_ms);
    pthread_mutex_unlock(&ch->recv_lock);
    return rc;
}

int cuc_channel_peer_pid(const cuc_channel *ch, pid_t *pid)
{
    if (!ch || !pid)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_peer_pid: NULL argument");
    *pid = ch->peer_pid;
    return 0;
}

int cuc_channel_peer_uid(const cuc_channel *ch, uid_t *uid)
{
    if (!ch || !uid)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_peer_uid: NULL argument");
    *uid = ch->peer_uid;
    return 0;
}
