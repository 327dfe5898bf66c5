/* Holds (hold.c): a detached message's leases, kept under a token for
 * whoever has the bytes (cucore/share.h). One more kind of lease entry:
 * an unclaimed hold is a grant in a table of its own that sends nothing
 * (lease.h, link NULL), so the objects count it as a lease and a lease
 * wait waits for it; a claim moves that grant into the claiming peer's
 * table (the first claim) or begins a copy of it there (the later ones),
 * and from then on the peer's releases, its close or its death end it as
 * they end a channel's leases.
 *
 * A hold keeps a reference to each of its objects (their lease ops' ref)
 * from detach until it is forgotten: while unclaimed, or while any
 * peer's grant of it lives. A hold nobody claimed ends at its expiry
 * (CUC__LEASE_EXPIRED); a hold that leases nothing (a message of pools,
 * devices, kernels) is kept until its expiry whoever claims it.
 *
 * Threads: every function is thread-safe. The callbacks of the tables
 * (cuc__holds_peer_gone) take the holds' lock; nothing here ends a lease
 * while holding it. */
#ifndef CUC_LEASE_HOLD_H
#define CUC_LEASE_HOLD_H

#include <stddef.h>
#include <stdint.h>

#include "cucore/msg.h"
#include "lease/lease.h"

#define CUC__TOKEN_LEN 16u

struct cuc__holds;

/* A share point's holds; a hold lasts hold_ms unclaimed. */
int cuc__holds_create(int hold_ms, struct cuc__holds **out);
/* Ends every unclaimed hold and frees the table. Peers' grants must have
 * ended first (their tables ended: cuc__leases_end_all). */
void cuc__holds_destroy(struct cuc__holds *h);

/* A hold of m's attachments (their leases begun in the holds' table, a
 * reference to each taken) under a fresh random token, written to token.
 * data (freed by data_free when the hold is forgotten) is the caller's:
 * what it serves for the hold. CUC_E_INVALID for a message whose leases
 * are held already (detached before and not yet forgotten), CUC_E_LIMIT
 * past max holds. On failure data stays the caller's. */
int cuc__hold_add(struct cuc__holds *h, const cuc_msg *m, size_t max, void *data,
                  void (*data_free)(void *), uint8_t token[CUC__TOKEN_LEN]);

/* Grants the hold of token to peer (a table whose gone callback is
 * cuc__holds_peer_gone): 0, with *data the hold's (valid until the
 * caller's next call on h from the thread that serves peer: a hold is
 * forgotten only on that thread's calls and at destroy) and *block its
 * leases' block (0: it leases nothing). 0 too when the peer holds it
 * already. CUC_E_NOT_FOUND (message naming the token) when no hold or
 * lease of it lives. */
int cuc__hold_claim(struct cuc__holds *h, const uint8_t token[CUC__TOKEN_LEN],
                    struct cuc__leases *peer, void **data, uint64_t *block);
/* Forgets the unclaimed hold of token (a detach that failed after it). */
void cuc__hold_drop(struct cuc__holds *h, const uint8_t token[CUC__TOKEN_LEN]);
/* Runs fn(data, arg) on the hold of token under the holds' lock, then,
 * when fn returned 0, ends it as claimed by nobody (an attach in the
 * process that detached it): CUC_E_NOT_FOUND when it is gone, else what
 * fn returned. fn must not end a lease. */
int cuc__hold_take_here(struct cuc__holds *h, const uint8_t token[CUC__TOKEN_LEN],
                        int (*fn)(void *data, void *arg), void *arg);
/* The peer used nothing of the hold of token: its grant ends, and the
 * hold, if that leaves none and it has not expired, is unclaimed again. */
void cuc__hold_give_back(struct cuc__holds *h, const uint8_t token[CUC__TOKEN_LEN],
                         struct cuc__leases *peer);

/* A peer table's gone callback (lease.h), arg the holds: a grant of a
 * hold ended there (however: a peer that dropped a fetch's reply unread
 * gives the claim back, cuc__hold_give_back, which keeps the hold). */
void cuc__holds_peer_gone(void *holds, uint64_t block, int why);

/* Ends the unclaimed holds whose time is up; returns the deadline of the
 * next one (-1: none). */
int64_t cuc__holds_expire(struct cuc__holds *h);

/* Holds alive, and of those unclaimed. */
void cuc__holds_count(struct cuc__holds *h, size_t *alive, size_t *unclaimed);

#endif
