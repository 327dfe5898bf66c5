/* Lingering links (linger.c): the exporter's end of a channel that the
 * user destroyed while leases on it were still held. cuc_channel_destroy()
 * hands the lease table here, which reads what has arrived at once (a
 * dead peer's leases end there and then) and keeps the link only while
 * leases are left; the pump reads the lingering links, ends leases as
 * releases arrive (or all of them when the peer closes or dies), drops
 * any other message, and lets a link go once its table holds no lease.
 * Nothing here needs the user's channel:
 * the lease waits and the channel calls of the process pump it
 * (channel/lease_wait.c, channel/channel.c).
 *
 * Threads: thread-safe. One thread pumps at a time; a second pump returns
 * CUC_E_BUSY at once (it never waits for the first), so a caller's
 * timeout is its own. */
#ifndef CUC_LEASE_LINGER_H
#define CUC_LEASE_LINGER_H

#include "lease/lease.h"

/* Reads what has arrived on l's link now (its releases end leases; the
 * peer's close or death ends them all: CUC__LEASE_PEER_CLOSED), then, if
 * leases are left, keeps the link read until they end (takes a reference
 * to l). The caller (cuc_channel_destroy) must be the link's only reader;
 * its thread's error is left as it was. */
int cuc__linger_add(struct cuc__leases *l);

/* Waits up to timeout_ms (0: only what has arrived) for traffic on the
 * lingering links and processes it. 0 when it pumped, CUC_E_NOT_FOUND
 * when no link lingers, CUC_E_BUSY when another thread is pumping. Sets
 * no error message. */
int cuc__linger_pump(int timeout_ms);

/* Links lingering now. */
size_t cuc__linger_count(void);

#endif
