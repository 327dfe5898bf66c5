/* The lease table: granted leases by id (base/htab.h), their ends, and the
 * release messages an importer sends. */
#include "lease/lease.h"
#include "base/error.h"
#include "os/clock.h"
#include "os/proc.h"
#include "wire/records.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* The leases of one sent message, registered together: one allocation
 * and one pass under the table's lock for all of them, and one stamp of
 * the message's first frame (refs: the entries still held, plus one while
 * the sender uses the grant; l->lock). */
struct grant {
    size_t refs;
    struct grant *dead; /* once refs reached 0 inside a walk of the table */
    int sent;     /* seq is known: the message's frames went out */
    uint32_t seq; /* its first frame's sequence number (a refusal names it) */
    size_t n;
    struct lease {
        struct cuc__hnode node;
        uint64_t id;
        const struct cuc__lease_ops *ops;
        void *obj;
        struct grant *g;
        int held; /* in by_id: not ended yet */
    } e[];
};

/* What a lease's end needs, copied out of the table under its lock. */
struct ended {
    uint64_t id;
    const struct cuc__lease_ops *ops;
    void *obj;
};

/* Ends a grant with no entry held (l->lock held, or no other thread). */
static void grant_put_locked(struct grant *g)
{
    if (--g->refs == 0)
        free(g);
}

static struct lease *of_node(struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, struct lease, node);
}

static int same_id(const struct cuc__hnode *n, const void *key)
{
    return of_node((struct cuc__hnode *)n)->id == *(const uint64_t *)key;
}

/* Drops an entry's reference to its grant inside a walk of the table
 * (l->lock held, or no other thread): a grant that ends goes on *arg's
 * list, freed after the walk, since later entries of the walk may be in
 * it. */
static void unhold_entry(struct cuc__hnode *n, void *arg)
{
    struct grant **dead = arg, *g = of_node(n)->g;

    of_node(n)->held = 0;
    if (--g->refs == 0) {
        g->dead = *dead;
        *dead = g;
    }
}

static void free_dead(struct grant *g)
{
    while (g) {
        struct grant *next = g->dead;
        free(g);
        g = next;
    }
}

struct cuc__kept {
    void *obj;
    void (*drop)(void *obj);
};

static void leases_free(struct cuc__ref *r)
{
    struct cuc__leases *l = CUC_CONTAINER_OF(r, struct cuc__leases, ref);
    struct grant *dead = NULL;

    for (size_t i = 0; i < l->nkept; i++)
        l->kept[i].drop(l->kept[i].obj);
    free(l->kept);
    /* Empty in the process that made it (a lingering link keeps the table
     * until its leases end); in a forked child the inherited entries are
     * dropped without their ends: they are the parent's. */
    cuc__htab_each(&l->by_id, unhold_entry, &dead);
    free_dead(dead);
    cuc__htab_free(&l->by_id);
    cuc__link_unref(l->link);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l);
}

int cuc__leases_create(struct cuc__link *link, struct cuc__leases **out)
{
    struct cuc__leases *l = calloc(1, sizeof(*l));

    if (!l)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a channel's lease table");
    cuc__ref_init(&l->ref, leases_free);
    cuc__link_ref(link);
    l->link = link;
    pthread_mutex_init(&l->lock, NULL);
    cuc__cond_init(&l->cond);
    *out = l;
    return 0;
}

CUC__REF_FUNCTIONS(cuc__leases, struct cuc__leases, ref)

struct cuc__leases *cuc__leases_of_msg(const cuc_msg *m)
{
    struct cuc__ref *r = cuc__msg_origin(m);

    return r ? CUC_CONTAINER_OF(r, struct cuc__leases, ref) : NULL;
}

/* The origin's reply: a message back on the link. */
static int origin_reply(struct cuc__ref *r, const cuc_msg *m)
{
    struct cuc__leases *l = CUC_CONTAINER_OF(r, struct cuc__leases, ref);
    int rc;

    if (cuc__link_is_closed(l->link))
        return 0;
    rc = cuc__link_send(l->link, m);
    return rc && cuc__link_is_closed(l->link) ? 0 : rc;
}

