/* The importer's side of the share point: the connections to the share
 * points this process attached from, claims and their answers, and the
 * attached message (its records, its gate, what its destroy gives back). */
#include "share/point.h"
#include "base/error.h"
#include "base/hex.h"
#include "memory/pool.h"
#include "memory/vmm.h"
#include "os/clock.h"
#include "wire/records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- waits: claims sent, answered by the thread ---- */

static struct cuc__share_wait *of_node(const struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, struct cuc__share_wait, node);
}

static int same_pending(const struct cuc__hnode *n, const void *key)
{
    return !of_node(n)->done && memcmp(of_node(n)->token, key, CUC_SHARE_ID_LEN) == 0;
}

/* The first pending wait for token on e (p->lock held), or NULL. */
static struct cuc__share_wait *wait_find_locked(struct cuc__share *p,
                                                const struct cuc__share_exp *e,
                                                const uint8_t *token)
{
    uint64_t h = cuc__hash_bytes(token, CUC_SHARE_ID_LEN);
    struct cuc__hnode *n = cuc__htab_find(&p->waits, h, same_pending, token);

    while (n && of_node(n)->exp != e) /* a token is one exporter's: a forged
                                       * answer from another is ignored */
        n = NULL;
    return n ? of_node(n) : NULL;
}

/* w answered (p->lock held): status 0, or the refusal; reply (a fetch's,
 * taken) or NULL. Its gate opens or shuts. */
static void wait_done_locked(struct cuc__share *p, struct cuc__share_wait *w, int status,
                             cuc_msg *reply)
{
    const char *how;

    switch (status) {
    case CUC_E_NOT_FOUND:
        how = "the exporter has no hold or lease of it any more: it expired unclaimed "
              "(CUCORE_SHARE_HOLD_MS) or every receiver's lease of it ended";
        break;
    case CUC_E_EXPORTER_GONE:
        how = "its connection ended before the answer: the exporting process stopped "
              "sharing or exited";
        break;
    case CUC_E_LIMIT:
        how = "this process had no fd free for the answer's fds (RLIMIT_NOFILE)";
        break;
    default:
        how = cuc_strerror(status);
    }

    cuc__htab_remove(&p->waits, &w->node);
    p->npending--;
    w->done = 1;
    w->reply = reply;
    if (status)
        cuc__gate_settle(w->gate, status, "the claim of token %s at the share point %s "
                         "(pid %ld) was refused: %s", cuc__id16_hex(w->token).s,
                         w->exp->path, (long)w->exp->pid, how);
    else
        cuc__gate_settle(w->gate, 0, NULL);
    if (!w->fetch || w->abandoned) { /* nobody waits for it but through its gate */
        w->exp->waits--;
        cuc__gate_unref(w->gate);
        free(w);
        return;
    }
    pthread_cond_broadcast(&p->cond);
}

static int wait_add(struct cuc__share *p, struct cuc__share_exp *e, const uint8_t *token,
                    int fetch, struct cuc__share_wait **out)
{
    struct cuc__share_wait *w = calloc(1, sizeof(*w));
    int rc;

    if (!w)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a claim");
    /* a plain claim waits in the connection's queue for its first use */
    rc = cuc__gate_create(p->timeout_ms, fetch ? NULL : e->ch->leases, &w->gate);
    if (rc) {
        free(w);
        return rc;
    }
    memcpy(w->token, token, CUC_SHARE_ID_LEN);
    memcpy(w->gate->token, token, CUC_SHARE_ID_LEN);
    w->exp = e;
    w->fetch = fetch;
    w->node.hash = cuc__hash_bytes(token, CUC_SHARE_ID_LEN);
    pthread_mutex_lock(&p->lock);
    rc = cuc__htab_insert(&p->waits, &w->node);
    if (!rc) {
        p->npending++;
        e->waits++;
    }
    pthread_mutex_unlock(&p->lock);
    if (rc) {
        cuc__gate_unref(w->gate);
        free(w);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a claim");
    }
    *out = w;
    return 0;
}

/* The caller is done with w, a fetch's wait (answered or not): 1 when its
 * reply came, a late one too (none can come once w is out of the table). */
