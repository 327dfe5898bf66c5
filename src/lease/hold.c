/* Holds: tokens, the table of unclaimed grants, claims that move or copy
 * a grant into a peer's table, expiry. */
#include "lease/hold.h"
#include "base/error.h"
#include "base/hex.h"
#include "base/htab.h"
#include "os/clock.h"
#include "os/fd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An object of a hold. The grants of a hold (its own, and the peers')
 * lease entries, not objects: each entry counts the leases of it alive in
 * every table, and drops the hold's reference to its object just before
 * the last of them ends, so that the end that frees the object is a
 * lease's end, counted by the object's lease waits like any other. */
struct entry {
    struct hold *x;
    const struct cuc__lease_ops *ops; /* the object's */
    void *obj;
    _Atomic size_t live; /* its leases alive, in any table */
};

struct hold {
    struct cuc__hnode by_token, by_block;
    uint8_t token[CUC__TOKEN_LEN];
    uint64_t block;             /* its leases' block, 0 when it leases nothing */
    struct entry *entries;      /* a reference to each object while live */
    struct cuc__lease_att *atts; /* the grants' attachments: the entries */
    size_t natts;
    _Atomic int spent;          /* an entry's leases all ended: no new claim */
    int64_t expires;
    int unclaimed;              /* its grant is in the holds' table (on the queue) */
    struct hold *prev, *next;   /* the queue of unclaimed holds, by expiry */
    size_t grants;              /* grants of it in peers' tables */
    void *data;
    void (*data_free)(void *);
};

struct cuc__holds {
    pthread_mutex_t lock;
    struct cuc__leases *table; /* the unclaimed holds' grants */
    struct cuc__htab by_token, by_block;
    struct hold *head, *tail; /* unclaimed, soonest expiry first */
    size_t alive, unclaimed;
    int hold_ms;
};

static struct hold *of_token(const struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, struct hold, by_token);
}

static struct hold *of_block(const struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, struct hold, by_block);
}

static int same_token(const struct cuc__hnode *n, const void *key)
{
    return memcmp(of_token(n)->token, key, CUC__TOKEN_LEN) == 0;
}

static int same_block(const struct cuc__hnode *n, const void *key)
{
    return of_block(n)->block == *(const uint64_t *)key;
}

static struct hold *find_token(struct cuc__holds *h, const uint8_t *token)
{
    struct cuc__hnode *n = cuc__htab_find(&h->by_token, cuc__hash_bytes(token, CUC__TOKEN_LEN),
                                          same_token, token);

    return n ? of_token(n) : NULL;
}

static struct hold *find_block(struct cuc__holds *h, uint64_t block)
{
    struct cuc__hnode *n = block ? cuc__htab_find(&h->by_block, cuc__hash_u64(block),
                                                  same_block, &block)
                                 : NULL;

    return n ? of_block(n) : NULL;
}

/* ---- the queue of unclaimed holds (h->lock held) ---- */

static void queue_remove(struct cuc__holds *h, struct hold *x)
{
    if (!x->unclaimed)
        return;
    *(x->prev ? &x->prev->next : &h->head) = x->next;
    *(x->next ? &x->next->prev : &h->tail) = x->prev;
    x->prev = x->next = NULL;
    x->unclaimed = 0;
    h->unclaimed--;
}

/* In expiry order: from the tail, where a new hold (the latest expiry)
 * goes at once; a hold given back walks to its place. */
static void queue_insert(struct cuc__holds *h, struct hold *x)
{
    struct hold *after = h->tail;

    while (after && after->expires > x->expires)
        after = after->prev;
    x->prev = after;
    x->next = after ? after->next : h->head;
    *(x->next ? &x->next->prev : &h->tail) = x;
    *(after ? &after->next : &h->head) = x;
    x->unclaimed = 1;
    h->unclaimed++;
}

/* ---- life of a hold ---- */

/* ---- the entries' lease ops ---- */

static void entry_begin(void *arg)
{
    struct entry *e = arg;

    atomic_fetch_add(&e->live, 1);
    e->ops->begin(e->obj);
}

static void entry_end(void *arg, uint64_t id, int why)
{
    struct entry *e = arg;
    void *obj = e->obj;
    const struct cuc__lease_ops *ops = e->ops;

    if (atomic_fetch_sub(&e->live, 1) == 1) {
        atomic_store(&e->x->spent, 1);
        ops->unref(obj); /* the lease ending still keeps it */
    }
    ops->end(obj, id, why);
}

