/* The message container: creation and destruction, appending records,
 * viewing them, moving fds out, and what a message keeps (attached
 * objects, the lease table it came from). */
#include "wire/msg_impl.h"
#include "base/array.h"
#include "base/error.h"
#include "os/fd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Payload multiples are powers of two, so a mask checks them: a division
 * by a table value was a tenth of a device record's round trip. */
#define MULTIPLE_OK_(name, ver, lo, hi, mul, flo, fhi, roff, rlen)                              \
    _Static_assert((mul) > 0 && ((mul) & ((mul) - 1)) == 0, #name ": multiple of a power of two"); \
    _Static_assert((roff) + (rlen) <= (lo), #name ": the reserved field is in every payload");
CUC__RECORD_SHAPES(MULTIPLE_OK_)
#undef MULTIPLE_OK_

#define FIXED_HDR_(name, ver, lo, hi, mul, flo, fhi)                                 \
    ((lo) == (hi) && (lo) % 8 == 0 && (lo) % (mul) == 0 && (flo) == 0 && (fhi) == 0 && \
             CUC_RECORD_##name != CUC_RECORD_RELEASE &&                                \
             CUC_RECORD_##name != CUC_RECORD_REFUSED &&                                \
             CUC_RECORD_##name != CUC_RECORD_CLAIM &&                                  \
             CUC_RECORD_##name != CUC_RECORD_CONFIRM /* counted (a cap) */             \
         ? CUC_RECORD_##name | (uint64_t)(ver) << 16 | (uint64_t)(lo) << 32            \
         : ~(uint64_t)0)
#define SHAPE_(name, ver, lo, hi, mul, flo, fhi, roff, rlen)                  \
    [CUC_RECORD_##name] = {CUC_RECORD_##name, ver, lo, hi, mul, flo, fhi, roff, rlen, \
                           FIXED_HDR_(name, ver, lo, hi, mul, flo, fhi)},
/* Indexed by type: record types are small, dense integers (a length other
 * than CUC__REC_NSHAPES conflicts with msg_impl.h's declaration). */
const struct cuc__rec_shape cuc__rec_shapes[] = {CUC__RECORD_SHAPES(SHAPE_)};
#undef SHAPE_
#undef FIXED_HDR_
_Static_assert(offsetof(struct cuc__wire_rec, off) == CUC__WIRE_REC_HDR,
               "a record's header fields come first, in their wire order");

/* Indexed by type, as the shapes. */
#define NAME_(name, value, text) [value] = text,
static const char *const type_names[] = {CUC_RECORD_TYPE_MAP(NAME_)};
#undef NAME_

const char *cuc_record_type_name(int type)
{
    if (type < 0 || (size_t)type >= CUC_ARRAY_LEN(type_names) || !type_names[type])
        return "unknown";
    return type_names[type];
}

/* "a" or "an", for the record type names in messages. */
static const char *article(const char *name)
{
    return strchr("aeiou", name[0]) ? "an" : "a";
}

/* One freed message struct kept per thread: the common create (or decode),
 * use, destroy cycle then costs no malloc for the struct. A thread's spare
 * is freed when the thread exits (the key's destructor); a thread whose key
 * is not set (registered 0) keeps none. */
_Thread_local struct cuc__msg_cache cuc__msg_cache;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static int spare_key_ok;

static void spare_free(void *unused)
{
    (void)unused;
    free(cuc__msg_cache.spare);
    cuc__msg_cache.spare = NULL;
}

static void spare_init(void)
{
    spare_key_ok = pthread_key_create(&spare_key, spare_free) == 0;
}

/* The storage of a fresh message: the inline arrays, nothing held. */
static void storage_init(cuc_msg *m)
{
    m->recs = m->rec_inline;
    m->data = m->data_inline;
    m->fds = m->fd_inline;
    m->rec_cap = CUC__MSG_INLINE_RECS;
    m->fd_cap = CUC__MSG_INLINE_FDS;
    m->data_cap = CUC__MSG_INLINE_DATA;
    m->data_block = NULL;
    m->atts = NULL;
    m->natts = m->att_cap = 0;
    m->origin = NULL;
    m->gate = NULL;
    m->gate_done = NULL;
    m->locals = NULL;
    m->side = NULL;
    m->taken = NULL;
}

/* m, its storage fresh, becomes the thread's spare when there is room. */
static void msg_release(cuc_msg *m)
{
    struct cuc__msg_cache *c = &cuc__msg_cache;

    if (!c->spare && !c->registered) {
        pthread_once(&spare_once, spare_init);
        c->registered = spare_key_ok && pthread_setspecific(spare_key, c) == 0;
    }
    if (!c->spare && c->registered) {
        c->spare = m;
        return;
    }
    free(m);
}

cuc_msg *cuc__msg_alloc(void)
{
    cuc_msg *m = malloc(sizeof(*m));

    if (m)
        storage_init(m);
    return m;
}

int cuc_msg_create(cuc_msg **msg)
{
    cuc_msg *m;

    if (!msg)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_create: msg is NULL");
    m = cuc__msg_new();
    if (!m)
        return cuc__seterr(CUC_E_NOMEM, "cuc_msg_create: out of memory");
    *msg = m;
    return 0;
}

/* Objects records resolve to in this process (cuc__msg_set_local). */
struct cuc__local {
    size_t index;
    void *obj;
    void (*unref)(void *obj);
};
struct cuc__locals {
    size_t n, cap;
    struct cuc__local e[];
};

static void locals_free(cuc_msg *m)
{
    for (size_t i = 0; i < m->locals->n; i++)
        m->locals->e[i].unref(m->locals->e[i].obj);
    free(m->locals);
}

/* Everything a message may hold, freed; the struct cached or freed. */
static CUC_COLD void destroy_holding(cuc_msg *m)
{
    if (!m)
        return;
    if (m->nfds)
        cuc__close_fds(m->fds, m->nfds);
    if (m->gate) { /* first: it reads the records and their marks */
        if (m->gate_done)
            m->gate_done(m->gate, m);
        cuc__ref_put(m->gate);
    }
    if (m->locals)
        locals_free(m);
    if (m->recs != m->rec_inline)
        free(m->recs);
    if (m->data_block)
        free(m->data_block);
    else if (m->data != m->data_inline)
        free(m->data);
    if (m->fds != m->fd_inline)
        free(m->fds);
    for (size_t i = 0, k; i < m->natts; i = k) {
        const struct cuc__lease_ops *ops = m->atts[i].ops;
        for (k = i + 1; ops->unref_many && k < m->natts && m->atts[k].ops == ops; k++)
            ;
        if (ops->unref_many)
            ops->unref_many(m->atts + i, k - i);
        else
            ops->unref(m->atts[i].obj);
    }
    if (m->atts)
        free(m->atts);
    free(m->side);
    free(m->taken);
    if (m->origin)
        cuc__ref_put(m->origin);
    storage_init(m);
    msg_release(m);
}

void cuc_msg_destroy(cuc_msg *m)
{
    struct cuc__msg_cache *c = &cuc__msg_cache;

    /* The usual message, small and holding nothing, goes back to the
     * thread's cache as it is: its storage is a fresh one's. */
    if (CUC_LIKELY(m && !(m->holds | m->nfds) && !c->spare && c->registered)) {
        c->spare = m;
        return;
    }
    destroy_holding(m);
}

/* ---- growing ---- */

int cuc__msg_grow(cuc_msg *m, size_t nrecs, size_t nfds, size_t data_len)
{
    size_t rcap = m->rec_cap, fcap = m->fd_cap;
    int rc = 0;

    m->holds |= CUC__MSG_HOLDS_HEAP; /* whatever moves below, the destroy frees */

    rc = cuc__array_reserve((void **)&m->recs, &rcap, nrecs, sizeof(*m->recs), 0,
                            m->rec_inline);
    m->rec_cap = (uint32_t)rcap;
    if (!rc)
        rc = cuc__array_reserve((void **)&m->fds, &fcap, nfds, sizeof(*m->fds), 0,
                                m->fd_inline);
    m->fd_cap = (uint32_t)fcap;
    if (!rc && m->data_block && data_len > m->data_cap) {
        /* data lies inside an adopted buffer: it moves to a block of its
         * own, which can grow */
        uint8_t *own = malloc(m->data_cap);
        if (!own)
            return cuc__seterr(CUC_E_NOMEM, "out of memory for a %zu-byte message",
                               m->data_cap);
        memcpy(own, m->data, m->data_len);
        free(m->data_block);
        m->data_block = NULL;
        m->data = own;
    }
    if (!rc)
        rc = cuc__array_reserve((void **)&m->data, &m->data_cap, data_len, 1, 0,
                                m->data_inline);
    return rc;
}

/* ---- adding records ---- */

static int check_add_slow(const cuc_msg *m, uint16_t type, uint16_t version,
                          const void *payload, uint32_t len, uint32_t nfds);

/* Inline (with append) in the two add calls: a small record's whole
 * encode is a few of these, and the calls were a third of it. */
static inline __attribute__((always_inline)) int
check_add(const cuc_msg *m, uint16_t type, uint16_t version, const void *payload,
          uint32_t len, uint32_t nfds)
{
    const struct cuc__rec_shape *s = cuc__rec_shape_of(type);

    if (CUC_LIKELY(s && version && version <= s->version && (payload || !len) &&
                   len >= s->min_len && len <= s->max_len && !(len & (s->multiple - 1)) &&
                   nfds >= s->min_fds && nfds <= s->max_fds && !s->rsv_len &&
                   type != CUC_RECORD_RELEASE && m->nrecs < CUC_MSG_MAX_RECORDS &&
                   m->nfds + (uint64_t)nfds <= CUC_MSG_MAX_FDS &&
                   m->wire_len + CUC__WIRE_REC_HDR + cuc__pad8(len) <= CUC_MSG_MAX_BYTES))
        return 0; /* the common case, without naming anything */
    return check_add_slow(m, type, version, payload, len, nfds);
}

static int check_add_slow(const cuc_msg *m, uint16_t type, uint16_t version,
                          const void *payload, uint32_t len, uint32_t nfds)
{
    const struct cuc__rec_shape *s = cuc__rec_shape_of(type);
    const char *name = cuc_record_type_name(type);
    uint64_t wire_len;

    if (!s)
        return cuc__seterr(CUC_E_INVALID, "record type %u is not a cucore record "
                           "type", type);
    if (version == 0 || version > s->version)
        return cuc__seterr(CUC_E_INVALID, "%s record version %u: this cucore "
                           "writes versions 1..%u", name, version, s->version);
    if (len && !payload)
        return cuc__seterr(CUC_E_INVALID, "%s record: payload is NULL with "
                           "length %u", name, len);
    if (len < s->min_len || len > s->max_len || (len & (s->multiple - 1)))
        return cuc__seterr(CUC_E_INVALID, "%s record: payload length %u outside "
                           "%u..%u (multiple of %u)", name, len, s->min_len,
                           s->max_len, s->multiple);
    if (nfds < s->min_fds || nfds > s->max_fds)
        return cuc__seterr(CUC_E_INVALID, "%s record: %u fds, it carries %u..%u",
                           name, nfds, s->min_fds, s->max_fds);
    if (s->rsv_len && !cuc__all_zero((const uint8_t *)payload + s->rsv_off, s->rsv_len))
        return cuc__seterr(CUC_E_INVALID, "%s record: reserved field (payload offset "
                           "%u, %u bytes) is not 0", name, s->rsv_off, s->rsv_len);
    if (type == CUC_RECORD_RELEASE && m->nrelease >= CUC__RELEASE_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u "
                           "release records", CUC__RELEASE_MAX_RECORDS);
    if (type == CUC_RECORD_REFUSED && m->nrefused >= CUC__REFUSED_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u "
                           "refused records", CUC__REFUSED_MAX_RECORDS);
    if ((type == CUC_RECORD_CLAIM || type == CUC_RECORD_CONFIRM) &&
        m->nclaim >= CUC__CLAIM_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u claim "
                           "and confirm records", CUC__CLAIM_MAX_RECORDS);
    if (m->nrecs >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of "
                           "%u records", CUC_MSG_MAX_RECORDS);
    if ((uint64_t)m->nfds + nfds > CUC_MSG_MAX_FDS)
        return cuc__seterr(CUC_E_LIMIT, "message would carry %llu fds, more than "
                           "the maximum of %u", (unsigned long long)m->nfds + nfds,
                           CUC_MSG_MAX_FDS);
    wire_len = (uint64_t)m->wire_len + CUC__WIRE_REC_HDR + cuc__pad8(len);
    if (wire_len > CUC_MSG_MAX_BYTES)
        return cuc__seterr(CUC_E_LIMIT, "message would be %llu bytes, more than "
                           "the maximum of %u", (unsigned long long)wire_len,
                           CUC_MSG_MAX_BYTES);
    return 0;
}

/* Appends the record; the fds, already owned by the message's caller, go
 * into the table as they are. */
static inline __attribute__((always_inline)) int
append(cuc_msg *m, uint16_t type, uint16_t version, const void *payload, uint32_t len,
       const void *tail, uint32_t tail_len, const int *fds, uint32_t nfds)
{
    size_t off = cuc__pad8(m->data_len);
    struct cuc__wire_rec *r;
    int rc = cuc__msg_reserve(m, (size_t)m->nrecs + 1, (size_t)m->nfds + nfds, off + len);

    if (rc)
        return rc;
    r = &m->recs[m->nrecs++];
    r->type = type;
    r->version = version;
    r->len = len;
    r->off = (uint32_t)off;
    r->fd_first = nfds ? m->nfds : 0;
    r->nfds = nfds;
    if (len - tail_len)
        memcpy(m->data + off, payload, len - tail_len);
    if (tail_len)
        memcpy(m->data + off + (len - tail_len), tail, tail_len);
    m->data_len = off + len;
    if (nfds)
        memcpy(m->fds + m->nfds, fds, nfds * sizeof(int));
    m->nfds += nfds;
    m->fds_owned += nfds;
    m->nrelease += type == CUC_RECORD_RELEASE;
    m->nrefused += type == CUC_RECORD_REFUSED;
    m->nclaim += type == CUC_RECORD_CLAIM || type == CUC_RECORD_CONFIRM;
    m->types |= type < 32 ? 1u << type : 0;
    m->wire_len += CUC__WIRE_REC_HDR + cuc__pad8(len);
    return 0;
}

int cuc__msg_add_record_owned(cuc_msg *m, uint16_t type, uint16_t version,
                              const void *payload, uint32_t len, int *fds,
                              uint32_t nfds)
{
    int rc;

    if (!m || (nfds && !fds)) {
        rc = cuc__seterr(CUC_E_INVALID, "cuc__msg_add_record_owned: NULL argument");
        goto close_given;
    }
    rc = check_add(m, type, version, payload, len, nfds);
    if (!rc)
        rc = append(m, type, version, payload, len, NULL, 0, fds, nfds);
    if (rc)
        goto close_given;
    return 0;
close_given:
    if (fds)
        cuc__close_fds(fds, nfds);
    return rc;
}

int cuc__msg_add_record_tail(cuc_msg *m, uint16_t type, uint16_t version, const void *head,
                             uint32_t head_len, const void *tail, uint32_t tail_len)
{
    const struct cuc__rec_shape *s = cuc__rec_shape_of(type);
    uint32_t len = head_len + tail_len;
    int rc;

    if (!m || !head || (tail_len && !tail) || len < head_len)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_add_record_tail: NULL argument or "
                           "a %u + %u-byte payload", head_len, tail_len);
    /* check_add reads the reserved field at payload: it must be the head's */
    if (s && s->rsv_off + s->rsv_len > head_len)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_add_record_tail: the reserved field "
                           "of a %s record is not in its %u-byte head",
                           cuc_record_type_name(type), head_len);
    rc = check_add(m, type, version, head, len, 0);
    if (!rc)
        rc = append(m, type, version, head, len, tail, tail_len, NULL, 0);
    return rc;
}