static int wait_free(struct cuc__share *p, struct cuc__share_wait *w)
{
    int replied;

    pthread_mutex_lock(&p->lock);
    if (!w->done) {
        cuc__htab_remove(&p->waits, &w->node);
        p->npending--;
    }
    w->exp->waits--;
    replied = w->reply != NULL;
    pthread_mutex_unlock(&p->lock);
    cuc_msg_destroy(w->reply);
    cuc__gate_unref(w->gate);
    free(w);
    return replied;
}

/* Sends a claim of token on ch now, after those queued there. */
static int send_claim(cuc_channel *ch, const uint8_t *token, uint32_t flags)
{
    int rc = cuc__leases_queue_claim(ch->leases, token, flags);

    return rc < 0 ? rc : cuc__leases_flush(ch->leases);
}

void cuc__share_flush_queued(struct cuc__share *p)
{
    struct cuc__leases *q[64];
    size_t n = 0;

    pthread_mutex_lock(&p->lock);
    for (struct cuc__share_exp *e = p->exps; e && n < CUC_ARRAY_LEN(q); e = e->next)
        if (!e->closed && cuc__leases_pending(e->ch->leases)) {
            cuc__leases_ref(e->ch->leases);
            q[n++] = e->ch->leases;
        }
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < n; i++) {
        (void)cuc__leases_flush(q[i]); /* a failure is the connection's end: read there */
        cuc__leases_unref(q[i]);
    }
}

/* The pending wait of gate g (p->lock held), or NULL. */
static struct cuc__share_wait *wait_of_gate_locked(struct cuc__share *p,
                                                   struct cuc__share_exp *e,
                                                   const uint8_t *token,
                                                   const struct cuc__gate *g)
{
    uint64_t h = cuc__hash_bytes(token, CUC_SHARE_ID_LEN);

    for (struct cuc__hnode *n = cuc__htab_find(&p->waits, h, same_pending, token); n;
         n = cuc__htab_find(&p->waits, h, same_pending, token)) {
        struct cuc__share_wait *w = of_node(n);
        if (w->gate == g && w->exp == e)
            return w;
        break; /* another attach of the same bytes: not ours to settle */
    }
    return NULL;
}

/* ---- reading an exporter's answers (the thread) ---- */

/* A message of confirm records: each settles its wait. */
static void take_confirms(struct cuc__share *p, struct cuc__share_exp *e, const cuc_msg *m)
{
    uint8_t token[CUC_SHARE_ID_LEN];
    struct cuc__share_wait *w;
    int status;

    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < cuc_msg_record_count(m); i++)
        if (cuc__confirm_rec_read(m, i, token, &status) == 0 &&
            (w = wait_find_locked(p, e, token)) != NULL)
            wait_done_locked(p, w, status, NULL);
    pthread_mutex_unlock(&p->lock);
}

/* A fetch's answer (record 0 a confirm of 0, then the held records): to
 * its waiter, or, waited for no more, its leases released. */
static void take_reply(struct cuc__share *p, struct cuc__share_exp *e, cuc_msg *m)
{
    uint8_t token[CUC_SHARE_ID_LEN];
    struct cuc__share_wait *w = NULL;
    int status, taken = 0;

    pthread_mutex_lock(&p->lock);
    if (cuc__confirm_rec_read(m, 0, token, &status) == 0 && status == 0)
        w = wait_find_locked(p, e, token);
    if (w && w->fetch && !w->abandoned) {
        wait_done_locked(p, w, 0, m);
        taken = 1; /* w and m are the waiter's now: it may free them once unlocked */
    } else if (w && w->abandoned) {
        wait_done_locked(p, w, CUC_E_TIMEOUT, NULL); /* freed: nobody took it over */
    }
    pthread_mutex_unlock(&p->lock);
    if (taken)
        return;
    /* nobody waits (its attach timed out): the claim is given back */
    cuc_msg_destroy(m);
    (void)send_claim(e->ch, token, CUC__CLAIM_GIVE_BACK);
}

struct fail_ctx {
    struct cuc__share *p;
    struct cuc__share_exp *e;
    int status, fetch_only;
    struct cuc__share_wait *hit[64];
    size_t n;
};

