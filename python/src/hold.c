/* The exporter's holds and leases of buffers shared through pickle.
 *
 * A buffer's pickle carries its record bytes (no fd: the receiver imports
 * the pointer itself, once it has the pool). So that the memory stays
 * allocated until the receiver has it, each pickle takes a hold: a
 * reference to the buffer under a fresh token, which the record carries
 * as its lease id. The receiver claims the token on its kept channel to
 * this process's share point (a message it does not wait for); the
 * connection's serving thread then turns the hold into a lease of that
 * connection, which ends when the receiver releases it (its last Python
 * reference to the buffer went) or when the connection closes (it died).
 *
 * Policy for holds never claimed (a pickle never loaded, a receiver that
 * died before its claim went out): a hold lasts HOLD_MS (CUCORE_SHARE_HOLD_MS,
 * default 60 s) and is then dropped at the next share-point activity
 * (a pickle, a claim, a lease count or wait), or when this process exits.
 * The token says when a receiver must claim synchronously instead (half
 * of that time: claim.c), so no receiver imports memory whose hold may
 * have ended. A token claimed once is a lease of one connection: its bytes
 * loaded again by another process get no lease (pickle once per receiver).
 *
 * The table is touched by Python threads (pickling, counts) and by the
 * serving threads, which never touch Python: one mutex. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cucore_py.h"

#define TOKEN_SEQ_BITS 20 /* a token: (claim-synchronously-after ms << 20) | sequence */
#define DEFAULT_HOLD_MS 60000

struct hold {
    struct hold *chain;       /* the token hash's chain */
    struct hold *prev, *next; /* the unclaimed FIFO, or its lessee's list */
    uint64_t token;
    cuc_buffer *b;            /* a reference */
    struct lessee *owner;     /* NULL while unclaimed */
    int64_t expires_ms;
};

struct lessee {
    struct hold head; /* the list of its leases (a sentinel) */
    struct lessee *prev, *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct hold **table;
static size_t nbuckets, nholds;
static struct hold unclaimed = {NULL, &unclaimed, &unclaimed, 0, NULL, NULL, 0};
static struct lessee lessees = {{0}, &lessees, &lessees};
static uint64_t seq;
static int64_t hold_ms = -1;

int64_t hold_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_BOOTTIME, &ts); /* one clock for every process of the host */
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t hold_sync_after_ms(uint64_t token)
{
    return (int64_t)(token >> TOKEN_SEQ_BITS);
}

static int64_t hold_time(void)
{
    if (hold_ms < 0) {
        const char *e = getenv("CUCORE_SHARE_HOLD_MS");
        long v = e ? strtol(e, NULL, 10) : 0;

        hold_ms = v > 0 ? v : DEFAULT_HOLD_MS;
    }
    return hold_ms;
}

static size_t bucket(uint64_t token)
{
    return (size_t)((token * 0x9E3779B97F4A7C15ull) >> 32) & (nbuckets - 1);
}

static int grow_locked(void)
{
    size_t n = nbuckets ? nbuckets * 2 : 1024, old = nbuckets, i;
    struct hold **t = calloc(n, sizeof(*t)), **was = table, *h, *next;

    if (!t)
        return -1;
    table = t;
    nbuckets = n;
    for (i = 0; i < old; i++)
        for (h = was[i]; h; h = next) {
            next = h->chain;
            h->chain = table[bucket(h->token)];
            table[bucket(h->token)] = h;
        }
    free(was);
    return 0;
}

static struct hold *find_locked(uint64_t token)
{
    struct hold *h = nbuckets ? table[bucket(token)] : NULL;

    while (h && h->token != token)
        h = h->chain;
    return h;
}

static void unlink_list(struct hold *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
}

static void link_tail(struct hold *head, struct hold *h)
{
    h->prev = head->prev;
    h->next = head;
    head->prev->next = h;
    head->prev = h;
}

/* Out of the table and its list; the caller drops h->b unlocked (end()). */
static void remove_locked(struct hold *h)
{
    struct hold **p = &table[bucket(h->token)];

    while (*p != h)
        p = &(*p)->chain;
    *p = h->chain;
    unlink_list(h);
    nholds--;
    pthread_cond_broadcast(&changed);
}

/* Drops what the holds of list kept (unlocked: a last reference frees). */
static void end_all(struct hold *list)
{
    struct hold *h, *next;

    for (h = list; h; h = next) {
        struct imp *e = claim_downstream_end(h->b);

        next = h->chain;
        cuc_buffer_unref_async(h->b, NULL);
        claim_release(e); /* after our mapping went: A -> B -> C */
        free(h);
    }
}

/* Unclaimed holds past their time, onto *ended (chained). */
static void expire_locked(int64_t now, struct hold **ended)
{
    while (unclaimed.next != &unclaimed && unclaimed.next->expires_ms <= now) {
        struct hold *h = unclaimed.next;

        remove_locked(h);
        h->chain = *ended;
        *ended = h;
    }
}

void hold_sweep(void)
{
    struct hold *ended = NULL;

    pthread_mutex_lock(&mu);
    expire_locked(hold_now_ms(), &ended);
    pthread_mutex_unlock(&mu);
    end_all(ended);
}

