/* The one wait for leases to end, for every object that grants them: a
 * channel's own leases, a pool's, a buffer's, a VMM resource's. Each
 * offers a gauge (its count, the lock guarding it, the condition its lease
 * ends broadcast); the wait pumps the caller's channel in short slices, so
 * that ends noticed by other threads (on other channels) count too, or,
 * without a channel (or once its peer has gone), reads the lingering links
 * of destroyed channels in such slices and, while another thread reads
 * them or none lingers, sleeps on the gauge's condition: it pumps no live
 * channel (the headers' contract: pool.h, memory.h, vmm.h). */
#include "channel/channel.h"
#include "base/error.h"
#include "memory/buffer.h"
#include "memory/pool.h"
#include "memory/vmm.h"
#include "lease/linger.h"
#include "os/clock.h"

#include <sched.h>


/* Pumps in slices of at most this, then looks at the count again. */
#define PUMP_SLICE_MS 20
/* Looks before sleeping on the gauge. */
#define SPIN_LOOKS 100

static size_t current(const struct cuc__lease_gauge *g)
{
    size_t n;

    pthread_mutex_lock(g->lock);
    n = *g->count;
    pthread_mutex_unlock(g->lock);
    return n;
}

static int timed_out(size_t n, const struct cuc__lease_gauge *g, int timeout_ms,
                     size_t max_left)
{
    char what[96];

    g->describe(g->obj, what, sizeof(what));
    return cuc__seterr(CUC_E_TIMEOUT, "%zu lease%s on %s still held after %d ms "
                       "(waiting for at most %zu); the importers must free what "
                       "they imported, or their channel must close", n,
                       n == 1 ? "" : "s", what, timeout_ms, max_left);
}

/* Looks a few times, yielding, then sleeps until the count is low enough
 * or the deadline passes: an end another thread is about to notice (a
 * share point's) is often microseconds away, and a sleeper on a VM wakes
 * tens of microseconds late. */
static void sleep_on(const struct cuc__lease_gauge *g, size_t max_left, int64_t deadline)
{
    for (int i = 0; i < SPIN_LOOKS && current(g) > max_left; i++)
        sched_yield();
    pthread_mutex_lock(g->lock);
    while (*g->count > max_left)
        if (cuc__cond_wait_until(g->cond, g->lock, deadline))
            break;
    pthread_mutex_unlock(g->lock);
}

/* The one loop. g NULL: the caller's object was NULL. */
static int wait_for(const struct cuc__lease_gauge *g, cuc_channel *ch, size_t max_left,
                    int timeout_ms, const char *fn)
{
    int64_t deadline = cuc__deadline(timeout_ms);

    if (!g || timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "%s: %s", fn,
                           g ? "timeout below -1" : "NULL argument");
    if (ch && cuc__link_check_owner(ch->link, fn))
        return CUC_E_FORKED;
    for (;;) {
        size_t n = current(g);
        int left, rc;

        if (n <= max_left)
            return 0;
        left = cuc__remaining(deadline);
        if (left == 0)
            return timed_out(n, g, timeout_ms, max_left);
        if (!ch) {
            /* Lingering links (destroyed channels) are read here; while
             * another thread reads them, or none lingers, the ends it
             * notices wake the gauge. */
            int slice = left < 0 || left > PUMP_SLICE_MS ? PUMP_SLICE_MS : left;
            rc = cuc__linger_pump(slice);
            if (rc == CUC_E_BUSY || rc == CUC_E_NOT_FOUND)
                sleep_on(g, max_left, cuc__deadline(slice));
            continue;
        }
        rc = cuc_channel_pump(ch, left < 0 || left > PUMP_SLICE_MS ? PUMP_SLICE_MS : left);
        if (rc == CUC_E_PEER_CLOSED)
            ch = NULL; /* its leases ended; others may end elsewhere */
        else if (rc && rc != CUC_E_TIMEOUT)
            return current(g) <= max_left ? 0 : rc;
    }
}

int cuc_channel_lease_wait(cuc_channel *ch, size_t max_left, int timeout_ms)
{
    struct cuc__lease_gauge g;

    return wait_for(ch ? cuc__leases_gauge(ch->leases, &g) : NULL, ch, max_left,
                    timeout_ms, "cuc_channel_lease_wait");
}

int cuc_pool_lease_wait(cuc_pool *p, cuc_channel *ch, size_t max_left, int timeout_ms)
{
    struct cuc__lease_gauge g;

    int rc = wait_for(p ? cuc__pool_gauge(p, &g) : NULL, ch, max_left, timeout_ms,
                      "cuc_pool_lease_wait");

    return rc ? rc : cuc__pool_take_lost(p);
}

int cuc_buffer_lease_wait(cuc_buffer *b, cuc_channel *ch, size_t max_left, int timeout_ms)
{
    struct cuc__lease_gauge g;

    return wait_for(b ? cuc__buffer_gauge(b, &g) : NULL, ch, max_left, timeout_ms,
                    "cuc_buffer_lease_wait");
}

int cuc_vmm_lease_wait(cuc_vmm *v, cuc_channel *ch, size_t max_left, int timeout_ms)
{
    struct cuc__lease_gauge g;

    return wait_for(v ? cuc__vmm_gauge(v, &g) : NULL, ch, max_left, timeout_ms,
                    "cuc_vmm_lease_wait");
}