static void collect(struct cuc__hnode *n, void *arg)
{
    struct fail_ctx *c = arg;
    struct cuc__share_wait *w = of_node(n);

    if (c->n < CUC_ARRAY_LEN(c->hit) && w->exp == c->e && !w->done &&
        (w->fetch || !c->fetch_only))
        c->hit[c->n++] = w;
}

/* Every pending wait on e (or only its fetches) fails with status. */
static void fail_waits(struct cuc__share *p, struct cuc__share_exp *e, int status,
                       int fetch_only)
{
    struct fail_ctx c = {p, e, status, fetch_only, {0}, 0};

    pthread_mutex_lock(&p->lock);
    do { /* settling removes from the table: collect, then settle */
        c.n = 0;
        cuc__htab_each(&p->waits, collect, &c);
        for (size_t i = 0; i < c.n; i++)
            wait_done_locked(p, c.hit[i], status, NULL);
    } while (c.n == CUC_ARRAY_LEN(c.hit));
    pthread_mutex_unlock(&p->lock);
}

static void fail_fetches(struct cuc__share *p, struct cuc__share_exp *e, int status)
{
    fail_waits(p, e, status, 1);
}

int cuc__share_read_exp(struct cuc__share *p, struct cuc__share_exp *e)
{
    cuc_msg *m;
    int rc;

    for (;;) {
        rc = cuc__link_recv(e->ch->link, 0, &m);
        if (rc == CUC_E_TIMEOUT)
            return 0;
        if (rc == CUC_E_LIMIT) { /* a reply with fds we had no room for: refused */
            fail_fetches(p, e, rc);
            continue;
        }
        if (rc == CUC_E_BADMSG || rc == CUC_E_VERSION) {
            if (e->ch->link->recv_err.status)
                return 1;
            continue;
        }
        if (rc)
            return 1;
        if (cuc__msg_count_type(m, CUC_RECORD_CONFIRM) == cuc_msg_record_count(m)) {
            take_confirms(p, e, m);
            cuc_msg_destroy(m);
        } else if (cuc_msg_record_count(m) > 1) {
            take_reply(p, e, m);
        } else {
            cuc_msg_destroy(m);
        }
    }
}

/* ---- exporters ---- */

/* The hello a share point sends first: its share record, of the point the
 * bytes name, or the socket is someone else's now. */
static int check_hello(cuc_channel *ch, const struct cuc_share_record *want, int timeout_ms)
{
    struct cuc_share_record got;
    cuc_msg *m;
    int rc = cuc_channel_recv(ch, timeout_ms, &m);

    if (rc == CUC_E_TIMEOUT)
        return cuc__seterr(CUC_E_TIMEOUT, "the share point at \"%s\" did not greet in %d ms",
                           want->path, timeout_ms);
    if (rc == CUC_E_PEER_CLOSED)
        return cuc__seterr(CUC_E_EXPORTER_GONE, "the share point at \"%s\" closed the "
                           "connection at once (it is stopping, or serves as many peers "
                           "as it may, all holding leases)", want->path);
    if (rc)
        return rc;
    rc = cuc_msg_record_count(m) == 1 ? cuc_msg_read_share(m, 0, &got) : CUC_E_BADMSG;
    cuc_msg_destroy(m);
    if (rc)
        return cuc__seterr(CUC_E_BADMSG, "what answers at \"%s\" is no cucore share point",
                           want->path);
    if (memcmp(got.point, want->point, sizeof(got.point)) != 0)
        return cuc__seterr(CUC_E_EXPORTER_GONE, "the share point that detached these bytes "
                           "(%s) is gone: its socket \"%s\" is another's now (%s)",
                           cuc__id16_hex(want->point).s, want->path,
                           cuc__id16_hex(got.point).s);
    return 0;
}

/* A connection to the share point of r, greeted. A share point that
 * serves as many peers as it may closes a newcomer at once: tried again
 * until CUC__SHARE_CONNECT_MS. */