/* The origin's keep: once per object, up to CUC__LEASES_MAX_KEPT. */
static int origin_keep(struct cuc__ref *r, void *obj, void (*drop)(void *obj))
{
    struct cuc__leases *l = CUC_CONTAINER_OF(r, struct cuc__leases, ref);
    int rc = 0;

    pthread_mutex_lock(&l->lock);
    for (size_t i = 0; i < l->nkept && !rc; i++)
        rc = l->kept[i].obj == obj;
    if (!rc && l->nkept == CUC__LEASES_MAX_KEPT)
        rc = cuc__seterr(CUC_E_LIMIT, "the channel to pid %ld already keeps %u images "
                         "for its peer", (long)l->link->peer_pid, CUC__LEASES_MAX_KEPT);
    if (!rc && l->nkept == l->kept_cap) {
        size_t cap = l->kept_cap ? 2 * l->kept_cap : 8;
        void *p = realloc(l->kept, cap * sizeof(*l->kept));
        if (p) {
            l->kept = p;
            l->kept_cap = cap;
        } else {
            rc = cuc__seterr(CUC_E_NOMEM, "out of memory keeping an image for a peer");
        }
    }
    if (!rc)
        l->kept[l->nkept++] = (struct cuc__kept){obj, drop};
    pthread_mutex_unlock(&l->lock);
    return rc;
}

static const struct cuc__origin_ops origin_ops = {origin_reply, origin_keep};

void cuc__leases_stamp(struct cuc__leases *l, cuc_msg *m)
{
    cuc__msg_set_origin(m, &l->ref);
    cuc__msg_set_origin_ops(m, &origin_ops);
}

uint64_t cuc__lease_id_next(void)
{
    static _Atomic uint64_t next = 1;

    return atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
}

/* Takes e out of the table (l->lock held): its end's arguments into *x;
 * the entry is gone once its grant is. */
static void take_entry_locked(struct cuc__leases *l, struct lease *e, struct ended *x)
{
    *x = (struct ended){e->id, e->ops, e->obj};
    cuc__htab_remove(&l->by_id, &e->node);
    e->held = 0;
    l->count--;
    grant_put_locked(e->g);
}

/* The lease id, out of the table (l->lock held): 1 with *x, or 0. */
static int take_locked(struct cuc__leases *l, uint64_t id, struct ended *x)
{
    struct cuc__hnode *n = id ? cuc__htab_find(&l->by_id, cuc__hash_u64(id), same_id, &id)
                              : NULL;

    if (!n)
        return 0;
    take_entry_locked(l, of_node(n), x);
    return 1;
}

/* Runs the ends of x[0..n), unlocked, then wakes the lease waiters once. */
static void finish(struct cuc__leases *l, const struct ended *x, size_t n, int why)
{
    for (size_t i = 0; i < n; i++)
        x[i].ops->end(x[i].obj, x[i].id, why);
    pthread_mutex_lock(&l->lock);
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

/* A grant of n leases, refs 1 (the sender's), nothing held yet. */
static struct grant *grant_new(size_t n)
{
    struct grant *g;

    if (n > (SIZE_MAX - sizeof(*g)) / sizeof(g->e[0]))
        return NULL;
    g = malloc(sizeof(*g) + n * sizeof(g->e[0]));
    if (g)
        *g = (struct grant){1, NULL, 0, 0, n};
    return g;
}

/* Why lease id cannot be added now (l->lock held), or 0. */
static int refuse_locked(struct cuc__leases *l, uint64_t id)
{
    if (l->over)
        return cuc__seterr(CUC_E_PEER_CLOSED, "the peer (pid %ld) has closed the "
                           "channel: lease %llu would never be released",
                           (long)l->link->peer_pid, (unsigned long long)id);
    if (cuc__htab_find(&l->by_id, cuc__hash_u64(id), same_id, &id))
        return cuc__seterr(CUC_E_INVALID, "lease %llu is already held on this channel",
                           (unsigned long long)id);
    return 0;
}

/* Registers the entries of g, each begun already, in one pass (l->lock
 * held). On failure none is registered. */
static int register_locked(struct cuc__leases *l, struct grant *g)
{
    size_t i;
    int rc = 0;

    for (i = 0; !rc && i < g->n; i++) {
        rc = refuse_locked(l, g->e[i].id);
        if (!rc)
            rc = cuc__htab_insert(&l->by_id, &g->e[i].node);
    }
    if (rc) {
        for (size_t k = 0; k + 1 < i; k++)
            cuc__htab_remove(&l->by_id, &g->e[k].node);
        return rc;
    }
    for (i = 0; i < g->n; i++)
        g->e[i].held = 1;
    l->count += g->n;
    g->refs += g->n;
    return 0;
}

int cuc__leases_add(struct cuc__leases *l, uint64_t id,
                    const struct cuc__lease_ops *ops, void *obj)
{
    struct grant *g;
    int rc;

    if (!l || !ops || id == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc__leases_add: %s",
                           id ? "NULL argument" : "lease id 0 is reserved");
    g = grant_new(1);
    if (!g)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for lease %llu",
                           (unsigned long long)id);
    g->e[0] = (struct lease){{NULL, cuc__hash_u64(id)}, id, ops, obj, g, 0};
    pthread_mutex_lock(&l->lock);
    rc = register_locked(l, g);
    grant_put_locked(g); /* the entry's reference keeps it, if registered */
    pthread_mutex_unlock(&l->lock);
    return rc;
}

