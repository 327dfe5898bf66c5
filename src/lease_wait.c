/* Waiting for the leases of a pool's buffers to end: pumping the channel
 * the caller names, or sleeping on the pool's condition variable while
 * other threads process the channels. */
#include "memory_impl.h"
#include "channel_impl.h"

#include <time.h>

/* pool->lock held; 0 when woken, CUC_E_TIMEOUT at the deadline. */
static int sleep_locked(cuc_pool *pool, int64_t deadline)
{
    struct timespec ts;

    if (deadline < 0) {
        pthread_cond_wait(&pool->cond, &pool->lock);
        return 0;
    }
    ts.tv_sec = (time_t)(deadline / 1000);
    ts.tv_nsec = (long)(deadline % 1000) * 1000000L;
    return pthread_cond_timedwait(&pool->cond, &pool->lock, &ts) == ETIMEDOUT ? CUC_E_TIMEOUT
                                                                                : 0;
}

static int timed_out(size_t n, const char *what, int timeout_ms, size_t max_left)
{
    return cuc__seterr(CUC_E_TIMEOUT, "%zu lease%s on %s still held after %d ms "
                       "(waiting for at most %zu); the importers must free what "
                       "they imported, or their channel must close", n,
                       n == 1 ? "" : "s", what, timeout_ms, max_left);
}

int cuc__lease_wait(cuc_pool *pool, const size_t *count, cuc_channel *ch,
                    size_t max_left, int timeout_ms, const char *what)
{
    int64_t deadline = cuc__deadline(timeout_ms);
    size_t n;
    int rc;

    for (;;) {
        pthread_mutex_lock(&pool->lock);
        n = *count;
        if (n <= max_left) {
            pthread_mutex_unlock(&pool->lock);
            return 0;
        }
        if (!ch) {
            rc = sleep_locked(pool, deadline);
            n = *count;
            pthread_mutex_unlock(&pool->lock);
            if (rc && n > max_left)
                return timed_out(n, what, timeout_ms, max_left);
            continue;
        }
        pthread_mutex_unlock(&pool->lock);
        rc = cuc_channel_pump(ch, cuc__remaining(deadline));
        if (rc == CUC_E_PEER_CLOSED) {
            /* its leases have ended; others are other threads' business */
            ch = NULL;
            continue;
        }
        if (rc == 0 && deadline >= 0 && cuc__remaining(deadline) == 0)
            rc = CUC_E_TIMEOUT; /* messages keep coming, but time is up */
        if (rc == CUC_E_TIMEOUT) {
            pthread_mutex_lock(&pool->lock);
            n = *count;
            pthread_mutex_unlock(&pool->lock);
            if (n <= max_left)
                return 0;
            return timed_out(n, what, timeout_ms, max_left);
        }
        if (rc)
            return rc;
    }
}
