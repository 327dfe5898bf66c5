/* The lease table: granted leases by message (base/htab.h), and by the
 * first frame of a sent message, which a refusal names; their ends, and
 * the release messages an importer sends. */
#include "lease/lease.h"
#include "base/error.h"
#include "os/clock.h"
#include "os/proc.h"
#include "wire/records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A lease id is its message's block and its attachment's index there
 * (wire.h): the leases of one sent message are one grant, found by the
 * block, with an entry (16 bytes) and a held bit a lease, registered and
 * taken out with one table operation a message, not one a lease. */
struct lease {
    const struct cuc__lease_ops *ops;
    void *obj;
};
struct grant {
    struct cuc__hnode node; /* in by_block while held > 0 */
    struct cuc__hnode by_seq; /* in by_seq while in_seq */
    uint64_t block;
    /* one for the table while held > 0, one for the sender while it uses
     * the grant, one for each walk that ends its leases unlocked */
    size_t refs;
    int in_seq;   /* findable by seq: its frames went out, held, not refused */
    uint32_t seq; /* its first frame's sequence number (a refusal names it) */
    uint32_t n, held;
    uint64_t *bits;   /* bit i: lease i held */
    uint64_t *ending; /* bit i: lease i taken by cuc__leases_end_all, to end */
    struct grant *next_end; /* on an end_all's list */
    struct lease e[];
};

/* What a lease's end needs, copied out of the table under its lock. */
struct ended {
    uint64_t id;
    const struct cuc__lease_ops *ops;
    void *obj;
    int last; /* its grant's last lease: the grant left the table */
};

#define WORDS(n) (((size_t)(n) + 63) / 64)

static int bit(const uint64_t *w, uint32_t i) { return (int)(w[i / 64] >> (i % 64) & 1u); }
static void bit_clear(uint64_t *w, uint32_t i) { w[i / 64] &= ~((uint64_t)1 << (i % 64)); }

static uint64_t block_of(uint64_t id) { return id >> CUC__LEASE_INDEX_BITS; }
static uint32_t index_of(uint64_t id)
{
    return (uint32_t)(id & (CUC__LEASE_PER_BLOCK - 1u));
}

static void grant_put_locked(struct grant *g)
{
    if (--g->refs == 0)
        free(g);
}

static struct grant *of_node(struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, struct grant, node);
}

static int same_block(const struct cuc__hnode *n, const void *key)
{
    return of_node((struct cuc__hnode *)n)->block == *(const uint64_t *)key;
}

static struct grant *find_locked(struct cuc__leases *l, uint64_t block)
{
    struct cuc__hnode *n = cuc__htab_find(&l->by_block, cuc__hash_u64(block), same_block,
                                          &block);

    return n ? of_node(n) : NULL;
}

/* ---- the grants of sent messages by their first frame's sequence
 * number (what a refused record names): one lookup a record ---- */

static struct grant *of_seq_node(const struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, struct grant, by_seq);
}

static int same_seq(const struct cuc__hnode *n, const void *key)
{
    return of_seq_node(n)->seq == *(const uint32_t *)key;
}

/* g, whose frames are going out, made findable by seq (l->lock held)
 * while it is in the table. Out of memory it is not: a refusal of its
 * message then ends nothing, and its leases end with the channel. */
static void seq_index_locked(struct cuc__leases *l, struct grant *g)
{
    if (!g->held)
        return; /* its leases ended already */
    g->by_seq.hash = cuc__hash_u64(g->seq);
    g->in_seq = cuc__htab_insert(&l->by_seq, &g->by_seq) == 0;
}

static void seq_forget_locked(struct cuc__leases *l, struct grant *g)
{
    if (g->in_seq)
        cuc__htab_remove(&l->by_seq, &g->by_seq);
    g->in_seq = 0;
}

static struct grant *find_seq_locked(struct cuc__leases *l, uint32_t seq)
{
    struct cuc__hnode *n = cuc__htab_find(&l->by_seq, cuc__hash_u64(seq), same_seq, &seq);

