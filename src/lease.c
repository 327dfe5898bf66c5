/* Leases: what the peer imported from us and has not released. A hash
 * table (open addressing, linear probing, backward-shift deletion) from
 * lease id to the exporter's end callback. */
#include "internal.h"
#include "channel_impl.h"
#include "wire.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Ids per release record: 64 KiB of payload. */
#define RELEASE_IDS_PER_RECORD CUC__RELEASE_MAX_IDS

static size_t slot_of(uint64_t id, size_t cap)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)id & (cap - 1);
}

static struct cuc__lease_slot *find(const cuc_channel *ch, uint64_t id)
{
    size_t s;

    if (!ch->lease_cap)
        return NULL;
    for (s = slot_of(id, ch->lease_cap); ch->leases[s].id; s = (s + 1) & (ch->lease_cap - 1))
        if (ch->leases[s].id == id)
            return &ch->leases[s];
    return NULL;
}

static void insert(struct cuc__lease_slot *tab, size_t cap, const struct cuc__lease_slot *e)
{
    size_t s = slot_of(e->id, cap);

    while (tab[s].id)
        s = (s + 1) & (cap - 1);
    tab[s] = *e;
}

static int grow(cuc_channel *ch)
{
    size_t cap = ch->lease_cap ? ch->lease_cap * 2 : 16, i;
    struct cuc__lease_slot *tab = calloc(cap, sizeof(*tab));

    if (!tab)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for %zu leases", cap);
    for (i = 0; i < ch->lease_cap; i++)
        if (ch->leases[i].id)
            insert(tab, cap, &ch->leases[i]);
    free(ch->leases);
    ch->leases = tab;
    ch->lease_cap = cap;
    return 0;
}

/* Removes slot e, shifting back the entries that probed past it. */
static void erase(cuc_channel *ch, struct cuc__lease_slot *e)
{
    size_t mask = ch->lease_cap - 1, hole = (size_t)(e - ch->leases), s = hole;

    for (;;) {
        size_t home;
        s = (s + 1) & mask;
        if (!ch->leases[s].id)
            break;
        home = slot_of(ch->leases[s].id, ch->lease_cap);
        /* may the entry at s move to hole? only if hole lies on its probe
         * path, i.e. cyclically in [home, s) */
        if (((s - home) & mask) >= ((s - hole) & mask)) {
            ch->leases[hole] = ch->leases[s];
            hole = s;
        }
    }
    ch->leases[hole].id = 0;
    ch->lease_count--;
}

uint64_t cuc__channel_lease_new_id(cuc_channel *ch)
{
    uint64_t id;

    pthread_mutex_lock(&ch->lease_lock);
    do
        id = ch->lease_next++;
    while (id == 0 || find(ch, id));
    pthread_mutex_unlock(&ch->lease_lock);
    return id;
}

int cuc__channel_lease_add(cuc_channel *ch, uint64_t id, cuc__lease_fn fn, void *arg)
{
    struct cuc__lease_slot e = {id, fn, arg};
    int rc = 0;

    if (!ch || !fn || id == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc__channel_lease_add: %s",
                           id ? "NULL argument" : "lease id 0 is reserved");
    pthread_mutex_lock(&ch->lease_lock);
    if (ch->leases_over)
        rc = cuc__seterr(CUC_E_PEER_CLOSED, "the peer (pid %ld) has closed the "
                         "channel: lease %llu would never be released",
                         (long)ch->peer_pid, (unsigned long long)id);
    else if (find(ch, id))
        rc = cuc__seterr(CUC_E_INVALID, "lease %llu is already held on this channel",
                         (unsigned long long)id);
    else if ((ch->lease_count + 1) * 4 > ch->lease_cap * 3)
        rc = grow(ch);
    if (!rc) {
        insert(ch->leases, ch->lease_cap, &e);
        ch->lease_count++;
    }
    pthread_mutex_unlock(&ch->lease_lock);
    return rc;
}

int cuc__channel_lease_drop(cuc_channel *ch, uint64_t id)
{
    struct cuc__lease_slot *e;
    int rc = 0;

    if (!ch)
        return cuc__seterr(CUC_E_INVALID, "cuc__channel_lease_drop: ch is NULL");
    pthread_mutex_lock(&ch->lease_lock);
    e = id ? find(ch, id) : NULL;
    if (e)
        erase(ch, e);
    else
        rc = cuc__seterr(CUC_E_NOT_FOUND, "lease %llu is not held on this channel",
                         (unsigned long long)id);
    pthread_mutex_unlock(&ch->lease_lock);
    return rc;
}