int cuc__leases_drop(struct cuc__leases *l, uint64_t id)
{
    struct ended x;
    int found;

    pthread_mutex_lock(&l->lock);
    found = take_locked(l, id, &x);
    pthread_mutex_unlock(&l->lock);
    if (!found)
        return cuc__seterr(CUC_E_NOT_FOUND, "lease %llu is not held on this channel",
                           (unsigned long long)id);
    return 0;
}

/* Ends the leases of g still held, with why, a batch at a time. A lease
 * the table no longer holds has ended already (the peer went meanwhile). */
static void end_held(struct cuc__leases *l, struct grant *g, int why)
{
    struct ended x[64];
    size_t i = 0;

    while (i < g->n) {
        size_t k = 0;
        pthread_mutex_lock(&l->lock);
        for (; i < g->n && k < CUC_ARRAY_LEN(x); i++)
            if (g->e[i].held)
                take_entry_locked(l, &g->e[i], &x[k++]);
        pthread_mutex_unlock(&l->lock);
        if (k)
            finish(l, x, k, why);
    }
}

/* The first of m's n attachments that the table refuses now, or n: the
 * leases up to it are begun, as they were one at a time (l->lock taken). */
static size_t first_refused(struct cuc__leases *l, const struct cuc__lease_att *atts,
                            size_t n, int *rc)
{
    size_t i;

    pthread_mutex_lock(&l->lock);
    for (i = 0, *rc = 0; i < n && !*rc; i++)
        *rc = refuse_locked(l, atts[i].id);
    pthread_mutex_unlock(&l->lock);
    return *rc ? i - 1 : n;
}

/* Begins each of atts[0..n): a run of one ops at a time where it has
 * begin_many. */
static void begin_all(const struct cuc__lease_att *atts, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = i + 1;
        if (!atts[i].ops->begin_many) {
            atts[i].ops->begin(atts[i].obj);
            i = k;
            continue;
        }
        while (k < n && atts[k].ops == atts[i].ops)
            k++;
        atts[i].ops->begin_many(atts + i, k - i);
        i = k;
    }
}

/* Begins and registers every lease attached to m, in one grant. On
 * failure every lease begun is ended with CUC__LEASE_SEND_FAILED and *out
 * is NULL. *out is NULL too for a message with no lease. */
