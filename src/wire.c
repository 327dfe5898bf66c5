/* The wire format's container: message header, records, fd table.
 * Layout and rules: docs/wire-format.md. Every byte that decode reads is
 * untrusted; sizes are computed in size_t/uint64_t so that lengths near
 * UINT32_MAX cannot wrap. */
#include "internal.h"
#include "wire.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MSG_MAGIC 0x31435543u /* "CUC1" little-endian */
#define MSG_FORMAT_VERSION 1u
#define MSG_HEADER_LEN 32u
#define REC_HEADER_LEN 16u
#define INLINE_BYTES 192u
#define INLINE_RECS 4u

struct rec {
    uint16_t type, version;
    uint32_t len;
    size_t off; /* of the payload in buf */
    uint32_t fd_first, nfds;
};

/* A small message lives in the struct itself: one malloc in all. */
struct cuc_msg {
    uint8_t *buf; /* header + records, in wire form */
    size_t len, cap;
    struct rec *recs;
    size_t nrec, rcap;
    int *fds;
    size_t nfds, fdcap;
    uint8_t inline_buf[INLINE_BYTES];
    struct rec inline_recs[INLINE_RECS];
};

static size_t pad8(size_t n)
{
    return (n + 7u) & ~(size_t)7u;
}

static void msg_init(cuc_msg *m)
{
    m->buf = m->inline_buf;
    m->cap = INLINE_BYTES;
    m->len = MSG_HEADER_LEN;
    memset(m->buf, 0, MSG_HEADER_LEN);
    m->recs = m->inline_recs;
    m->rcap = INLINE_RECS;
    m->nrec = 0;
    m->fds = NULL;
    m->nfds = m->fdcap = 0;
}

int cuc_msg_create(cuc_msg **msg)
{
    cuc_msg *m;

    if (!msg)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_create: msg is NULL");
    m = malloc(sizeof(*m));
    if (!m)
        return cuc__seterr(CUC_E_NOMEM, "cuc_msg_create: out of memory");
    msg_init(m);
    *msg = m;
    return 0;
}