void cuc__leases_end_all(cuc_channel *ch, int why)
{
    struct cuc__lease_slot *tab;
    size_t cap, i;

    pthread_mutex_lock(&ch->lease_lock);
    tab = ch->leases;
    cap = ch->lease_cap;
    ch->leases = NULL;
    ch->lease_cap = ch->lease_count = 0;
    if (why == CUC__LEASE_PEER_CLOSED || why == CUC__LEASE_CHANNEL_CLOSED)
        ch->leases_over = 1;
    pthread_mutex_unlock(&ch->lease_lock);
    for (i = 0; i < cap; i++)
        if (tab[i].id)
            tab[i].fn(tab[i].arg, tab[i].id, why);
    free(tab);
}

void cuc__leases_free(cuc_channel *ch)
{
    free(ch->leases);
    ch->leases = NULL;
    ch->lease_cap = ch->lease_count = 0;
}

/* Ends the leases of one release record; callbacks run unlocked. */
static void release_ids(cuc_channel *ch, const uint8_t *p, uint32_t n)
{
    struct cuc__lease_slot ended[64];
    uint32_t i = 0;

    while (i < n) {
        size_t k = 0;
        pthread_mutex_lock(&ch->lease_lock);
        for (; i < n && k < CUC_ARRAY_LEN(ended); i++) {
            uint64_t id = cuc__get64(p + 8 * (size_t)i);
            struct cuc__lease_slot *e = id ? find(ch, id) : NULL;
            if (!e)
                continue; /* unknown or already ended: exactly once */
            ended[k++] = *e;
            erase(ch, e);
        }
        pthread_mutex_unlock(&ch->lease_lock);
        for (size_t j = 0; j < k; j++)
            ended[j].fn(ended[j].arg, ended[j].id, CUC__LEASE_RELEASED);
    }
}

int cuc__leases_take_release(cuc_channel *ch, cuc_msg *m)
{
    size_t i, n = cuc_msg_count(m), nrel = 0;
    struct cuc__record r;

    for (i = 0; i < n; i++) {
        cuc__msg_record(m, i, &r);
        nrel += r.type == CUC_RECORD_RELEASE;
    }
    if (nrel == 0)
        return 0;
    if (nrel != n || cuc_msg_fd_count(m)) {
        cuc_msg_destroy(m);
        return cuc__seterr(CUC_E_BADMSG, "the peer sent a message mixing %zu "
                           "release records with %zu other records: releases "
                           "travel alone (message dropped)", nrel, n - nrel);
    }
    for (i = 0; i < n; i++) {
        cuc__msg_record(m, i, &r);
        release_ids(ch, r.payload, r.len / 8);
    }
    cuc_msg_destroy(m);
    return 1;
}

uint64_t cuc__lease_id_next(void)
{
    static _Atomic uint64_t next = 1;

    return atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
}

/* What a message's lease registers on the channel: the end callback needs
 * both the module's ops and its object. */
struct msg_lease {
    const struct cuc__lease_ops *ops;
    void *obj;
};

static void msg_lease_end(void *arg, uint64_t id, int why)
{
    struct msg_lease *l = arg;

    l->ops->end(l->obj, id, why);
    free(l);
}

static int begin_one(cuc_channel *ch, const struct cuc__lease_att *a)
{
    struct msg_lease *l = malloc(sizeof(*l));
    int rc;

    if (!l)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for lease %llu",
                           (unsigned long long)a->id);
    *l = (struct msg_lease){a->ops, a->obj};
    a->ops->begin(a->obj);
    rc = cuc__channel_lease_add(ch, a->id, msg_lease_end, l);
    if (rc) {
        a->ops->end(a->obj, a->id, CUC__LEASE_SEND_FAILED);
        free(l);
    }
    return rc;
}

/* Ends leases [0, n) of a message that did not go out. A lease the channel
 * no longer holds has already ended (the peer went meanwhile). */
