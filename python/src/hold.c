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
 * have ended. A claim can still be lost on the way: a message that came
 * when this process had no fd free for its memfd is dropped
 * (CUC_E_LIMIT), unread. Every hold unclaimed at that moment is then
 * kept (hold_keep_unclaimed): it no longer ends at its time, but when a
 * release of its token comes (the receiver whose claim was lost is done
 * with it), or at exit; memory is freed late, never under a mapping.
 *
 * Several receivers of the same bytes (one pickle loaded by two
 * processes): the first claim turns the hold into that connection's lease;
 * each later claim of the token, while any lease of it (or the hold) is
 * still there, gives its connection a lease of its own (another reference:
 * the buffer stays allocated until every one has ended). A claim that
 * arrives after the last of them ended finds nothing: the memory may have
 * been freed or reused under a mapping the receiver already made, so the
 * share point tells it (a stale notice, share.c) and the receiver's buffer
 * raises from then on. A release ends the releasing connection's own lease
 * only (a receiver that cannot import claims and releases), so no
 * connection ends another's.
 *
 * The table is touched by Python threads (pickling, counts) and by the
 * serving threads, which never touch Python: one mutex, taken before
 * claim.c's (a lease added counts its user there under it), never after. */
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "cucore_py.h"

#define TOKEN_SEQ_BITS 20 /* a token: (claim-synchronously-after ms << 20) | sequence */
#define DEFAULT_HOLD_MS 60000
#define MAX_HOLD_MS 2147483648L

/* A pool's holds and leases, counted as they come and go, so that a
 * lease wait neither walks every list nor wakes for each release: its
 * waiters are woken once the count is down to what one of them waits for. */
struct pool_count {
    struct keynode node; /* keyed by the pool's address (never dereferenced) */
    size_t n;            /* holds and leases of the pool's buffers */
    size_t dropping;     /* ended, their buffers not yet dropped (end_all):
                          * counted with n until then, so that a waiter
                          * finds the frees their ends allowed done */
    size_t waiters;      /* hold_wait() calls on it: it stays while any */
    size_t wake_at;      /* the largest count a waiter waits for */
};

struct hold {
    struct keynode node;      /* keyed by the token */
    struct hold *prev, *next; /* the unclaimed FIFO, or its lessee's list;
                               * once out of the table, the ended list */
    cuc_buffer *b;            /* a reference */
    struct uses u;            /* the imports it is a user of (claim.c: A -> B -> C) */
    struct lessee *owner;     /* NULL while unclaimed */
    struct pool_count *pc;    /* its pool's count, of which it is one */
    int64_t expires_ms;
    int kept;                 /* unclaimed, on the kept list: no time limit */
};

struct lessee {
    struct hold head; /* the list of its leases (a sentinel) */
    struct lessee *prev, *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct keytab table, pools;
static struct hold unclaimed = {{NULL, 0}, &unclaimed, &unclaimed, NULL, {NULL, NULL}, NULL, NULL, 0, 0};
/* Unclaimed holds that a lost message may have claimed (hold_keep_unclaimed). */
static struct hold kept = {{NULL, 0}, &kept, &kept, NULL, {NULL, NULL}, NULL, NULL, 0, 0};
static struct lessee lessees = {.prev = &lessees, .next = &lessees};
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

        /* at most 2^31 ms (24.8 days): a token keeps the time in its high
         * bits, and bit 63 would read as a release */
        hold_ms = v > 0 ? (v < MAX_HOLD_MS ? v : MAX_HOLD_MS) : DEFAULT_HOLD_MS;
    }
    return hold_ms;
}

/* The node of token leased to owner (NULL: the unclaimed hold); with
 * any, the first node of token whoever holds it. */
static struct hold *find_locked(uint64_t token, const struct lessee *owner, int any)
{
    struct keynode *n = keytab_first(&table, token);

