/* The importer's claims on buffers that arrived by pickle (hold.c has the
 * exporter's side).
 *
 * Each buffer imported through a pickle remembers the (exporter, token)
 * claims it arrived under, and counts its users: the references of this
 * process that map its memory (its Python object, each Python view made
 * from it, each hold or lease of it given out from here: A -> B -> C). The claims and, later, their releases go to
 * the exporter on the kept channel (share.c) without waiting for an
 * answer: they are queued here and a background thread sends what is
 * queued as one message per exporter, so that a list of n buffers costs a
 * few messages, not n (Buffer.close_many drops its list and sends their
 * releases itself, unless that thread is sending at the time). A buffer's
 * claims are released when its last user has gone: a user is counted off
 * only after its reference was dropped (the last one unmaps the memory and
 * waits for its stream first), and a reference with leases of its own
 * (sent on through a cucore Channel from here) is dropped only once those
 * ended: until then it is parked (park.c).
 *
 * A claim that reached the exporter after every hold and lease of its
 * token had ended comes back in a stale notice (share.c): the buffer it
 * was imported as is marked, and its uses raise from then on. */
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "cucore_py.h"

struct claim {
    struct conn *c;
    uint64_t token;
};

struct imp {
    struct keynode node; /* keyed by the buffer's address (never dereferenced:
                          * its users may outlive it) */
    size_t users;        /* references that map it, not yet dropped */
    size_t n, cap;
    struct claim *claims;
    uint64_t stale;      /* a claim the exporter found nothing for, or 0 */
    long stale_pid;
    int kept;            /* a drop of it failed: its claims are never released */
};

