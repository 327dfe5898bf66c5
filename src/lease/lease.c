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

struct lease {
    struct cuc__hnode node;
    uint64_t id;
    const struct cuc__lease_ops *ops;
    void *obj;
    int sent;     /* seq is known: the message's frames went out */
    uint32_t seq; /* its first frame's sequence number (a refusal names it) */
};

static struct lease *of_node(struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, struct lease, node);
}

static int same_id(const struct cuc__hnode *n, const void *key)
{
    return of_node((struct cuc__hnode *)n)->id == *(const uint64_t *)key;
}

static void free_entry(struct cuc__hnode *n, void *arg)
{
    (void)arg;
    free(of_node(n));
}

struct cuc__kept {
    void *obj;
    void (*drop)(void *obj);
};

static void leases_free(struct cuc__ref *r)
{
    struct cuc__leases *l = CUC_CONTAINER_OF(r, struct cuc__leases, ref);

    for (size_t i = 0; i < l->nkept; i++)
        l->kept[i].drop(l->kept[i].obj);
    free(l->kept);
    /* Empty in the process that made it (a lingering link keeps the table
     * until its leases end); in a forked child the inherited entries are
     * dropped without their ends: they are the parent's. */
    cuc__htab_each(&l->by_id, free_entry, NULL);
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

/* The lease id, out of the table (l->lock held), or NULL. */
static struct lease *take_locked(struct cuc__leases *l, uint64_t id)
{
    struct cuc__hnode *n = id ? cuc__htab_find(&l->by_id, cuc__hash_u64(id), same_id, &id)
                              : NULL;

    if (!n)
        return NULL;
    cuc__htab_remove(&l->by_id, n);
    l->count--;
    return of_node(n);
}

/* Runs a taken lease's end, unlocked, and wakes the lease waiters. */
static void finish(struct cuc__leases *l, struct lease *e, int why)
{
    e->ops->end(e->obj, e->id, why);
    free(e);
    pthread_mutex_lock(&l->lock);
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

int cuc__leases_add(struct cuc__leases *l, uint64_t id,
                    const struct cuc__lease_ops *ops, void *obj)
{
    struct lease *e;
    int rc = 0;

    if (!l || !ops || id == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc__leases_add: %s",
                           id ? "NULL argument" : "lease id 0 is reserved");
    e = malloc(sizeof(*e));
    if (!e)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for lease %llu",
                           (unsigned long long)id);
    *e = (struct lease){{NULL, cuc__hash_u64(id)}, id, ops, obj, 0, 0};
    pthread_mutex_lock(&l->lock);
    if (l->over)
        rc = cuc__seterr(CUC_E_PEER_CLOSED, "the peer (pid %ld) has closed the "
                         "channel: lease %llu would never be released",
                         (long)l->link->peer_pid, (unsigned long long)id);
    else if (cuc__htab_find(&l->by_id, e->node.hash, same_id, &id))
        rc = cuc__seterr(CUC_E_INVALID, "lease %llu is already held on this channel",
                         (unsigned long long)id);
    else
        rc = cuc__htab_insert(&l->by_id, &e->node);
    if (!rc)
        l->count++;
    pthread_mutex_unlock(&l->lock);
    if (rc)
        free(e);
    return rc;
}

int cuc__leases_drop(struct cuc__leases *l, uint64_t id)
{
    struct lease *e;

    pthread_mutex_lock(&l->lock);
    e = take_locked(l, id);
    pthread_mutex_unlock(&l->lock);
    if (!e)
        return cuc__seterr(CUC_E_NOT_FOUND, "lease %llu is not held on this channel",
                           (unsigned long long)id);
    free(e);
    return 0;
}

/* Ends the leases of atts[0..n) still held, with why. A lease the table
 * no longer holds has ended already (the peer went meanwhile). */
static void end_listed(struct cuc__leases *l, const struct cuc__lease_att *atts,
                       size_t n, int why)
{
    for (size_t i = 0; i < n; i++) {
        struct lease *e;
        pthread_mutex_lock(&l->lock);
        e = take_locked(l, atts[i].id);
        pthread_mutex_unlock(&l->lock);
        if (e)
            finish(l, e, why);
    }
}

int cuc__leases_grant(struct cuc__leases *l, const cuc_msg *m)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts);

    for (size_t i = 0; i < n; i++) {
        int rc;
        atts[i].ops->begin(atts[i].obj);
        rc = cuc__leases_add(l, atts[i].id, atts[i].ops, atts[i].obj);
        if (rc) {
            atts[i].ops->end(atts[i].obj, atts[i].id, CUC__LEASE_SEND_FAILED);
            end_listed(l, atts, i, CUC__LEASE_SEND_FAILED);
            return rc;
        }
    }
    return 0;
}

