/* A socket that speaks frames: sending a message as frames, receiving and
 * rejoining them (each frame checked before use, every refused fd closed:
 * os/sock.c), sticky errors.
 *
 * SOCK_SEQPACKET rather than SOCK_STREAM: the kernel keeps frame
 * boundaries, and the fds of one sendmsg arrive with exactly that frame's
 * bytes. With a byte stream, fds attach to whichever read covers the first
 * byte of their sendmsg, a peer can stop half-way through a header, and
 * every read has to be reassembled; here a frame is all or nothing, and a
 * truncated or oversized one is flagged (MSG_TRUNC) instead of shifting
 * every frame after it. */
#include "frame/link.h"
#include "os/clock.h"
#include "os/fd.h"
#include "os/proc.h"
#include "os/sock.h"
#include "wire/records.h"
#include "wire/wire.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void link_free(struct cuc__ref *r)
{
    struct cuc__link *l = CUC_CONTAINER_OF(r, struct cuc__link, ref);

    close(l->fd); /* in a forked child: only this process's copy */
    cuc__reasm_reset(&l->rx);
    free(l->rxbuf);
    pthread_mutex_destroy(&l->send_lock);
    free(l);
}

int cuc__link_open(int fd, struct cuc__link **out)
{
    struct cuc__link *l = NULL;
    int rc;

    rc = cuc__sock_check_seqpacket(fd);
    if (!rc && !(l = calloc(1, sizeof(*l))))
        rc = cuc__seterr(CUC_E_NOMEM, "out of memory for a channel");
    if (!rc && !(l->rxbuf = malloc(CUC__FRAME_HDR + CUC__FRAME_MAX_DATA)))
        rc = cuc__seterr(CUC_E_NOMEM, "out of memory for a channel's frame buffer");
    if (!rc)
        rc = cuc__sock_peer(fd, &l->peer_pid, &l->peer_uid);
    if (rc) {
        if (l)
            free(l->rxbuf);
        free(l);
        close(fd);
        return rc;
    }
    cuc__ref_init(&l->ref, link_free);
    l->fd = fd;
    l->owner = cuc__pid();
    l->rx_max_len = CUC_MSG_MAX_BYTES;
    l->rx_max_fds = CUC_MSG_MAX_FDS;
    l->rx_since = -1;
    atomic_init(&l->closed, 0);
    pthread_mutex_init(&l->send_lock, NULL);
    *out = l;
    return 0;
}

CUC__REF_FUNCTIONS(cuc__link, struct cuc__link, ref)

void cuc__link_close(struct cuc__link *l)
{
    atomic_store(&l->closed, 1);
    /* Not in a forked child: the socket is shared with the parent, and a
     * shutdown would close the parent's channel too. */
    if (l->owner == cuc__pid())
        shutdown(l->fd, SHUT_RDWR);
    cuc__reasm_reset(&l->rx); /* a partial message's fds go now */
}

int cuc__link_check_owner(const struct cuc__link *l, const char *fn)
{
    return cuc__check_owner(l->owner, fn, "channel");
}

int cuc__link_is_closed(struct cuc__link *l)
{
    return atomic_load(&l->closed);
}

/* ---- send ---- */

/* Encodes part of m into buf and sends it as its frame. */
static int send_part(struct cuc__link *l, const cuc_msg *m, uint8_t *buf,
                     struct cuc__enc_cursor *cur, uint32_t len, const int *fds,
                     uint32_t nfds, uint32_t part, uint32_t nparts)
{
    uint8_t hdr[CUC__FRAME_HDR];
    struct cuc__frame f;
    uint32_t off, fd_off;

    cuc__frame_slice(len, nfds, part, &off, &f.len, &fd_off, &f.nfds);
    f.seq = l->send_seq;
    f.part = part;
    f.nparts = nparts;
    f.msg_len = len;
    f.msg_nfds = nfds;
    cuc__frame_write(hdr, &f);
    if (f.len)
        cuc__msg_encode_part(m, off, f.len, buf, cur);
    return cuc__sock_send(l->fd, hdr, sizeof(hdr), buf, f.len, fds + fd_off, f.nfds);
}

int cuc__link_send(struct cuc__link *l, const cuc_msg *m)
{
    return cuc__link_send_seq(l, m, NULL, NULL);
}