static int grant_msg(struct cuc__leases *l, const cuc_msg *m, struct grant **out)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts), bad, i;
    struct grant *g;
    int rc;

    *out = NULL;
    if (n == 0)
        return 0;
    bad = first_refused(l, atts, n, &rc);
    if (rc) {
        /* begun and ended, the refused one first, as a lease at a time did */
        for (i = 0; i <= bad; i++)
            atts[i].ops->begin(atts[i].obj);
        atts[bad].ops->end(atts[bad].obj, atts[bad].id, CUC__LEASE_SEND_FAILED);
        for (i = 0; i < bad; i++)
            atts[i].ops->end(atts[i].obj, atts[i].id, CUC__LEASE_SEND_FAILED);
        return rc;
    }
    g = grant_new(n);
    if (!g)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for the %zu leases of a message", n);
    begin_all(atts, n);
    for (i = 0; i < n; i++)
        g->e[i] = (struct lease){{NULL, cuc__hash_u64(atts[i].id)}, atts[i].id,
                                 atts[i].ops, atts[i].obj, g, 0};
    pthread_mutex_lock(&l->lock);
    rc = register_locked(l, g); /* again: the peer may have gone meanwhile */
    pthread_mutex_unlock(&l->lock);
    if (rc) {
        for (i = 0; i < n; i++)
            atts[i].ops->end(atts[i].obj, atts[i].id, CUC__LEASE_SEND_FAILED);
        free(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* The sender is done with g (its entries may live on). */
static void grant_done(struct cuc__leases *l, struct grant *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&l->lock);
    grant_put_locked(g);
    pthread_mutex_unlock(&l->lock);
}

/* Ends the leases of one release record, a batch at a time under the
 * lock, the ends unlocked. */
static void release_ids(struct cuc__leases *l, const uint8_t *p, size_t n)
{
    struct ended x[64];
    size_t i = 0;

    while (i < n) {
        size_t k = 0;
        pthread_mutex_lock(&l->lock);
        for (; i < n && k < CUC_ARRAY_LEN(x); i++)
            k += take_locked(l, cuc__get64(p + 8 * i), &x[k]); /* exactly once */
        pthread_mutex_unlock(&l->lock);
        if (k)
            finish(l, x, k, CUC__LEASE_RELEASED);
    }
}

struct stamp {
    struct cuc__leases *l;
    struct grant *g;
};

/* Under the link's send lock, before the first frame goes out: once for
 * the whole message. */
static void stamp_seq(void *arg, uint32_t seq)
{
    const struct stamp *st = arg;

    pthread_mutex_lock(&st->l->lock);
    st->g->sent = 1;
    st->g->seq = seq;
    pthread_mutex_unlock(&st->l->lock);
}

int cuc__leases_send(struct cuc__leases *l, const cuc_msg *m, const cuc_msg *sent)
{
    struct grant *g;
    struct stamp st;
    int rc = grant_msg(l, m, &g);

    if (rc)
        return rc;
    st = (struct stamp){l, g};
    rc = cuc__link_send_seq(l->link, sent, g ? stamp_seq : NULL, &st);
    if (rc && g)
        end_held(l, g, CUC__LEASE_SEND_FAILED);
    grant_done(l, g);
    return rc;
}

struct by_seq {
    uint32_t seq;
    uint64_t *ids;
    size_t n, cap;
};

static void collect_seq(struct cuc__hnode *h, void *arg)
{
    struct by_seq *b = arg;
    struct lease *e = of_node(h);

    if (!e->g->sent || e->g->seq != b->seq)
        return;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 16;
        uint64_t *p = realloc(b->ids, cap * sizeof(*p));
        if (!p)
            return; /* out of memory: these stay until the peer goes */
        b->ids = p;
        b->cap = cap;
    }
    b->ids[b->n++] = e->id;
}

/* The peer refused the message whose first frame was seq: its leases end
 * (nothing of it was kept). */
static void refused_seq(struct cuc__leases *l, uint32_t seq)
{
    struct by_seq b = {seq, NULL, 0, 0};

    pthread_mutex_lock(&l->lock);
    cuc__htab_each(&l->by_id, collect_seq, &b);
    l->refused++;
    pthread_mutex_unlock(&l->lock);
    for (size_t i = 0; i < b.n;) {
        struct ended x[64];
        size_t k = 0;
        pthread_mutex_lock(&l->lock);
        for (; i < b.n && k < CUC_ARRAY_LEN(x); i++)
            k += take_locked(l, b.ids[i], &x[k]);
        pthread_mutex_unlock(&l->lock);
        if (k)
            finish(l, x, k, CUC__LEASE_REFUSED);
    }
    free(b.ids);
}