void cuc__leases_revoke(struct cuc__leases *l, const cuc_msg *m)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts);

    end_listed(l, atts, n, CUC__LEASE_SEND_FAILED);
}

/* Ends the leases of one release record, a batch at a time under the
 * lock, the ends unlocked. */
static void release_ids(struct cuc__leases *l, const uint8_t *p, size_t n)
{
    struct lease *ended[64];
    size_t i = 0;

    while (i < n) {
        size_t k = 0;
        pthread_mutex_lock(&l->lock);
        for (; i < n && k < CUC_ARRAY_LEN(ended); i++) {
            struct lease *e = take_locked(l, cuc__get64(p + 8 * i));
            if (e) /* unknown or already ended: exactly once */
                ended[k++] = e;
        }
        pthread_mutex_unlock(&l->lock);
        for (size_t j = 0; j < k; j++)
            finish(l, ended[j], CUC__LEASE_RELEASED);
    }
}

struct stamp {
    struct cuc__leases *l;
    const struct cuc__lease_att *atts;
    size_t n;
};

/* Under the link's send lock, before the first frame goes out. */
static void stamp_seq(void *arg, uint32_t seq)
{
    const struct stamp *st = arg;
    struct cuc__leases *l = st->l;

    pthread_mutex_lock(&l->lock);
    for (size_t i = 0; i < st->n; i++) {
        uint64_t id = st->atts[i].id;
        struct cuc__hnode *h = cuc__htab_find(&l->by_id, cuc__hash_u64(id), same_id, &id);
        if (h) {
            of_node(h)->sent = 1;
            of_node(h)->seq = seq;
        }
    }
    pthread_mutex_unlock(&l->lock);
}

int cuc__leases_send(struct cuc__leases *l, const cuc_msg *m, const cuc_msg *sent)
{
    struct stamp st = {l, NULL, 0};

    st.n = cuc__msg_leases(m, &st.atts);
    return cuc__link_send_seq(l->link, sent, st.n ? stamp_seq : NULL, &st);
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

    if (!e->sent || e->seq != b->seq)
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
    for (size_t i = 0; i < b.n; i++) {
        struct lease *e;
        pthread_mutex_lock(&l->lock);
        e = take_locked(l, b.ids[i]);
        pthread_mutex_unlock(&l->lock);
        if (e)
            finish(l, e, CUC__LEASE_REFUSED);
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

static void end_one(struct cuc__hnode *n, void *arg)
{
    const struct end_all *a = arg;

    finish(a->l, of_node(n), a->why);
}

void cuc__leases_end_all(struct cuc__leases *l, int why)
{
    struct end_all a = {l, why};
    struct cuc__htab tab;

    pthread_mutex_lock(&l->lock);
    tab = l->by_id;
    l->by_id = (struct cuc__htab){NULL, 0, 0};
    l->count = 0;
    if (why == CUC__LEASE_PEER_CLOSED || why == CUC__LEASE_CHANNEL_CLOSED)
        l->over = 1;
    pthread_mutex_unlock(&l->lock);
    /* the ends run unlocked, on a table no other thread can see */
    cuc__htab_each(&tab, end_one, &a);
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
