/* Gates: pending until a share point answers a claim. */
#include "lease/gate.h"
#include "lease/lease.h"
#include "base/error.h"
#include "os/clock.h"
#include "wire/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>

/* Looks before sleeping on a pending gate. */
#define SPIN_LOOKS 100

static void gate_free(struct cuc__ref *r)
{
    struct cuc__gate *g = CUC_CONTAINER_OF(r, struct cuc__gate, ref);

    if (g->via)
        cuc__leases_unref(g->via);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g);
}

int cuc__gate_create(int timeout_ms, struct cuc__leases *via, struct cuc__gate **out)
{
    struct cuc__gate *g = calloc(1, sizeof(*g));

    if (!g)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an attach's gate");
    cuc__ref_init(&g->ref, gate_free);
    pthread_mutex_init(&g->lock, NULL);
    cuc__cond_init(&g->cond);
    g->status = CUC__GATE_PENDING;
    g->timeout_ms = timeout_ms;
    if (via) {
        cuc__leases_ref(via);
        g->via = via;
    }
    *out = g;
    return 0;
}

CUC__REF_FUNCTIONS(cuc__gate, struct cuc__gate, ref)

void cuc__gate_settle(struct cuc__gate *g, int status, const char *why, ...)
{
    va_list ap;

    pthread_mutex_lock(&g->lock);
    if (g->status == CUC__GATE_PENDING) {
        if (status) {
            va_start(ap, why);
            vsnprintf(g->why, sizeof(g->why), why, ap);
            va_end(ap);
        }
        __atomic_store_n(&g->status, status, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&g->cond);
    }
    pthread_mutex_unlock(&g->lock);
}

int cuc__gate_pass(struct cuc__gate *g, const char *what)
{
    int64_t deadline;
    int st;

    if (!g)
        return 0;
    /* opened long ago: the usual case costs one atomic load */
    if (__atomic_load_n(&g->status, __ATOMIC_ACQUIRE) == 0)
        return 0;
    /* its claim may still be queued with others: out with them now */
    if (g->via && cuc__leases_flush(g->via) != 0)
        return cuc__seterr(CUC_E_EXPORTER_GONE, "%s: its claim could not be sent: %s", what,
                           cuc_errmsg());
    /* the answer is normally a round trip away: look again, yielding, before
     * sleeping (a sleeper on a VM wakes tens of microseconds late) */
    for (int i = 0; i < SPIN_LOOKS && cuc__gate_pending(g); i++)
        sched_yield();
    deadline = cuc__deadline(g->timeout_ms);
    pthread_mutex_lock(&g->lock);
    while (g->status == CUC__GATE_PENDING &&
           cuc__cond_wait_until(&g->cond, &g->lock, deadline) == 0)
        ;
    st = g->status;
    pthread_mutex_unlock(&g->lock);
    if (st == CUC__GATE_PENDING)
        return cuc__seterr(CUC_E_TIMEOUT, "%s: its exporter did not confirm the lease in "
                           "%d ms (CUCORE_SHARE_TIMEOUT_MS)", what, g->timeout_ms);
    if (st)
        return cuc__seterr(st, "%s: %s", what, g->why);
    return 0;
}

int cuc__gate_pending(struct cuc__gate *g)
{
    return g && __atomic_load_n(&g->status, __ATOMIC_ACQUIRE) == CUC__GATE_PENDING;
}

struct cuc__gate *cuc__gate_of_msg(const cuc_msg *m)
{
    struct cuc__ref *r = cuc__msg_gate(m);

    return r ? CUC_CONTAINER_OF(r, struct cuc__gate, ref) : NULL;
}