struct queue {
    struct queue *next;
    struct conn *c;
    uint64_t *ops;
    size_t n, cap;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, idle = PTHREAD_COND_INITIALIZER;
static struct keytab table;
static struct queue *queues;
static size_t queued; /* ops and drops waiting, over all queues */
static uint64_t arrived; /* ops and drops ever queued: polled unlocked, atomic */
static int flushing, started, asleep, closing;
static struct drop *drops;
static size_t ndrops, drops_cap;
static size_t nstale; /* entries marked stale: buffer uses look only then */

/* A list being unpickled (or closed) makes its ops a few us apart: the
 * thread waits while they keep coming, so that they go as one message,
 * and a lone op waits one step, not the whole bound. After a round it
 * watches a while for the next burst (the closes that follow a list's
 * loads) before it sleeps. It polls rather than sleeps for these: on the
 * H200's VM a thread put to sleep for 20 us, or woken by a signal, ran
 * again tens of microseconds late, and the lease end waits for it. */
#define BATCH_STEP_US 20
#define BATCH_MAX_US 200
#define BATCH_ENOUGH 32
#define LINGER_US 50

static void claim_release(struct imp *e);

static uint64_t key_of(const cuc_buffer *b)
{
    return (uint64_t)(uintptr_t)b;
}

static struct imp *find_locked(const cuc_buffer *b)
{
    return (struct imp *)keytab_first(&table, key_of(b));
}

/* ---- the queue and its thread ---- */

static int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Polls, without the lock, until an op arrives after the count seen or
 * the time limit (now_us()) passes: 1 if one came. */
static int poll_arrival(uint64_t seen, int64_t limit)
{
    for (;;) {
        if (__atomic_load_n(&arrived, __ATOMIC_RELAXED) != seen)
            return 1;
        if (now_us() >= limit)
            return 0;
        sched_yield();
    }
}

/* No memory for a batch: one cuc_buffer_unref_async() each. */
static int drop_each(const struct drop *d, size_t n, cuc_stream *s)
{
    size_t i;
    int rc = 0, one;

    for (i = 0; i < n; i++)
        if (d[i].b && (one = cuc_buffer_unref_async(d[i].b, s)) && !rc)
            rc = one;
    return rc;
}

/* Drops the n references of d together (one synchronize a stream,
 * cuc_buffer_unref_many_async) on stream s, then counts them off their
 * imports (whose claims, released, go out with the next ops sent);
 * those with leases of their own are parked instead. The first failure,
 * or 0: every reference is dropped whatever happens. After a failure no
 * buffer of the batch tells which of them failed, so none of their claims
 * is released (claim_unuse). */
int claim_drop_many(struct drop *d, size_t n, cuc_stream *s)
{
    cuc_buffer **bufs;
    size_t i;
    int rc = CUC_E_NOMEM;

    if (!n)
        return 0;
    for (i = 0; i < n; i++)
        if (park_if_leased(d[i].b, d[i].u))
            d[i].b = NULL; /* sent on from here: park.c drops it */
    bufs = calloc(n, sizeof(*bufs));
    if (bufs) {
        for (i = 0; i < n; i++)
            bufs[i] = d[i].b;
        rc = cuc_buffer_unref_many_async(bufs, n, s);
        free(bufs);
    }
    if (rc == CUC_E_NOMEM) /* no batch: nothing was dropped */
        rc = drop_each(d, n, s);
    for (i = 0; i < n; i++)
        if (d[i].b)
            claim_unuse(d[i].u, rc); /* after the unmap: the exporter may free then */
    return rc;
}

/* The buffers closed since the last round, dropped together. */
static void drop_all_locked(void)
{
    struct drop *d = drops;
    size_t n = ndrops;

    if (!n)
        return;
    drops = NULL;
    ndrops = drops_cap = 0;
    queued -= n;
    pthread_mutex_unlock(&mu);
    claim_drop_many(d, n, NULL);
    free(d);
    pthread_mutex_lock(&mu);
}

/* Lets the ops of a burst gather: waits while a new one comes within
 * BATCH_STEP_US of the last, up to BATCH_MAX_US, unless enough are there
 * already. */
static void gather_locked(void)
{
    int64_t end = now_us() + BATCH_MAX_US, now;

    while (queued < BATCH_ENOUGH && (now = now_us()) < end) {
        uint64_t seen = arrived;
        int came;

        pthread_mutex_unlock(&mu);
        came = poll_arrival(seen, now + BATCH_STEP_US);
        pthread_mutex_lock(&mu);
        if (!came)
            break;
    }
}

/* After a round: watches LINGER_US for the next op before sleeping. */
static void linger_locked(void)
{
    uint64_t seen = arrived;

    pthread_mutex_unlock(&mu);
    poll_arrival(seen, now_us() + LINGER_US);
    pthread_mutex_lock(&mu);
}

/* Sends each exporter's queued ops as one message (mu let go around
 * each send). The caller set flushing: one sender at a time, so that the
 * ops of a token reach its exporter in the order they were queued. */
static void send_queues_locked(void)
{
    struct queue *q;

    for (q = queues; q; q = q->next) {
        uint64_t *ops = q->ops;
        size_t n = q->n;

        if (!n)
            continue;
        q->ops = NULL;
        q->n = q->cap = 0;
        queued -= n;
        pthread_mutex_unlock(&mu);
        share_conn_post(q->c, ops, n); /* one message; a gone exporter drops it */
        share_conn_drain(q->c);        /* stale notices of earlier rounds */
        free(ops);
        pthread_mutex_lock(&mu);
    }
}

static void *flush_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        if (!queued)
            linger_locked();
        while (!queued || flushing) { /* flushing: claim_send_now() is sending */
            asleep = 1;
            pthread_cond_wait(&wake, &mu);
            asleep = 0;
        }
        flushing = 1;
        gather_locked();
        drop_all_locked();
        send_queues_locked();
        flushing = 0;
        pthread_cond_broadcast(&idle);
    }
    return NULL;
}

/* Sends what is queued now on the calling thread (Buffer.close_many's
 * releases), so that they do not wait for the thread to wake, unless the
 * thread is sending already (its next round sends them) or the process
 * is exiting (claim_close: the thread's last round sends them). */
void claim_send_now(void)
{
    pthread_mutex_lock(&mu);
    if (started && !flushing && !closing) {
        flushing = 1;
        send_queues_locked();
        flushing = 0;
        pthread_cond_broadcast(&idle);
        if (queued && asleep)
            pthread_cond_signal(&wake); /* drops queued meanwhile */
    }
    pthread_mutex_unlock(&mu);
}

static int start_locked(void)
{
    if (started)
        return 0;
    started = py_thread_detached(flush_main, NULL) == 0;
    return started ? 0 : CUC_E_NOMEM;
}

static void wake_locked(void)
{
    queued++;
    __atomic_store_n(&arrived, arrived + 1, __ATOMIC_RELAXED); /* written under mu only */
    if (asleep)
        pthread_cond_signal(&wake);
}

static struct queue *queue_locked(struct conn *c)
{
    struct queue *q;

    for (q = queues; q && q->c != c; q = q->next)
        ;
    if (!q && (q = calloc(1, sizeof(*q)))) {
        q->c = c;
        q->next = queues;
        queues = q;
    }
    return q;
}

