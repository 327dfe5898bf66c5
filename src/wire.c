/* The message container: records in memory, their encoding to bytes and
 * the bounds-checked decoding of untrusted bytes (docs/wire-format.md). */
#include "internal.h"
#include "wire.h"
#include "lease.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define WIRE_MAGIC 0x4d435543u /* "CUCM" in little-endian byte order */
#define INLINE_RECS 4
#define INLINE_FDS 4
#define INLINE_DATA 128

struct wire_rec {
    uint16_t type;
    uint16_t version;
    uint32_t len;
    uint32_t off;      /* payload offset in the data arena */
    uint32_t fd_first; /* index into the fd table */
    uint32_t nfds;
};

/* Arrays start in the inline storage, so that a small message costs one
 * malloc; they move to the heap when they outgrow it. */
struct cuc_msg {
    struct wire_rec *recs;
    uint8_t *data;
    int *fds;
    uint32_t nrecs, rec_cap;
    uint32_t nfds, fd_cap;
    uint32_t fds_owned; /* entries of fds that are not -1 */
    uint32_t nrelease;  /* release records, at most CUC__RELEASE_MAX_RECORDS */
    size_t data_len, data_cap;
    size_t wire_len; /* encoded size */
    struct cuc__lease_att *atts; /* leases to register when sent */
    size_t natts, att_cap;
    cuc_channel *channel; /* the channel it arrived on (a reference) */
    struct wire_rec rec_inline[INLINE_RECS];
    int fd_inline[INLINE_FDS];
    _Alignas(8) uint8_t data_inline[INLINE_DATA];
};

struct rec_shape {
    uint16_t type, version;
    uint32_t min_len, max_len, multiple, min_fds, max_fds;
    uint32_t rsv_off, rsv_len; /* a reserved field that must be zero */
};

/* Payload multiples are powers of two, so a mask checks them: a division
 * by a table value was a tenth of a device record's round trip. */