/* Close-on-exec copies of fds[0..n) into own; on failure none is left. */
static int dup_all(const int *fds, uint32_t n, uint16_t type, int *own)
{
    char what[96];
    int rc;

    for (uint32_t i = 0; i < n; i++) {
        snprintf(what, sizeof(what), "fd %d (fd %u of a %s record)", fds[i], i,
                 cuc_record_type_name(type));
        rc = cuc__dup_cloexec(fds[i], what, &own[i]);
        if (rc) {
            cuc__close_fds(own, i);
            return rc;
        }
    }
    return 0;
}

int cuc__msg_add_record(cuc_msg *m, uint16_t type, uint16_t version,
                        const void *payload, uint32_t len, const int *fds,
                        uint32_t nfds)
{
    int dups[16], *own = dups;
    int rc;

    if (!m || (nfds && !fds))
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_add_record: NULL argument");
    rc = check_add(m, type, version, payload, len, nfds);
    if (rc)
        return rc;
    if (nfds > CUC_ARRAY_LEN(dups)) {
        own = malloc(nfds * sizeof(int));
        if (!own)
            return cuc__seterr(CUC_E_NOMEM, "out of memory for %u fds", nfds);
    }
    rc = dup_all(fds, nfds, type, own);
    if (!rc) {
        rc = append(m, type, version, payload, len, NULL, 0, own, nfds);
        if (rc)
            cuc__close_fds(own, nfds);
    }
    if (own != dups)
        free(own);
    return rc;
}