static int connect_greeted(struct cuc__share *p, const struct cuc_share_record *r,
                           cuc_channel **out)
{
    int64_t deadline = cuc__deadline(CUC__SHARE_CONNECT_MS);
    cuc_channel *ch;
    int rc;

    for (;;) {
        rc = cuc_channel_connect(r->path, 0, &ch);
        if (rc == CUC_E_BUSY) /* a full backlog: alive, a burst of importers; nobody
                               * accepting (no socket, or refused) is gone at once */
            rc = cuc_channel_connect(r->path, cuc__remaining(deadline), &ch);
        if (rc == CUC_E_NOT_FOUND ||
            (rc == CUC_E_TIMEOUT && !strstr(cuc_errmsg(), "backlog")))
            return cuc__seterr(CUC_E_EXPORTER_GONE, "the process that detached these "
                               "bytes is gone: nothing accepts on its share point \"%s\"",
                               r->path);
        if (rc)
            return rc;
        rc = check_hello(ch, r, p->timeout_ms);
        if (!rc) {
            *out = ch;
            return 0;
        }
        cuc_channel_destroy(ch);
        if (rc != CUC_E_EXPORTER_GONE || !strstr(cuc_errmsg(), "at once") ||
            cuc__remaining(deadline) == 0)
            return rc;
        cuc__nap(20, deadline);
    }
}

/* A connection to the share point of r; its releases go out in batches
 * (the thread sends what the frees queued meanwhile). */
static int connect_exp(struct cuc__share *p, const struct cuc_share_record *r,
                       struct cuc__share_exp **out)
{
    struct cuc__share_exp *e;
    cuc_channel *ch = NULL;
    int rc = connect_greeted(p, r, &ch);

    if (rc)
        return rc;
    e = calloc(1, sizeof(*e));
    if (!e) {
        cuc_channel_destroy(ch);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a share point connection");
    }
    memcpy(e->point, r->point, sizeof(e->point));
    memcpy(e->path, r->path, sizeof(e->path));
    e->ch = ch;
    e->pid = ch->link->peer_pid;
    cuc__leases_defer_releases(ch->leases, cuc__share_wake_cb, p);
    *out = e;
    return 0;
}

static struct cuc__share_exp *exp_find_locked(struct cuc__share *p, const uint8_t *point)
{
    for (struct cuc__share_exp *e = p->exps; e; e = e->next)
        if (!e->closed && memcmp(e->point, point, CUC_SHARE_ID_LEN) == 0)
            return e;
    return NULL;
}

/* The open connection to r's share point, made if there is none, with
 * one wait counted on it (the caller's: wait_free or exp_put drops it). */
static int exp_get(struct cuc__share *p, const struct cuc_share_record *r,
                   struct cuc__share_exp **out)
{
    struct cuc__share_exp *e, *made = NULL;
    int rc;

    pthread_mutex_lock(&p->lock);
    e = exp_find_locked(p, r->point);
    if (e)
        e->waits++;
    pthread_mutex_unlock(&p->lock);
    if (e) {
        *out = e;
        return 0;
    }
    rc = connect_exp(p, r, &made);
    if (rc)
        return rc;
    pthread_mutex_lock(&p->lock);
    e = exp_find_locked(p, r->point); /* another thread's connect won */
    if (!e) {
        e = made;
        made = NULL;
        e->next = p->exps;
        p->exps = e;
        p->nexps++;
    }
    e->waits++;
    pthread_mutex_unlock(&p->lock);
    if (made) {
        cuc_channel_destroy(made->ch);
        free(made);
    } else {
        cuc__share_wake(p); /* poll it */
    }
    *out = e;
    return 0;
}

static void exp_put(struct cuc__share *p, struct cuc__share_exp *e)
{
    pthread_mutex_lock(&p->lock);
    e->waits--;
    pthread_mutex_unlock(&p->lock);
}

/* Keeps a pool imported through e (a reference) until e's connection ends. */
static void exp_keep_pool(struct cuc__share *p, struct cuc__share_exp *e, cuc_pool *pool)
{
    pthread_mutex_lock(&p->lock);
    if (e->npools == e->pool_cap) {
        size_t cap = e->pool_cap ? 2 * e->pool_cap : 4;
        void *more = realloc(e->pools, cap * sizeof(*e->pools));
        if (!more) {
            pthread_mutex_unlock(&p->lock);
            cuc_pool_unref(pool); /* kept by its buffers only: fetched again later */
            return;
        }
        e->pools = more;
        e->pool_cap = cap;
    }
    e->pools[e->npools++] = pool;
    pthread_mutex_unlock(&p->lock);
}