static void abort_first(cuc_channel *ch, const struct cuc__lease_att *atts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct cuc__lease_slot *e;
        struct cuc__lease_slot got = {0, NULL, NULL};

        pthread_mutex_lock(&ch->lease_lock);
        e = find(ch, atts[i].id);
        if (e) {
            got = *e;
            erase(ch, e);
        }
        pthread_mutex_unlock(&ch->lease_lock);
        if (got.id)
            got.fn(got.arg, got.id, CUC__LEASE_SEND_FAILED);
    }
}

int cuc__leases_begin_msg(cuc_channel *ch, const cuc_msg *m)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts);

    for (size_t i = 0; i < n; i++) {
        int rc = begin_one(ch, &atts[i]);
        if (rc) {
            abort_first(ch, atts, i);
            return rc;
        }
    }
    return 0;
}

void cuc__leases_abort_msg(cuc_channel *ch, const cuc_msg *m)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts);

    abort_first(ch, atts, n);
}

int cuc_channel_release(cuc_channel *ch, const uint64_t *ids, size_t n)
{
    uint8_t *payload;
    size_t done = 0;
    int rc = 0;

    if (!ch || !ids || n == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_release: %s",
                           n ? "NULL argument" : "no lease id given");
    if (ch->fd < 0)
        return 0; /* closed here: the peer has already ended these leases */
    payload = malloc(8 * (size_t)(n < RELEASE_IDS_PER_RECORD ? n : RELEASE_IDS_PER_RECORD));
    if (!payload)
        return cuc__seterr(CUC_E_NOMEM, "out of memory releasing %zu leases", n);
    while (!rc && done < n) {
        cuc_msg *m;
        rc = cuc_msg_create(&m);
        /* 1000 records of 64 KiB keep a message under CUC_MSG_MAX_BYTES */
        for (size_t r = 0; !rc && r < CUC__RELEASE_MAX_RECORDS && done < n; r++) {
            size_t k = n - done < RELEASE_IDS_PER_RECORD ? n - done : RELEASE_IDS_PER_RECORD;
            for (size_t i = 0; i < k; i++)
                cuc__put64(payload + 8 * i, ids[done + i]);
            rc = cuc__msg_add_record(m, CUC_RECORD_RELEASE, CUC_RECORD_RELEASE_VERSION,
                                     payload, (uint32_t)(8 * k), NULL, 0);
            done += k;
        }
        if (!rc)
            rc = cuc_channel_send(ch, m);
        cuc_msg_destroy(m);
    }
    free(payload);
    return rc;
}

int cuc_channel_lease_count(cuc_channel *ch, size_t *n)
{
    if (!ch || !n)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_lease_count: NULL argument");
    pthread_mutex_lock(&ch->lease_lock);
    *n = ch->lease_count;
    pthread_mutex_unlock(&ch->lease_lock);
    return 0;
}

int cuc_channel_lease_wait(cuc_channel *ch, size_t max_left, int timeout_ms)
{
    int64_t deadline = cuc__deadline(timeout_ms);
    size_t n;
    int rc;

    if (!ch || timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "cuc_channel_lease_wait: %s",
                           ch ? "timeout below -1" : "ch is NULL");
    for (;;) {
        cuc_channel_lease_count(ch, &n);
        if (n <= max_left)
            return 0;
        rc = cuc_channel_pump(ch, cuc__remaining(deadline));
        if (rc == CUC_E_TIMEOUT || (rc && rc != CUC_E_PEER_CLOSED)) {
            cuc_channel_lease_count(ch, &n);
            if (n <= max_left)
                return 0;
            if (rc == CUC_E_TIMEOUT)
                return cuc__seterr(CUC_E_TIMEOUT, "%zu leases still held after %d "
                                   "ms (waiting for at most %zu)", n, timeout_ms,
                                   max_left);
            return rc;
        }
        if (rc == CUC_E_PEER_CLOSED)
            continue; /* leases ended: the count check returns */
        if (deadline >= 0 && cuc__remaining(deadline) == 0) {
            cuc_channel_lease_count(ch, &n);
            if (n > max_left)
                return cuc__seterr(CUC_E_TIMEOUT, "%zu leases still held after %d "
                                   "ms (waiting for at most %zu)", n, timeout_ms,
                                   max_left);
        }
    }
}