#define MULTIPLE_OK_(type, ver, lo, hi, mul, flo, fhi, roff, rlen)                              \
    _Static_assert((mul) > 0 && ((mul) & ((mul) - 1)) == 0, #type ": multiple of a power of two"); \
    _Static_assert((roff) + (rlen) <= (lo), #type ": the reserved field is in every payload");
CUC__RECORD_TYPES(MULTIPLE_OK_)
#undef MULTIPLE_OK_

/* Indexed by type: record types are small, dense integers. */
#define SHAPE_(type, ver, lo, hi, mul, flo, fhi, roff, rlen) \
    [type] = {type, ver, lo, hi, mul, flo, fhi, roff, rlen},
static const struct rec_shape shapes[] = {CUC__RECORD_TYPES(SHAPE_)};
#undef SHAPE_

static const struct rec_shape *shape_of(unsigned type)
{
    if (type >= CUC_ARRAY_LEN(shapes) || shapes[type].version == 0)
        return NULL;
    return &shapes[type];
}

const char *cuc__record_type_name(unsigned type)
{
    static const char *const names[] = {NULL, "device", "stream", "event",
                                        "launch config", "kernel", "pool",
                                        "buffer", "vmm", "fd", "release"};

    if (type >= CUC_ARRAY_LEN(names) || !names[type])
        return "unknown";
    return names[type];
}

static size_t pad8(size_t n)
{
    return (n + 7u) & ~(size_t)7u;
}

static int check_zero(const uint8_t *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* One freed message struct kept per thread: the common create (or decode),
 * use, destroy cycle then costs no malloc for the struct. A thread's spare
 * is freed when the thread exits (the key's destructor). */
static _Thread_local cuc_msg *spare;
static _Thread_local int spare_registered;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static int spare_key_ok;

static void spare_free(void *unused)
{
    (void)unused;
    free(spare);
    spare = NULL;
}

static void spare_init(void)
{
    spare_key_ok = pthread_key_create(&spare_key, spare_free) == 0;
}

static cuc_msg *msg_new(void)
{
    cuc_msg *m = spare;

    if (m) {
        spare = NULL;
        return m;
    }
    return malloc(sizeof(*m));
}

static void msg_release(cuc_msg *m)
{
    if (!spare && !spare_registered) {
        pthread_once(&spare_once, spare_init);
        spare_registered = spare_key_ok && pthread_setspecific(spare_key, &spare) == 0;
    }
    if (!spare && spare_registered) {
        spare = m;
        return;
    }
    free(m);
}

static void msg_init(cuc_msg *m)
{
    m->recs = m->rec_inline;
    m->data = m->data_inline;
    m->fds = m->fd_inline;
    m->nrecs = 0;
    m->rec_cap = INLINE_RECS;
    m->nfds = 0;
    m->fd_cap = INLINE_FDS;
    m->fds_owned = 0;
    m->nrelease = 0;
    m->data_len = 0;
    m->data_cap = INLINE_DATA;
    m->wire_len = CUC__WIRE_HDR;
    m->atts = NULL;
    m->natts = m->att_cap = 0;
    m->channel = NULL;
}

int cuc_msg_create(cuc_msg **msg)
{
    cuc_msg *m;

    if (!msg)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_create: msg is NULL");
    m = msg_new();
    if (!m)
        return cuc__seterr(CUC_E_NOMEM, "cuc_msg_create: out of memory");
    msg_init(m);
    *msg = m;
    return 0;
}

void cuc_msg_destroy(cuc_msg *m)
{
    if (!m)
        return;
    cuc__close_fds(m->fds, m->nfds);
    if (m->recs != m->rec_inline)
        free(m->recs);
    if (m->data != m->data_inline)
        free(m->data);
    if (m->fds != m->fd_inline)
        free(m->fds);
    for (size_t i = 0; i < m->natts; i++)
        m->atts[i].ops->unref(m->atts[i].obj);
    free(m->atts);
    if (m->channel)
        cuc__channel_unref(m->channel);
    msg_release(m);
}

int cuc__msg_lease_attach(cuc_msg *m, uint64_t lease_id,
                          const struct cuc__lease_ops *ops, void *obj)
{
    if (!m || !ops || !obj || lease_id == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_lease_attach: %s",
                           lease_id ? "NULL argument" : "lease id 0 is reserved");
    if (m->natts == m->att_cap) {
        size_t cap = m->att_cap ? 2 * m->att_cap : 8;
        void *p = realloc(m->atts, cap * sizeof(*m->atts));
        if (!p)
            return cuc__seterr(CUC_E_NOMEM, "out of memory attaching lease %zu "
                               "to a message", m->natts + 1);
        m->atts = p;
        m->att_cap = cap;
    }
    ops->ref(obj);
    m->atts[m->natts++] = (struct cuc__lease_att){lease_id, ops, obj};
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

cuc_channel *cuc__msg_channel(const cuc_msg *m)
{
    return m ? m->channel : NULL;
}

void cuc__msg_set_channel(cuc_msg *m, cuc_channel *ch)
{
    cuc__channel_ref(ch);
    if (m->channel)
        cuc__channel_unref(m->channel);
    m->channel = ch;
}

size_t cuc_msg_count(const cuc_msg *m)
{
    return m ? m->nrecs : 0;
}

size_t cuc_msg_fd_count(const cuc_msg *m)
{
    return m ? m->fds_owned : 0;
}

int cuc_msg_record_type(const cuc_msg *m, size_t index, int *type)
{
    if (!m || !type)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_record_type: NULL argument");
    if (index >= m->nrecs)
        return cuc__seterr(CUC_E_INVALID, "record index %zu is out of range: the "
                           "message has %u records", index, m->nrecs);
    *type = m->recs[index].type;
    return 0;
}

/* Makes room for need elements of size elem in *arr (capacity *cap, inline
 * storage inl). Doubles, so n appends cost O(n). */
static int grow(void **arr, void *inl, size_t *cap, size_t need, size_t elem)
{
    size_t ncap = *cap ? *cap : 1;
    void *p;

    if (need <= *cap)
        return 0;
    while (ncap < need)
        ncap *= 2;
    if (*arr == inl) {
        p = malloc(ncap * elem);
        if (p)
            memcpy(p, inl, *cap * elem);
    } else {
        p = realloc(*arr, ncap * elem);
    }
    if (!p)
        return cuc__seterr(CUC_E_NOMEM, "message: out of memory growing to %zu "
                           "entries of %zu bytes", ncap, elem);
    *arr = p;
    *cap = ncap;
    return 0;
}

static int grow_recs(cuc_msg *m, size_t need)
{
    size_t cap = m->rec_cap;
    int rc = grow((void **)&m->recs, m->rec_inline, &cap, need, sizeof(*m->recs));

    m->rec_cap = (uint32_t)cap;
    return rc;
}

static int grow_fds(cuc_msg *m, size_t need)
{
    size_t cap = m->fd_cap;
    int rc = grow((void **)&m->fds, m->fd_inline, &cap, need, sizeof(*m->fds));

    m->fd_cap = (uint32_t)cap;
    return rc;
}

static int check_add(const cuc_msg *m, uint16_t type, uint16_t version,
                     const void *payload, uint32_t len, uint32_t nfds)
{
    const struct rec_shape *s = shape_of(type);

    if (!s)
        return cuc__seterr(CUC_E_INVALID, "record type %u is not a cucore record "
                           "type", type);
    if (version == 0 || version > s->version)
        return cuc__seterr(CUC_E_INVALID, "%s record version %u: this cucore "
                           "writes versions 1..%u", cuc__record_type_name(s->type), version, s->version);
    if (len && !payload)
        return cuc__seterr(CUC_E_INVALID, "%s record: payload is NULL with "
                           "length %u", cuc__record_type_name(s->type), len);
    if (len < s->min_len || len > s->max_len || (len & (s->multiple - 1)))
        return cuc__seterr(CUC_E_INVALID, "%s record: payload length %u outside "
                           "%u..%u (multiple of %u)", cuc__record_type_name(s->type), len, s->min_len,
                           s->max_len, s->multiple);
    if (nfds < s->min_fds || nfds > s->max_fds)
        return cuc__seterr(CUC_E_INVALID, "%s record: %u fds, it carries %u..%u",
                           cuc__record_type_name(s->type), nfds, s->min_fds, s->max_fds);
    if (s->rsv_len && !check_zero((const uint8_t *)payload + s->rsv_off, s->rsv_len))
        return cuc__seterr(CUC_E_INVALID, "%s record: reserved field (payload offset "
                           "%u, %u bytes) is not 0", cuc__record_type_name(s->type),
                           s->rsv_off, s->rsv_len);
    if (type == CUC_RECORD_RELEASE && m->nrelease >= CUC__RELEASE_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u "
                           "release records", CUC__RELEASE_MAX_RECORDS);
    if (m->nrecs >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of "
                           "%u records", CUC_MSG_MAX_RECORDS);
    if ((uint64_t)m->nfds + nfds > CUC_MSG_MAX_FDS)
        return cuc__seterr(CUC_E_LIMIT, "message would carry %llu fds, more than "
                           "the maximum of %u", (unsigned long long)m->nfds + nfds,
                           CUC_MSG_MAX_FDS);
    if ((uint64_t)m->wire_len + CUC__WIRE_REC_HDR + pad8(len) > CUC_MSG_MAX_BYTES)
        return cuc__seterr(CUC_E_LIMIT, "message would be %llu bytes, more than "
                           "the maximum of %u",
                           (unsigned long long)(m->wire_len + CUC__WIRE_REC_HDR + pad8(len)),
                           CUC_MSG_MAX_BYTES);
    return 0;
}

/* Appends the record; the fds, already owned by the message's caller, go
 * into the table as they are. */
static int append(cuc_msg *m, uint16_t type, uint16_t version,
                  const void *payload, uint32_t len, const int *fds, uint32_t nfds)
{
    size_t off = pad8(m->data_len);
    struct wire_rec *r;
    int rc;

    if (CUC_UNLIKELY(m->nrecs + 1 > m->rec_cap || m->nfds + nfds > m->fd_cap ||
                     off + len > m->data_cap)) {
        rc = grow_recs(m, (size_t)m->nrecs + 1);
        if (!rc)
            rc = grow_fds(m, (size_t)m->nfds + nfds);
        if (!rc)
            rc = grow((void **)&m->data, m->data_inline, &m->data_cap, off + len, 1);
        if (rc)
            return rc;
    }
    r = &m->recs[m->nrecs++];
    r->type = type;
    r->version = version;
    r->len = len;
    r->off = (uint32_t)off;
    r->fd_first = nfds ? m->nfds : 0;
    r->nfds = nfds;
    if (len)
        memcpy(m->data + off, payload, len);
    m->data_len = off + len;
    if (nfds)
        memcpy(m->fds + m->nfds, fds, nfds * sizeof(int));
    m->nfds += nfds;
    m->fds_owned += nfds;
    m->nrelease += type == CUC_RECORD_RELEASE;
    m->wire_len += CUC__WIRE_REC_HDR + pad8(len);
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
        rc = append(m, type, version, payload, len, fds, nfds);
    if (rc)
        goto close_given;
    return 0;
close_given:
    if (fds)
        cuc__close_fds(fds, nfds);
    return rc;
}

int cuc__msg_add_record(cuc_msg *m, uint16_t type, uint16_t version,
                        const void *payload, uint32_t len, const int *fds,
                        uint32_t nfds)
{
    int dups[16], *own = dups;
    uint32_t i;
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
    for (i = 0; i < nfds; i++) {
        own[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (own[i] < 0) {
            rc = cuc__errno_err(errno, "cannot duplicate fd %d (fd %u of a %s "
                                "record)", fds[i], i, cuc__record_type_name(type));
            cuc__close_fds(own, i);
            goto free_own;
        }
    }
    rc = append(m, type, version, payload, len, own, nfds);
    if (rc)
        cuc__close_fds(own, nfds);
free_own:
    if (own != dups)
        free(own);
    return rc;
}

int cuc__msg_record(const cuc_msg *m, size_t index, struct cuc__record *rec)
{
    const struct wire_rec *r;

    if (!m || !rec)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_record: NULL argument");
    if (index >= m->nrecs)
        return cuc__seterr(CUC_E_INVALID, "record index %zu is out of range: the "
                           "message has %u records", index, m->nrecs);
    r = &m->recs[index];
    rec->type = r->type;
    rec->version = r->version;
    rec->len = r->len;
    rec->payload = m->data + r->off;
    rec->nfds = r->nfds;
    rec->fds = m->fds + r->fd_first;
    return 0;
}

int cuc__msg_record_of(const cuc_msg *m, size_t index, unsigned type,
                       struct cuc__record *rec)
{
    struct cuc__record r;
    const char *want = cuc__record_type_name(type);
    int rc = cuc__msg_record(m, index, &r);

    if (rc)
        return rc;
    if (r.type != type)
        return cuc__seterr(CUC_E_INVALID, "record %zu is a %s record, not %s %s", index,
                           cuc__record_type_name(r.type),
                           type == CUC_RECORD_EVENT || type == CUC_RECORD_FD ? "an" : "a",
                           want);
    *rec = r;
    return 0;
}

int cuc__msg_take_record_fd(cuc_msg *m, size_t index, uint32_t k, int *fd)
{
    const struct wire_rec *r;
    int *slot;

    if (!m || !fd)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_take_record_fd: NULL argument");
    if (index >= m->nrecs)
        return cuc__seterr(CUC_E_INVALID, "record index %zu is out of range: the "
                           "message has %u records", index, m->nrecs);
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

/* ---- encoding ---- */

static int find_taken(const cuc_msg *m)
{
    uint32_t i;

    for (i = 0; i < m->nrecs; i++) {
        const struct wire_rec *r = &m->recs[i];
        uint32_t k;
        for (k = 0; k < r->nfds; k++)
            if (m->fds[r->fd_first + k] < 0)
                return cuc__seterr(CUC_E_INVALID, "fd %u of record %u (%s) was "
                                   "taken out of the message: it can no longer "
                                   "be sent", k, i, cuc__record_type_name(r->type));
    }
    return cuc__seterr(CUC_E_INVALID, "message fd table is inconsistent");
}

/* Writes the message's m->wire_len bytes to out. */
static void encode_to(const cuc_msg *m, uint8_t *out)
{
    uint8_t *p;
    uint32_t i;

    cuc__put32(out, WIRE_MAGIC);
    cuc__put16(out + 4, CUC__WIRE_FORMAT);
    cuc__put16(out + 6, 0);
    cuc__put32(out + 8, m->nrecs);
    cuc__put32(out + 12, m->nfds);
    cuc__put32(out + 16, (uint32_t)m->wire_len);
    cuc__put32(out + 20, 0);
    p = out + CUC__WIRE_HDR;
    for (i = 0; i < m->nrecs; i++) {
        const struct wire_rec *r = &m->recs[i];
        size_t padded = pad8(r->len);
        cuc__put16(p, r->type);
        cuc__put16(p + 2, r->version);
        cuc__put32(p + 4, r->len);
        cuc__put32(p + 8, r->fd_first);
        cuc__put32(p + 12, r->nfds);
        p += CUC__WIRE_REC_HDR;
        if (r->len)
            memcpy(p, m->data + r->off, r->len);
        memset(p + r->len, 0, padded - r->len);
        p += padded;
    }
}

int cuc__msg_encode(const cuc_msg *m, uint8_t **bytes, size_t *len,
                    const int **fds, size_t *nfds)
{
    uint8_t *out;

    if (!m || !bytes || !len || !fds || !nfds)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_encode: NULL argument");
    if (CUC_UNLIKELY(m->fds_owned != m->nfds))
        return find_taken(m);
    out = malloc(m->wire_len);
    if (!out)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a %zu-byte message",
                           m->wire_len);
    encode_to(m, out);
    *bytes = out;
    *len = m->wire_len;
    *fds = m->fds;
    *nfds = m->nfds;
    return 0;
}

static int needs_channel(const cuc_msg *m)
{
    return cuc__seterr(CUC_E_NEEDS_CHANNEL, "the message carries %u file "
                       "descriptor%s, which plain bytes cannot: send it with "
                       "cuc_channel_send()", m->nfds, m->nfds == 1 ? "" : "s");
}

size_t cuc_msg_wire_size(const cuc_msg *m)
{
    return m ? m->wire_len : 0;
}

int cuc_msg_to_buffer(const cuc_msg *m, void *buf, size_t cap, size_t *len)
{
    if (!m || !buf || !len)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_to_buffer: NULL argument");
    if (m->nfds)
        return needs_channel(m);
    if (cap < m->wire_len)
        return cuc__seterr(CUC_E_LIMIT, "the message needs %zu bytes; the buffer has "
                           "%zu (cuc_msg_wire_size() tells in advance)", m->wire_len, cap);
    encode_to(m, buf);
    *len = m->wire_len;
    return 0;
}

int cuc_msg_to_bytes(const cuc_msg *m, void **bytes, size_t *len)
{
    const int *fds;
    size_t nfds;
    uint8_t *out;
    int rc;

    if (!m || !bytes || !len)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_to_bytes: NULL argument");
    if (m->nfds)
        return needs_channel(m);
    rc = cuc__msg_encode(m, &out, len, &fds, &nfds);
    if (rc)
        return rc;
    *bytes = out;
    return 0;
}

/* ---- decoding ---- */

struct hdr {
    uint32_t nrecs, nfds;
};

static int check_header(const uint8_t *b, size_t len, size_t nfds, struct hdr *h)
{
    uint32_t magic, total;
    uint16_t format, flags;

    if (len < CUC__WIRE_HDR)
        return cuc__badmsg("message of %zu bytes is shorter than the %u-byte header",
                           len, CUC__WIRE_HDR);
    magic = cuc__get32(b);
    if (magic != WIRE_MAGIC)
        return cuc__badmsg("bad magic 0x%08x at offset 0 (a cucore message starts with "
                           "0x%08x, \"CUCM\")", magic, WIRE_MAGIC);
    format = cuc__get16(b + 4);
    if (format > CUC__WIRE_FORMAT)
        return cuc__seterr(CUC_E_VERSION, "message format version %u (offset 4) is "
                           "newer than this cucore reads (%u): upgrade the "
                           "receiver", format, CUC__WIRE_FORMAT);
    if (format == 0)
        return cuc__badmsg("message format version 0 at offset 4 is not valid");
    flags = cuc__get16(b + 6);
    if (flags)
        return cuc__badmsg("flags 0x%04x at offset 6: format version %u defines none",
                           flags, CUC__WIRE_FORMAT);
    total = cuc__get32(b + 16);
    if (total != len)
        return cuc__badmsg("total length %u at offset 16, but the message is %zu bytes",
                           total, len);
    if (len > CUC_MSG_MAX_BYTES)
        return cuc__badmsg("message of %zu bytes exceeds the maximum of %u", len,
                           CUC_MSG_MAX_BYTES);
    if (cuc__get32(b + 20))
        return cuc__badmsg("reserved field at offset 20 is 0x%08x, must be 0",
                           cuc__get32(b + 20));
    h->nrecs = cuc__get32(b + 8);
    if (h->nrecs > CUC_MSG_MAX_RECORDS)
        return cuc__badmsg("record count %u at offset 8 exceeds the maximum of %u",
                           h->nrecs, CUC_MSG_MAX_RECORDS);
    if ((uint64_t)h->nrecs * CUC__WIRE_REC_HDR > len - CUC__WIRE_HDR)
        return cuc__badmsg("record count %u at offset 8 needs at least %llu bytes of "
                           "records; the message has %zu", h->nrecs,
                           (unsigned long long)h->nrecs * CUC__WIRE_REC_HDR,
                           len - CUC__WIRE_HDR);
    h->nfds = cuc__get32(b + 12);
    if (h->nfds > CUC_MSG_MAX_FDS)
        return cuc__badmsg("fd count %u at offset 12 exceeds the maximum of %u", h->nfds,
                           CUC_MSG_MAX_FDS);
    if (h->nfds != nfds)
        return cuc__badmsg("fd count %u at offset 12, but %zu fds arrived with the "
                           "message", h->nfds, nfds);
    return 0;
}

static int check_shape(const struct rec_shape *s, uint32_t i, size_t off,
                       const uint8_t *b, uint32_t len, uint32_t nfds)
{
    size_t rsv = off + CUC__WIRE_REC_HDR + s->rsv_off;

    if (s->type == CUC_RECORD_RELEASE && len > s->max_len)
        return cuc__badmsg("record %u at offset %zu: release payload length %u is more "
                           "than the %u lease ids a release record holds", i, off, len,
                           CUC__RELEASE_MAX_IDS);
    if (len < s->min_len || len > s->max_len || (len & (s->multiple - 1)))
        return cuc__badmsg("record %u at offset %zu: %s payload length %u outside "
                           "%u..%u (multiple of %u)", i, off,
                           cuc__record_type_name(s->type), len, s->min_len, s->max_len,
                           s->multiple);
    if (nfds < s->min_fds || nfds > s->max_fds)
        return cuc__badmsg("record %u at offset %zu: %s record with %u fds (it carries "
                           "%u..%u)", i, off, cuc__record_type_name(s->type), nfds,
                           s->min_fds, s->max_fds);
    if (!check_zero(b + rsv, s->rsv_len))
        return cuc__badmsg("record %u at offset %zu: reserved %s record field at "
                           "offset %zu (payload offset %u, %u bytes) is not 0", i, off,
                           cuc__record_type_name(s->type), rsv, s->rsv_off, s->rsv_len);
    return 0;
}

static int check_fd_range(uint32_t i, size_t off, uint32_t first, uint32_t n,
                          uint32_t total, uint32_t *next)
{
    if (n == 0) {
        if (first)
            return cuc__badmsg("record %u at offset %zu: fd index %u (offset %zu) with "
                               "fd count 0, must be 0", i, off, first, off + 8);
        return 0;
    }
    if ((uint64_t)first + n > total)
        return cuc__badmsg("record %u at offset %zu: fds %u..%llu (offset %zu) are outside "
                           "the %u fds of the message", i, off, first,
                           (unsigned long long)first + n - 1, off + 8, total);
    if (first < *next)
        return cuc__badmsg("record %u at offset %zu: fd %u (offset %zu) is already "
                           "referenced by an earlier record", i, off, first, off + 8);
    if (first > *next)
        return cuc__badmsg("record %u at offset %zu: fd index %u (offset %zu) skips fds "
                           "%u..%u, which no record references", i, off, first, off + 8,
                           *next, first - 1);
    *next = first + n;
    return 0;
}

/* Walks the records, checking each against the bytes left; fills m->recs
 * (offsets relative to the record area, which m->data copies). */
static int walk_records(cuc_msg *m, const uint8_t *b, size_t len, const struct hdr *h)
{
    size_t off = CUC__WIRE_HDR;
    uint32_t i, next_fd = 0, nrelease = 0;
    int rc;

    for (i = 0; i < h->nrecs; i++) {
        const struct rec_shape *s;
        struct wire_rec *r = &m->recs[i];
        size_t left = len - off;
        uint64_t padded;

        if (left < CUC__WIRE_REC_HDR)
            return cuc__badmsg("record %u at offset %zu: its %u-byte header is cut off "
                               "(%zu bytes left)", i, off, CUC__WIRE_REC_HDR, left);
        r->type = cuc__get16(b + off);
        r->version = cuc__get16(b + off + 2);
        r->len = cuc__get32(b + off + 4);
        r->fd_first = cuc__get32(b + off + 8);
        r->nfds = cuc__get32(b + off + 12);
        padded = ((uint64_t)r->len + 7u) & ~(uint64_t)7u;
        if (padded > left - CUC__WIRE_REC_HDR)
            return cuc__badmsg("record %u at offset %zu: payload length %u (offset %zu) "
                               "exceeds the %zu bytes left", i, off, r->len, off + 4,
                               left - CUC__WIRE_REC_HDR);
        s = shape_of(r->type);
        if (!s)
            return cuc__seterr(CUC_E_VERSION, "record %u at offset %zu: unknown "
                               "record type %u: the sender runs a newer cucore",
                               i, off, r->type);
        if (r->version > s->version)
            return cuc__seterr(CUC_E_VERSION, "record %u at offset %zu: %s record "
                               "version %u is newer than this cucore reads (%u)",
                               i, off, cuc__record_type_name(s->type), r->version, s->version);
        if (r->version == 0)
            return cuc__badmsg("record %u at offset %zu: version 0 is not valid", i, off);
        rc = check_fd_range(i, off, r->fd_first, r->nfds, h->nfds, &next_fd);
        if (!rc)
            rc = check_shape(s, i, off, b, r->len, r->nfds);
        if (rc)
            return rc;
        if (!check_zero(b + off + CUC__WIRE_REC_HDR + r->len, (size_t)padded - r->len))
            return cuc__badmsg("record %u at offset %zu: padding after the payload "
                               "(offset %zu) is not zero", i, off,
                               off + CUC__WIRE_REC_HDR + r->len);
        if (r->type == CUC_RECORD_RELEASE && ++nrelease > CUC__RELEASE_MAX_RECORDS)
            return cuc__badmsg("record %u at offset %zu: more than the %u release "
                               "records a message holds", i, off,
                               CUC__RELEASE_MAX_RECORDS);
        r->off = (uint32_t)(off + CUC__WIRE_REC_HDR - CUC__WIRE_HDR);
        off += CUC__WIRE_REC_HDR + (size_t)padded;
    }
    if (off != len)
        return cuc__badmsg("%zu bytes after the last record (offset %zu)", len - off, off);
    if (next_fd != h->nfds)
        return cuc__badmsg("fds %u..%u arrived with the message but no record "
                           "references them", next_fd, h->nfds - 1);
    m->nrelease = nrelease;
    return 0;
}

/* A message sized for h, with nothing in it yet. */
static int msg_alloc_for(const struct hdr *h, size_t data_len, cuc_msg **out)
{
    cuc_msg *m = msg_new();
    int rc = CUC_E_NOMEM;

    if (!m)
        goto fail;
    msg_init(m);
    if (CUC_UNLIKELY(h->nrecs > m->rec_cap || h->nfds > m->fd_cap ||
                     data_len > m->data_cap) &&
        (grow_recs(m, h->nrecs) || grow_fds(m, h->nfds) ||
         grow((void **)&m->data, m->data_inline, &m->data_cap, data_len, 1)))
        goto free_msg;
    *out = m;
    return 0;
free_msg:
    cuc_msg_destroy(m);
fail:
    return cuc__seterr(rc, "out of memory decoding a message of %u records, "
                       "%zu bytes", h->nrecs, data_len);
}

int cuc__msg_decode(const void *bytes, size_t len, int *fds, size_t nfds,
                    cuc_msg **out)
{
    const uint8_t *b = bytes;
    struct hdr h = {0, 0};
    cuc_msg *m = NULL;
    int rc;

    if ((!bytes && len) || (nfds && !fds) || !out) {
        rc = cuc__seterr(CUC_E_INVALID, "cuc__msg_decode: NULL argument");
        goto close_given;
    }
    rc = check_header(b, len, nfds, &h);
    if (rc)
        goto close_given;
    rc = msg_alloc_for(&h, len - CUC__WIRE_HDR, &m);
    if (rc)
        goto close_given;
    rc = walk_records(m, b, len, &h);
    if (rc)
        goto free_msg;
    m->nrecs = h.nrecs;
    memcpy(m->data, b + CUC__WIRE_HDR, len - CUC__WIRE_HDR);
    m->data_len = len - CUC__WIRE_HDR;
    if (nfds)
        memcpy(m->fds, fds, nfds * sizeof(int));
    m->nfds = m->fds_owned = h.nfds;
    m->wire_len = len;
    for (size_t i = 0; i < nfds; i++)
        fds[i] = -1;
    *out = m;
    return 0;
free_msg:
    cuc_msg_destroy(m);
close_given:
    if (fds)
        cuc__close_fds(fds, nfds);
    return rc;
}

int cuc_msg_from_bytes(const void *bytes, size_t len, cuc_msg **msg)
{
    return cuc__msg_decode(bytes, len, NULL, 0, msg);
}