    while (n && !any && ((struct hold *)n)->owner != owner)
        n = keytab_next(n);
    return (struct hold *)n;
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

static uint64_t pool_key(const cuc_pool *pool)
{
    return (uint64_t)(uintptr_t)pool;
}

static struct pool_count *pool_count_find_locked(const cuc_pool *pool)
{
    return (struct pool_count *)keytab_first(&pools, pool_key(pool));
}

/* Counts h (h->b set) in its pool's count; -1 on no memory. */
static int pool_count_enter_locked(struct hold *h)
{
    const cuc_pool *pool = cuc_buffer_pool(h->b);
    struct pool_count *pc = pool_count_find_locked(pool);

    if (!pc) {
        pc = calloc(1, sizeof(*pc));
        if (!pc)
            return -1;
        pc->node.key = pool_key(pool);
        if (keytab_insert(&pools, &pc->node)) {
            free(pc);
            return -1;
        }
    }
    pc->n++;
    h->pc = pc;
    return 0;
}

/* Into the table (h's token and buffer set) and its pool's count; -1 on
 * no memory, with neither changed. */
static int insert_locked(struct hold *h)
{
    if (keytab_insert(&table, &h->node))
        return -1;
    if (pool_count_enter_locked(h) == 0)
        return 0;
    keytab_remove(&table, &h->node);
    return -1;
}

/* What a pool's lease count and its waiters see: its holds and leases,
 * and those ended whose buffers are not yet dropped. */
static size_t counted(const struct pool_count *pc)
{
    return pc->n + pc->dropping;
}

/* A count with no holds, no waiters and no drops to come goes. */
static void pool_count_drop_locked(struct pool_count *pc)
{
    if (pc->n || pc->waiters || pc->dropping)
        return;
    keytab_remove(&pools, &pc->node);
    free(pc);
}

/* Out of the table and its list; the caller drops h->b unlocked (end_all()). */
static void remove_locked(struct hold *h)
{
    struct pool_count *pc = h->pc;

    keytab_remove(&table, &h->node);
    unlink_list(h);
    pc->n--;
    pc->dropping++; /* end_all() counts it off, once h is dropped */
}

/* Drops what the holds of list kept (unlocked: a last reference frees),
 * then counts them off and wakes the lease waiters whose count that
 * reached: after the drops, so that a waiter finds the frees those ends
 * allowed already done (or failed, which its wait reports). */
static void end_all(struct hold *list)
{
    struct hold *h, *next;
    int wake = 0;

    if (!list)
        return;
    for (h = list; h; h = h->next)
        claim_finish(h->b, h->u, NULL); /* our claims on A after our mapping went */
    pthread_mutex_lock(&mu);
    for (h = list; h; h = next) {
        struct pool_count *pc = h->pc;

        next = h->next;
        pc->dropping--;
        if (pc->waiters && counted(pc) <= pc->wake_at)
            wake = 1;
        pool_count_drop_locked(pc);
        free(h);
    }
    if (wake)
        pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&mu);
}

