/* Gates (gate.c): what the objects of an attached message wait for before
 * their memory may be used. An attach maps memory at once but its claim
 * is answered later (share/): the gate is pending until the share point
 * confirms the claim (open) or refuses it (shut, with the reason), and
 * every use of an object resolved from the message waits on it. Shared by
 * the message (wire.h: cuc__msg_set_gate) and by every object made from
 * it; reference counted.
 *
 * Threads: every function is thread-safe. */
#ifndef CUC_LEASE_GATE_H
#define CUC_LEASE_GATE_H

#include <pthread.h>
#include <stdint.h>

#include "cucore/msg.h"
#include "base/ref.h"

struct cuc__gate {
    struct cuc__ref ref;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int status;     /* CUC__GATE_PENDING, 0 (open) or the refusal's CUC_E_* */
    int timeout_ms; /* how long a use waits for the answer */
    uint8_t token[16]; /* the claim's (the share point's: what it gives back) */
    struct cuc__leases *via; /* where the claim is queued: flushed before a wait */
    char why[512];  /* the refusal's message */
};

#define CUC__GATE_PENDING 1

/* A pending gate (one reference), whose uses wait up to timeout_ms; its
 * claim queued in via (a reference is taken; NULL: sent already), which a
 * wait flushes first. */
struct cuc__leases;
int cuc__gate_create(int timeout_ms, struct cuc__leases *via, struct cuc__gate **out);
void cuc__gate_ref(struct cuc__gate *g);
void cuc__gate_unref(struct cuc__gate *g);

/* Settles g once (later calls are ignored): status 0 opens it; a
 * CUC_E_* shuts it, why (printf) saying what was refused. Wakes the
 * waiters. */
void cuc__gate_settle(struct cuc__gate *g, int status, const char *why, ...)
    __attribute__((format(printf, 3, 4)));

/* 0 once g is open (at once for NULL); its refusal (the message set) once
 * shut; CUC_E_TIMEOUT (naming what waited) after its timeout. */
int cuc__gate_pass(struct cuc__gate *g, const char *what);
/* 1 while g is pending (0 for NULL). */
int cuc__gate_pending(struct cuc__gate *g);

/* The gate of a message (no new reference), or NULL. */
struct cuc__gate *cuc__gate_of_msg(const cuc_msg *m);

#endif