static void close_fds(int *fds, size_t n)
{
    size_t i;

    for (i = 0; fds && i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

void cuc_msg_destroy(cuc_msg *m)
{
    if (!m)
        return;
    close_fds(m->fds, m->nfds);
    free(m->fds);
    if (m->buf != m->inline_buf)
        free(m->buf);
    if (m->recs != m->inline_recs)
        free(m->recs);
    free(m);
}

size_t cuc_msg_count(const cuc_msg *m)
{
    return m ? m->nrec : 0;
}

size_t cuc_msg_fd_count(const cuc_msg *m)
{
    return m ? m->nfds : 0;
}

int cuc_msg_record_type(const cuc_msg *m, size_t index, int *type)
{
    if (!m || !type || index >= m->nrec)
        return cuc__seterr(CUC_E_INVALID, "record index %zu out of range (%zu records)",
                           index, m ? m->nrec : 0);
    *type = m->recs[index].type;
    return 0;
}

static int reserve_bytes(cuc_msg *m, size_t extra)
{
    size_t want = m->len + extra, cap = m->cap;
    uint8_t *nb;

    if (want <= cap)
        return 0;
    if (want > CUC_MSG_MAX_BYTES)
        return cuc__seterr(CUC_E_LIMIT, "message would exceed %u bytes", CUC_MSG_MAX_BYTES);
    while (cap < want)
        cap *= 2;
    if (m->buf == m->inline_buf) {
        nb = malloc(cap);
        if (nb)
            memcpy(nb, m->buf, m->len);
    } else {
        nb = realloc(m->buf, cap);
    }
    if (!nb)
        return cuc__seterr(CUC_E_NOMEM, "message of %zu bytes: out of memory", want);
    m->buf = nb;
    m->cap = cap;
    return 0;
}

static int reserve_recs(cuc_msg *m, size_t n)
{
    size_t cap = m->rcap;
    struct rec *nr;

    if (m->nrec + n <= cap)
        return 0;
    if (m->nrec + n > CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message would exceed %u records", CUC_MSG_MAX_RECORDS);
    while (cap < m->nrec + n)
        cap *= 2;
    if (m->recs == m->inline_recs) {
        nr = malloc(cap * sizeof(*nr));
        if (nr)
            memcpy(nr, m->recs, m->nrec * sizeof(*nr));
    } else {
        nr = realloc(m->recs, cap * sizeof(*nr));
    }
    if (!nr)
        return cuc__seterr(CUC_E_NOMEM, "message of %zu records: out of memory", m->nrec + n);
    m->recs = nr;
    m->rcap = cap;
    return 0;
}

static int reserve_fds(cuc_msg *m, size_t n)
{
    size_t cap = m->fdcap ? m->fdcap : 4;
    int *nf;

    if (m->nfds + n > CUC_MSG_MAX_FDS)
        return cuc__seterr(CUC_E_LIMIT, "message would carry %zu fds, more than %u",
                           m->nfds + n, CUC_MSG_MAX_FDS);
    if (m->nfds + n <= m->fdcap)
        return 0;
    while (cap < m->nfds + n)
        cap *= 2;
    nf = realloc(m->fds, cap * sizeof(*nf));
    if (!nf)
        return cuc__seterr(CUC_E_NOMEM, "fd table of %zu: out of memory", cap);
    m->fds = nf;
    m->fdcap = cap;
    return 0;
}

static void append_record(cuc_msg *m, uint16_t type, uint16_t version, const void *payload,
                          uint32_t len, const int *fds, uint32_t nfds)
{
    size_t padded = pad8(len);
    uint8_t *h = m->buf + m->len;
    struct rec *r = &m->recs[m->nrec++];

    cuc__put16(h, type);
    cuc__put16(h + 2, version);
    cuc__put32(h + 4, len);
    cuc__put32(h + 8, (uint32_t)m->nfds);
    cuc__put32(h + 12, nfds);
    if (len)
        memcpy(h + REC_HEADER_LEN, payload, len);
    memset(h + REC_HEADER_LEN + len, 0, padded - len);
    r->type = type;
    r->version = version;
    r->len = len;
    r->off = m->len + REC_HEADER_LEN;
    r->fd_first = (uint32_t)m->nfds;
    r->nfds = nfds;
    if (nfds)
        memcpy(m->fds + m->nfds, fds, nfds * sizeof(int));
    m->nfds += nfds;
    m->len += REC_HEADER_LEN + padded;
}

int cuc__msg_add_record_owned(cuc_msg *m, uint16_t type, uint16_t version,
                              const void *payload, uint32_t len, int *fds,
                              uint32_t nfds)
{
    int rc = reserve_bytes(m, REC_HEADER_LEN + pad8(len));

    if (!rc)
        rc = reserve_recs(m, 1);
    if (!rc)
        rc = reserve_fds(m, nfds);
    if (rc) {
        close_fds(fds, nfds);
        return rc;
    }
    append_record(m, type, version, payload, len, fds, nfds);
    return 0;
}

int cuc__msg_add_record(cuc_msg *m, uint16_t type, uint16_t version,
                        const void *payload, uint32_t len, const int *fds,
                        uint32_t nfds)
{
    int dups[64], *d = dups, rc;
    uint32_t i;

    if (nfds > CUC_MSG_MAX_FDS)
        return cuc__seterr(CUC_E_LIMIT, "a record of %u fds exceeds %u", nfds, CUC_MSG_MAX_FDS);
    if (nfds > CUC_ARRAY_LEN(dups)) {
        d = malloc(nfds * sizeof(int));
        if (!d)
            return cuc__seterr(CUC_E_NOMEM, "out of memory");
    }
    for (i = 0; i < nfds; i++) {
        d[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        if (d[i] < 0) {
            rc = cuc__errno_err(errno, "cannot duplicate fd %d (record fd %u of %u)",
                                fds[i], i, nfds);
            close_fds(d, i);
            goto free_dups;
        }
    }
    rc = cuc__msg_add_record_owned(m, type, version, payload, len, d, nfds);
free_dups:
    if (d != dups)
        free(d);
    return rc;
}

int cuc__msg_record(const cuc_msg *m, size_t index, struct cuc__record *out)
{
    const struct rec *r;

    if (!m || index >= m->nrec)
        return cuc__seterr(CUC_E_INVALID, "record index %zu out of range (%zu records)",
                           index, m ? m->nrec : 0);
    r = &m->recs[index];
    out->type = r->type;
    out->version = r->version;
    out->len = r->len;
    out->payload = m->buf + r->off;
    out->nfds = r->nfds;
    out->fds = m->fds ? m->fds + r->fd_first : NULL;
    return 0;
}

int cuc__msg_take_record_fd(cuc_msg *m, size_t index, uint32_t k, int *fd)
{
    struct rec *r;

    if (!m || index >= m->nrec || k >= m->recs[index].nfds)
        return cuc__seterr(CUC_E_INVALID, "no fd %u in record %zu", k, index);
    r = &m->recs[index];
    if (m->fds[r->fd_first + k] < 0)
        return cuc__seterr(CUC_E_INVALID, "fd %u of record %zu was already taken", k, index);
    *fd = m->fds[r->fd_first + k];
    m->fds[r->fd_first + k] = -1;
    return 0;
}

static void write_header(uint8_t *h, const cuc_msg *m)
{
    memset(h, 0, MSG_HEADER_LEN);
    cuc__put32(h, MSG_MAGIC);
    cuc__put16(h + 4, MSG_FORMAT_VERSION);
    cuc__put32(h + 8, (uint32_t)m->len);
    cuc__put32(h + 12, (uint32_t)m->nrec);
    cuc__put32(h + 16, (uint32_t)m->nfds);
}

int cuc__msg_encode(const cuc_msg *m, uint8_t **bytes, size_t *len, const int **fds,
                    size_t *nfds)
{
    uint8_t *b;
    size_t i;

    for (i = 0; i < m->nfds; i++)
        if (m->fds[i] < 0)
            return cuc__seterr(CUC_E_INVALID, "fd %zu of the message was taken out; "
                               "it cannot be sent again", i);
    b = malloc(m->len);
    if (!b)
        return cuc__seterr(CUC_E_NOMEM, "message of %zu bytes: out of memory", m->len);
    memcpy(b, m->buf, m->len);
    write_header(b, m);
    *bytes = b;
    *len = m->len;
    *fds = m->fds;
    *nfds = m->nfds;
    return 0;
}

int cuc_msg_to_bytes(const cuc_msg *m, void **bytes, size_t *len)
{
    const int *fds;
    size_t nfds, n;
    uint8_t *b;
    int rc;

    if (!m || !bytes || !len)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_to_bytes: NULL argument");
    if (m->nfds)
        return cuc__seterr(CUC_E_NEEDS_CHANNEL, "the message carries %zu file "
                           "descriptor%s, which plain bytes cannot: send it on a "
                           "Unix-domain channel with SCM_RIGHTS", m->nfds,
                           m->nfds == 1 ? "" : "s");
    rc = cuc__msg_encode(m, &b, &n, &fds, &nfds);
    if (rc)
        return rc;
    *bytes = b;
    *len = n;
    return 0;
}

/* ---- decoding ---- */

static int known_type(uint16_t t)
{
    return t >= CUC_RECORD_DEVICE && t <= CUC_RECORD_RELEASE;
}

static int check_header(const uint8_t *b, size_t len, size_t nfds, uint32_t *nrec)
{
    uint32_t total, fdc;
    uint16_t ver;

    if (len < MSG_HEADER_LEN)
        return cuc__seterr(CUC_E_BADMSG, "message of %zu bytes is shorter than its "
                           "%u-byte header", len, MSG_HEADER_LEN);
    if (cuc__get32(b) != MSG_MAGIC)
        return cuc__seterr(CUC_E_BADMSG, "bad magic 0x%08x at offset 0: not a cucore "
                           "message", cuc__get32(b));
    ver = cuc__get16(b + 4);
    if (ver != MSG_FORMAT_VERSION)
        return cuc__seterr(ver > MSG_FORMAT_VERSION ? CUC_E_VERSION : CUC_E_BADMSG,
                           "message format version %u; this cucore reads version %u",
                           ver, MSG_FORMAT_VERSION);
    if (cuc__get16(b + 6) || cuc__get32(b + 20) || cuc__get64(b + 24))
        return cuc__seterr(CUC_E_BADMSG, "reserved header fields are not zero");
    total = cuc__get32(b + 8);
    if (total != len)
        return cuc__seterr(CUC_E_BADMSG, "header says %u bytes, %zu arrived", total, len);
    *nrec = cuc__get32(b + 12);
    if (*nrec > CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_BADMSG, "header claims %u records, more than the "
                           "limit of %u", *nrec, CUC_MSG_MAX_RECORDS);
    fdc = cuc__get32(b + 16);
    if (fdc != nfds)
        return cuc__seterr(CUC_E_BADMSG, "header says %u fds, %zu arrived", fdc, nfds);
    /* Every record takes at least a header: reject a count the bytes
     * cannot hold before allocating for it. */
    if ((uint64_t)*nrec * REC_HEADER_LEN > len - MSG_HEADER_LEN)
        return cuc__seterr(CUC_E_BADMSG, "header claims %u records; %zu bytes cannot "
                           "hold them", *nrec, len);
    return 0;
}

static int check_payload(const struct rec *r, const uint8_t *p, size_t off)
{
    if (r->version == 0)
        return cuc__seterr(CUC_E_BADMSG, "record at offset %zu has version 0", off);
    if (r->version > 1)
        return cuc__seterr(CUC_E_VERSION, "record type %u version %u at offset %zu is "
                           "newer than this cucore reads (1)", r->type, r->version, off);
    if (r->type == CUC_RECORD_DEVICE && (r->len != 16 || r->nfds != 0))
        return cuc__seterr(CUC_E_BADMSG, "device record at offset %zu: %u bytes and "
                           "%u fds, want 16 bytes and no fd", off, r->len, r->nfds);
    if (r->type == CUC_RECORD_FD &&
        (r->len != 8 || r->nfds != 1 || cuc__get32(p + 4) != 0))
        return cuc__seterr(CUC_E_BADMSG, "fd record at offset %zu: %u bytes and %u "
                           "fds, want 8 bytes and 1 fd", off, r->len, r->nfds);
    return 0;
}

static int parse_record(cuc_msg *m, size_t i, size_t pos, size_t nfds, size_t *fd_next)
{
    const uint8_t *h = m->buf + pos;
    struct rec *r = &m->recs[i];
    size_t padded, j;

    if (m->len - pos < REC_HEADER_LEN)
        return cuc__seterr(CUC_E_BADMSG, "record %zu header at offset %zu runs past "
                           "the end (%zu bytes)", i, pos, m->len);
    r->type = cuc__get16(h);
    r->version = cuc__get16(h + 2);
    r->len = cuc__get32(h + 4);
    r->fd_first = cuc__get32(h + 8);
    r->nfds = cuc__get32(h + 12);
    r->off = pos + REC_HEADER_LEN;
    padded = pad8((size_t)r->len);
    if (padded > m->len - r->off)
        return cuc__seterr(CUC_E_BADMSG, "record %zu at offset %zu claims %u payload "
                           "bytes; %zu remain", i, pos, r->len, m->len - r->off);
    if (!known_type(r->type))
        return cuc__seterr(CUC_E_VERSION, "record %zu at offset %zu has unknown type %u",
                           i, pos, r->type);
    /* fds are referenced in order, each exactly once. */
    if (r->fd_first != *fd_next || (uint64_t)r->fd_first + r->nfds > nfds)
        return cuc__seterr(CUC_E_BADMSG, "record %zu at offset %zu references fds "
                           "%u..+%u; expected to start at %zu of %zu", i, pos,
                           r->fd_first, r->nfds, *fd_next, nfds);
    *fd_next += r->nfds;
    for (j = r->len; j < padded; j++)
        if (m->buf[r->off + j])
            return cuc__seterr(CUC_E_BADMSG, "record %zu: padding byte at offset %zu "
                               "is not zero", i, r->off + j);
    return check_payload(r, m->buf + r->off, pos);
}

static int parse_records(cuc_msg *m, uint32_t nrec, size_t nfds)
{
    size_t pos = MSG_HEADER_LEN, fd_next = 0, i;
    int rc;

    for (i = 0; i < nrec; i++) {
        rc = parse_record(m, i, pos, nfds, &fd_next);
        if (rc)
            return rc;
        pos = m->recs[i].off + pad8(m->recs[i].len);
    }
    if (pos != m->len)
        return cuc__seterr(CUC_E_BADMSG, "%zu bytes after the last record", m->len - pos);
    if (fd_next != nfds)
        return cuc__seterr(CUC_E_BADMSG, "%zu fds arrived but records reference %zu",
                           nfds, fd_next);
    return 0;
}

static int copy_in(cuc_msg *m, const void *bytes, size_t len, uint32_t nrec)
{
    if (len > m->cap) {
        uint8_t *b = malloc(len);
        if (!b)
            return cuc__seterr(CUC_E_NOMEM, "message of %zu bytes: out of memory", len);
        m->buf = b;
        m->cap = len;
    }
    memcpy(m->buf, bytes, len);
    m->len = len;
    if (nrec > m->rcap) {
        struct rec *r = malloc((size_t)nrec * sizeof(*r));
        if (!r)
            return cuc__seterr(CUC_E_NOMEM, "%u records: out of memory", nrec);
        m->recs = r;
        m->rcap = nrec;
    }
    return 0;
}

static int adopt_fds(cuc_msg *m, const int *fds, size_t nfds)
{
    if (!nfds)
        return 0;
    m->fds = malloc(nfds * sizeof(int));
    if (!m->fds)
        return cuc__seterr(CUC_E_NOMEM, "fd table of %zu: out of memory", nfds);
    memcpy(m->fds, fds, nfds * sizeof(int));
    m->nfds = m->fdcap = nfds;
    return 0;
}

int cuc__msg_decode(const void *bytes, size_t len, int *fds, size_t nfds, cuc_msg **out)
{
    cuc_msg *m = NULL;
    uint32_t nrec = 0;
    int rc;

    if (!bytes || !out) {
        rc = cuc__seterr(CUC_E_INVALID, "cuc_msg decode: NULL argument");
        goto close_fds;
    }
    if (len > CUC_MSG_MAX_BYTES) {
        rc = cuc__seterr(CUC_E_BADMSG, "message of %zu bytes exceeds the limit of %u",
                         len, CUC_MSG_MAX_BYTES);
        goto close_fds;
    }
    rc = check_header(bytes, len, nfds, &nrec);
    if (rc)
        goto close_fds;
    rc = cuc_msg_create(&m);
    if (rc)
        goto close_fds;
    rc = copy_in(m, bytes, len, nrec);
    if (!rc)
        rc = parse_records(m, nrec, nfds);
    if (rc)
        goto destroy_msg;
    m->nrec = nrec;
    rc = adopt_fds(m, fds, nfds);
    if (rc)
        goto destroy_msg;
    *out = m;
    return 0;

destroy_msg:
    cuc_msg_destroy(m);
close_fds:
    close_fds(fds, nfds);
    return rc;
}

int cuc_msg_from_bytes(const void *bytes, size_t len, cuc_msg **msg)
{
    return cuc__msg_decode(bytes, len, NULL, 0, msg);
}