/* Queues one op for c's exporter; 0, or CUC_E_NOMEM. */
static int post_locked(struct conn *c, uint64_t op)
{
    struct queue *q = queue_locked(c);

    if (!q)
        return CUC_E_NOMEM;
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        uint64_t *ops = realloc(q->ops, cap * sizeof(*ops));

        if (!ops)
            return CUC_E_NOMEM;
        q->ops = ops;
        q->cap = cap;
    }
    if (start_locked())
        return CUC_E_NOMEM;
    q->ops[q->n++] = op;
    wake_locked();
    return 0;
}

/* b's reference (a user of the imports u) for the thread to drop with
 * the others closed meanwhile: 0, or CUC_E_NOMEM (the caller drops it now:
 * claim_finish). */
int claim_drop_later(cuc_buffer *b, struct uses u)
{
    int rc = CUC_E_NOMEM;

    pthread_mutex_lock(&mu);
    if (ndrops == drops_cap) {
        size_t cap = drops_cap ? drops_cap * 2 : 256;
        struct drop *grown = realloc(drops, cap * sizeof(*grown));

        if (grown) {
            drops = grown;
            drops_cap = cap;
        }
    }
    if (!closing && ndrops < drops_cap && start_locked() == 0) {
        drops[ndrops].b = b;
        drops[ndrops++].u = u;
        wake_locked();
        rc = 0;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* At exit (the share point closing): what is queued goes now, and buffers
 * closed after this are dropped by their caller, not by a thread that the
 * interpreter's end might cut short. */
void claim_close(void)
{
    pthread_mutex_lock(&mu);
    closing = 1;
    pthread_mutex_unlock(&mu);
    claim_flush();
}

/* Waits until every op queued so far has been sent (the GIL released). */
void claim_flush(void)
{
    pthread_mutex_lock(&mu);
    while (started && (queued || flushing))
        pthread_cond_wait(&idle, &mu);
    pthread_mutex_unlock(&mu);
}

/* ---- imports ---- */

/* Adds the claim (c, token) to e, and with post queues it to be sent:
 * 0, or CUC_E_NOMEM with e as it was. */
static int append_locked(struct imp *e, struct conn *c, uint64_t token, int post)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 2;
        struct claim *grown = realloc(e->claims, cap * sizeof(*grown));

        if (!grown)
            return CUC_E_NOMEM;
        e->claims = grown;
        e->cap = cap;
    }
    if (post && post_locked(c, token))
        return CUC_E_NOMEM;
    e->claims[e->n].c = c;
    e->claims[e->n++].token = token;
    return 0;
}

/* b arrived under (c, token); post: the claim still has to be sent (it
 * was not made synchronously); use: a new user of b (a Python object that
 * did not have it). The same claim twice counts once. */
