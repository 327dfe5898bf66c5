/* The importer's claims on buffers that arrived by pickle (hold.c has the
 * exporter's side).
 *
 * Each buffer imported through a pickle remembers the (exporter, token)
 * claims it arrived under. The claims and, later, their releases go to
 * the exporter on the kept channel (share.c) without waiting for an
 * answer: they are queued here and a background thread sends what is
 * queued as one message per exporter, so that a list of n buffers costs a
 * few messages, not n. A buffer's claims are released when its Python
 * object has gone and no hold or lease of this process keeps it for a
 * process further on (A -> B -> C: B releases A's lease only after C's
 * ended), after its reference was dropped (the last one unmaps it and
 * waits for its stream first). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cucore_py.h"

#define RELEASE_BIT (1ull << 63)

struct claim {
    struct conn *c;
    uint64_t token;
};

struct imp {
    struct imp *chain;
    const cuc_buffer *b; /* the key: the Python object's or a hold's reference keeps it */
    int py;              /* a Python object has it */
    size_t down;         /* holds and leases of it given out from here */
    size_t n, cap;
    struct claim *claims;
};

struct queue {
    struct queue *next;
    struct conn *c;
    uint64_t *ops;
    size_t n, cap;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, idle = PTHREAD_COND_INITIALIZER;
static struct imp **table;
static size_t nbuckets, nimps;
static struct queue *queues;
static size_t queued; /* ops and drops waiting, over all queues */
static int flushing, started, asleep, closing;
static pthread_t flusher;
static struct drop {
    cuc_buffer *b;  /* a reference to drop */
    struct imp *e;  /* its claims to release then, or NULL */
} *drops;
static size_t ndrops, drops_cap;

#define BATCH_NAP_US 100 /* a lone op waits this long for company */

static size_t bucket(const void *p)
{
    return (size_t)(((uintptr_t)p * 0x9E3779B97F4A7C15ull) >> 32) & (nbuckets - 1);
}

static int grow_locked(void)
{
    size_t n = nbuckets ? nbuckets * 2 : 1024, old = nbuckets, i;
    struct imp **t = calloc(n, sizeof(*t)), **was = table, *e, *next;

    if (!t)
        return -1;
    table = t;
    nbuckets = n;
    for (i = 0; i < old; i++)
        for (e = was[i]; e; e = next) {
            next = e->chain;
            e->chain = table[bucket(e->b)];
            table[bucket(e->b)] = e;
        }
    free(was);
    return 0;
}

static struct imp *find_locked(const cuc_buffer *b)
{
    struct imp *e = nbuckets ? table[bucket(b)] : NULL;

    while (e && e->b != b)
        e = e->chain;
    return e;
}

static void remove_locked(struct imp *e)
{
    struct imp **p = &table[bucket(e->b)];

    while (*p != e)
        p = &(*p)->chain;
    *p = e->chain;
    nimps--;
}

/* ---- the queue and its thread ---- */

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};

    nanosleep(&ts, NULL);
}

/* The buffers closed since the last round, dropped together (one
 * synchronize a stream, cuc_buffer_unref_many_async), then their claims
 * released (queued: they go out in this round). */
static void drop_all_locked(void)
{
    struct drop *d = drops;
    size_t n = ndrops, i;
    cuc_buffer **bufs;

    if (!n)
        return;
    drops = NULL;
    ndrops = drops_cap = 0;
    queued -= n;
    pthread_mutex_unlock(&mu);
    bufs = malloc(n * sizeof(*bufs));
    for (i = 0; bufs && i < n; i++)
        bufs[i] = d[i].b;
    if (bufs)
        cuc_buffer_unref_many_async(bufs, n, NULL);
    for (i = 0; i < n; i++) {
        if (!bufs)
            cuc_buffer_unref_async(d[i].b, NULL);
        claim_release(d[i].e);
    }
    free(bufs);
    free(d);
    pthread_mutex_lock(&mu);
}

static void *flush_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        struct queue *q;

        while (!queued) {
            asleep = 1;
            pthread_cond_wait(&wake, &mu);
            asleep = 0;
        }
        flushing = 1;
        if (queued < 32) { /* a list being unpickled: let its ops gather */
            pthread_mutex_unlock(&mu);
            nap_us(BATCH_NAP_US);
            pthread_mutex_lock(&mu);
        }
        drop_all_locked();
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
            free(ops);
            pthread_mutex_lock(&mu);
        }
        flushing = 0;
        pthread_cond_broadcast(&idle);
    }
    return NULL;
}