/* ---- viewing ---- */

/* Creating a side arena is rare (a reader of a message being sent) and
 * must happen once even with several readers: one lock for all. */
static pthread_mutex_t side_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every deferred record of m written into a new side arena, or NULL. */
static uint8_t *side_write(const cuc_msg *m)
{
    uint8_t *side = malloc(m->natts * (size_t)CUC__DEFERRED_MAX);

    if (!side)
        return NULL;
    for (uint32_t i = 0; i < m->nrecs; i++) {
        const struct cuc__wire_rec *r = &m->recs[i];
        if (r->off & CUC__REC_DEFERRED)
            cuc__msg_put_deferred(m, r, side + (size_t)(r->off & ~CUC__REC_DEFERRED) *
                                                   CUC__DEFERRED_MAX);
    }
    return side;
}

int cuc__msg_deferred_payload(const cuc_msg *m, const struct cuc__wire_rec *w,
                              const uint8_t **payload)
{
    cuc_msg *own = (cuc_msg *)m; /* the side arena is all a reader writes */
    uint8_t *side = __atomic_load_n(&own->side, __ATOMIC_ACQUIRE);

    if (!side) {
        pthread_mutex_lock(&side_lock);
        side = own->side;
        if (!side && (side = side_write(m)) != NULL)
            __atomic_store_n(&own->side, side, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&side_lock);
        if (!side)
            return cuc__seterr(CUC_E_NOMEM, "out of memory writing the %zu buffer "
                               "records of a message for a reader", m->natts);
    }
    *payload = side + (size_t)(w->off & ~CUC__REC_DEFERRED) * CUC__DEFERRED_MAX;
    return 0;
}