static void entry_nop(void *arg)
{
    (void)arg;
}

/* Begins n entries, a run of one object kind at a time through the
 * object's begin_many where it has one (one lock a run, as a send does). */
static void entry_begin_many(const struct cuc__lease_att *atts, size_t n)
{
    struct cuc__lease_att run[64];

    for (size_t i = 0; i < n;) {
        const struct entry *e = atts[i].obj;
        size_t k = 0;
        if (!e->ops->begin_many) {
            entry_begin(atts[i++].obj);
            continue;
        }
        for (; i < n && k < CUC_ARRAY_LEN(run) &&
               ((const struct entry *)atts[i].obj)->ops == e->ops; i++, k++) {
            struct entry *ei = atts[i].obj;
            atomic_fetch_add(&ei->live, 1);
            run[k] = (struct cuc__lease_att){atts[i].id, ei->ops, ei->obj};
        }
        e->ops->begin_many(run, k);
    }
}

static const struct cuc__lease_ops entry_ops = {entry_begin, entry_end, entry_nop, entry_nop,
                                                entry_begin_many, NULL, NULL};

static void hold_free(struct hold *x)
{
    for (size_t i = 0; i < x->natts; i++) /* only when a grant failed to begin */
        if (atomic_load(&x->entries[i].live) == 0 && !atomic_load(&x->spent))
            x->entries[i].ops->unref(x->entries[i].obj);
    free(x->entries);
    free(x->atts);
    if (x->data_free)
        x->data_free(x->data);
    free(x);
}

/* Out of the tables when nothing of it lives any more (h->lock held): 1
 * when the caller must hold_free it (unlocked: an unref may free memory). */
static int forget_if_done_locked(struct cuc__holds *h, struct hold *x)
{
    if (x->unclaimed || x->grants)
        return 0;
    cuc__htab_remove(&h->by_token, &x->by_token);
    if (x->block)
        cuc__htab_remove(&h->by_block, &x->by_block);
    h->alive--;
    return 1;
}

/* The holds' table's gone: an unclaimed hold's grant ended (its expiry,
 * or the destroy). */
static void table_gone(void *arg, uint64_t block, int why)
{
    struct cuc__holds *h = arg;
    struct hold *x;
    int done = 0;

    (void)why;
    pthread_mutex_lock(&h->lock);
    x = find_block(h, block);
    if (x) {
        queue_remove(h, x);
        done = forget_if_done_locked(h, x);
    }
    pthread_mutex_unlock(&h->lock);
    if (done)
        hold_free(x);
}

int cuc__holds_create(int hold_ms, struct cuc__holds **out)
{
    struct cuc__holds *h = calloc(1, sizeof(*h));
    int rc;

    if (!h)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a share point's holds");
    rc = cuc__leases_create(NULL, &h->table);
    if (rc) {
        free(h);
        return rc;
    }
    cuc__leases_on_gone(h->table, table_gone, h);
    pthread_mutex_init(&h->lock, NULL);
    h->hold_ms = hold_ms;
    *out = h;
    return 0;
}

static void free_left(struct cuc__hnode *n, void *arg)
{
    (void)arg;
    hold_free(of_token(n));
}

void cuc__holds_destroy(struct cuc__holds *h)
{
    if (!h)
        return;
    cuc__leases_end_all(h->table, CUC__LEASE_EXPIRED); /* the unclaimed go */
    /* what is left had peers' grants, all ended before: nothing holds them */
    cuc__htab_each(&h->by_token, free_left, NULL);
    cuc__htab_free(&h->by_token);
    cuc__htab_free(&h->by_block);
    cuc__leases_unref(h->table);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

/* x's entries for m's attachments, a reference to each object taken,
 * and the attachments of its grants. */
static int take_atts(struct hold *x, const cuc_msg *m)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts);

    if (n == 0)
        return 0;
    x->entries = calloc(n, sizeof(*x->entries));
    x->atts = malloc(n * sizeof(*x->atts));
    if (!x->entries || !x->atts)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a hold of %zu objects", n);
    for (size_t i = 0; i < n; i++) {
        x->entries[i] = (struct entry){x, atts[i].ops, atts[i].obj, 0};
        x->atts[i] = (struct cuc__lease_att){atts[i].id, &entry_ops, &x->entries[i]};
        atts[i].ops->ref(atts[i].obj);
    }
    x->natts = n;
    x->block = atts[0].id >> CUC__LEASE_INDEX_BITS;
    return 0;
}

