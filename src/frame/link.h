/* A link (link.c): one end of a connected AF_UNIX SOCK_SEQPACKET socket
 * that carries whole messages as frames (frame.h). It sends a message
 * (split, its fds beside it), receives the next complete one (checked and
 * rejoined), and keeps what breaks a direction for good (a sticky error:
 * every later call on that direction reports it again).
 *
 * A link is reference counted: the channel holds one, and so does the
 * lease table, which sends releases on it after the channel is gone from
 * the user's hands. The socket fd is fixed for the link's life and closed
 * with its last reference (no thread ever sees it change);
 * cuc__link_close() shuts the socket down before that.
 *
 * Fork: a link belongs to the process that opened it. In a child that
 * inherited it through fork() every send and receive fails with
 * CUC_E_FORKED and nothing reaches the socket (the parent's frame
 * sequence stays intact); the last reference only closes the child's copy
 * of the fd.
 *
 * Threads: sends are serialized inside (a message's frames never
 * interleave). Receives are not: one thread at a time calls
 * cuc__link_recv() on a link (the channel's reader, or the lingering
 * links' pump, lease/linger.c). */
#ifndef CUC_FRAME_LINK_H
#define CUC_FRAME_LINK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "cucore/msg.h"
#include "base/error.h"
#include "base/ref.h"
#include "frame/frame.h"

struct cuc__link {
    struct cuc__ref ref;
    int fd;               /* fixed; closed by the last reference */
    pid_t owner;          /* the process that opened it (os/proc.h) */
    _Atomic int closed;   /* cuc__link_close() has run */
    pid_t peer_pid;
    uid_t peer_uid;

    pthread_mutex_t send_lock;
    uint32_t send_seq;
    struct cuc__err_saved send_err;

    /* the receive side, under the caller's receive lock */
    struct cuc__reasm rx;
    uint8_t *rxbuf; /* one frame */
    struct cuc__err_saved recv_err;
    uint32_t rx_max_len, rx_max_fds; /* the most a received message may be */
    int64_t rx_since; /* when the partial message's first frame came, or -1 */
};

/* A link over fd, which must be a connected SEQPACKET socket (checked);
 * takes fd in every case (closed on failure). Reads the peer's
 * credentials. */
int cuc__link_open(int fd, struct cuc__link **out);
void cuc__link_ref(struct cuc__link *l);
void cuc__link_unref(struct cuc__link *l);

/* Lowers what a message from the peer may be (cuc__link_open: the
 * format's CUC_MSG_MAX_BYTES and CUC_MSG_MAX_FDS): a frame announcing more
 * is a framing error (its fds closed). A share point's peers send only
 * claims and releases. */
void cuc__link_limit_rx(struct cuc__link *l, uint32_t max_len, uint32_t max_fds);
/* When the first frame of a message still partial arrived (a deadline's
 * clock, os/clock.h), or -1 when none is: a peer that stops half-way
 * through a message is found by it. */
int64_t cuc__link_partial_since(const struct cuc__link *l);

/* Shuts the socket down (sends after it fail, receives too; the peer sees
 * the close) and drops a partial message. Must not race a receive. The
 * object and its fd stay until the last reference. */
void cuc__link_close(struct cuc__link *l);
/* 0 if this process opened l, else CUC_E_FORKED naming both pids. */
int cuc__link_check_owner(const struct cuc__link *l, const char *fn);
/* 1 once cuc__link_close() has run. */
int cuc__link_is_closed(struct cuc__link *l);

/* Encodes m and sends it, split into frames. Blocks while the socket is
 * full. CUC_E_INVALID once this process closed the link; CUC_E_PEER_CLOSED;
 * CUC_E_LIMIT (fds in flight). A failure after part of a message went out,
 * or the peer's close, sticks to the sending direction. */
int cuc__link_send(struct cuc__link *l, const cuc_msg *m);
/* As cuc__link_send; stamp(arg, seq) runs first, under the send lock, with
 * the sequence number the message's first frame will carry (what a refused
 * record names), before any frame of it can reach the peer. */
int cuc__link_send_seq(struct cuc__link *l, const cuc_msg *m,
                       void (*stamp)(void *arg, uint32_t seq), void *arg);

/* The next complete message, waiting until the deadline (a partial
 * message survives a timeout and goes on at the next call). CUC_E_TIMEOUT,
 * a message that decodes badly (CUC_E_BADMSG / CUC_E_VERSION, the message
 * dropped) and a message whose fds this process had no room for
 * (CUC_E_LIMIT naming RLIMIT_NOFILE, the fds needed and free: the message
 * dropped, the rest of its frames skipped, a refused record sent back so
 * the sender ends its leases) leave the link usable; a framing error and
 * CUC_E_PEER_CLOSED stick to the receiving direction. deadline 0 takes
 * only what has already arrived: nothing there is CUC_E_TIMEOUT with no
 * message set (the readers that drain a link ask so after every message,
 * and would only format one to drop it). */
int cuc__link_recv(struct cuc__link *l, int64_t deadline, cuc_msg **m);

#endif