size_t cuc_msg_record_count(const cuc_msg *m)
{
    return m ? m->nrecs : 0;
}

size_t cuc_msg_fd_count(const cuc_msg *m)
{
    return m ? m->fds_owned : 0;
}

static int check_index(const cuc_msg *m, size_t index)
{
    if (index >= m->nrecs)
        return cuc__seterr(CUC_E_INVALID, "record index %zu is out of range: the "
                           "message has %u records", index, m->nrecs);
    return 0;
}

int cuc_msg_record_type(const cuc_msg *m, size_t index, int *type)
{
    int rc;

    if (!m || !type)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_record_type: NULL argument");
    rc = check_index(m, index);
    if (rc)
        return rc;
    *type = m->recs[index].type;
    return 0;
}

/* The record w of m as a reader sees it: its bytes and fds in place (a
 * deferred record's bytes written for it once: CUC_E_NOMEM if they cannot
 * be). */
static inline int view_of(const cuc_msg *m, const struct cuc__wire_rec *w,
                          struct cuc__record *rec)
{
    const uint8_t *payload = m->data + w->off;

    if (CUC_UNLIKELY(w->off & CUC__REC_DEFERRED)) {
        int rc = cuc__msg_deferred_payload(m, w, &payload);
        if (rc)
            return rc;
    }
    rec->type = w->type;
    rec->version = w->version;
    rec->len = w->len;
    rec->payload = payload;
    rec->nfds = w->nfds;
    rec->fds = m->fds + w->fd_first;
    return 0;
}