/* Indexes x (h->lock held), unless h is full or x's block is held. */
static int insert_locked(struct cuc__holds *h, struct hold *x, size_t max)
{
    int rc = 0;

    if (h->alive >= max)
        return cuc__seterr(CUC_E_LIMIT, "the share point keeps %zu holds, its most: wait "
                           "until receivers attach them or they expire", h->alive);
    if (x->block && find_block(h, x->block))
        return cuc__seterr(CUC_E_INVALID, "this message was detached already and its "
                           "hold lives: detach a new message for another hold");
    x->by_token.hash = cuc__hash_bytes(x->token, CUC__TOKEN_LEN);
    rc = cuc__htab_insert(&h->by_token, &x->by_token);
    if (!rc && x->block) {
        x->by_block.hash = cuc__hash_u64(x->block);
        rc = cuc__htab_insert(&h->by_block, &x->by_block);
        if (rc)
            cuc__htab_remove(&h->by_token, &x->by_token);
    }
    if (rc)
        return cuc__seterr(CUC_E_NOMEM, "out of memory indexing a hold");
    x->expires = cuc__deadline(h->hold_ms);
    queue_insert(h, x);
    h->alive++;
    return 0;
}

int cuc__hold_add(struct cuc__holds *h, const cuc_msg *m, size_t max, void *data,
                  void (*data_free)(void *), uint8_t token[CUC__TOKEN_LEN])
{
    struct hold *x = calloc(1, sizeof(*x));
    int rc;

    if (!x)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a hold");
    rc = cuc__random_bytes(x->token, CUC__TOKEN_LEN, "a hold's token");
    if (!rc)
        rc = take_atts(x, m);
    if (!rc) {
        pthread_mutex_lock(&h->lock);
        rc = insert_locked(h, x, max);
        /* begun under the lock: a claim cannot find it before its grant */
        if (!rc && x->natts && (rc = cuc__leases_grant(h->table, x->atts, x->natts)) != 0) {
            queue_remove(h, x);
            x->unclaimed = 0;
            forget_if_done_locked(h, x);
        }
        if (!rc) { /* set before a claim, on the thread, can read them */
            x->data = data;
            x->data_free = data_free;
        }
        pthread_mutex_unlock(&h->lock);
    }
    if (rc) { /* data stays the caller's */
        hold_free(x);
        return rc;
    }
    memcpy(token, x->token, CUC__TOKEN_LEN);
    return 0;
}

static int not_found(const uint8_t *token)
{
    return cuc__seterr(CUC_E_NOT_FOUND, "no hold or lease of token %s lives at the share "
                       "point: it expired unclaimed (CUCORE_SHARE_HOLD_MS), or every "
                       "receiver's lease of it ended", cuc__id16_hex(token).s);
}

/* Gives peer its grant of x (h->lock held). */
static int grant_locked(struct cuc__holds *h, struct hold *x, struct cuc__leases *peer)
{
    int rc;

    if (cuc__leases_held(peer, x->block))
        return 0;
    if (atomic_load(&x->spent)) /* some object's leases all ended: it may be freed */
        return cuc__seterr(CUC_E_NOT_FOUND, "the hold of token %s is spent: its receivers "
                           "released some of its objects already",
                           cuc__id16_hex(x->token).s);
    if (x->unclaimed) { /* the first claim takes the hold's own grant */
        rc = cuc__leases_move(h->table, peer, x->block);
        if (!rc)
            queue_remove(h, x);
    } else {
        rc = cuc__leases_grant(peer, x->atts, x->natts);
    }
    if (!rc)
        x->grants++;
    return rc;
}

int cuc__hold_claim(struct cuc__holds *h, const uint8_t token[CUC__TOKEN_LEN],
                    struct cuc__leases *peer, void **data, uint64_t *block)
{
    struct hold *x;
    int rc = 0;

    pthread_mutex_lock(&h->lock);
    x = find_token(h, token);
    if (!x)
        rc = not_found(token);
    else if (x->block)
        rc = grant_locked(h, x, peer);
    if (!rc) {
        *data = x->data;
        *block = x->block;
    }
    pthread_mutex_unlock(&h->lock);
    return rc;
}