    return n ? of_seq_node(n) : NULL;
}

struct cuc__kept {
    void *obj;
    void (*drop)(void *obj);
};

static void free_grant(struct cuc__hnode *n, void *arg)
{
    (void)arg;
    free(of_node(n));
}

static void leases_free(struct cuc__ref *r)
{
    struct cuc__leases *l = CUC_CONTAINER_OF(r, struct cuc__leases, ref);

    for (size_t i = 0; i < l->nkept; i++)
        l->kept[i].drop(l->kept[i].obj);
    free(l->kept);
    /* Empty in the process that made it (a lingering link keeps the table
     * until its leases end); in a forked child the inherited grants are
     * dropped without their ends: they are the parent's (and no sender or
     * walk of the child's holds one then). */
    cuc__htab_each(&l->by_block, free_grant, NULL);
    cuc__htab_free(&l->by_block);
    cuc__htab_free(&l->by_seq);
    cuc_msg_destroy(l->claims);
    free(l->rel);
    cuc__link_unref(l->link);
    pthread_mutex_destroy(&l->qlock);
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
    if (link)
        cuc__link_ref(link);
    l->link = link;
    pthread_mutex_init(&l->lock, NULL);
    pthread_mutex_init(&l->qlock, NULL);
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
    return cuc__msg_lease_block_next() << CUC__LEASE_INDEX_BITS;
}

/* Takes lease i of g out of the table (l->lock held, the lease held): its
 * end's arguments into *x. 1 when that was g's last: g left the table,
 * whose reference to it is the caller's to drop. */
static int take_entry_locked(struct cuc__leases *l, struct grant *g, uint32_t i,
                             struct ended *x)
{
    *x = (struct ended){g->block << CUC__LEASE_INDEX_BITS | i, g->e[i].ops, g->e[i].obj, 0};
    bit_clear(g->bits, i);
    l->count--;
    if (--g->held)
        return 0;
    cuc__htab_remove(&l->by_block, &g->node);
    seq_forget_locked(l, g);
    x->last = 1;
    return 1;
}

/* The lease id, out of the table (l->lock held): 1 with *x, or 0 (an id
 * the peer made up, or one that ended). */
static int take_locked(struct cuc__leases *l, uint64_t id, struct ended *x)
{
    struct grant *g = id ? find_locked(l, block_of(id)) : NULL;
    uint32_t i = index_of(id);

    if (!g || i >= g->n || !bit(g->bits, i))
        return 0;
    if (take_entry_locked(l, g, i, x))
        grant_put_locked(g);
    return 1;
}

/* Runs the ends of x[0..n), unlocked, then wakes the lease waiters once
 * and tells the table's owner of the grants that left it. */
static void finish(struct cuc__leases *l, const struct ended *x, size_t n, int why)
{
    for (size_t i = 0; i < n; i++)
        x[i].ops->end(x[i].obj, x[i].id, why);
    pthread_mutex_lock(&l->lock);
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
    for (size_t i = 0; l->gone && i < n; i++)
        if (x[i].last)
            l->gone(l->gone_arg, block_of(x[i].id), why);
}

/* A grant of n leases of block, refs 1 (the sender's), nothing held yet. */
static struct grant *grant_new(uint64_t block, size_t n)
{
    struct grant *g;
    size_t words = WORDS(n);

    if (n == 0 || n > CUC__LEASE_PER_BLOCK)
        return NULL;
    g = malloc(sizeof(*g) + n * sizeof(g->e[0]) + 2 * words * sizeof(uint64_t));
    if (!g)
        return NULL;
    *g = (struct grant){.node = {NULL, cuc__hash_u64(block)}, .block = block, .refs = 1,
                        .n = (uint32_t)n};
    g->bits = (uint64_t *)(g->e + n);
    g->ending = g->bits + words;
    return g;
}