/* Unclaimed holds past their time, onto the list *ended. */
static void expire_locked(int64_t now, struct hold **ended)
{
    while (unclaimed.next != &unclaimed && unclaimed.next->expires_ms <= now) {
        struct hold *h = unclaimed.next;

        remove_locked(h);
        h->next = *ended;
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

int hold_new(cuc_buffer *b, struct uses u, uint64_t *token)
{
    struct hold *h = malloc(sizeof(*h)), *ended = NULL;
    int64_t now = hold_now_ms(), t = hold_time();

    if (!h)
        return CUC_E_NOMEM;
    pthread_mutex_lock(&mu);
    expire_locked(now, &ended);
    h->node.key = ((uint64_t)(now + t / 2) << TOKEN_SEQ_BITS) |
                  (++seq & ((1u << TOKEN_SEQ_BITS) - 1));
    h->b = b;
    if (insert_locked(h)) {
        pthread_mutex_unlock(&mu);
        free(h);
        end_all(ended);
        return CUC_E_NOMEM;
    }
    h->b = cuc_buffer_ref(b);
    h->u = u;
    h->owner = NULL;
    h->expires_ms = now + t;
    h->kept = 0;
    link_tail(&unclaimed, h);
    *token = h->node.key;
    claim_use(u); /* under mu: a sweep that ends h must find its user counted */
    pthread_mutex_unlock(&mu);
    end_all(ended);
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
        h->next = ended;
        ended = h;
    }
    l->prev->next = l->next;
    l->next->prev = l->prev;
    pthread_mutex_unlock(&mu);
    end_all(ended);
    free(l);
}

/* Another lease of token for l, beside the lease other holds (a second
 * receiver of the same bytes): NULL on no memory. It is counted a user of
 * the imports (claim.c) before mu is let go, so that other's end cannot
 * release our own claims upstream in between (A -> B -> C). */
static struct hold *add_lease_locked(struct lessee *l, struct hold *other)
{
    struct hold *h;

    h = malloc(sizeof(*h));
    if (!h)
        return NULL;
    h->node.key = other->node.key;
    h->b = other->b;
    if (insert_locked(h)) {
        free(h);
        return NULL;
    }
    h->b = cuc_buffer_ref(other->b);
    h->u = other->u;
    h->owner = l;
    h->expires_ms = other->expires_ms;
    h->kept = 0;
    link_tail(&l->head, h);
    claim_use(h->u);
    return h;
}

/* One claim or release of token by l under mu (hold_apply says what);
 * a lease it ends goes onto *ended. */
static int apply_locked(struct lessee *l, uint64_t token, int claim, struct hold **ended)
{
    struct hold *h = find_locked(token, l, 0);

    if (claim && l && h)
        return 1;
    if (claim && l) {
        h = find_locked(token, NULL, 0);
        if (h) {
            unlink_list(h);
            h->owner = l;
            h->kept = 0;
            link_tail(&l->head, h);
            return 0;
        }
        h = find_locked(token, NULL, 1);
        if (!h)
            return CUC_E_NOT_FOUND;
        return add_lease_locked(l, h) ? 0 : CUC_E_NOMEM;
    }
    if (!h && l && (h = find_locked(token, NULL, 0)) != NULL && !h->kept)
        h = NULL; /* a release of what l never claimed leaves the hold alone */
    if (!h)
        return CUC_E_NOT_FOUND;
    remove_locked(h);
    h->next = *ended;
    *ended = h;
    return 0;
}

void hold_keep_unclaimed(void)
{
    pthread_mutex_lock(&mu);
    while (unclaimed.next != &unclaimed) {
        struct hold *h = unclaimed.next;

        unlink_list(h);
        h->kept = 1;
        link_tail(&kept, h);
    }
    pthread_mutex_unlock(&mu);
}

/* A claim gives l a lease of token: the unclaimed hold becomes it, or,
 * when another connection claimed the token first and its lease is still
 * there, l gets one of its own. 0; 1 if l holds one already;
 * CUC_E_NOT_FOUND for a token that has no node left (its hold and every
 * lease ended, or it never was one of ours); CUC_E_NOMEM. A release
 * (claim 0) ends l's lease of the token, or, when l has none, the token's
 * hold if it is kept (l's claim of it was lost); with l NULL (the
 * exporting process loading its own pickle) the unclaimed hold. */
int hold_apply(struct lessee *l, uint64_t token, int claim)
{
    struct hold *ended = NULL;
    int rc;

    pthread_mutex_lock(&mu);
    expire_locked(hold_now_ms(), &ended);
    rc = apply_locked(l, token, claim, &ended);
    pthread_mutex_unlock(&mu);
    end_all(ended);
    return rc;
}

/* A connection's lease ops, as hold_apply each (a release has RELEASE_BIT),
 * a slice of them a lock: the claims that found nothing are moved to the
 * front of ops, *nstale of them. Their buffers are dropped after. */
#define APPLY_SLICE 256
void hold_apply_many(struct lessee *l, uint64_t *ops, size_t n, size_t *nstale)
{
    struct hold *ended = NULL;
    size_t i = 0, k = 0;

    while (i < n) {
        size_t stop = n - i < APPLY_SLICE ? n : i + APPLY_SLICE;

        pthread_mutex_lock(&mu);
        expire_locked(hold_now_ms(), &ended);
        for (; i < stop; i++) {
            int claim = !(ops[i] & RELEASE_BIT);

            if (apply_locked(l, ops[i] & ~RELEASE_BIT, claim, &ended) == CUC_E_NOT_FOUND && claim)
                ops[k++] = ops[i]; /* in place: ops[i] was read */
        }
        pthread_mutex_unlock(&mu);
    }
    end_all(ended);
    *nstale = k;
}

/* The holds of the list at head, of buffer b (NULL: all of them). */
static size_t list_count_locked(const struct hold *head, const cuc_buffer *b)
{
    const struct hold *h;
    size_t n = 0;

    for (h = head->next; h != head; h = h->next)
        n += !b || h->b == b;
    return n;
}

/* Holds and leases of buffer b: every list is walked (a test asks). */
static size_t count_buffer_locked(const cuc_buffer *b)
{
    const struct lessee *l;
    size_t n = list_count_locked(&unclaimed, b) + list_count_locked(&kept, b);

    for (l = lessees.next; l != &lessees; l = l->next)
        n += list_count_locked(&l->head, b);
    return n;
}

static size_t count_pool_locked(const cuc_pool *pool)
{
    const struct pool_count *pc = pool_count_find_locked(pool);

    return pc ? counted(pc) : 0;
}

size_t hold_count(const cuc_buffer *b, const cuc_pool *pool)
{
    size_t n;

    hold_sweep();
    pthread_mutex_lock(&mu);
    n = b ? count_buffer_locked(b) : count_pool_locked(pool);
    pthread_mutex_unlock(&mu);
    return n;
}

void hold_stats(size_t *nunclaimed, size_t *leased)
{
    size_t n;

    hold_sweep();
    pthread_mutex_lock(&mu);
    n = list_count_locked(&unclaimed, NULL) + list_count_locked(&kept, NULL);
    *nunclaimed = n;
    *leased = table.count - n;
    pthread_mutex_unlock(&mu);
}

/* Looks again and again, yielding the CPU between looks (mu let go), until
 * the wait is over or the clock (hold_now_ms) reaches until. */
static void spin_locked(const struct pool_count *pc, size_t max_left, int64_t until)
{
    while (counted(pc) > max_left && hold_now_ms() < until) {
        pthread_mutex_unlock(&mu);
        sched_yield();
        pthread_mutex_lock(&mu);
    }
}

/* Waits (the GIL released by the caller) up to ms for the holds and
 * leases of pool (those ended counted until their buffers are dropped) to
 * be at most max_left; the count left. Until the clock (hold_now_ms)
 * reaches spin_until it looks in a loop, yielding the CPU; then it
 * sleeps, woken once the count is down to it (end_all), not at each
 * release. */
size_t hold_wait(const cuc_pool *pool, size_t max_left, int ms, int64_t spin_until)
{
    struct pool_count *pc;
    struct timespec ts;
    int64_t until;
    size_t n = 0;

    hold_sweep();
    pthread_mutex_lock(&mu);
    pc = pool_count_find_locked(pool);
    if (pc && counted(pc) > max_left && ms > 0) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(ms % 1000) * 1000000;
        ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pc->waiters++;
        pc->wake_at = max_left > pc->wake_at ? max_left : pc->wake_at;
        until = hold_now_ms() + ms;
        spin_locked(pc, max_left, spin_until < until ? spin_until : until);
        while (counted(pc) > max_left &&
               pthread_cond_timedwait(&changed, &mu, &ts) == 0)
            ;
        if (--pc->waiters == 0)
            pc->wake_at = 0;
    }
    if (pc) {
        n = counted(pc);
        pool_count_drop_locked(pc);
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
    table = pools = (struct keytab){0};
    unclaimed.prev = unclaimed.next = &unclaimed;
    kept.prev = kept.next = &kept;
    lessees.prev = lessees.next = &lessees;
}
