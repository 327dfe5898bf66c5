/* Channels: creation over a socket, the message queue between pump and
 * recv, the send and receive entry points. The bytes and fds move through
 * the link (frame/link.c); leases are the lease table's (lease/lease.c),
 * which this file calls and which never calls back. */
#include "channel/channel.h"
#include "base/error.h"
#include "os/clock.h"
#include "os/fd.h"
#include "os/proc.h"
#include "lease/linger.h"

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
    pthread_mutex_init(&ch->lock, NULL);
    cuc__cond_init(&ch->cond);
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

/* The user's handle goes; the link may stay (channel.h): read by the
 * lingering pump while leases granted on it are held, writable while
 * messages or objects from it hold the table. */
static void detach(cuc_channel *ch)
{
    /* No shutdown(): the socket may be shared with a child (channel.h's
     * pattern of handing one end of a pair to a child), and a shutdown
     * would end the child's channel too. */
    if (cuc__leases_count(ch->leases) > 0)
        cuc__linger_add(ch->leases); /* on failure the leases stay held */
}

void cuc_channel_destroy(cuc_channel *ch)
{
    if (!ch)
        return;
    pthread_mutex_lock(&ch->lock);
    queue_free(ch);
    pthread_mutex_unlock(&ch->lock);
    pthread_mutex_destroy(&ch->lock);
    pthread_cond_destroy(&ch->cond);
    cuc__kernel_refs_free(&ch->krefs);
    /* Inherited through fork: only this process's memory and fd copy go
     * (the leases are the parent's). */
    if (ch->link->owner == cuc__pid())
        detach(ch);
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
    rc = cuc__link_check_owner(ch->link, "cuc_channel_send");
    if (rc)
        return rc;
    rc = cuc__kernel_refs_for_send(&ch->krefs, m, &sent);
    if (rc)
        return rc;
    rc = cuc__leases_send(ch->leases, m, sent);
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
 * its leases. The caller is the reader (no lock held). */
static int take_one(cuc_channel *ch, int64_t deadline, cuc_msg **out)
{
    cuc_msg *m;
    int rc = cuc__link_recv(ch->link, deadline, &m);

    if (rc == CUC_E_PEER_CLOSED)
        cuc__leases_end_all(ch->leases, CUC__LEASE_PEER_CLOSED);
    if (rc)
        return rc;
    pthread_mutex_lock(&ch->lock);
    ch->taken++;
    pthread_cond_broadcast(&ch->cond);
    pthread_mutex_unlock(&ch->lock);
    rc = cuc__kernel_refs_take_held(&ch->krefs, m);
    if (rc == 0)
        rc = cuc__leases_take_release(ch->leases, m);
    if (rc == 0) {
        cuc__leases_stamp(ch->leases, m);
        *out = m;
    }
    return rc;
}

/* The oldest queued message, or NULL (lock held). */
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

static int waited_out(const cuc_channel *ch, const char *fn, int timeout_ms)
{
    return cuc__seterr(CUC_E_TIMEOUT, "%s: timed out after %d ms: another thread "
                       "was receiving on the channel to pid %ld and took nothing "
                       "for this call", fn, timeout_ms, (long)ch->link->peer_pid);
}

/* Becomes the reader, or waits until the reader finishes or takes a
 * message, or the deadline passes. lock held. 1: this thread is the reader now; 0: woken,
 * look again; CUC_E_TIMEOUT (no message set). */
static int reader_or_wait(cuc_channel *ch, int64_t deadline)
{
    if (!ch->reading) {
        ch->reading = 1;
        return 1;
    }
    return cuc__cond_wait_until(&ch->cond, &ch->lock, deadline);
}

static void reader_done(cuc_channel *ch)
{
    pthread_mutex_lock(&ch->lock);
    ch->reading = 0;
    pthread_cond_broadcast(&ch->cond);
    pthread_mutex_unlock(&ch->lock);
}

int cuc_channel_recv(cuc_channel *ch, int timeout_ms, cuc_msg **out)
{
    int64_t deadline;
    cuc_msg *m = NULL;
    int rc;

    if (!ch || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_recv: NULL argument");
    rc = check_timeout("cuc_channel_recv", timeout_ms);
    if (!rc)
        rc = cuc__link_check_owner(ch->link, "cuc_channel_recv");
    if (rc)
        return rc;
    cuc__linger_pump(0);
    deadline = cuc__deadline(timeout_ms);
    pthread_mutex_lock(&ch->lock);
    for (;;) {
        if ((m = dequeue(ch)) != NULL) {
            rc = 0;
            break;
        }
        rc = reader_or_wait(ch, deadline);
        if (rc == 1) {
            pthread_mutex_unlock(&ch->lock);
            while ((rc = take_one(ch, deadline, &m)) == 1)
                ;
            reader_done(ch);
            pthread_mutex_lock(&ch->lock);
            break;
        }
        if (rc == CUC_E_TIMEOUT) {
            rc = waited_out(ch, "cuc_channel_recv", timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&ch->lock);
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
    pthread_mutex_lock(&ch->lock);
    if (ch->qtail)
        ch->qtail->next = q;
    else
        ch->qhead = q;
    ch->qtail = q;
    ch->qlen++;
    pthread_cond_broadcast(&ch->cond);
    pthread_mutex_unlock(&ch->lock);
    return 0;
}

static size_t queued(cuc_channel *ch)
{
    size_t n;

    pthread_mutex_lock(&ch->lock);
    n = ch->qlen;
    pthread_mutex_unlock(&ch->lock);
    return n;
}

/* The reader's pump (no lock held). */
static int pump_reading(cuc_channel *ch, int64_t deadline)
{
    int processed = 0, rc;
    cuc_msg *m;

    for (;;) {
        size_t n = queued(ch);
        if (n >= CUC_CHANNEL_MAX_QUEUED)
            return cuc__seterr(CUC_E_BUSY, "%zu received messages wait in the "
                               "channel's queue: call cuc_channel_recv()", n);
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
    unsigned long seen;
    int64_t deadline;
    int rc;

    if (!ch)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_pump: ch is NULL");
    rc = check_timeout("cuc_channel_pump", timeout_ms);
    if (!rc)
        rc = cuc__link_check_owner(ch->link, "cuc_channel_pump");
    if (rc)
        return rc;
    cuc__linger_pump(0);
    deadline = cuc__deadline(timeout_ms);
    pthread_mutex_lock(&ch->lock);
    seen = ch->taken;
    for (;;) {
        rc = reader_or_wait(ch, deadline);
        if (rc == 1) {
            pthread_mutex_unlock(&ch->lock);
            rc = pump_reading(ch, deadline);
            reader_done(ch);
            pthread_mutex_lock(&ch->lock);
            break;
        }
        if (ch->taken != seen) { /* the reader processed traffic for us */
            rc = 0;
            break;
        }
        if (rc == CUC_E_TIMEOUT) {
            rc = waited_out(ch, "cuc_channel_pump", timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&ch->lock);
    return rc;
}

int cuc_channel_release(cuc_channel *ch, const uint64_t *ids, size_t n)
{
    if (!ch || !ids || n == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_release: %s",
                           n ? "NULL argument" : "no lease id given");
    if (cuc__link_check_owner(ch->link, "cuc_channel_release"))
        return CUC_E_FORKED;
    return cuc__leases_release(ch->leases, ids, n);
}

int cuc_channel_lease_count(cuc_channel *ch, size_t *n)
{
    if (!ch || !n)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_lease_count: NULL argument");
    if (cuc__link_check_owner(ch->link, "cuc_channel_lease_count"))
        return CUC_E_FORKED;
    *n = cuc__leases_count(ch->leases);
    return 0;
}

int cuc_channel_refused_count(cuc_channel *ch, uint64_t *n)
{
    if (!ch || !n)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_refused_count: NULL argument");
    if (cuc__link_check_owner(ch->link, "cuc_channel_refused_count"))
        return CUC_E_FORKED;
    *n = cuc__leases_refused(ch->leases);
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
