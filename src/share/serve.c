/* The exporter's side of the share point: detaching a message (a hold,
 * and the bytes), the socket, the peers it serves, their claims (a grant
 * of the hold in the peer's lease table) and releases (the lease table's
 * own path), fetch replies (the held records with their fds). */
#include "share/point.h"
#include "base/error.h"
#include "base/hex.h"
#include "memory/buffer.h"
#include "memory/pool.h"
#include "memory/vmm.h"
#include "os/clock.h"
#include "os/fd.h"
#include "os/sock.h"
#include "wire/records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- what a hold serves: the objects of its held records ---- */

struct held_obj {
    int type;          /* the record's: pool, vmm or fd */
    void *obj;         /* a pool or VMM resource (a reference) */
    uint64_t lease_id; /* a vmm record's */
    uint32_t tag;      /* an fd record's */
    int fd;            /* an fd record's (owned), else -1 */
};

struct hold_data {
    struct held_obj *held; /* in record order */
    size_t nheld;
    cuc_pool **pools; /* the pools of its buffer records (a reference each) */
    size_t npools;
};

static void data_free(void *arg)
{
    struct hold_data *d = arg;

    for (size_t i = 0; i < d->nheld; i++) {
        if (d->held[i].type == CUC_RECORD_POOL)
            cuc_pool_unref(d->held[i].obj);
        else if (d->held[i].type == CUC_RECORD_VMM)
            cuc_vmm_unref(d->held[i].obj);
        else if (d->held[i].fd >= 0)
            close(d->held[i].fd);
    }
    for (size_t i = 0; i < d->npools; i++)
        cuc_pool_unref(d->pools[i]);
    free(d->held);
    free(d->pools);
    free(d);
}

/* The VMM resource m attached under lease id. */
static cuc_vmm *vmm_of(const cuc_msg *m, uint64_t id)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts), i = id & (CUC__LEASE_PER_BLOCK - 1u);

    if (i < n && atts[i].id == id && atts[i].ops == &cuc__vmm_lease_ops)
        return atts[i].obj;
    return NULL;
}

static int hold_pool(struct hold_data *d, const uint8_t id[CUC_POOL_ID_LEN])
{
    cuc_pool *pool;
    void *more;
    int rc;

    for (size_t i = 0; i < d->npools; i++)
        if (memcmp(d->pools[i]->id, id, CUC_POOL_ID_LEN) == 0)
            return 0;
    rc = cuc_pool_get_by_id(id, &pool);
    if (rc)
        return rc;
    more = realloc(d->pools, (d->npools + 1) * sizeof(*d->pools));
    if (!more) {
        cuc_pool_unref(pool);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a hold's pools");
    }
    d->pools = more;
    d->pools[d->npools++] = pool;
    return 0;
}

/* Record i of m, if it carries fds, as the object the hold serves it
 * from. */
static int hold_record(struct hold_data *d, const cuc_msg *m, size_t i)
{
    struct held_obj *h = &d->held[d->nheld];
    struct cuc_pool_record pr;
    struct cuc_vmm_record vr;
    struct cuc__record r;
    int rc = cuc__msg_record(m, i, &r);

    if (rc)
        return rc;
    *h = (struct held_obj){r.type, NULL, 0, 0, -1};
    switch (r.type) {
    case CUC_RECORD_POOL:
        rc = cuc_msg_read_pool(m, i, &pr);
        if (!rc)
            rc = cuc_pool_get_by_id(pr.id, (cuc_pool **)&h->obj);
        break;
    case CUC_RECORD_VMM:
        rc = cuc_msg_read_vmm(m, i, &vr);
        if (!rc && !(h->obj = vmm_of(m, vr.lease_id)))
            rc = cuc__seterr(CUC_E_INVALID, "vmm record %zu has no resource attached to "
                             "the message", i);
        if (!rc) {
            cuc_vmm_ref(h->obj);
            h->lease_id = vr.lease_id;
        }
        break;
    case CUC_RECORD_FD:
        h->tag = cuc__get32(r.payload);
        rc = cuc__dup_cloexec(r.fds[0], "an fd record's fd", &h->fd);
        break;
    default:
        return 0;
    }
    if (!rc)
        d->nheld++;
    return rc;
}