int hold_new(cuc_buffer *b, uint64_t *token)
{
    struct hold *h = malloc(sizeof(*h)), *ended = NULL;
    int64_t now = hold_now_ms(), t = hold_time();

    if (!h)
        return CUC_E_NOMEM;
    pthread_mutex_lock(&mu);
    expire_locked(now, &ended);
    if (nholds >= nbuckets && grow_locked()) {
        pthread_mutex_unlock(&mu);
        free(h);
        end_all(ended);
        return CUC_E_NOMEM;
    }
    h->token = ((uint64_t)(now + t / 2) << TOKEN_SEQ_BITS) |
               (++seq & ((1u << TOKEN_SEQ_BITS) - 1));
    h->b = cuc_buffer_ref(b);
    h->owner = NULL;
    h->expires_ms = now + t;
    h->chain = table[bucket(h->token)];
    table[bucket(h->token)] = h;
    link_tail(&unclaimed, h);
    nholds++;
    pthread_mutex_unlock(&mu);
    claim_downstream_begin(b);
    end_all(ended);
    *token = h->token;
    return 0;
}

struct lessee *hold_lessee_new(void)
{
    struct lessee *l = calloc(1, sizeof(*l));

    if (!l)
        return NULL;
    l->head.prev = l->head.next = &l->head;
    pthread_mutex_lock(&mu);
    l->prev = lessees.prev;
    l->next = &lessees;
    lessees.prev->next = l;
    lessees.prev = l;
    pthread_mutex_unlock(&mu);
    return l;
}

/* The connection closed: its leases end, and it goes. */
void hold_lessee_end(struct lessee *l)
{
    struct hold *ended = NULL;

    pthread_mutex_lock(&mu);
    while (l->head.next != &l->head) {
        struct hold *h = l->head.next;

        remove_locked(h);
        h->chain = ended;
        ended = h;
    }
    l->prev->next = l->next;
    l->next->prev = l->prev;
    pthread_mutex_unlock(&mu);
    end_all(ended);
    free(l);
}

/* A claim turns an unclaimed hold into a lease of l: 0, or CUC_E_NOT_FOUND
 * for a token that is not an unclaimed hold (expired, claimed by another
 * connection) and 1 for one l holds already. A release (claim 0) ends l's
 * lease of the token, or the hold while unclaimed (a receiver that could
 * not import it gives it back). */
int hold_apply(struct lessee *l, uint64_t token, int claim)
{
    struct hold *h, *ended = NULL;
    int rc = 0;

    pthread_mutex_lock(&mu);
    expire_locked(hold_now_ms(), &ended);
    h = find_locked(token);
    if (!h || (h->owner && h->owner != l)) {
        rc = CUC_E_NOT_FOUND;
    } else if (claim && h->owner == l) {
        rc = 1;
    } else if (claim) {
        unlink_list(h);
        h->owner = l;
        link_tail(&l->head, h);
    } else {
        remove_locked(h);
        h->chain = ended;
        ended = h;
    }
    pthread_mutex_unlock(&mu);
    end_all(ended);
    return rc;
}

/* Holds and leases of buffer b (or, with b NULL, of the buffers of pool):
 * every list is walked, which is fine for a count a test or a wait asks. */
static size_t count_locked(const cuc_buffer *b, const cuc_pool *pool)
{
    const struct lessee *l;
    const struct hold *h, *head;
    size_t n = 0;

    for (l = &lessees;; l = l->next) {
        head = l == &lessees ? &unclaimed : &l->head;
        for (h = head->next; h != head; h = h->next)
            n += b ? h->b == b : cuc_buffer_pool(h->b) == pool;
        if (l->next == &lessees)
            break;
    }
    return n;
}

size_t hold_count(const cuc_buffer *b, const cuc_pool *pool)
{
    size_t n;

    hold_sweep();
    pthread_mutex_lock(&mu);
    n = count_locked(b, pool);
    pthread_mutex_unlock(&mu);
    return n;
}

void hold_stats(size_t *nunclaimed, size_t *leased)
{
    const struct hold *h;
    size_t n = 0;

    hold_sweep();
    pthread_mutex_lock(&mu);
    for (h = unclaimed.next; h != &unclaimed; h = h->next)
        n++;
    *nunclaimed = n;
    *leased = nholds - n;
    pthread_mutex_unlock(&mu);
}

/* Waits (the GIL released by the caller) up to ms for the holds and
 * leases of pool to be at most max_left; the count left. */
size_t hold_wait(const cuc_pool *pool, size_t max_left, int ms)
{
    struct timespec ts;
    size_t n;

    hold_sweep();
    pthread_mutex_lock(&mu);
    n = count_locked(NULL, pool);
    if (n > max_left && ms > 0) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(ms % 1000) * 1000000;
        ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&changed, &mu, &ts);
        n = count_locked(NULL, pool);
    }
    pthread_mutex_unlock(&mu);
    return n;
}

/* A forked child: the parent's holds are the parent's (their buffers are
 * inert here); the child starts with none. The memory is leaked in the
 * child only, never freed from it. */
void hold_after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&changed, NULL);
    table = NULL;
    nbuckets = nholds = 0;
    unclaimed.prev = unclaimed.next = &unclaimed;
    lessees.prev = lessees.next = &lessees;
}