int cuc__msg_record(const cuc_msg *m, size_t index, struct cuc__record *rec)
{
    int rc;

    if (!m || !rec)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_record: NULL argument");
    rc = check_index(m, index);
    if (rc)
        return rc;
    return view_of(m, &m->recs[index], rec);
}

int cuc_msg_record(const cuc_msg *m, size_t index, struct cuc_record_view *view)
{
    struct cuc__record r;
    int rc;

    if (!m || !view)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_record: NULL argument");
    rc = cuc__msg_record(m, index, &r);
    if (rc)
        return rc;
    view->type = r.type;
    view->version = r.version;
    view->payload = r.payload;
    view->len = r.len;
    view->nfds = r.nfds;
    return 0;
}

int cuc__msg_record_of(const cuc_msg *m, size_t index, unsigned type,
                       struct cuc__record *rec)
{
    const char *want, *got;
    struct cuc__record r;
    int rc = cuc__msg_record(m, index, &r);

    if (rc)
        return rc;
    if (r.type != type) {
        want = cuc_record_type_name((int)type);
        got = cuc_record_type_name(r.type);
        return cuc__seterr(CUC_E_INVALID, "record %zu is %s %s record, not %s %s "
                           "record", index, article(got), got, article(want), want);
    }
    *rec = r;
    return 0;
}