void cuc__share_exp_closed(struct cuc__share *p, struct cuc__share_exp *e, int why)
{
    cuc_pool **pools;
    size_t n;

    fail_waits(p, e, why, 0);
    pthread_mutex_lock(&p->lock);
    e->closed = 1;
    pools = e->pools;
    n = e->npools;
    e->pools = NULL;
    e->npools = e->pool_cap = 0;
    pthread_mutex_unlock(&p->lock);
    /* what was imported from it stays while its objects do */
    for (size_t i = 0; i < n; i++)
        cuc_pool_unref(pools[i]);
    free(pools);
}

void cuc__share_reap_exps_locked(struct cuc__share *p)
{
    struct cuc__share_exp **at = &p->exps, *e;

    while ((e = *at) != NULL) {
        if (!e->closed || e->waits) {
            at = &e->next;
            continue;
        }
        *at = e->next;
        p->nexps--;
        cuc_channel_destroy(e->ch); /* its socket stays while imports report on it */
        free(e);
    }
}

void cuc__share_attach_end(struct cuc__share *p)
{
    for (struct cuc__share_exp *e = p->exps; e; e = e->next)
        if (!e->closed)
            cuc__share_exp_closed(p, e, CUC_E_EXPORTER_GONE);
    pthread_mutex_lock(&p->lock);
    cuc__share_reap_exps_locked(p); /* those with waits go when the waits do */
    pthread_mutex_unlock(&p->lock);
}

/* ---- the attached message ---- */

/* The lease id of record i of m, or 0 for a record that leases nothing. */
static uint64_t lease_of(const cuc_msg *m, size_t i)
{
    struct cuc_ipc_buffer_record ir;
    struct cuc_buffer_record br;
    struct cuc_vmm_record vr;
    int type = 0;

    (void)cuc_msg_record_type(m, i, &type);
    switch (type) {
    case CUC_RECORD_BUFFER:
    case CUC_RECORD_BUFFER_VIEW:
        return cuc_msg_read_buffer(m, i, &br) == 0 ? br.lease_id : 0;
    case CUC_RECORD_IPC_BUFFER:
        return cuc_msg_read_ipc_buffer(m, i, &ir) == 0 ? ir.lease_id : 0;
    case CUC_RECORD_VMM:
        return cuc_msg_read_vmm(m, i, &vr) == 0 ? vr.lease_id : 0;
    default:
        return 0;
    }
}

/* An attached message goes: the leases of its records nobody got are
 * released, or, when nobody got any, the claim is given back (the hold
 * stays for the bytes' other holders). */
static void attached_done(struct cuc__ref *gref, const cuc_msg *m)
{
    struct cuc__gate *g = CUC_CONTAINER_OF(gref, struct cuc__gate, ref);
    struct cuc__leases *l = cuc__leases_of_msg(m);
    size_t n = cuc_msg_record_count(m), nleased = 0, nleft = 0;
    uint64_t small[64], *left = small;

    if (!l || __atomic_load_n(&g->status, __ATOMIC_ACQUIRE) < 0)
        return; /* refused: nothing is held */
    if (n > CUC_ARRAY_LEN(small) && !(left = malloc(n * sizeof(*left))))
        return; /* kept until the connection ends: late, never early */
    for (size_t i = 0; i < n; i++) {
        uint64_t id = lease_of(m, i);
        nleased += id != 0;
        if (id && !cuc__msg_taken(m, i))
            left[nleft++] = id;
    }
    if (nleft && nleft == nleased) {
        /* after the claim, if it is still queued */
        if (cuc__leases_queue_claim(l, g->token, CUC__CLAIM_GIVE_BACK) >= 0)
            (void)cuc__leases_flush(l);
    } else if (nleft) {
        (void)cuc__leases_release(l, left, nleft);
    }
    if (left != small)
        free(left);
}

/* 1 when a record of b (an attach's bytes) needs the exporter's fds: a
 * held record but for a pool this process has, a buffer of a pool it has
 * not. */
