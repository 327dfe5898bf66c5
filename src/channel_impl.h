/* The channel object, shared by channel.c (lifetime, send/recv/pump),
 * channel_io.c (frames on the socket), channel_listen.c (listen, accept,
 * connect) and lease.c. */
#ifndef CUC_CHANNEL_IMPL_H
#define CUC_CHANNEL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "cucore/channel.h"
#include "channel_frame.h"
#include "lease.h"

struct cuc__qnode {
    cuc_msg *m;
    struct cuc__qnode *next;
};

struct cuc__lease_slot {
    uint64_t id; /* 0: empty */
    cuc__lease_fn fn;
    void *arg;
};

/* A failure that sticks: reported again, with its message, by every later
 * call on that direction. */
struct cuc__sticky {
    int status;
    char msg[1024];
};

struct cuc_channel {
    _Atomic unsigned refs; /* the user's, received messages', importers' */
    int fd;                /* -1 once closed */
    pid_t peer_pid;
    uid_t peer_uid;

    pthread_mutex_t send_lock; /* one message's frames never interleave */
    uint32_t send_seq;
    struct cuc__sticky send_err;

    pthread_mutex_t recv_lock;
    struct cuc__reasm rx;
    uint8_t *rxbuf; /* one frame */
    struct cuc__sticky recv_err;
    struct cuc__qnode *qhead, *qtail;
    size_t qlen;

    pthread_mutex_t lease_lock;
    struct cuc__lease_slot *leases; /* open addressing, power-of-two size */
    size_t lease_cap, lease_count;
    uint64_t lease_next;
    int leases_over; /* the peer has gone: no lease can be added */
};

/* channel.c: a channel over a connected SEQPACKET socket (owned by the
 * call: closed on failure), peer credentials read from it. */
int cuc__channel_wrap(int fd, cuc_channel **out);

/* Absolute deadline in ms on CLOCK_MONOTONIC for a timeout (-1: none), and
 * what is left of it as a poll() timeout. */
int64_t cuc__deadline(int timeout_ms);
int cuc__remaining(int64_t deadline);
/* poll() for events until the deadline, across EINTR: 0 when ready,
 * CUC_E_TIMEOUT (without a message: the caller says what timed out). */
int cuc__poll_until(int fd, short events, int64_t deadline);

/* channel_io.c */
int cuc__channel_send_frames(cuc_channel *ch, const cuc_msg *m);
/* The next complete message (release or not). Framing errors and
 * CUC_E_PEER_CLOSED stick in ch->recv_err. Called with recv_lock held. */
int cuc__channel_read_msg(cuc_channel *ch, int64_t deadline, cuc_msg **m);

/* lease.c. 1 if m is a release message (then consumed: ended leases'
 * callbacks have run), 0 if not, or a status for a malformed release
 * (m destroyed). Called with recv_lock held. */
int cuc__leases_take_release(cuc_channel *ch, cuc_msg *m);
/* Ends every lease with why; afterwards no lease can be added if
 * why is CUC__LEASE_PEER_CLOSED. */
void cuc__leases_end_all(cuc_channel *ch, int why);
void cuc__leases_free(cuc_channel *ch);

/* error helpers */
int cuc__sticky_set(struct cuc__sticky *s, int status);
int cuc__sticky_get(const struct cuc__sticky *s);

#endif