/* The pools of m's pool buffers (their attachments): an importer that
 * has not got one fetches it with the held records. */
static int hold_pools(struct hold_data *d, const cuc_msg *m)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts);
    cuc_pool *last = NULL;
    int rc = 0;

    for (size_t i = 0; !rc && i < n; i++) {
        cuc_buffer *b = atts[i].obj;
        if (atts[i].ops != &cuc__buffer_lease_ops || cuc_buffer_is_wrapped(b) ||
            cuc_buffer_pool(b) == last)
            continue;
        last = cuc_buffer_pool(b);
        rc = hold_pool(d, last->id);
    }
    return rc;
}

/* The records of a channel's or a share point's own traffic, which no
 * detached message carries. */
static const int traffic[] = {CUC_RECORD_RELEASE, CUC_RECORD_REFUSED, CUC_RECORD_KERNEL_REF,
                              CUC_RECORD_KERNEL_HELD, CUC_RECORD_SHARE, CUC_RECORD_HELD,
                              CUC_RECORD_CLAIM, CUC_RECORD_CONFIRM};

static int refuse_traffic(const cuc_msg *m)
{
    int type = 0;

    for (size_t k = 0; k < CUC_ARRAY_LEN(traffic); k++) {
        if (!cuc__msg_has_type(m, (unsigned)traffic[k]))
            continue;
        for (size_t i = 0; i < cuc_msg_record_count(m); i++)
            if (cuc_msg_record_type(m, i, &type) == 0 && type == traffic[k])
                return cuc__seterr(CUC_E_INVALID, "record %zu is a %s record, which belongs "
                                   "to a channel's or a share point's own traffic: a "
                                   "detached message carries objects", i,
                                   cuc_record_type_name(type));
    }
    return 0;
}

/* 1 when m holds a record that carries fds. */
static int holds_fds(const cuc_msg *m)
{
    return cuc_msg_fd_count(m) != 0;
}