int cuc__leases_take_release(struct cuc__leases *l, cuc_msg *m)
{
    size_t n = cuc_msg_record_count(m), nrel = cuc__release_rec_count(m);
    size_t nref = cuc__refused_rec_count(m);

    if (nrel + nref == 0)
        return 0;
    if (nrel + nref != n || cuc_msg_fd_count(m)) {
        cuc_msg_destroy(m);
        return cuc__seterr(CUC_E_BADMSG, "the peer sent a message mixing %zu "
                           "release and refused records with %zu other records: "
                           "they travel alone (message dropped)", nrel + nref,
                           n - nrel - nref);
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *ids;
        uint32_t seq;
        size_t k;
        if (cuc__release_rec_read(m, i, &ids, &k) == 0)
            release_ids(l, ids, k);
        else if (cuc__refused_rec_read(m, i, &seq) == 0)
            refused_seq(l, seq);
    }
    cuc_msg_destroy(m);
    return 1;
}

uint64_t cuc__leases_refused(struct cuc__leases *l)
{
    uint64_t n;

    pthread_mutex_lock(&l->lock);
    n = l->refused;
    pthread_mutex_unlock(&l->lock);
    return n;
}

struct end_all {
    struct cuc__leases *l;
    int why;
};

static void mark_ended(struct cuc__hnode *n, void *arg)
{
    (void)arg;
    of_node(n)->held = 0; /* a sender's revoke passes it by */
}

static void end_one(struct cuc__hnode *n, void *arg)
{
    const struct end_all *a = arg;
    struct lease *e = of_node(n);

    e->ops->end(e->obj, e->id, a->why);
}

void cuc__leases_end_all(struct cuc__leases *l, int why)
{
    struct end_all a = {l, why};
    struct grant *dead = NULL;
    struct cuc__htab tab;

    pthread_mutex_lock(&l->lock);
    tab = l->by_id;
    l->by_id = (struct cuc__htab){NULL, 0, 0};
    l->count = 0;
    if (why == CUC__LEASE_PEER_CLOSED || why == CUC__LEASE_CHANNEL_CLOSED)
        l->over = 1;
    cuc__htab_each(&tab, mark_ended, NULL);
    pthread_mutex_unlock(&l->lock);
    /* the ends run unlocked, on a table no other thread can see; the
     * entries' grant references keep them until the ends are done */
    cuc__htab_each(&tab, end_one, &a);
    pthread_mutex_lock(&l->lock);
    cuc__htab_each(&tab, unhold_entry, &dead);
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
    free_dead(dead);
    cuc__htab_free(&tab);
}

size_t cuc__leases_count(struct cuc__leases *l)
{
    size_t n;

    pthread_mutex_lock(&l->lock);
    n = l->count;
    pthread_mutex_unlock(&l->lock);
    return n;
}

struct cuc__lease_gauge *cuc__leases_gauge(struct cuc__leases *l, struct cuc__lease_gauge *g)
{
    *g = (struct cuc__lease_gauge){&l->lock, &l->cond, &l->count, ""};
    snprintf(g->what, sizeof(g->what), "the channel to pid %ld", (long)l->link->peer_pid);
    return g;
}

int cuc__leases_release(struct cuc__leases *l, const uint64_t *ids, size_t n)
{
    size_t done = 0;
    int rc = 0;

    /* Inherited through fork: the leases are the parent's, and a frame from
     * here would break its channel's sequence (DESIGN.md, "Fork"). */
    if (l->link->owner != cuc__pid())
        return 0;
    while (!rc && done < n) {
        cuc_msg *m;
        if (cuc__link_is_closed(l->link))
            return 0; /* closed here: the peer has ended these leases */
        rc = cuc__release_msg_build(ids, n, &done, &m);
        if (rc)
            break;
        rc = cuc__link_send(l->link, m);
        cuc_msg_destroy(m);
        if (rc && cuc__link_is_closed(l->link))
            return 0;
    }
    return rc;
}
