/* Leases (lease.c): the service that keeps an exporter from freeing what
 * an importer still maps. One lease table per channel, shared by both
 * sides of the lease protocol:
 *
 *   exporter  cuc_channel_send() grants a lease per object attached to the
 *             message (wire.h: cuc__msg_lease_attach), under the id its
 *             record carries; the object's free is deferred until its
 *             ops->end has run, once per lease. A lease ends when the
 *             peer's release arrives (cuc__leases_take_release, called by
 *             the channel's receive, or by the lingering links' pump once
 *             the user destroyed the channel: lease/linger.h), or when
 *             the peer closes or dies (cuc__leases_end_all). Destroying
 *             the channel does not end them.
 *   importer  an object imported from a message received on the channel
 *             keeps the table the message reports to (cuc__leases_of_msg)
 *             and releases its lease there when it is done
 *             (cuc__leases_release: a release message sent on the link).
 *
 * The table calls only down (the link, the codecs) and the objects' own
 * ops; it never calls the channel. It is reference counted: the channel,
 * every received message and every imported object hold it, so it (and
 * the link it sends releases on) outlives the user's channel handle.
 *
 * Threads: every function is thread-safe. ops->end runs with no lock of
 * the table held, on the thread that noticed the end: it may send,
 * release, add or drop leases, but must not receive on the channel. */
#ifndef CUC_LEASE_LEASE_H
#define CUC_LEASE_LEASE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cucore/msg.h"
#include "base/htab.h"
#include "base/ref.h"
#include "frame/link.h"
#include "wire/wire.h"

/* Why a lease ended (ops->end's why). */
enum cuc__lease_end {
    CUC__LEASE_RELEASED = 1,       /* the importer sent a release */
    CUC__LEASE_PEER_CLOSED = 2,    /* the importer closed its end or died */
    CUC__LEASE_CHANNEL_CLOSED = 3, /* this side closed the link for good */
    CUC__LEASE_SEND_FAILED = 4,    /* the message never reached the peer */
    CUC__LEASE_REFUSED = 5,        /* the peer dropped the message unread */
    CUC__LEASE_EXPIRED = 6         /* a hold nobody claimed in time */
};

struct cuc__leases {
    struct cuc__ref ref;
    struct cuc__link *link; /* releases go out on it (a reference) */
    pthread_mutex_t lock;
    pthread_cond_t cond;    /* broadcast when a lease ends */
    struct cuc__htab by_block; /* granted leases, a grant a message (lease.c) */
    struct cuc__htab by_seq;   /* the sent ones of them, by their first frame */
    size_t count;              /* leases held */
    int over;               /* peer gone or channel closed: none can be added */
    uint64_t refused;       /* messages with leases the peer refused */
    /* objects kept for the peer until the table goes (wire.h:
     * cuc__origin_ops keep): images the peer may name by reference */
    struct cuc__kept *kept;
    size_t nkept, kept_cap;
    /* told when a grant left the table because its last lease ended (not
     * when it moved: cuc__leases_move), after the ends ran, no lock held */
    void (*gone)(void *arg, uint64_t block, int why);
    void *gone_arg;
    /* an importer's claims not yet sent (cuc__leases_queue_claim), under
     * qlock, which also orders them before any release on the link */
    pthread_mutex_t qlock;
    cuc_msg *claims;
    /* releases queued under qlock (cuc__leases_defer_releases: a share
     * point's connection), sent after the claims at the next flush; wake
     * is told (no lock held) when the first is queued */
    uint64_t *rel;
    size_t nrel, rel_cap;
    void (*wake)(void *arg);
    void *wake_arg;
};

/* Most objects a table keeps for its peer (images it said it holds). */
#define CUC__LEASES_MAX_KEPT 4096u

/* A table for the channel over link (a reference is taken), or, link
 * NULL, one that sends nothing: a share point's holds (lease/hold.h). */
int cuc__leases_create(struct cuc__link *link, struct cuc__leases **out);
/* Sets the table's gone callback (above); before any grant. */
void cuc__leases_on_gone(struct cuc__leases *l, void (*gone)(void *, uint64_t, int),
                         void *arg);
void cuc__leases_ref(struct cuc__leases *l);
void cuc__leases_unref(struct cuc__leases *l);

/* The table a received message reports to (no new reference), or NULL
 * for a message that came on no channel. */
struct cuc__leases *cuc__leases_of_msg(const cuc_msg *m);
/* Marks m as received through l: it reports there from now on. */
void cuc__leases_stamp(struct cuc__leases *l, cuc_msg *m);

/* ---- exporter side ---- */

/* A lease id unique in this process (never 0) for a lease of its own: the
 * first of a block no message has (wire.h). A message's leases have the
 * ids its attachments got. */
uint64_t cuc__lease_id_next(void);

/* Registers lease id (one cuc__lease_id_next() gave, not already held) of
 * obj; ops->end(obj, id, why) runs once when it ends (ops->begin is the
 * caller's to call). CUC_E_PEER_CLOSED if the peer already went (nothing
 * would release it). */