static int needs_fetch(const cuc_msg *b)
{
    uint8_t seen[CUC_POOL_ID_LEN];
    struct cuc_buffer_record br;
    struct cuc_held_record hr;
    cuc_pool *pool = NULL;
    int any = 0;

    for (size_t i = 1; i < cuc_msg_record_count(b); i++) {
        const uint8_t *id = NULL;
        int type = 0;
        (void)cuc_msg_record_type(b, i, &type);
        if (type == CUC_RECORD_HELD && cuc_msg_read_held(b, i, &hr) == 0)
            id = hr.type == CUC_RECORD_POOL ? hr.payload : NULL;
        else if ((type == CUC_RECORD_BUFFER || type == CUC_RECORD_BUFFER_VIEW) &&
                 cuc_msg_read_buffer(b, i, &br) == 0)
            id = br.pool_id;
        else if (type == CUC_RECORD_HELD)
            return 1; /* a held vmm or fd record */
        else
            continue;
        if (!id)
            return 1;
        if (any && memcmp(id, seen, sizeof(seen)) == 0)
            continue; /* the records of one pool follow each other */
        if (!(pool = cuc__pool_find(id)))
            return 1;
        cuc_pool_unref(pool);
        memcpy(seen, id, sizeof(seen));
        any = 1;
    }
    return 0;
}

/* Record i of b into o as it is. */
static int copy_plain(cuc_msg *o, const cuc_msg *b, size_t i)
{
    struct cuc__record r;
    int rc = cuc__msg_record(b, i, &r);

    return rc ? rc : cuc__msg_add_record(o, r.type, r.version, r.payload, r.len, r.fds,
                                         r.nfds);
}

/* The message of b's records (record 0, the share record, left out), each
 * held record replaced by what held(i, arg) adds. */
static int rebuild(const cuc_msg *b, int (*held)(cuc_msg *o, size_t k, void *arg), void *arg,
                   cuc_msg **out)
{
    struct cuc_held_record hr;
    size_t k = 0;
    cuc_msg *o;
    int rc = cuc_msg_create(&o);

    for (size_t i = 1; !rc && i < cuc_msg_record_count(b); i++) {
        if (cuc_msg_read_held(b, i, &hr) == 0)
            rc = held(o, k++, arg);
        else
            rc = copy_plain(o, b, i);
    }
    if (rc) {
        cuc_msg_destroy(o);
        return rc;
    }
    *out = o;
    return 0;
}

/* No fetch: every held record is a pool this process has. */
static int held_pool_here(cuc_msg *o, size_t k, void *arg)
{
    const cuc_msg *b = arg;
    struct cuc_held_record hr;
    cuc_pool *pool = NULL;
    size_t seen = 0;
    int rc = CUC_E_NOT_FOUND;

    for (size_t i = 1; i < cuc_msg_record_count(b); i++)
        if (cuc_msg_read_held(b, i, &hr) == 0 && seen++ == k) {
            pool = cuc__pool_find(hr.payload);
            break;
        }
    if (pool)
        rc = cuc_msg_add_pool(o, pool);
    cuc_pool_unref(pool);
    return rc == CUC_E_NOT_FOUND ? cuc__seterr(rc, "a pool of the attached message went "
                                               "away while it was attached") : rc;
}

/* Fetched: held record k is record 1 + k of the reply. */
static int held_from_reply(cuc_msg *o, size_t k, void *arg)
{
    return copy_plain(o, arg, 1 + k);
}

static size_t count_held(const cuc_msg *b)
{
    return cuc__msg_count_type(b, CUC_RECORD_HELD);
}

/* The pools the reply r brought after its held records are imported; those
 * new here are kept with e. */
static int import_pools(struct cuc__share *p, struct cuc__share_exp *e, const cuc_msg *r,
                        size_t nheld)
{
    struct cuc_pool_record pr;
    cuc_pool *had, *pool;
    int rc = 0;

    for (size_t j = 1 + nheld; !rc && j < cuc_msg_record_count(r); j++) {
        rc = cuc_msg_read_pool(r, j, &pr);
        if (rc)
            break;
        had = cuc__pool_find(pr.id);
        rc = cuc_msg_get_pool(r, j, &pool);
        if (!rc && !had)
            exp_keep_pool(p, e, pool);
        else if (!rc)
            cuc_pool_unref(pool);
        cuc_pool_unref(had);
    }
    return rc;
}

