/* Leases (internal interface for the modules that export objects an
 * importer maps: memory pools, pool buffers, VMM allocations).
 *
 * The exporter, before it sends an object on a channel:
 *     uint64_t id = cuc__channel_lease_new_id(ch);
 *     cuc__channel_lease_add(ch, id, on_end, obj);   // obj stays alive
 *     ... put id in the object's record, cuc_channel_send(ch, m) ...
 *     on send failure: cuc__channel_lease_drop(ch, id) (no callback)
 * and defers the object's free until on_end has run (once per lease). The
 * importer, when it frees what it imported, calls cuc_channel_release(ch,
 * &id, 1) on the channel it came from. See cucore/channel.h for when the
 * callback runs. */
#ifndef CUC_LEASE_H
#define CUC_LEASE_H

#include <stdint.h>

#include "cucore/channel.h"

/* Why a lease ended (the callback's why). */
enum cuc__lease_end {
    CUC__LEASE_RELEASED = 1,      /* the importer sent a release */
    CUC__LEASE_PEER_CLOSED = 2,   /* the importer closed its end or died */
    CUC__LEASE_CHANNEL_CLOSED = 3, /* the exporter closed the channel */
    CUC__LEASE_SEND_FAILED = 4     /* the message never reached the peer */
};

/* Runs once per lease, on the thread that noticed the end, with no channel
 * lock held except the receive lock: it may send, release, add or drop
 * leases on the channel, but must not receive, pump, wait or close it.
 * When why is CUC__LEASE_CHANNEL_CLOSED the channel is being freed: the
 * callback must not touch it at all. */
typedef void (*cuc__lease_fn)(void *arg, uint64_t lease_id, int why);

/* A lease id not yet used on this channel (never 0). */
uint64_t cuc__channel_lease_new_id(cuc_channel *ch);

/* Registers lease id (not 0, not already held). CUC_E_PEER_CLOSED if the
 * channel already saw the peer go (nothing would ever release it): free at
 * once instead. */
int cuc__channel_lease_add(cuc_channel *ch, uint64_t id, cuc__lease_fn fn, void *arg);

/* Forgets lease id without running its callback (the send that should
 * have carried it failed). CUC_E_NOT_FOUND if it is not held. */
int cuc__channel_lease_drop(cuc_channel *ch, uint64_t id);

/* ---- Leases carried by messages (the usual way to make them) ----
 *
 * An exporting module puts cuc__lease_id_next() in its record's payload
 * and attaches the object to the message with cuc__msg_lease_attach()
 * (wire.h). cuc_channel_send() then, for each attached lease, calls
 * ops->begin(obj) and registers the lease on that channel; ops->end(obj,
 * id, why) runs exactly once per begin: when the lease ends (why as above)
 * or, with CUC__LEASE_SEND_FAILED, when the send fails. end runs on
 * whichever thread notices (a receive, pump, lease wait or close), so the
 * object must lock or use atomics. The message holds the object from
 * attach (ops->ref) to its destruction (ops->unref). Plain bytes
 * (cuc_msg_to_bytes) ignore attached leases. */
struct cuc__lease_ops {
    void (*begin)(void *obj);
    void (*end)(void *obj, uint64_t lease_id, int why);
    void (*ref)(void *obj);
    void (*unref)(void *obj);
};

/* A lease id unique in this process (never 0), for a record payload. */
uint64_t cuc__lease_id_next(void);

/* Registers every lease attached to m on ch (begin, then add). On failure
 * every lease begun is ended with CUC__LEASE_SEND_FAILED. */
int cuc__leases_begin_msg(cuc_channel *ch, const cuc_msg *m);
/* After a failed send of m: drops its leases from ch and ends each one
 * not already ended with CUC__LEASE_SEND_FAILED. */
void cuc__leases_abort_msg(cuc_channel *ch, const cuc_msg *m);

/* The channel object is reference counted: cuc_channel_close() closes the
 * socket, ends its leases and drops the caller's reference; received
 * messages and the objects imported from them hold their own, so that an
 * importer can still release (a no-op once closed) after a close. */
void cuc__channel_ref(cuc_channel *ch);
void cuc__channel_unref(cuc_channel *ch);

#endif