static int start_locked(void)
{
    pthread_attr_t attr;

    if (started)
        return 0;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&flusher, &attr, flush_main, NULL) == 0;
    pthread_attr_destroy(&attr);
    return started ? 0 : CUC_E_NOMEM;
}

static void wake_locked(void)
{
    queued++;
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

/* b's reference (and then e's claims) for the thread to drop with the
 * others closed meanwhile: 0, or CUC_E_NOMEM (the caller drops it now). */
int claim_drop_later(cuc_buffer *b, struct imp *e)
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
        drops[ndrops++].e = e;
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

/* b arrived under (c, token); post: the claim still has to be sent (it
 * was not made synchronously). The same claim twice counts once. */
int claim_add(const cuc_buffer *b, struct conn *c, uint64_t token, int post)
{
    struct imp *e;
    size_t i;
    int rc = 0;

    pthread_mutex_lock(&mu);
    e = find_locked(b);
    if (!e && (nimps < nbuckets || grow_locked() == 0) && (e = calloc(1, sizeof(*e)))) {
        e->b = b;
        e->chain = table[bucket(b)];
        table[bucket(b)] = e;
        nimps++;
    }
    for (i = 0; e && i < e->n; i++)
        if (e->claims[i].c == c && e->claims[i].token == token)
            break; /* the same pickle loaded again */
    if (!e) {
        rc = CUC_E_NOMEM;
    } else if (i == e->n) {
        if (e->n == e->cap) {
            size_t cap = e->cap ? e->cap * 2 : 2;
            struct claim *grown = realloc(e->claims, cap * sizeof(*grown));

            if (!grown) {
                pthread_mutex_unlock(&mu);
                return CUC_E_NOMEM;
            }
            e->claims = grown;
            e->cap = cap;
        }
        e->claims[e->n].c = c;
        e->claims[e->n++].token = token;
        if (post)
            rc = post_locked(c, token);
    }
    if (e)
        e->py = 1;
    pthread_mutex_unlock(&mu);
    return rc;
}

int claim_give_back(struct conn *c, uint64_t token)
{
    int rc;

    pthread_mutex_lock(&mu);
    rc = post_locked(c, token | RELEASE_BIT);
    pthread_mutex_unlock(&mu);
    return rc;
}

/* e's claims are released (it is out of the table); NULL is a no-op. */
void claim_release(struct imp *e)
{
    size_t i;

    if (!e)
        return;
    pthread_mutex_lock(&mu);
    for (i = 0; i < e->n; i++)
        post_locked(e->claims[i].c, e->claims[i].token | RELEASE_BIT);
    pthread_mutex_unlock(&mu);
    free(e->claims);
    free(e);
}

/* The entry of b if nothing keeps it any more (out of the table: the caller
 * drops its reference, then claim_release()s it), else NULL. */
static struct imp *done_locked(struct imp *e)
{
    if (!e || e->py || e->down)
        return NULL;
    remove_locked(e);
    return e;
}

struct imp *claim_py_drop(const cuc_buffer *b)
{
    struct imp *e;

    pthread_mutex_lock(&mu);
    e = find_locked(b);
    if (e)
        e->py = 0;
    e = done_locked(e);
    pthread_mutex_unlock(&mu);
    return e;
}

void claim_downstream_begin(const cuc_buffer *b)
{
    struct imp *e;

    pthread_mutex_lock(&mu);
    e = find_locked(b);
    if (e)
        e->down++;
    pthread_mutex_unlock(&mu);
}

struct imp *claim_downstream_end(const cuc_buffer *b)
{
    struct imp *e;

    pthread_mutex_lock(&mu);
    e = find_locked(b);
    if (e && e->down)
        e->down--;
    e = done_locked(e);
    pthread_mutex_unlock(&mu);
    return e;
}

/* A forked child has no thread and sends nothing of the parent's. */
void claim_after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&idle, NULL);
    table = NULL;
    nbuckets = nimps = 0;
    queues = NULL;
    queued = 0;
    flushing = started = asleep = closing = 0;
    drops = NULL;
    ndrops = drops_cap = 0;
}
