/* Channels: creation over a socket, the message queue between pump and
 * recv, the send and receive entry points. The bytes and fds move through
 * the link (frame/link.c); leases are the lease table's (lease/lease.c),
 * which this file calls and which never calls back. */
#include "channel/channel.h"
#include "base/error.h"
#include "os/clock.h"
#include "os/fd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int cuc__channel_wrap(int fd, cuc_channel **out)
{
    struct cuc__link *link;
    cuc_channel *ch;
    int rc;

    rc = cuc__link_open(fd, &link);
    if (rc)
        return rc;
    ch = calloc(1, sizeof(*ch));
    if (!ch) {
        rc = cuc__seterr(CUC_E_NOMEM, "out of memory for a channel");
        goto drop_link;
    }
    rc = cuc__leases_create(link, &ch->leases);
    if (rc)
        goto free_ch;
    ch->link = link;
    pthread_mutex_init(&ch->recv_lock, NULL);
    cuc__kernel_refs_init(&ch->krefs);
    *out = ch;
    return 0;
free_ch:
    free(ch);
drop_link:
    cuc__link_close(link);
    cuc__link_unref(link);
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
        cuc_channel_destroy(ca);
        return rc;
    }
    *a = ca;
    return 0;
}

int cuc_channel_from_fd(int fd, cuc_channel **ch)
{
    char what[32];
    int rc;

    if (!ch || fd < 0) {
        if (fd >= 0)
            close(fd);
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_from_fd: %s",
                           ch ? "negative fd" : "ch is NULL");
    }
    snprintf(what, sizeof(what), "fd %d", fd);
    rc = cuc__set_cloexec_or_close(fd, what);
    if (rc)
        return rc;
    return cuc__channel_wrap(fd, ch);
}

int cuc_channel_fd(const cuc_channel *ch)
{
    if (!ch)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_fd: ch is NULL");
    return ch->link->fd;
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

void cuc_channel_destroy(cuc_channel *ch)
{
    if (!ch)
        return;
    cuc__link_close(ch->link);
    cuc__leases_end_all(ch->leases, CUC__LEASE_CHANNEL_CLOSED);
    pthread_mutex_lock(&ch->recv_lock);
    queue_free(ch);
    pthread_mutex_unlock(&ch->recv_lock);
    pthread_mutex_destroy(&ch->recv_lock);
    cuc__kernel_refs_free(&ch->krefs);
    /* messages and imports may hold the table (and through it the link) */
    cuc__leases_unref(ch->leases);
    cuc__link_unref(ch->link);
    free(ch);
}

int cuc_channel_send(cuc_channel *ch, const cuc_msg *m)
{
    const cuc_msg *sent;
    int rc;

    if (!ch || !m)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_send: NULL argument");
    rc = cuc__kernel_refs_for_send(&ch->krefs, m, &sent);
    if (rc)
        return rc;
    rc = cuc__leases_grant(ch->leases, m);
    if (!rc) {
        rc = cuc__link_send(ch->link, sent);
        if (rc)
            cuc__leases_revoke(ch->leases, m);
    }
    if (sent != m)
        cuc_msg_destroy((cuc_msg *)sent);
    return rc;
}

static int check_timeout(const char *fn, int timeout_ms)
{
    if (timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "%s: timeout %d ms (use -1 to wait "
                           "forever)", fn, timeout_ms);
    return 0;
}

/* One message from the link: 0 with *out a message for the user, 1 for a
 * release (consumed: its leases ended), or a failure. The peer's end ends
 * its leases. recv_lock held. */
static int take_one(cuc_channel *ch, int64_t deadline, cuc_msg **out)
{
    cuc_msg *m;
    int rc = cuc__link_recv(ch->link, deadline, &m);

    if (rc == CUC_E_PEER_CLOSED)
        cuc__leases_end_all(ch->leases, CUC__LEASE_PEER_CLOSED);
    if (rc)
        return rc;
    rc = cuc__kernel_refs_take_held(&ch->krefs, m);
    if (rc == 0)
        rc = cuc__leases_take_release(ch->leases, m);
    if (rc == 0) {
        cuc__leases_stamp(ch->leases, m);
        *out = m;
    }
    return rc;
}

/* The oldest queued message, or NULL (recv_lock held). */
static cuc_msg *dequeue(cuc_channel *ch)
{
    struct cuc__qnode *q = ch->qhead;
    cuc_msg *m;

    if (!q)
        return NULL;
    ch->qhead = q->next;
    if (!ch->qhead)
        ch->qtail = NULL;
    ch->qlen--;
    m = q->m;
    free(q);
    return m;
}

int cuc_channel_recv(cuc_channel *ch, int timeout_ms, cuc_msg **out)
{
    cuc_msg *m;
    int rc;

    if (!ch || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_recv: NULL argument");
    rc = check_timeout("cuc_channel_recv", timeout_ms);
    if (rc)
        return rc;
    pthread_mutex_lock(&ch->recv_lock);
    m = dequeue(ch);
    if (!m) {
        int64_t deadline = cuc__deadline(timeout_ms);
        while ((rc = take_one(ch, deadline, &m)) == 1)
            ;
    }
    pthread_mutex_unlock(&ch->recv_lock);
    if (!rc)
        *out = m;
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
        rc = take_one(ch, processed ? 0 : deadline, &m);
        if (rc == CUC_E_TIMEOUT && processed)
            return 0;
        if (rc < 0)
            return rc;
        processed++;
        if (rc == 0 && (rc = enqueue(ch, m)) != 0)
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

int cuc_channel_release(cuc_channel *ch, const uint64_t *ids, size_t n)
{
    if (!ch || !ids || n == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_release: %s",
                           n ? "NULL argument" : "no lease id given");
    return cuc__leases_release(ch->leases, ids, n);
}

int cuc_channel_lease_count(cuc_channel *ch, size_t *n)
{
    if (!ch || !n)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_lease_count: NULL argument");
    *n = cuc__leases_count(ch->leases);
    return 0;
}

int cuc_channel_peer_pid(const cuc_channel *ch, pid_t *pid)
{
    if (!ch || !pid)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_peer_pid: NULL argument");
    *pid = ch->link->peer_pid;
    return 0;
}

int cuc_channel_peer_uid(const cuc_channel *ch, uid_t *uid)
{
    if (!ch || !uid)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_peer_uid: NULL argument");
    *uid = ch->link->peer_uid;
    return 0;
}