/* Waits for a fetch's answer: 0 with w->reply, or the refusal. */
static int wait_reply(struct cuc__share *p, struct cuc__share_wait *w)
{
    int64_t deadline = cuc__deadline(p->timeout_ms);
    int done;

    pthread_mutex_lock(&p->lock);
    while (!w->done && cuc__cond_wait_until(&p->cond, &p->lock, deadline) == 0)
        ;
    done = w->done;
    pthread_mutex_unlock(&p->lock);
    if (!done)
        return cuc__seterr(CUC_E_TIMEOUT, "the share point \"%s\" (pid %ld) did not answer "
                           "the claim of token %s in %d ms (CUCORE_SHARE_TIMEOUT_MS)",
                           w->exp->path, (long)w->exp->pid, cuc__id16_hex(w->token).s,
                           p->timeout_ms);
    return w->reply ? 0 : cuc__gate_pass(w->gate, "attaching");
}

struct token_on {
    const uint8_t *token;
    const struct cuc__share_exp *e;
};

static int same_abandoned(const struct cuc__hnode *n, const void *key)
{
    const struct token_on *k = key;
    const struct cuc__share_wait *w = of_node(n);

    return w->abandoned && !w->done && w->exp == k->e &&
           memcmp(w->token, k->token, CUC_SHARE_ID_LEN) == 0;
}

/* An earlier attach's fetch of token on e that timed out, its answer still
 * to come; taken over (take 1) or not. A claim of the token's own would be
 * answered too, and the give-back of the earlier answer would end the
 * grant it uses. */
static struct cuc__share_wait *abandoned(struct cuc__share *p, struct cuc__share_exp *e,
                                         const uint8_t *token, int take)
{
    struct token_on k = {token, e};
    struct cuc__hnode *n;

    pthread_mutex_lock(&p->lock);
    n = cuc__htab_find(&p->waits, cuc__hash_bytes(token, CUC_SHARE_ID_LEN), same_abandoned,
                       &k);
    if (n && take)
        of_node(n)->abandoned = 0;
    pthread_mutex_unlock(&p->lock);
    return n ? of_node(n) : NULL;
}

/* A fetch that timed out unanswered is left for its answer (take_reply
 * gives it back) or for the next attach of the token: 1, or 0 when it was
 * answered meanwhile. */
static int abandon(struct cuc__share *p, struct cuc__share_wait *w)
{
    int left;

    pthread_mutex_lock(&p->lock);
    left = !w->done;
    w->abandoned = left;
    pthread_mutex_unlock(&p->lock);
    return left;
}

/* The fetch path: the claim answered with the held records' fds. */
static int attach_fetch(struct cuc__share *p, struct cuc__share_exp *e, const cuc_msg *b,
                        const uint8_t *token, cuc_msg **out)
{
    struct cuc__share_wait *w = abandoned(p, e, token, 1);
    int rc = 0;

    if (!w) {
        rc = wait_add(p, e, token, 1, &w);
        if (rc)
            return rc;
        rc = send_claim(e->ch, token, CUC__CLAIM_FETCH);
    }
    if (!rc)
        rc = wait_reply(p, w);
    if (rc == CUC_E_TIMEOUT && abandon(p, w))
        return rc;
    if (!rc)
        rc = import_pools(p, e, w->reply, count_held(b));
    if (!rc)
        rc = rebuild(b, held_from_reply, w->reply, out);
    if (!rc) {
        cuc__leases_stamp(e->ch->leases, *out);
        cuc__msg_set_gate(*out, &w->gate->ref, attached_done);
    }
    /* answered (in time or late) but not taken here, or dropped for want of
     * fds: given back (e lives: attach_remote holds a wait on it) */
    if ((wait_free(p, w) && rc) || rc == CUC_E_LIMIT)
        (void)send_claim(e->ch, token, CUC__CLAIM_GIVE_BACK);
    return rc;
}

/* The plain path: the claim sent first, its answer coming while the
 * message is rebuilt and its memory mapped; uses wait for it (the gate). */