static int hold_data_of(const cuc_msg *m, struct hold_data **out)
{
    size_t n = cuc_msg_record_count(m);
    struct hold_data *d;
    int rc = refuse_traffic(m);

    if (rc)
        return rc;
    d = calloc(1, sizeof(*d));
    if (!d || (holds_fds(m) && !(d->held = calloc(n, sizeof(*d->held))))) {
        free(d);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a hold of %zu records", n);
    }
    for (size_t i = 0; !rc && holds_fds(m) && i < n; i++)
        rc = hold_record(d, m, i);
    if (!rc)
        rc = hold_pools(d, m);
    if (rc) {
        data_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* ---- detach: the bytes ---- */

static void share_rec(const struct cuc__share *p, const uint8_t *token,
                      struct cuc_share_record *r)
{
    memset(r, 0, sizeof(*r));
    memcpy(r->point, p->point, sizeof(r->point));
    memcpy(r->boot_id, p->boot, sizeof(r->boot_id));
    if (token)
        memcpy(r->token, token, sizeof(r->token));
    memcpy(r->path, p->path, sizeof(r->path));
}

/* Record i of m into b: as it is, or, carrying fds, as a held record. */
static int copy_record(cuc_msg *b, const cuc_msg *m, size_t i)
{
    struct cuc__record r;
    int rc = cuc__msg_record(m, i, &r);

    if (rc)
        return rc;
    if (r.nfds == 0)
        return cuc__msg_add_record(b, r.type, r.version, r.payload, r.len, NULL, 0);
    return cuc__held_rec_put(b, &(struct cuc_held_record){r.type, r.version, r.nfds,
                                                          r.payload, r.len});
}

static int bytes_of(const struct cuc__share *p, const cuc_msg *m, const uint8_t *token,
                    void **bytes, size_t *len)
{
    uint8_t payload[CUC__SHARE_PAYLOAD];
    struct cuc_share_record sr;
    cuc_msg *b;
    int rc;

    share_rec(p, token, &sr);
    if (cuc_msg_fd_count(m) == 0) { /* no record to hold: m's bytes, led by the share record */
        rc = cuc__share_rec_write(&sr, payload);
        return rc ? rc : cuc__msg_to_bytes_led(m, CUC_RECORD_SHARE, CUC_RECORD_SHARE_VERSION,
                                               payload, sizeof(payload), bytes, len);
    }
    rc = cuc_msg_create(&b);
    if (rc)
        return rc;
    rc = cuc__share_rec_put(b, &sr);
    for (size_t i = 0; !rc && i < cuc_msg_record_count(m); i++)
        rc = copy_record(b, m, i);
    if (!rc)
        rc = cuc_msg_to_bytes(b, bytes, len);
    cuc_msg_destroy(b);
    return rc;
}

int cuc__share_detach(struct cuc__share *p, const cuc_msg *m, void **bytes, size_t *len)
{
    uint8_t token[CUC__TOKEN_LEN];
    struct hold_data *d = NULL;
    int rc;

    pthread_mutex_lock(&p->lock);
    rc = cuc__share_listen_locked(p);
    pthread_mutex_unlock(&p->lock);
    if (!rc)
        rc = hold_data_of(m, &d);
    if (rc)
        return rc;
    rc = cuc__hold_add(p->holds, m, CUC_SHARE_MAX_HOLDS, d, data_free, token);
    if (rc) {
        data_free(d);
        return rc;
    }
    cuc__share_wake(p); /* its expiry may be the soonest now */
    rc = bytes_of(p, m, token, bytes, len);
    if (rc) /* nobody can have the token: the hold goes */
        cuc__hold_drop(p->holds, token);
    return rc;
}

/* ---- the socket ---- */

int cuc__share_listen_locked(struct cuc__share *p)
{
    uint8_t name[8];
    char hex[17], path[sizeof(p->path) + 64];
    int rc;

    if (p->listener)
        return 0;
    rc = cuc__random_bytes(name, sizeof(name), "a share point's socket name");
    if (rc)
        return rc;
    cuc__hex(name, sizeof(name), hex);
    if (snprintf(path, sizeof(path), "%s/" CUC__SHARE_SOCK_PREFIX "%s" CUC__SHARE_SOCK_SUFFIX,
                 p->dir, hex) > (int)CUC_SHARE_PATH_MAX)
        return cuc__seterr(CUC_E_INVALID, "the share point directory \"%s\" is too long "
                           "for a socket path (at most %u bytes with its name): choose a "
                           "shorter one (CUCORE_SHARE_DIR)", p->dir, CUC_SHARE_PATH_MAX);
    rc = cuc_channel_listen(path, &p->listener);
    if (rc)
        return rc;
    memcpy(p->path, path, strlen(path) + 1);
    cuc__share_wake(p);
    return 0;
}

/* ---- peers ---- */

static int send_hello(struct cuc__share *p, cuc_channel *ch)
{
    struct cuc_share_record sr;
    cuc_msg *m;
    int rc = cuc_msg_create(&m);

    if (rc)
        return rc;
    share_rec(p, NULL, &sr);
    rc = cuc__share_rec_put(m, &sr);
    if (!rc)
        rc = cuc__link_send(ch->link, m);
    cuc_msg_destroy(m);
    return rc;
}

/* The peer idle longest that holds no lease and has been quiet a while
 * (a claim may be on its way from a newer one), or NULL. */
static struct cuc__share_peer *idlest(struct cuc__share *p)
{
    int64_t quiet = cuc__deadline(0) - CUC__SHARE_EVICT_QUIET_MS;
    struct cuc__share_peer *best = NULL;

    for (struct cuc__share_peer *pr = p->peers; pr; pr = pr->next)
        if (pr->last <= quiet && cuc__leases_count(pr->ch->leases) == 0 &&
            (!best || pr->last < best->last))
            best = pr;
    return best;
}

/* A new peer over ch, or ch dropped when every place is taken by a peer
 * with leases. */
static void add_peer(struct cuc__share *p, cuc_channel *ch)
{
    struct timeval tv = {CUC__SHARE_SEND_MS / 1000, 0};
    struct cuc__share_peer *pr, *old;

    if (p->npeers >= p->max_peers && (old = idlest(p)) != NULL)
        cuc__share_drop_peer(p, old, CUC__LEASE_CHANNEL_CLOSED);
    pr = p->npeers < p->max_peers ? calloc(1, sizeof(*pr)) : NULL;
    /* a peer that does not read cannot stall the thread past this */
    if (!pr || setsockopt(ch->link->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
        send_hello(p, ch) != 0) {
        free(pr);
        cuc_channel_destroy(ch);
        return;
    }
    cuc__link_limit_rx(ch->link, CUC__SHARE_PEER_MAX_BYTES, 0);
    cuc__leases_on_gone(ch->leases, cuc__holds_peer_gone, p->holds);
    pr->ch = ch;
    pr->last = cuc__deadline(0);
    pthread_mutex_lock(&p->lock);
    pr->next = p->peers;
    p->peers = pr;
    p->npeers++;
    pthread_mutex_unlock(&p->lock);
}

int cuc__share_accept(struct cuc__share *p)
{
    cuc_channel *ch;
    int rc;

    for (;;) {
        rc = cuc_listener_accept(p->listener, 0, &ch);
        if (rc == CUC_E_PERMISSION)
            continue; /* another uid's peer: refused, nothing said to it */
        if (rc == CUC_E_TIMEOUT)
            return 0; /* none waiting */
        if (rc)
            return 1; /* no fd to take it with, say: poll would say so at once */
        add_peer(p, ch);
    }
}

void cuc__share_drop_peer(struct cuc__share *p, struct cuc__share_peer *pr, int why)
{
    struct cuc__share_peer **at;

    pthread_mutex_lock(&p->lock);
    for (at = &p->peers; *at && *at != pr; at = &(*at)->next)
        ;
    if (*at) {
        *at = pr->next;
        p->npeers--;
    }
    pthread_mutex_unlock(&p->lock);
    cuc__link_close(pr->ch->link);
    cuc__leases_end_all(pr->ch->leases, why);
    cuc_channel_destroy(pr->ch);
    free(pr);
}

/* ---- claims ---- */

static int add_held(cuc_msg *r, const struct held_obj *h)
{
    switch (h->type) {
    case CUC_RECORD_POOL:
        return cuc_msg_add_pool(r, h->obj);
    case CUC_RECORD_VMM:
        return cuc__msg_add_vmm_under(r, h->obj, h->lease_id);
    default:
        return cuc_msg_add_fd(r, h->fd, h->tag);
    }
}

/* A fetch's answer: the confirm, the held records with their fds, the
 * pools of the buffer records. */
static int fetch_reply(const struct hold_data *d, const uint8_t *token, cuc_msg **out)
{
    cuc_msg *r;
    int rc = cuc_msg_create(&r);

    if (!rc)
        rc = cuc__confirm_rec_put(r, token, 0);
    for (size_t i = 0; !rc && i < d->nheld; i++)
        rc = add_held(r, &d->held[i]);
    for (size_t i = 0; !rc && i < d->npools; i++)
        rc = cuc_msg_add_pool(r, d->pools[i]);
    if (rc) {
        cuc_msg_destroy(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* One fetch: the reply, or the failure in the batch of confirms. A peer
 * short of fds drops the reply (and says so with a refused record, as on
 * any channel) and then gives the claim back (attach.c): the grant is not
 * ended by the refusal, whose ends would run before the hold could be
 * restored, and free what the hold's other receivers may still claim. */
static void serve_fetch(struct cuc__share_peer *pr, const uint8_t *token, void *data,
                        int rc, cuc_msg *confirms)
{
    cuc_msg *r = NULL;

    if (!rc)
        rc = fetch_reply(data, token, &r);
    if (!rc)
        rc = cuc__link_send(pr->ch->link, r);
    cuc_msg_destroy(r);
    if (rc)
        (void)cuc__confirm_rec_put(confirms, token, rc);
}

/* Claim record i of m from pr: its answer into confirms (a fetch's reply
 * is sent at once). */
static void serve_claim(struct cuc__share *p, struct cuc__share_peer *pr, const cuc_msg *m,
                        size_t i, cuc_msg *confirms)
{
    uint8_t token[CUC__TOKEN_LEN];
    uint64_t block = 0;
    void *data = NULL;
    uint32_t flags;
    int rc;

    if (cuc__claim_rec_read(m, i, token, &flags) != 0)
        return; /* a claim that does not read gets no answer */
    if (flags & CUC__CLAIM_GIVE_BACK) {
        cuc__hold_give_back(p->holds, token, pr->ch->leases);
        return;
    }
    rc = cuc__hold_claim(p->holds, token, pr->ch->leases, &data, &block);
    if (flags & CUC__CLAIM_FETCH)
        serve_fetch(pr, token, data, rc, confirms);
    else
        (void)cuc__confirm_rec_put(confirms, token, rc);
}

/* A message of claims: every one answered, the plain ones in one message. */
static void serve_claims(struct cuc__share *p, struct cuc__share_peer *pr, cuc_msg *m)
{
    size_t n = cuc_msg_record_count(m);
    cuc_msg *confirms;

    if (cuc_msg_create(&confirms) != 0)
        return; /* unanswered: the importer's waits time out */
    for (size_t i = 0; i < n; i++)
        serve_claim(p, pr, m, i, confirms);
    if (cuc_msg_record_count(confirms))
        (void)cuc__link_send(pr->ch->link, confirms);
    cuc_msg_destroy(confirms);
}

/* 1 when every record of m is a claim. */
static int all_claims(const cuc_msg *m)
{
    size_t n = cuc_msg_record_count(m);

    return n && cuc__msg_count_type(m, CUC_RECORD_CLAIM) == n;
}

int cuc__share_serve(struct cuc__share *p, struct cuc__share_peer *pr)
{
    cuc_msg *m;
    int rc;

    for (;;) {
        rc = cuc__link_recv(pr->ch->link, 0, &m);
        if (rc == CUC_E_TIMEOUT)
            return 0;
        if (rc == CUC_E_BADMSG || rc == CUC_E_VERSION || rc == CUC_E_LIMIT) {
            if (pr->ch->link->recv_err.status)
                return 1; /* a framing error: nothing more can be read */
            continue;     /* that message was dropped; the next may be fine */
        }
        if (rc)
            return 1; /* gone */
        pr->last = cuc__deadline(0);
        rc = cuc__leases_take_release(pr->ch->leases, m); /* consumes m if 1 or < 0 */
        if (rc == 0 && all_claims(m))
            serve_claims(p, pr, m);
        if (rc == 0)
            cuc_msg_destroy(m); /* anything else a peer sends is dropped */
    }
}

/* ---- an attach in this process ---- */

static void vmm_unref(void *v)
{
    cuc_vmm_unref(v);
}

int cuc__share_rebuild_here(void *data, const cuc_msg *b, cuc_msg **out)
{
    struct hold_data *d = data;
    struct cuc_held_record hr;
    size_t k = 0;
    cuc_msg *o;
    int rc = cuc_msg_create(&o);

    for (size_t i = 1; !rc && i < cuc_msg_record_count(b); i++) {
        struct cuc__record r;
        if (cuc_msg_read_held(b, i, &hr) != 0) {
            rc = cuc__msg_record(b, i, &r);
            if (!rc)
                rc = cuc__msg_add_record(o, r.type, r.version, r.payload, r.len, NULL, 0);
            continue;
        }
        if (k >= d->nheld) {
            rc = cuc__seterr(CUC_E_BADMSG, "the bytes hold more held records than their "
                             "hold here");
            break;
        }
        rc = add_held(o, &d->held[k]);
        if (!rc && d->held[k].type == CUC_RECORD_VMM) {
            rc = cuc__msg_set_local(o, i - 1, d->held[k].obj, vmm_unref);
            if (!rc)
                cuc_vmm_ref(d->held[k].obj);
        }
        k++;
    }
    if (rc) {
        cuc_msg_destroy(o);
        return rc;
    }
    *out = o;
    return 0;
}

/* ---- counts, the end ---- */

void cuc__share_peer_leases(struct cuc__share *p, size_t *leases, size_t *peers)
{
    *leases = *peers = 0;
    pthread_mutex_lock(&p->lock);
    for (struct cuc__share_peer *pr = p->peers; pr; pr = pr->next) {
        size_t n = cuc__leases_count(pr->ch->leases);
        *leases += n;
        *peers += n > 0;
    }
    pthread_mutex_unlock(&p->lock);
}

void cuc__share_serve_end(struct cuc__share *p)
{
    while (p->peers)
        cuc__share_drop_peer(p, p->peers, CUC__LEASE_CHANNEL_CLOSED);
    cuc__holds_destroy(p->holds);
    p->holds = NULL;
    cuc_listener_destroy(p->listener); /* removes the socket */
    p->listener = NULL;
    p->path[0] = '\0';
}