int cuc__leases_add(struct cuc__leases *l, uint64_t id,
                    const struct cuc__lease_ops *ops, void *obj);
/* Forgets lease id without running its end (CUC_E_NOT_FOUND if not held). */
int cuc__leases_drop(struct cuc__leases *l, uint64_t id);

/* Begins and registers atts[0..n) as one grant: their ids must be one
 * block's, attachment i block | i (wire.h). On failure each lease begun
 * is ended with CUC__LEASE_SEND_FAILED. */
int cuc__leases_grant(struct cuc__leases *l, const struct cuc__lease_att *atts, size_t n);
/* Moves the grant of block from one table to another, its leases going
 * on (none ends or begins): CUC_E_NOT_FOUND when from does not hold it,
 * CUC_E_PEER_CLOSED when to can take no lease, CUC_E_INVALID when to
 * holds the block already. */
int cuc__leases_move(struct cuc__leases *from, struct cuc__leases *to, uint64_t block);
/* 1 when the table holds a grant of block. */
int cuc__leases_held(struct cuc__leases *l, uint64_t block);
/* Ends the leases of block's grant still held, with why (0 when none). */
void cuc__leases_end_block(struct cuc__leases *l, uint64_t block, int why);

/* Sends sent (m, or what the channel made of it) on the link, after
 * beginning and registering every lease attached to m: one grant for the
 * message (one allocation and one pass under the table's lock for all its
 * leases), stamped with the sequence number of its first frame before any
 * frame goes out, so that a refused record naming it ends exactly those
 * leases. On failure every lease begun for it (and still held) is ended
 * with CUC__LEASE_SEND_FAILED. */
int cuc__leases_send(struct cuc__leases *l, const cuc_msg *m, const cuc_msg *sent);

/* A message the channel received: 1 if it was a release or a refusal
 * (consumed: the leases it names ended, m destroyed; a refused record
 * that names a sent message whose leases are held, by its first frame's
 * sequence number, ends them with CUC__LEASE_REFUSED and counts one; any
 * other is ignored, so a message is counted once however often it is
 * named), 0 if not (m untouched), or CUC_E_BADMSG for those mixed with
 * anything else (m destroyed). A refused record costs one lookup, not a
 * walk of the grants. */
int cuc__leases_take_release(struct cuc__leases *l, cuc_msg *m);

/* Ends every lease with why. After CUC__LEASE_PEER_CLOSED or
 * _CHANNEL_CLOSED no lease can be added. */
void cuc__leases_end_all(struct cuc__leases *l, int why);

/* Messages with leases the peer refused so far. */
uint64_t cuc__leases_refused(struct cuc__leases *l);

/* Leases held now. */
size_t cuc__leases_count(struct cuc__leases *l);

/* What a lease wait watches (channel/lease_wait.c): a count of leases, the
 * lock that guards it and the condition broadcast when one of them ends.
 * Every object that grants leases offers one (the channel's table, a pool,
 * a buffer, a VMM resource). */
struct cuc__lease_gauge {
    pthread_mutex_t *lock;
    pthread_cond_t *cond;
    const size_t *count;
    /* names the leases' object for the timeout message (only then: a wait
     * that ends in time formats nothing) */
    void (*describe)(const void *obj, char *out, size_t len);
    const void *obj;
};
/* Each fills g and returns it. */
struct cuc__lease_gauge *cuc__leases_gauge(struct cuc__leases *l, struct cuc__lease_gauge *g);

/* ---- importer side ---- */

/* Queues a claim of token with flags (wire/records.h: CUC__CLAIM_*) to go
 * out on the link, with the others queued, at the next flush: before any
 * release on this table, when a gate of it is waited on (lease/gate.h),
 * when the queue is full, or by cuc__leases_flush (the share point's
 * thread, which the caller wakes when this returns 1: the queue was
 * empty). A share point's claims of many attaches so travel as one
 * message. 0 or 1, or a failure. */
int cuc__leases_queue_claim(struct cuc__leases *l, const uint8_t token[16], uint32_t flags);
/* Sends the queued claims, then the queued releases (0 when none). */
int cuc__leases_flush(struct cuc__leases *l);
/* Nonzero while claims or releases wait for a flush (a hint: no lock). */
int cuc__leases_pending(const struct cuc__leases *l);
/* From now on releases on l are queued, not sent: the next flush sends
 * them (cuc__leases_flush), wake(arg) being called when the queue was
 * empty, so that a share point's thread sends the releases of many frees
 * as one message. Before the table is used. */
void cuc__leases_defer_releases(struct cuc__leases *l, void (*wake)(void *), void *arg);

/* Tells the peer that this process no longer uses ids[0..n): release
 * messages on the link (which stays open while the table lives, also after
 * the user destroyed the channel), now or, deferred, at the next flush
 * (cuc__leases_defer_releases). 0 without sending once the link was
 * closed for good, and in a child that inherited the table through fork
 * (the leases are the parent's). */
int cuc__leases_release(struct cuc__leases *l, const uint64_t *ids, size_t n);

#endif
