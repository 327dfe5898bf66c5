/* The share point (cucore/share.h): one per process, its state here and
 * its code in three files, the top one calling the other two:
 *   share.c   the public functions, its life (start, stop, fork, exit),
 *             the socket directory, the one thread and its poll loop;
 *   serve.c   the exporter's side: detach (holds), the peers it serves,
 *             their claims and releases;
 *   attach.c  the importer's side: connections to the share points it
 *             attached from, claims and their answers, the attached
 *             message.
 * The thread is the only reader of every socket here: peers' (their
 * claims and releases) and exporters' (answers). Users' threads send
 * claims and releases and wait for answers; they never receive.
 *
 * Locks: p->lock guards the lists, the waits and the counts; it is never
 * held across a socket call that can block or a lease operation (the
 * holds' callbacks run on lease ends). */
#ifndef CUC_SHARE_POINT_H
#define CUC_SHARE_POINT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "cucore/pool.h"
#include "cucore/share.h"
#include "base/htab.h"
#include "channel/channel.h"
#include "lease/gate.h"
#include "lease/hold.h"

#define CUC__SHARE_SOCK_PREFIX "cucore-share-"
#define CUC__SHARE_SOCK_SUFFIX ".sock"
/* What a peer may send: claims and releases, no fds. */
#define CUC__SHARE_PEER_MAX_BYTES (1u << 20)
/* A peer that stops half-way through a message is dropped after this, or
 * after the share point's timeout if that is shorter. */
#define CUC__SHARE_HALF_SENT_MS 10000
/* A send to a peer that does not read fails after this (the peer is dropped). */
#define CUC__SHARE_SEND_MS 10000
/* A peer is let go for a newcomer only once it has been quiet this long. */
#define CUC__SHARE_EVICT_QUIET_MS 1000
/* A connect to a share point whose backlog is full is tried again until
 * this; one that nobody accepts on fails at once (the exporter is gone). */
#define CUC__SHARE_CONNECT_MS 10000

/* A connection the share point serves. */
struct cuc__share_peer {
    cuc_channel *ch;
    int64_t last; /* when it last sent (eviction takes the oldest idle one) */
    struct cuc__share_peer *next;
};

/* A share point this process attached from. */
struct cuc__share_exp {
    uint8_t point[CUC_SHARE_ID_LEN];
    char path[CUC_SHARE_PATH_MAX + 1];
    cuc_channel *ch;
    pid_t pid;        /* its SO_PEERCRED pid, for messages */
    int closed;       /* its connection ended: the next attach connects again */
    size_t waits;     /* claims waiting on it (it is freed only without any) */
    cuc_pool **pools; /* pools first imported through it (a reference each) */
    size_t npools, pool_cap;
    struct cuc__share_exp *next;
};

/* A claim sent and not yet answered. */
struct cuc__share_wait {
    struct cuc__hnode node; /* in p->waits, by token */
    uint8_t token[CUC_SHARE_ID_LEN];
    struct cuc__share_exp *exp;
    struct cuc__gate *gate; /* settled by the answer (a reference) */
    int fetch;              /* waits for the held records too */
    cuc_msg *reply;         /* a fetch's answer */
    int done;
    int abandoned; /* a fetch whose attach timed out: its answer is given back when it
                    * comes, unless the next attach of the token takes the wait over */
};

struct cuc__share {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a wait answered */
    pid_t owner;
    int running;
    _Atomic int stopping;
    pthread_t thread;
    int wake; /* an eventfd: the lists changed, or stop */

    char dir[4096];
    int hold_ms, timeout_ms, half_sent_ms;
    unsigned max_peers;
    uint8_t point[CUC_SHARE_ID_LEN];
    uint8_t boot[CUC_SHARE_ID_LEN];

    /* exporter */
    cuc_listener *listener; /* made at the first detach */
    char path[CUC_SHARE_PATH_MAX + 1];
    struct cuc__holds *holds;
    struct cuc__share_peer *peers;
    size_t npeers;

    /* importer */
    struct cuc__share_exp *exps;
    size_t nexps;
    struct cuc__htab waits;
    size_t npending;
};

/* Wakes the thread: its poll set changed. */
static inline void cuc__share_wake(struct cuc__share *p)
{
    uint64_t one = 1;

    /* EAGAIN: the counter is full, the thread is woken anyway */
    (void)!write(p->wake, &one, sizeof(one));
}

/* cuc__share_wake as a callback (arg: the point), once it is stopping not:
 * what a connection's queued releases and the settler's queued frees
 * (memory/settle.h) call. */
static inline void cuc__share_wake_cb(void *arg)
{
    struct cuc__share *p = arg;

    if (!atomic_load(&p->stopping))
        cuc__share_wake(p);
}

/* serve.c */
/* cuc_share_detach on the running share point p. */
int cuc__share_detach(struct cuc__share *p, const cuc_msg *m, void **bytes, size_t *len);
/* Makes the socket if there is none yet (p->lock held). */
int cuc__share_listen_locked(struct cuc__share *p);
/* The listener is readable: takes every peer waiting; 1 when one could
 * not be taken (no fd free): the listener stays readable. */
int cuc__share_accept(struct cuc__share *p);
/* Peer pr is readable: serves what it sent; 1 when it must be dropped. */
int cuc__share_serve(struct cuc__share *p, struct cuc__share_peer *pr);
/* Drops pr (off the list, its leases ended, its socket closed). */
void cuc__share_drop_peer(struct cuc__share *p, struct cuc__share_peer *pr, int why);
/* Ends every peer and hold (the stop). */
void cuc__share_serve_end(struct cuc__share *p);
/* The message of b's records (the share record left out) in the process
 * that detached it: each held record from data, the hold's (a VMM
 * resource resolving to the hold's own object). */
int cuc__share_rebuild_here(void *data, const cuc_msg *b, cuc_msg **out);
/* Leases granted through the share point to its peers, and how many
 * peers hold them. */
void cuc__share_peer_leases(struct cuc__share *p, size_t *leases, size_t *peers);

/* attach.c */
/* cuc_share_attach on the running share point p. */
int cuc__share_attach(struct cuc__share *p, const void *bytes, size_t len, cuc_msg **out);
/* Exporter e is readable: takes its answers; 1 when its connection ended. */
int cuc__share_read_exp(struct cuc__share *p, struct cuc__share_exp *e);
/* e's connection ended (why: a status): its waits fail, its pools are let go. */
void cuc__share_exp_closed(struct cuc__share *p, struct cuc__share_exp *e, int why);
/* Frees the exporters that are closed and waited on by nobody (p->lock held). */
void cuc__share_reap_exps_locked(struct cuc__share *p);
/* Sends the claims and releases queued on every exporter connection (the
 * thread, once woken). */
void cuc__share_flush_queued(struct cuc__share *p);
/* Ends every exporter connection (the stop). */
void cuc__share_attach_end(struct cuc__share *p);

#endif