/* Why the leases of block cannot be added now (l->lock held), or 0. */
static int refuse_locked(struct cuc__leases *l, uint64_t block)
{
    uint64_t first = block << CUC__LEASE_INDEX_BITS;

    if (l->over)
        return cuc__seterr(CUC_E_PEER_CLOSED, "the peer (pid %ld) has closed the "
                           "channel: lease %llu would never be released",
                           l->link ? (long)l->link->peer_pid : 0L,
                           (unsigned long long)first);
    if (find_locked(l, block))
        return cuc__seterr(CUC_E_INVALID, "lease %llu is already held on this channel (a "
                           "message is sent again only once its leases ended)",
                           (unsigned long long)first);
    return 0;
}

/* Registers every lease of g, each begun already (l->lock held). On
 * failure none is. */
static int register_locked(struct cuc__leases *l, struct grant *g)
{
    size_t words = WORDS(g->n);
    int rc = refuse_locked(l, g->block);

    if (!rc)
        rc = cuc__htab_insert(&l->by_block, &g->node);
    if (rc)
        return rc;
    memset(g->bits, 0xff, words * sizeof(uint64_t));
    if (g->n % 64)
        g->bits[words - 1] = ((uint64_t)1 << (g->n % 64)) - 1;
    memset(g->ending, 0, words * sizeof(uint64_t));
    g->held = g->n;
    l->count += g->n;
    g->refs++;
    return 0;
}

int cuc__leases_add(struct cuc__leases *l, uint64_t id,
                    const struct cuc__lease_ops *ops, void *obj)
{
    struct grant *g;
    int rc;

    if (!l || !ops || id == 0 || index_of(id))
        return cuc__seterr(CUC_E_INVALID, "cuc__leases_add: %s",
                           !l || !ops ? "NULL argument"
                           : id ? "the lease id is not one cuc__lease_id_next() gave"
                                : "lease id 0 is reserved");
    g = grant_new(block_of(id), 1);
    if (!g)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for lease %llu",
                           (unsigned long long)id);
    g->e[0] = (struct lease){ops, obj};
    pthread_mutex_lock(&l->lock);
    rc = register_locked(l, g);
    grant_put_locked(g); /* the table's reference keeps it, if registered */
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

/* Ends the leases of g still held, with why, a batch at a time; the
 * caller holds a reference to g. A lease the table no longer holds has
 * ended already (the peer went meanwhile). */
static void end_held(struct cuc__leases *l, struct grant *g, int why)
{
    struct ended x[64];
    uint32_t i = 0;

    while (i < g->n) {
        size_t k = 0;
        pthread_mutex_lock(&l->lock);
        for (; i < g->n && k < CUC_ARRAY_LEN(x); i++)
            if (bit(g->bits, i) && take_entry_locked(l, g, i, &x[k++]))
                g->refs--; /* the table's; not the last: the caller holds one */
        pthread_mutex_unlock(&l->lock);
        if (k)
            finish(l, x, k, why);
    }
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

/* The leases of a message that could not be granted: begun and ended,
 * as a send that failed ends them. */
static void begin_and_fail(const struct cuc__lease_att *atts, size_t n)
{
    begin_all(atts, n);
    for (size_t i = 0; i < n; i++)
        atts[i].ops->end(atts[i].obj, atts[i].id, CUC__LEASE_SEND_FAILED);
}

/* m's attachments as one grant: attachment i is lease block | i. */
static struct grant *grant_of(const struct cuc__lease_att *atts, size_t n)
{
    uint64_t block = block_of(atts[0].id);
    struct grant *g;

    for (size_t i = 0; i < n; i++)
        if (atts[i].id != (block << CUC__LEASE_INDEX_BITS | i))
            return NULL; /* not a message's ids: wire.h gives only these */
    g = grant_new(block, n);
    for (size_t i = 0; g && i < n; i++)
        g->e[i] = (struct lease){atts[i].ops, atts[i].obj};
    return g;
}

/* Begins and registers every lease attached to m, in one grant. On
 * failure every lease begun is ended with CUC__LEASE_SEND_FAILED and *out
 * is NULL. *out is NULL too for a message with no lease. */
static int grant_atts(struct cuc__leases *l, const struct cuc__lease_att *atts, size_t n,
                      struct grant **out)
{
    struct grant *g;
    int rc;

    *out = NULL;
    if (n == 0)
        return 0;
    g = grant_of(atts, n);
    if (!g) {
        begin_and_fail(atts, n);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for the %zu leases of a message", n);
    }
    begin_all(atts, n);
    pthread_mutex_lock(&l->lock);
    rc = register_locked(l, g);
    pthread_mutex_unlock(&l->lock);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            atts[i].ops->end(atts[i].obj, atts[i].id, CUC__LEASE_SEND_FAILED);
        free(g);
        return rc;
    }
    *out = g;
    return 0;
}

