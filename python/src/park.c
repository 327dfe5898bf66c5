/* Imported buffers whose last Python user went while leases of their own
 * were still held: the buffer arrived by pickle and was sent on through a
 * cucore Channel (not pickle). The C library keeps such a buffer mapped
 * until those leases end (cucore/memory.h), but the claims of its pickle
 * are Python's (claim.c): releasing them now would let the exporter free
 * memory that the channel's receiver maps. So the reference is parked
 * here, still a user of its imports; one thread waits for the leases to
 * end (the channel's releases processed: by a thread receiving or pumping
 * it, or, for a channel closed here, by the wait itself reading the
 * lingering link), then drops the reference and counts it off (the last
 * user's claims are released then).
 *
 * Only a reference with leases when it is dropped is parked: the common
 * case (never sent on) costs one lease count. */
#include <stdlib.h>

#include "cucore_py.h"

#define WAIT_SLICE_MS 20 /* the wait for one buffer; the others are looked at between */

struct parked {
    struct parked *next;
    cuc_buffer *b; /* the reference, dropped once its leases end */
    struct uses u; /* counted off then */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t added = PTHREAD_COND_INITIALIZER;
static struct parked *list;
static int started;

static size_t leases_of(const cuc_buffer *b)
{
    size_t n = 0;

    return cuc_buffer_lease_count(b, &n) == 0 ? n : 0;
}

/* The parked entries whose leases have ended, out of the list. */
static struct parked *take_done_locked(void)
{
    struct parked **p = &list, *done = NULL, *q;

    while ((q = *p)) {
        if (leases_of(q->b)) {
            p = &q->next;
            continue;
        }
        *p = q->next;
        q->next = done;
        done = q;
    }
    return done;
}

static void *park_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        struct parked *done, *next;
        cuc_buffer *first;

        while (!list)
            pthread_cond_wait(&added, &mu);
        done = take_done_locked();
        first = list ? cuc_buffer_ref(list->b) : NULL;
        pthread_mutex_unlock(&mu);
        for (; done; done = next) {
            next = done->next;
            int rc = cuc_buffer_unref_async(done->b, NULL); /* the last: unmaps, waits */

            claim_unuse(done->u, rc);
            free(done);
        }
        if (first) /* pumps lingering links; wakes when the pool's leases change */
            cuc_buffer_lease_wait(first, NULL, 0, WAIT_SLICE_MS);
        cuc_buffer_unref_async(first, NULL);
        pthread_mutex_lock(&mu);
    }
    return NULL;
}

static int start_locked(void)
{
    if (started)
        return 0;
    started = py_thread_detached(park_main, NULL) == 0;
    return started ? 0 : -1;
}

/* 1 if b, a user of imports u, had leases of its own: it is parked (or,
 * with no memory to park it, kept for the process: the exporter ends the
 * claims when we exit; never released early). 0: the caller drops b and
 * counts it off now. */
int park_if_leased(cuc_buffer *b, struct uses u)
{
    struct parked *q;

    if ((!u.own && !u.up) || !leases_of(b))
        return 0;
    q = malloc(sizeof(*q));
    pthread_mutex_lock(&mu);
    if (q && start_locked() == 0) {
        q->b = b;
        q->u = u;
        q->next = list;
        list = q;
        pthread_cond_signal(&added);
        q = NULL;
    }
    pthread_mutex_unlock(&mu);
    free(q); /* unparked: b leaks and stays a user, which keeps the memory safe */
    return 1;
}

/* Parked buffers and claims, for a test (_share_stats). */
size_t park_count(void)
{
    struct parked *q;
    size_t n = 0;

    pthread_mutex_lock(&mu);
    for (q = list; q; q = q->next)
        n++;
    pthread_mutex_unlock(&mu);
    return n;
}

/* A forked child: the parent's parked buffers are the parent's (inert
 * here), and its thread did not come along. */
void park_after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&added, NULL);
    list = NULL;
    started = 0;
}