int cuc__link_send_seq(struct cuc__link *l, const cuc_msg *m,
                       void (*stamp)(void *arg, uint32_t seq), void *arg)
{
    uint8_t small[1024], *buf = small;
    struct cuc__enc_cursor cur = {0, 0};
    const int *fds;
    size_t len, nfds;
    uint32_t part, nparts;
    int rc;

    rc = cuc__msg_encode_begin(m, &len, &fds, &nfds);
    if (rc)
        return rc;
    nparts = cuc__frame_parts((uint32_t)len, (uint32_t)nfds);
    if (l->owner != cuc__pid()) /* not even the send lock: a forked copy */
        return cuc__link_check_owner(l, "sending on a channel");
    /* Each frame's part is encoded into one frame's room as it goes out:
     * no copy of the whole message. */
    if (len > sizeof(small) &&
        !(buf = malloc(len < CUC__FRAME_MAX_DATA ? len : CUC__FRAME_MAX_DATA)))
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a frame of a %zu-byte message",
                           len);
    pthread_mutex_lock(&l->send_lock);
    rc = 0;
    if (l->send_err.status)
        rc = cuc__err_restore(&l->send_err);
    if (!rc && atomic_load(&l->closed))
        rc = cuc__seterr(CUC_E_INVALID, "the channel was closed by this process");
    if (!rc && stamp)
        stamp(arg, l->send_seq);
    for (part = 0; !rc && part < nparts; part++) {
        rc = send_part(l, m, buf, &cur, (uint32_t)len, fds, (uint32_t)nfds, part, nparts);
        if (!rc)
            l->send_seq++;
        else if (part > 0 || rc == CUC_E_PEER_CLOSED)
            /* the peer holds part of a message: nothing can follow it */
            cuc__err_save(&l->send_err, rc);
    }
    pthread_mutex_unlock(&l->send_lock);
    if (buf != small)
        free(buf);
    return rc;
}

/* ---- receive ---- */

void cuc__link_limit_rx(struct cuc__link *l, uint32_t max_len, uint32_t max_fds)
{
    l->rx_max_len = max_len;
    l->rx_max_fds = max_fds;
}

int64_t cuc__link_partial_since(const struct cuc__link *l)
{
    return l->rx_since;
}

/* A frame of a message larger than the link takes (its fds closed). */
static int over_limit(const struct cuc__link *l, const struct cuc__frame *f, int *fds,
                      size_t nfds)
{
    if (f->msg_len <= l->rx_max_len && f->msg_nfds <= l->rx_max_fds)
        return 0;
    cuc__close_fds(fds, nfds);
    return cuc__badmsg("the peer (pid %ld) sent a frame of a message of %u bytes and %u "
                       "fds; this channel takes at most %u bytes and %u fds",
                       (long)l->peer_pid, f->msg_len, f->msg_nfds, l->rx_max_len,
                       l->rx_max_fds);
}

static int peer_gone(const struct cuc__link *l)
{
    const struct cuc__reasm *r = &l->rx;

    if (cuc__reasm_partial(r))
        return cuc__seterr(CUC_E_PEER_CLOSED, "the peer (pid %ld) closed the channel "
                           "in the middle of a message: %u of its %u frames "
                           "arrived", (long)l->peer_pid, r->next_part,
                           r->first.nparts);
    return cuc__seterr(CUC_E_PEER_CLOSED, "the peer (pid %ld) closed the channel",
                       (long)l->peer_pid);
}

static int timed_out(const struct cuc__link *l, int64_t deadline)
{
    const struct cuc__reasm *r = &l->rx;

    if (deadline == 0)
        return CUC_E_TIMEOUT; /* a poll's answer: nothing had arrived */
    if (cuc__reasm_partial(r))
        return cuc__seterr(CUC_E_TIMEOUT, "timed out with %u of the %u frames of a "
                           "message from the peer (pid %ld) received; the next "
                           "receive goes on with it", r->next_part,
                           r->first.nparts, (long)l->peer_pid);
    return cuc__seterr(CUC_E_TIMEOUT, "timed out: no message from the peer (pid %ld)",
                       (long)l->peer_pid);
}

