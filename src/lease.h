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
    CUC__LEASE_CHANNEL_CLOSED = 3 /* the exporter closed the channel */
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

#endif