int cuc__msg_record_fixed(const cuc_msg *m, size_t index, unsigned type, uint32_t len,
                          uint32_t nfds, struct cuc__record *rec)
{
    struct cuc__record r;
    int rc;

    /* The record every reader of a fixed-size record expects, read in
     * place (a device record's whole decode is a few of these); anything
     * else takes the checked path below for its message. */
    if (CUC_LIKELY(m && rec && index < m->nrecs)) {
        const struct cuc__wire_rec *w = &m->recs[index];
        if (CUC_LIKELY(w->type == type && w->len == len && w->nfds == nfds))
            return view_of(m, w, rec);
    }
    rc = cuc__msg_record_of(m, index, type, &r);

    if (rc)
        return rc;
    if (r.len != len || r.nfds != nfds)
        return cuc__seterr(CUC_E_BADMSG, "%s record %zu has a %u-byte payload and %u "
                           "fds, not %u and %u", cuc_record_type_name((int)type), index,
                           r.len, r.nfds, len, nfds);
    *rec = r;
    return 0;
}

int cuc__msg_take_record_fd(cuc_msg *m, size_t index, uint32_t k, int *fd)
{
    const struct cuc__wire_rec *r;
    int *slot, rc;

    if (!m || !fd)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_take_record_fd: NULL argument");
    rc = check_index(m, index);
    if (rc)
        return rc;
    r = &m->recs[index];
    if (k >= r->nfds)
        return cuc__seterr(CUC_E_INVALID, "record %zu carries %u fds; there is no "
                           "fd %u", index, r->nfds, k);
    slot = &m->fds[r->fd_first + k];
    if (*slot < 0)
        return cuc__seterr(CUC_E_INVALID, "fd %u of record %zu was already taken",
                           k, index);
    *fd = *slot;
    *slot = -1;
    m->fds_owned--;
    return 0;
}

/* ---- attachments and origin ---- */

uint64_t cuc__msg_lease_block_next(void)
{
    static _Atomic uint64_t next = 1;

    return atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
}

/* The id attachment i of m has (its block taken at the first). */
static uint64_t lease_id_of(cuc_msg *m, size_t i)
{
    if (i == 0)
        m->lease_block = cuc__msg_lease_block_next();
    return m->lease_block << CUC__LEASE_INDEX_BITS | i;
}

static int attach(cuc_msg *m, const struct cuc__lease_ops *ops, void *obj, int take_ref,
                  uint64_t *lease_id)
{
    if (!m || !ops || !obj || !lease_id)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_lease_attach: NULL argument");
    if (m->natts >= CUC__LEASE_PER_BLOCK)
        return cuc__seterr(CUC_E_LIMIT, "a message holds at most %u objects with leases",
                           CUC__LEASE_PER_BLOCK);
    if (m->natts == m->att_cap) {
        size_t cap = m->att_cap ? 2 * m->att_cap : 8;
        void *p = realloc(m->atts, cap * sizeof(*m->atts));
        if (!p)
            return cuc__seterr(CUC_E_NOMEM, "out of memory attaching lease %zu "
                               "to a message", m->natts + 1);
        m->atts = p;
        m->att_cap = cap;
        m->holds |= CUC__MSG_HOLDS_ATTS;
    }
    if (take_ref)
        ops->ref(obj);
    *lease_id = lease_id_of(m, m->natts);
    m->atts[m->natts++] = (struct cuc__lease_att){*lease_id, ops, obj};
    return 0;
}