/* One datagram into l->rxbuf, parsed; its fds in fds[0..*nfds). */
static int read_frame(struct cuc__link *l, int64_t deadline, struct cuc__frame *f,
                      int *fds, size_t *nfds)
{
    size_t n, k;
    int rc;

    if (atomic_load(&l->closed))
        return cuc__seterr(CUC_E_INVALID, "the channel was closed by this process");
    rc = cuc__sock_recv(l->fd, l->rxbuf, CUC__FRAME_HDR + CUC__FRAME_MAX_DATA, deadline,
                        fds, &n, &k);
    if (rc == CUC_E_PEER_CLOSED)
        return peer_gone(l);
    if (rc == CUC_E_TIMEOUT)
        return timed_out(l, deadline);
    if (rc && rc != CUC_E_LIMIT)
        return rc;
    if (rc) { /* the bytes came, the fds did not */
        rc = cuc__frame_parse(l->rxbuf, n, f);
        if (!rc && f->nfds == 0)
            rc = cuc__badmsg("frame %u carries no fds, yet its control data "
                             "arrived cut short", f->seq);
        return rc ? rc : CUC_E_LIMIT;
    }
    rc = cuc__frame_parse(l->rxbuf, n, f);
    if (rc) {
        cuc__close_fds(fds, k);
        return rc;
    }
    *nfds = k;
    return 0;
}

/* A frame whose fds the kernel could not give this process: its message
 * is dropped and the sender told (a refused record) once per message, so
 * it ends that message's leases. CUC_E_LIMIT naming the limit, 1 for a
 * later frame of a message already refused (read on), or a framing error. */
static int refuse(struct cuc__link *l, const struct cuc__frame *f)
{
    unsigned long limit, open;
    uint32_t seq0;
    cuc_msg *m;
    int fresh, rc = cuc__reasm_refuse(&l->rx, f, &fresh, &seq0);

    if (rc)
        return rc;
    if (!fresh)
        return 1;
    /* Best effort: if it fails the sender learns at the close instead. */
    if (cuc__refused_msg_build(seq0, &m) == 0) {
        (void)cuc__link_send(l, m);
        cuc_msg_destroy(m);
    }
    cuc__fd_room(&limit, &open);
    return cuc__seterr(CUC_E_LIMIT, "a message from the peer (pid %ld) needs %u fds "
                       "(frame %u's header), but this process has no room for them: "
                       "RLIMIT_NOFILE is %lu, %lu fds are open, %lu free; the message "
                       "was dropped and the sender told it was refused (its leases "
                       "end); the channel goes on. Raise RLIMIT_NOFILE or close fds",
                       (long)l->peer_pid, f->msg_nfds, f->seq, limit, open,
                       limit > open ? limit - open : 0);
}

int cuc__link_recv(struct cuc__link *l, int64_t deadline, cuc_msg **m)
{
    int fds[CUC__FRAME_MAX_FDS];
    struct cuc__frame f;
    cuc_msg *msg;
    size_t nfds = 0;
    int rc, drc;

    rc = cuc__link_check_owner(l, "receiving on a channel");
    if (rc)
        return rc;
    rc = l->recv_err.status ? cuc__err_restore(&l->recv_err) : 0;
    while (!rc) {
        rc = read_frame(l, deadline, &f, fds, &nfds);
        if (rc == CUC_E_TIMEOUT)
            return rc;
        if (rc == CUC_E_LIMIT) {
            rc = refuse(l, &f);
            if (rc == 1) {
                rc = 0;
                continue;
            }
            if (rc == CUC_E_LIMIT)
                return rc;
            break;
        }
        if (!rc)
            rc = over_limit(l, &f, fds, nfds);
        if (!rc)
            rc = cuc__reasm_push(&l->rx, &f, l->rxbuf + CUC__FRAME_HDR, fds, nfds,
                                 &msg, &drc);
        if (rc)
            break;
        if (!cuc__reasm_partial(&l->rx))
            l->rx_since = -1;
        else if (l->rx_since < 0)
            l->rx_since = cuc__deadline(0);
        if (msg) {
            *m = msg;
            return 0;
        }
        if (drc)
            return drc; /* a sound frame with a bad message: dropped */
    }
    if (!l->recv_err.status) {
        cuc__err_save(&l->recv_err, rc);
        cuc__reasm_reset(&l->rx);
    }
    return rc;
}