/* Ends the hold of token if unclaimed, with why: its grant (then
 * table_gone forgets it), or the hold itself when it leases nothing. */
static void end_unclaimed(struct cuc__holds *h, const uint8_t *token, int why)
{
    uint64_t block = 0;
    struct hold *x;
    int done = 0;

    pthread_mutex_lock(&h->lock);
    x = find_token(h, token);
    if (x && x->unclaimed && x->block && cuc__leases_held(h->table, x->block))
        block = x->block;
    else if (x && x->unclaimed) {
        queue_remove(h, x);
        done = forget_if_done_locked(h, x);
    }
    pthread_mutex_unlock(&h->lock);
    if (block)
        cuc__leases_end_block(h->table, block, why);
    else if (done)
        hold_free(x);
}

void cuc__hold_drop(struct cuc__holds *h, const uint8_t token[CUC__TOKEN_LEN])
{
    end_unclaimed(h, token, CUC__LEASE_SEND_FAILED);
}

int cuc__hold_take_here(struct cuc__holds *h, const uint8_t token[CUC__TOKEN_LEN],
                        int (*fn)(void *data, void *arg), void *arg)
{
    struct hold *x;
    int rc;

    pthread_mutex_lock(&h->lock);
    x = find_token(h, token);
    rc = x ? fn(x->data, arg) : not_found(token);
    pthread_mutex_unlock(&h->lock);
    if (!rc)
        end_unclaimed(h, token, CUC__LEASE_RELEASED);
    return rc;
}

/* Makes x unclaimed again if its time is not up and no peer's grant but
 * the one ending holds it (h->lock held). */
static void restore_locked(struct cuc__holds *h, struct hold *x)
{
    if (x->unclaimed || x->grants != 1 || cuc__remaining(x->expires) == 0 ||
        atomic_load(&x->spent))
        return;
    if (cuc__leases_grant(h->table, x->atts, x->natts) == 0)
        queue_insert(h, x);
}

void cuc__hold_give_back(struct cuc__holds *h, const uint8_t token[CUC__TOKEN_LEN],
                         struct cuc__leases *peer)
{
    struct hold *x;
    uint64_t block = 0;

    pthread_mutex_lock(&h->lock);
    x = find_token(h, token);
    if (x && x->block && cuc__leases_held(peer, x->block)) {
        restore_locked(h, x);
        block = x->block;
    }
    pthread_mutex_unlock(&h->lock);
    if (block) /* its gone callback counts the grant off */
        cuc__leases_end_block(peer, block, CUC__LEASE_RELEASED);
}

void cuc__holds_peer_gone(void *arg, uint64_t block, int why)
{
    struct cuc__holds *h = arg;
    struct hold *x;
    int done = 0;

    pthread_mutex_lock(&h->lock);
    x = find_block(h, block);
    (void)why;
    if (x && x->grants) {
        x->grants--;
        done = forget_if_done_locked(h, x);
    }
    pthread_mutex_unlock(&h->lock);
    if (done)
        hold_free(x);
}

int64_t cuc__holds_expire(struct cuc__holds *h)
{
    for (;;) {
        struct hold *x;
        uint64_t block;
        int64_t next;

        pthread_mutex_lock(&h->lock);
        x = h->head;
        if (!x || cuc__remaining(x->expires) > 0) {
            next = x ? x->expires : -1;
            pthread_mutex_unlock(&h->lock);
            return next;
        }
        block = x->block;
        if (block && !cuc__leases_held(h->table, block))
            block = 0; /* its grant is gone already: nothing to end */
        if (!block) { /* nothing leased: forgotten at once */
            queue_remove(h, x);
            if (!forget_if_done_locked(h, x))
                x = NULL;
        }
        pthread_mutex_unlock(&h->lock);
        if (block)
            cuc__leases_end_block(h->table, block, CUC__LEASE_EXPIRED); /* table_gone */
        else if (x)
            hold_free(x);
    }
}

void cuc__holds_count(struct cuc__holds *h, size_t *alive, size_t *unclaimed)
{
    pthread_mutex_lock(&h->lock);
    *alive = h->alive;
    *unclaimed = h->unclaimed;
    pthread_mutex_unlock(&h->lock);
}