int claim_add(const cuc_buffer *b, struct conn *c, uint64_t token, int post, int use)
{
    struct imp *e;
    size_t i;
    int rc = 0;

    pthread_mutex_lock(&mu);
    e = find_locked(b);
    if (!e && (e = calloc(1, sizeof(*e)))) {
        e->node.key = key_of(b);
        if (keytab_insert(&table, &e->node)) {
            free(e);
            e = NULL;
        }
    }
    if (!e) {
        pthread_mutex_unlock(&mu);
        return CUC_E_NOMEM;
    }
    for (i = 0; i < e->n; i++)
        if (e->claims[i].c == c && e->claims[i].token == token)
            break; /* the same pickle loaded again */
    if (i == e->n && (rc = append_locked(e, c, token, post)) != 0) {
        if (!e->n && !e->users) { /* made for this claim: nothing else needs it */
            keytab_remove(&table, &e->node);
            free(e->claims);
            free(e);
        }
    } else if (use) {
        e->users++;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* One user more of the imports u (a view made from one, a hold given out
 * from here); the caller holds a user of them, so their entries exist. */
void claim_use(struct uses u)
{
    struct imp *e;

    pthread_mutex_lock(&mu);
    if (u.own && (e = find_locked(u.own)))
        e->users++;
    if (u.up && (e = find_locked(u.up)))
        e->users++;
    pthread_mutex_unlock(&mu);
}

static struct imp *unuse_locked(const cuc_buffer *k, int failed)
{
    struct imp *e = k ? find_locked(k) : NULL;

    if (!e)
        return NULL;
    e->kept |= failed != 0;
    if (!e->users || --e->users)
        return NULL;
    keytab_remove(&table, &e->node);
    return e;
}

/* A user of the imports u has dropped its reference (failed: the drop's
 * status): an import left with none has its claims released (the exporter
 * may free then), unless a drop of it failed: its memory may still be in
 * use here (the C library keeps a channel's leases so), and its claims
 * stay with the exporter until this process's connection to it closes. */
void claim_unuse(struct uses u, int failed)
{
    struct imp *own, *up;

    pthread_mutex_lock(&mu);
    own = unuse_locked(u.own, failed);
    up = unuse_locked(u.up, failed);
    pthread_mutex_unlock(&mu);
    claim_release(own);
    claim_release(up);
}

/* A token this process will not keep: claimed (a lease of our
 * connection, if it was not yet) and released, so that only our lease
 * ends, never another receiver's or the hold they may still claim. */
int claim_give_back(struct conn *c, uint64_t token)
{
    int rc;

    pthread_mutex_lock(&mu);
    rc = post_locked(c, token);
    if (rc == 0)
        rc = post_locked(c, token | RELEASE_BIT);
    pthread_mutex_unlock(&mu);
    return rc;
}

/* b's reference, a user of the imports u, dropped (on stream s), then
 * counted off them; while b has leases of its own (sent on a cucore
 * Channel from here) both wait for those to end (park.c). */
int claim_finish(cuc_buffer *b, struct uses u, cuc_stream *s)
{
    int rc;

    if (park_if_leased(b, u))
        return 0;
    rc = cuc_buffer_unref_async(b, s);
    claim_unuse(u, rc); /* after the unmap: the exporter may free then */
    return rc;
}

/* The exporter (pid) of connection c found nothing for these claims: the
 * buffers imported under them may map freed memory. */
struct stale_notice {
    struct conn *c;
    long pid;
    const uint64_t *tokens;
    size_t n;
};

static void mark_stale(struct keynode *node, void *arg)
{
    const struct stale_notice *sn = arg;
    struct imp *e = (struct imp *)node;

    for (size_t k = 0; k < e->n && !e->stale; k++)
        for (size_t t = 0; t < sn->n; t++)
            if (e->claims[k].c == sn->c && e->claims[k].token == sn->tokens[t]) {
                e->stale = sn->tokens[t];
                e->stale_pid = sn->pid;
                __atomic_add_fetch(&nstale, 1, __ATOMIC_RELAXED);
                break;
            }
}

void claim_mark_stale(struct conn *c, long pid, const uint64_t *tokens, size_t n)
{
    struct stale_notice sn = {c, pid, tokens, n};

    pthread_mutex_lock(&mu);
    keytab_each(&table, mark_stale, &sn);
    pthread_mutex_unlock(&mu);
}

/* 0, or -1 raised when b's claim came back stale. */
int claim_check(const cuc_buffer *b)
{
    uint64_t token = 0;
    long pid = 0;
    struct imp *e;

    if (!__atomic_load_n(&nstale, __ATOMIC_RELAXED))
        return 0;
    pthread_mutex_lock(&mu);
    e = find_locked(b);
    if (e && e->stale) {
        token = e->stale;
        pid = e->stale_pid;
    }
    pthread_mutex_unlock(&mu);
    if (!token)
        return 0;
    py_raise_fmt(CUC_E_NOT_FOUND, "this buffer's claim (token %016llx) reached process %ld, "
                 "its exporter, after every hold and lease of it had ended: the memory "
                 "it maps may have been freed or reused. The same pickle was loaded after "
                 "its other receivers released it, or past CUCORE_SHARE_HOLD_MS: pickle "
                 "the buffer for each receiver", (unsigned long long)token, pid);
    return -1;
}

/* e's claims are released (it is out of the table); NULL is a no-op. */
static void claim_release(struct imp *e)
{
    size_t i;

    if (!e)
        return;
    pthread_mutex_lock(&mu);
    for (i = 0; i < e->n && !e->kept; i++)
        post_locked(e->claims[i].c, e->claims[i].token | RELEASE_BIT);
    pthread_mutex_unlock(&mu);
    free(e->claims);
    free(e);
}

/* A forked child has no thread and sends nothing of the parent's. */
void claim_after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&idle, NULL);
    table = (struct keytab){0}; /* the parent's entries are not ours to free */
    queues = NULL;
    queued = 0;
    arrived = 0;
    flushing = started = asleep = closing = 0;
    drops = NULL;
    ndrops = drops_cap = 0;
    nstale = 0;
    park_after_fork();
}