int cuc__msg_lease_attach(cuc_msg *m, const struct cuc__lease_ops *ops, void *obj,
                          uint64_t *lease_id)
{
    return attach(m, ops, obj, 1, lease_id);
}

int cuc__msg_lease_attach_held(cuc_msg *m, const struct cuc__lease_ops *ops, void *obj,
                               uint64_t *lease_id)
{
    return attach(m, ops, obj, 0, lease_id);
}

/* ---- deferred records: the payload written by the attachment, when
 * the message is encoded (encode.c) or first read (above). A buffer in a
 * message of thousands then costs its record header and attachment. ---- */

/* Why type cannot be a deferred record of version and len, or 0. */
static int check_shape(uint16_t type, uint16_t version, uint32_t len)
{
    const struct cuc__rec_shape *s = cuc__rec_shape_of(type);

    if (s && version && version <= s->version && len >= s->min_len && len <= s->max_len &&
        !(len & (s->multiple - 1)) && s->min_fds == 0 && len <= CUC__DEFERRED_MAX &&
        type != CUC_RECORD_RELEASE)
        return 0;
    return cuc__seterr(CUC_E_INVALID, "cuc__msg_add_leased: %s record version %u of %u "
                       "bytes cannot be deferred", cuc_record_type_name(type), version, len);
}

static int check_room(const cuc_msg *m, uint32_t len)
{
    if (m->nrecs >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u records",
                           CUC_MSG_MAX_RECORDS);
    if (m->wire_len + CUC__WIRE_REC_HDR + cuc__pad8(len) > CUC_MSG_MAX_BYTES)
        return cuc__seterr(CUC_E_LIMIT, "message would be more than the maximum of %u "
                           "bytes", CUC_MSG_MAX_BYTES);
    return 0;
}

/* The record with its payload in the arena: a message a reader has
 * written the side arena of gets no new deferred record (its slots would
 * not cover it). */
static int add_written(cuc_msg *m, uint16_t type, uint16_t version, uint32_t len,
                       const struct cuc__lease_ops *ops, void *obj, int held)
{
    uint8_t p[CUC__DEFERRED_MAX];
    uint64_t lease_id;
    int rc = cuc__msg_reserve(m, (size_t)m->nrecs + 1, m->nfds,
                              cuc__pad8(m->data_len) + len);

    if (rc)
        return rc;
    rc = attach(m, ops, obj, !held, &lease_id);
    if (rc)
        return rc;
    ops->put(obj, type, lease_id, p);
    rc = cuc__msg_add_record(m, type, version, p, len, NULL, 0);
    if (rc) {
        m->natts--; /* the attach, undone */
        if (!held)
            ops->unref(obj);
    }
    return rc;
}

int cuc__msg_add_leased(cuc_msg *m, uint16_t type, uint16_t version, uint32_t len,
                        const struct cuc__lease_ops *ops, void *obj, int held)
{
    struct cuc__wire_rec *r;
    uint64_t lease_id;
    int rc;

    if (!m || !ops || !ops->put || !obj)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_add_leased: NULL argument");
    rc = check_shape(type, version, len);
    if (!rc)
        rc = check_room(m, len);
    if (rc)
        return rc;
    if (__atomic_load_n(&m->side, __ATOMIC_RELAXED))
        return add_written(m, type, version, len, ops, obj, held);
    rc = cuc__msg_reserve(m, (size_t)m->nrecs + 1, m->nfds, m->data_len);
    if (!rc)
        rc = attach(m, ops, obj, !held, &lease_id);
    if (rc)
        return rc;
    r = &m->recs[m->nrecs++];
    *r = (struct cuc__wire_rec){type, version, len, 0, 0,
                                CUC__REC_DEFERRED | (uint32_t)(m->natts - 1)};
    m->types |= type < 32 ? 1u << type : 0;
    m->wire_len += CUC__WIRE_REC_HDR + cuc__pad8(len);
    return 0;
}

void cuc__msg_lease_pop(cuc_msg *m)
{
    if (m && m->natts) {
        m->natts--;
        m->atts[m->natts].ops->unref(m->atts[m->natts].obj);
    }
}

size_t cuc__msg_leases(const cuc_msg *m, const struct cuc__lease_att **atts)
{
    *atts = m->atts;
    return m->natts;
}