static int attach_plain(struct cuc__share *p, struct cuc__share_exp *e, const cuc_msg *b,
                        const void *bytes, size_t len, const uint8_t *token, cuc_msg **out)
{
    struct cuc__share_wait *w;
    struct cuc__gate *g;
    cuc_msg *o;
    int rc = wait_add(p, e, token, 0, &w);

    if (rc)
        return rc;
    g = w->gate;
    cuc__gate_ref(g); /* ours: w is freed once answered, and another thread's
                       * flush may send the claim at any moment from now */
    rc = cuc__leases_queue_claim(e->ch->leases, token, 0);
    if (rc == 1) /* the first queued: the thread sends the batch when it wakes */
        cuc__share_wake(p);
    if (rc < 0) {
        pthread_mutex_lock(&p->lock);
        if ((w = wait_of_gate_locked(p, e, token, g)) != NULL)
            wait_done_locked(p, w, rc, NULL);
        pthread_mutex_unlock(&p->lock);
        cuc__gate_unref(g);
        return rc;
    }
    /* no held record: the records as they are, in one copy */
    rc = count_held(b) ? rebuild(b, held_pool_here, (void *)b, &o)
                       : cuc__msg_from_bytes_after(bytes, len, &o);
    (void)cuc__leases_flush(e->ch->leases); /* on its way while the memory is mapped */
    if (rc) { /* claimed, nothing used: given back */
        (void)send_claim(e->ch, token, CUC__CLAIM_GIVE_BACK);
        cuc__gate_unref(g);
        return rc;
    }
    cuc__leases_stamp(e->ch->leases, o);
    cuc__msg_set_gate(o, &g->ref, attached_done);
    cuc__gate_unref(g);
    *out = o;
    return 0;
}

/* ---- attach ---- */

static int foreign(const struct cuc__share *p, const struct cuc_share_record *r)
{
    return cuc__seterr(CUC_E_FOREIGN_HOST, "the bytes name a share point of another machine, "
                       "or of this one before it rebooted (boot id %s; here %s): memory "
                       "cannot cross machines; send a device's UUID, or share on that "
                       "machine", cuc__id16_hex(r->boot_id).s, cuc__id16_hex(p->boot).s);
}

/* In the process that detached the bytes: the objects themselves. */
struct here {
    const cuc_msg *b;
    cuc_msg *o;
};

static int build_here(void *data, void *arg)
{
    struct here *h = arg;

    return cuc__share_rebuild_here(data, h->b, &h->o);
}

static int attach_here(struct cuc__share *p, const cuc_msg *b,
                       const struct cuc_share_record *r, cuc_msg **out)
{
    struct here h = {b, NULL};
    int rc = cuc__hold_take_here(p->holds, r->token, build_here, &h);

    if (!rc)
        *out = h.o;
    return rc;
}

/* The share record of b, record 0. */
static int share_of(const cuc_msg *b, struct cuc_share_record *r)
{
    int type = 0;

    if (cuc_msg_record_count(b) == 0 || cuc_msg_record_type(b, 0, &type) != 0 ||
        type != CUC_RECORD_SHARE)
        return cuc__seterr(CUC_E_BADMSG, "the bytes are a cucore message but not a detached "
                           "one: record 0 is %s, not a share record",
                           cuc_msg_record_count(b) ? cuc_record_type_name(type) : "missing");
    return cuc_msg_read_share(b, 0, r);
}

static int attach_remote(struct cuc__share *p, const cuc_msg *b, const void *bytes,
                         size_t len, const struct cuc_share_record *r, cuc_msg **out)
{
    struct cuc__share_exp *e;
    int rc = exp_get(p, r, &e);

    if (rc)
        return rc;
    rc = needs_fetch(b) || abandoned(p, e, r->token, 0)
             ? attach_fetch(p, e, b, r->token, out)
             : attach_plain(p, e, b, bytes, len, r->token, out);
    exp_put(p, e);
    return rc;
}

int cuc__share_attach(struct cuc__share *p, const void *bytes, size_t len, cuc_msg **out)
{
    struct cuc_share_record r;
    cuc_msg *b;
    int rc = cuc_msg_from_bytes(bytes, len, &b);

    if (rc)
        return rc;
    rc = share_of(b, &r);
    if (!rc && memcmp(r.boot_id, p->boot, sizeof(r.boot_id)) != 0)
        rc = foreign(p, &r);
    if (!rc)
        rc = memcmp(r.point, p->point, sizeof(r.point)) == 0 ? attach_here(p, b, &r, out)
                                                              : attach_remote(p, b, bytes, len, &r,
                                                                              out);
    cuc_msg_destroy(b);
    return rc;
}