static int grant_msg(struct cuc__leases *l, const cuc_msg *m, struct grant **out)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts);

    return grant_atts(l, atts, n, out);
}

/* The sender is done with g (its leases may live on). */
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
    seq_forget_locked(st->l, st->g); /* sent again (a fetch answered twice): the last names it */
    st->g->seq = seq;
    seq_index_locked(st->l, st->g);
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

/* The peer refused the message whose first frame was seq: its leases end
 * (nothing of it was kept) and it is counted, once: it leaves the index
 * now. A seq that names no held grant ends and counts nothing. */
static void refused_seq(struct cuc__leases *l, uint32_t seq)
{
    struct grant *g;

    pthread_mutex_lock(&l->lock);
    g = find_seq_locked(l, seq);
    if (g) {
        seq_forget_locked(l, g);
        l->refused++;
        g->refs++; /* this end's */
    }
    pthread_mutex_unlock(&l->lock);
    if (!g)
        return;
    end_held(l, g, CUC__LEASE_REFUSED);
    grant_done(l, g);
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

int cuc__leases_grant(struct cuc__leases *l, const struct cuc__lease_att *atts, size_t n)
{
    struct grant *g;
    int rc = grant_atts(l, atts, n, &g);

    grant_done(l, g);
    return rc;
}

/* The two tables' locks, in one order whoever moves between them. */
static void lock_two(struct cuc__leases *a, struct cuc__leases *b)
{
    if ((uintptr_t)a > (uintptr_t)b) {
        struct cuc__leases *t = a;
        a = b;
        b = t;
    }
    pthread_mutex_lock(&a->lock);
    pthread_mutex_lock(&b->lock);
}

int cuc__leases_move(struct cuc__leases *from, struct cuc__leases *to, uint64_t block)
{
    struct grant *g;
    int rc;

    lock_two(from, to);
    g = find_locked(from, block);
    rc = g ? refuse_locked(to, block) : CUC_E_NOT_FOUND;
    if (!rc) {
        cuc__htab_remove(&from->by_block, &g->node);
        from->count -= g->held;
        rc = cuc__htab_insert(&to->by_block, &g->node);
        if (rc) /* out of memory growing to's table: it stays where it was */
            (void)cuc__htab_insert(&from->by_block, &g->node);
        (rc ? from : to)->count += g->held;
        seq_forget_locked(from, g); /* a refusal names the message it goes out in next */
    }
    pthread_mutex_unlock(&from->lock);
    pthread_mutex_unlock(&to->lock);
    if (!rc) {
        pthread_mutex_lock(&from->lock);
        pthread_cond_broadcast(&from->cond);
        pthread_mutex_unlock(&from->lock);
    }
    return rc == CUC_E_NOT_FOUND ? cuc__seterr(rc, "lease %llu is not held here",
                                               (unsigned long long)(block << CUC__LEASE_INDEX_BITS))
                                 : rc;
}

int cuc__leases_held(struct cuc__leases *l, uint64_t block)
{
    int held;

    pthread_mutex_lock(&l->lock);
    held = find_locked(l, block) != NULL;
    pthread_mutex_unlock(&l->lock);
    return held;
}

void cuc__leases_end_block(struct cuc__leases *l, uint64_t block, int why)
{
    struct grant *g;

    pthread_mutex_lock(&l->lock);
    g = find_locked(l, block);
    if (g)
        g->refs++; /* this walk's */
    pthread_mutex_unlock(&l->lock);
    if (!g)
        return;
    end_held(l, g, why);
    grant_done(l, g);
}

void cuc__leases_on_gone(struct cuc__leases *l, void (*gone)(void *, uint64_t, int),
                         void *arg)
{
    l->gone = gone;
    l->gone_arg = arg;
}

uint64_t cuc__leases_refused(struct cuc__leases *l)
{
    uint64_t n;

    pthread_mutex_lock(&l->lock);
    n = l->refused;
    pthread_mutex_unlock(&l->lock);
    return n;
}

/* Takes every lease of the grant out (l->lock held, the table detached):
 * they go to its ending bits, the grant onto *list with the walk's
 * reference. */
static void take_all(struct cuc__hnode *n, void *arg)
{
    struct grant **list = arg, *g = of_node(n);

    memcpy(g->ending, g->bits, WORDS(g->n) * sizeof(uint64_t));
    memset(g->bits, 0, WORDS(g->n) * sizeof(uint64_t)); /* a sender's end_held passes by */
    g->held = 0;
    g->in_seq = 0; /* the index goes with the table */
    g->next_end = *list;
    *list = g; /* the table's reference is now the walk's */
}

void cuc__leases_end_all(struct cuc__leases *l, int why)
{
    struct grant *list = NULL;
    struct cuc__htab tab;

    pthread_mutex_lock(&l->lock);
    tab = l->by_block;
    l->by_block = (struct cuc__htab){NULL, 0, 0};
    cuc__htab_free(&l->by_seq); /* its grants are all in tab */
    l->count = 0;
    if (why == CUC__LEASE_PEER_CLOSED || why == CUC__LEASE_CHANNEL_CLOSED)
        l->over = 1;
    cuc__htab_each(&tab, take_all, &list);
    pthread_mutex_unlock(&l->lock);
    cuc__htab_free(&tab);
    /* the ends run unlocked; each grant is kept by the walk's reference */
    for (struct grant *g = list; g; g = g->next_end)
        for (uint32_t i = 0; i < g->n; i++)
            if (bit(g->ending, i))
                g->e[i].ops->end(g->e[i].obj, g->block << CUC__LEASE_INDEX_BITS | i, why);
    for (struct grant *g = list; l->gone && g; g = g->next_end)
        l->gone(l->gone_arg, g->block, why);
    pthread_mutex_lock(&l->lock);
    while (list) {
        struct grant *next = list->next_end;
        grant_put_locked(list);
        list = next;
    }
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

size_t cuc__leases_count(struct cuc__leases *l)
{
    size_t n;

    pthread_mutex_lock(&l->lock);
    n = l->count;
    pthread_mutex_unlock(&l->lock);
    return n;
}

static void leases_describe(const void *obj, char *out, size_t len)
{
    const struct cuc__leases *l = obj;

    if (l->link)
        snprintf(out, len, "the channel to pid %ld", (long)l->link->peer_pid);
    else
        snprintf(out, len, "the share point's holds");
}

struct cuc__lease_gauge *cuc__leases_gauge(struct cuc__leases *l, struct cuc__lease_gauge *g)
{
    *g = (struct cuc__lease_gauge){&l->lock, &l->cond, &l->count, leases_describe, l};
    return g;
}

/* Sends release messages of ids[0..n) (qlock held). */
static int send_releases_locked(struct cuc__leases *l, const uint64_t *ids, size_t n)
{
    size_t done = 0;
    int rc = 0;

    while (!rc && done < n) {
        cuc_msg *m;
        if (cuc__link_is_closed(l->link))
            break; /* closed here: the peer has ended these leases */
        rc = cuc__release_msg_build(ids, n, &done, &m);
        if (rc)
            break;
        rc = cuc__link_send(l->link, m);
        cuc_msg_destroy(m);
        if (rc && cuc__link_is_closed(l->link))
            rc = 0, done = n;
    }
    return rc;
}

/* Sends the queued claims, then the queued releases (qlock held). */
static int flush_locked(struct cuc__leases *l)
{
    cuc_msg *m = l->claims;
    size_t nrel = l->nrel;
    int rc = 0;

    if (m) {
        __atomic_store_n(&l->claims, NULL, __ATOMIC_RELEASE);
        rc = cuc__link_is_closed(l->link) ? 0 : cuc__link_send(l->link, m);
        cuc_msg_destroy(m);
        if (rc && cuc__link_is_closed(l->link))
            rc = 0;
    }
    if (!rc && nrel) {
        __atomic_store_n(&l->nrel, 0, __ATOMIC_RELEASE);
        rc = send_releases_locked(l, l->rel, nrel);
    }
    return rc;
}

int cuc__leases_pending(const struct cuc__leases *l)
{
    return __atomic_load_n(&l->claims, __ATOMIC_ACQUIRE) != NULL ||
           __atomic_load_n(&l->nrel, __ATOMIC_ACQUIRE) != 0;
}

int cuc__leases_flush(struct cuc__leases *l)
{
    int rc;

    if (!cuc__leases_pending(l))
        return 0; /* the usual case: nothing queued */
    pthread_mutex_lock(&l->qlock);
    rc = flush_locked(l);
    pthread_mutex_unlock(&l->qlock);
    return rc;
}

void cuc__leases_defer_releases(struct cuc__leases *l, void (*wake)(void *), void *arg)
{
    pthread_mutex_lock(&l->qlock);
    l->wake = wake;
    l->wake_arg = arg;
    pthread_mutex_unlock(&l->qlock);
}

/* Queues ids[0..n) (qlock held); *first: the queue was empty. */
static int queue_releases_locked(struct cuc__leases *l, const uint64_t *ids, size_t n,
                                 int *first)
{
    if (l->nrel + n > l->rel_cap) {
        size_t cap = l->rel_cap ? l->rel_cap : 64;
        uint64_t *p;
        while (cap < l->nrel + n)
            cap *= 2;
        if (!(p = realloc(l->rel, cap * sizeof(*p))))
            return send_releases_locked(l, ids, n); /* no room: at once */
        l->rel = p, l->rel_cap = cap;
    }
    *first = l->nrel == 0 && !l->claims;
    memcpy(l->rel + l->nrel, ids, n * sizeof(*ids));
    __atomic_store_n(&l->nrel, l->nrel + n, __ATOMIC_RELEASE);
    return 0;
}

int cuc__leases_queue_claim(struct cuc__leases *l, const uint8_t token[16], uint32_t flags)
{
    int rc = 0, first = 0;

    pthread_mutex_lock(&l->qlock);
    if (!l->claims) {
        first = 1;
        cuc_msg *m = NULL;
        rc = cuc_msg_create(&m);
        __atomic_store_n(&l->claims, m, __ATOMIC_RELEASE);
    }
    if (!rc)
        rc = cuc__claim_rec_put(l->claims, token, flags);
    if (!rc && cuc_msg_record_count(l->claims) == CUC__CLAIM_MAX_RECORDS)
        rc = flush_locked(l);
    pthread_mutex_unlock(&l->qlock);
    return rc ? rc : first;
}

int cuc__leases_release(struct cuc__leases *l, const uint64_t *ids, size_t n)
{
    void (*wake)(void *);
    int rc = 0, first = 0;

    /* Inherited through fork: the leases are the parent's, and a frame from
     * here would break its channel's sequence (DESIGN.md, "Fork"). */
    if (l->link->owner != cuc__pid())
        return 0;
    pthread_mutex_lock(&l->qlock); /* a claim queued goes before its release */
    wake = l->wake;
    if (wake)
        rc = queue_releases_locked(l, ids, n, &first);
    else if (!(rc = flush_locked(l)))
        rc = send_releases_locked(l, ids, n);
    pthread_mutex_unlock(&l->qlock);
    if (first)
        wake(l->wake_arg);
    return rc;
}