void cuc__msg_set_origin(cuc_msg *m, struct cuc__ref *origin)
{
    if (origin) {
        cuc__ref_get(origin);
        m->holds |= CUC__MSG_HOLDS_ORIGIN;
    }
    if (m->origin)
        cuc__ref_put(m->origin);
    m->origin = origin;
}

struct cuc__ref *cuc__msg_origin(const cuc_msg *m)
{
    return m ? m->origin : NULL;
}

void cuc__msg_set_gate(cuc_msg *m, struct cuc__ref *gate,
                       void (*done)(struct cuc__ref *gate, const cuc_msg *m))
{
    if (gate) {
        cuc__ref_get(gate);
        m->holds |= CUC__MSG_HOLDS_GATE;
    }
    if (m->gate)
        cuc__ref_put(m->gate);
    m->gate = gate;
    m->gate_done = gate ? done : NULL;
}

struct cuc__ref *cuc__msg_gate(const cuc_msg *m)
{
    return m ? m->gate : NULL;
}

int cuc__msg_set_local(cuc_msg *m, size_t index, void *obj, void (*unref)(void *obj))
{
    struct cuc__locals *l = m->locals;
    size_t cap = l ? l->cap : 0, n = l ? l->n : 0;

    if (n == cap) {
        cap = cap ? 2 * cap : 4;
        l = realloc(l, sizeof(*l) + cap * sizeof(l->e[0]));
        if (!l)
            return cuc__seterr(CUC_E_NOMEM, "out of memory for a message's local objects");
        l->cap = cap;
        l->n = n;
        m->locals = l;
    }
    l->e[l->n++] = (struct cuc__local){index, obj, unref};
    m->holds |= CUC__MSG_HOLDS_ATTS;
    return 0;
}

void *cuc__msg_local(const cuc_msg *m, size_t index)
{
    const struct cuc__locals *l = m->locals;

    for (size_t i = 0; l && i < l->n; i++)
        if (l->e[i].index == index)
            return l->e[i].obj;
    return NULL;
}

int cuc__msg_taken_ready(const cuc_msg *m)
{
    cuc_msg *own = (cuc_msg *)m; /* the marks are all a reader writes */
    uint8_t *marks, *none = NULL;

    if (!m->origin)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_taken_ready: a message from plain "
                           "bytes has no leases to mark");
    if (__atomic_load_n(&own->taken, __ATOMIC_ACQUIRE))
        return 0;
    marks = calloc(((size_t)m->nrecs + 7) / 8, 1);
    if (!marks)
        return cuc__seterr(CUC_E_NOMEM, "out of memory marking the %u records of a "
                           "received message", m->nrecs);
    if (!__atomic_compare_exchange_n(&own->taken, &none, marks, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        free(marks); /* another reader was first */
    return 0;
}

int cuc__msg_taken(const cuc_msg *m, size_t index)
{
    const uint8_t *marks = __atomic_load_n(&m->taken, __ATOMIC_ACQUIRE);

    return marks && index < m->nrecs &&
           (__atomic_load_n(&marks[index / 8], __ATOMIC_RELAXED) >> (index % 8) & 1u);
}

void cuc__msg_set_taken(const cuc_msg *m, size_t index)
{
    uint8_t *marks = __atomic_load_n(&m->taken, __ATOMIC_ACQUIRE);

    if (marks && index < m->nrecs)
        __atomic_fetch_or(&marks[index / 8], (uint8_t)(1u << (index % 8)), __ATOMIC_RELAXED);
}

int cuc__msg_has_type(const cuc_msg *m, unsigned type)
{
    return type < 32 && (m->types >> type & 1u);
}

void cuc__msg_set_origin_ops(cuc_msg *m, const struct cuc__origin_ops *ops)
{
    m->origin_ops = ops;
}

int cuc__msg_origin_reply(const cuc_msg *m, const cuc_msg *reply)
{
    if (!m->origin || !m->origin_ops)
        return 0;
    return m->origin_ops->reply(m->origin, reply);
}

int cuc__msg_origin_keep(const cuc_msg *m, void *obj, void (*drop)(void *obj))
{
    if (!m->origin || !m->origin_ops)
        return CUC_E_NOT_FOUND;
    return m->origin_ops->keep(m->origin, obj, drop);
}
