/* Decoding untrusted bytes into a message: every length, count, index and
 * enum checked before use (docs/wire-format.md, "Decoding"). */
#include "wire/msg_impl.h"
#include "base/error.h"
#include "os/fd.h"

#include <stdlib.h>
#include <string.h>

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
    if (magic != CUC__WIRE_MAGIC)
        return cuc__badmsg("bad magic 0x%08x at offset 0 (a cucore message starts with "
                           "0x%08x, \"CUCM\")", magic, CUC__WIRE_MAGIC);
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

/* 1 when the header is the newest format's (flags 0), whole and
 * consistent with len and nfds, as check_header wants it; 0 for anything
 * else, which check_header then names. Three 64-bit words compared, no
 * call: the common case of every decode. */
static inline int header_ok(const uint8_t *b, size_t len, size_t nfds, struct hdr *h)
{
    uint64_t counts;
    uint32_t nrecs, hnfds;

    if (CUC_UNLIKELY(len < CUC__WIRE_HDR || len > CUC_MSG_MAX_BYTES))
        return 0;
    counts = cuc__get64(b + 8);
    nrecs = (uint32_t)counts;
    hnfds = (uint32_t)(counts >> 32);
    /* bytes 16..23 are the total length and a reserved 0: one word equal
     * to len, as len < 2^32 here */
    if (CUC_UNLIKELY(cuc__get64(b) != (CUC__WIRE_MAGIC | (uint64_t)CUC__WIRE_FORMAT << 32) ||
                     cuc__get64(b + 16) != len || nrecs > CUC_MSG_MAX_RECORDS ||
                     (uint64_t)nrecs * CUC__WIRE_REC_HDR > len - CUC__WIRE_HDR ||
                     hnfds > CUC_MSG_MAX_FDS || hnfds != nfds))
        return 0;
    h->nrecs = nrecs;
    h->nfds = hnfds;
    return 1;
}

static int check_shape(const struct cuc__rec_shape *s, uint32_t i, size_t off,
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
                           cuc_record_type_name(s->type), len, s->min_len, s->max_len,
                           s->multiple);
    if (nfds < s->min_fds || nfds > s->max_fds)
        return cuc__badmsg("record %u at offset %zu: %s record with %u fds (it carries "
                           "%u..%u)", i, off, cuc_record_type_name(s->type), nfds,
                           s->min_fds, s->max_fds);
    if (!cuc__all_zero(b + rsv, s->rsv_len))
        return cuc__badmsg("record %u at offset %zu: reserved %s record field at "
                           "offset %zu (payload offset %u, %u bytes) is not 0", i, off,
                           cuc_record_type_name(s->type), rsv, s->rsv_off, s->rsv_len);
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
    uint32_t i, next_fd = 0, nrelease = 0, nrefused = 0, nclaim = 0;
    int rc;

    for (i = 0; i < h->nrecs; i++) {
        const struct cuc__rec_shape *s;
        struct cuc__wire_rec *r = &m->recs[i];
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
        s = cuc__rec_shape_of(r->type);
        if (!s)
            return cuc__seterr(CUC_E_VERSION, "record %u at offset %zu: unknown "
                               "record type %u: the sender runs a newer cucore",
                               i, off, r->type);
        if (r->version > s->version)
            return cuc__seterr(CUC_E_VERSION, "record %u at offset %zu: %s record "
                               "version %u is newer than this cucore reads (%u)",
                               i, off, cuc_record_type_name(s->type), r->version, s->version);
        if (r->version == 0)
            return cuc__badmsg("record %u at offset %zu: version 0 is not valid", i, off);
        rc = check_fd_range(i, off, r->fd_first, r->nfds, h->nfds, &next_fd);
        if (!rc)
            rc = check_shape(s, i, off, b, r->len, r->nfds);
        if (rc)
            return rc;
        if (!cuc__all_zero(b + off + CUC__WIRE_REC_HDR + r->len, (size_t)padded - r->len))
            return cuc__badmsg("record %u at offset %zu: padding after the payload "
                               "(offset %zu) is not zero", i, off,
                               off + CUC__WIRE_REC_HDR + r->len);
        if (r->type == CUC_RECORD_RELEASE && ++nrelease > CUC__RELEASE_MAX_RECORDS)
            return cuc__badmsg("record %u at offset %zu: more than the %u release "
                               "records a message holds", i, off,
                               CUC__RELEASE_MAX_RECORDS);
        if (r->type == CUC_RECORD_REFUSED && ++nrefused > CUC__REFUSED_MAX_RECORDS)
            return cuc__badmsg("record %u at offset %zu: more than the %u refused "
                               "records a message holds", i, off,
                               CUC__REFUSED_MAX_RECORDS);
        if ((r->type == CUC_RECORD_CLAIM || r->type == CUC_RECORD_CONFIRM) &&
            ++nclaim > CUC__CLAIM_MAX_RECORDS)
            return cuc__badmsg("record %u at offset %zu: more than the %u claim and "
                               "confirm records a message holds", i, off,
                               CUC__CLAIM_MAX_RECORDS);
        r->off = (uint32_t)(off + CUC__WIRE_REC_HDR - CUC__WIRE_HDR);
        m->types |= r->type < 32 ? 1u << r->type : 0;
        off += CUC__WIRE_REC_HDR + (size_t)padded;
    }
    if (off != len)
        return cuc__badmsg("%zu bytes after the last record (offset %zu)", len - off, off);
    if (next_fd != h->nfds)
        return cuc__badmsg("fds %u..%u arrived with the message but no record "
                           "references them", next_fd, h->nfds - 1);
    m->nrelease = nrelease;
    m->nrefused = nrefused;
    m->nclaim = nclaim;
    return 0;
}

/* records_ok from record r (at p in b) on, for a message with a record
 * that is not of a fixed shape (one with fds, of a variable length or an
 * older version): each record's shape, fd range and padding checked as
 * walk_records does. m->types has the bits of the records before r. Out
 * of line: the loop of records_ok stays small. */
static __attribute__((noinline)) int
records_rest_ok(cuc_msg *m, const uint8_t *b, size_t len, const struct hdr *h,
                struct cuc__wire_rec *r, const uint8_t *p)
{
    struct cuc__wire_rec *rend = m->recs + h->nrecs;
    const uint8_t *end = b + len;
    uint32_t next_fd = 0, nrelease = 0, nrefused = 0, nclaim = 0, types = 0;

    for (; r < rend; r++) {
        const struct cuc__rec_shape *s;
        const uint8_t *pl = p + CUC__WIRE_REC_HDR;
        uint32_t type, version, rlen, first, nfds;
        size_t padded;

        if ((size_t)(end - p) < CUC__WIRE_REC_HDR)
            return 0;
        type = cuc__get16(p);
        version = cuc__get16(p + 2);
        rlen = cuc__get32(p + 4);
        first = cuc__get32(p + 8);
        nfds = cuc__get32(p + 12);
        padded = cuc__pad8(rlen);
        s = cuc__rec_shape_of(type);
        if (padded > (size_t)(end - p) - CUC__WIRE_REC_HDR || !s || version == 0 ||
            version > s->version || rlen < s->min_len || rlen > s->max_len ||
            (rlen & (s->multiple - 1)) || nfds < s->min_fds || nfds > s->max_fds)
            return 0;
        if (nfds ? first != next_fd || (uint64_t)first + nfds > h->nfds : first != 0)
            return 0;
        next_fd += nfds;
        if (!cuc__all_zero(pl + s->rsv_off, s->rsv_len) ||
            !cuc__all_zero(pl + rlen, padded - rlen))
            return 0;
        if ((type == CUC_RECORD_RELEASE && ++nrelease > CUC__RELEASE_MAX_RECORDS) ||
            (type == CUC_RECORD_REFUSED && ++nrefused > CUC__REFUSED_MAX_RECORDS) ||
            ((type == CUC_RECORD_CLAIM || type == CUC_RECORD_CONFIRM) &&
             ++nclaim > CUC__CLAIM_MAX_RECORDS))
            return 0;
        r->type = (uint16_t)type;
        r->version = (uint16_t)version;
        r->len = rlen;
        r->fd_first = first;
        r->nfds = nfds;
        r->off = (uint32_t)(pl - (b + CUC__WIRE_HDR));
        types |= type < 32 ? 1u << type : 0;
        p = pl + padded;
    }
    if (p != end || next_fd != h->nfds)
        return 0;
    m->types |= types;
    m->nrelease = nrelease;
    m->nrefused = nrefused;
    m->nclaim = nclaim;
    return 1;
}

/* walk_records without a word of error text: 1 when every record is
 * whole and within its shape, with m->recs, m->types, m->nrelease and
 * m->nrefused filled; 0 at the first thing wrong, which walk_records then
 * finds and names. It accepts no message walk_records refuses (the same checks, in
 * one pass; test_wire_quick and the fuzzer hold the two to one answer). Records
 * of a fixed shape (a device record, most records) are checked here, with
 * two compares of their header words and their reserved field; from the
 * first other record on, records_rest_ok checks each field. */
static inline __attribute__((always_inline)) int
records_ok(cuc_msg *m, const uint8_t *b, size_t len, const struct hdr *h)
{
    struct cuc__wire_rec *r = m->recs, *rend = r + h->nrecs;
    const uint8_t *p = b + CUC__WIRE_HDR, *end = b + len; /* p: the next record */
    uint32_t types = 0;

    for (; r < rend; r++) {
        const struct cuc__rec_shape *s;
        uint64_t w0;
        unsigned type;

        if (CUC_UNLIKELY((size_t)(end - p) < CUC__WIRE_REC_HDR))
            return 0;
        w0 = cuc__get64(p);
        type = (uint16_t)w0;
        s = cuc__rec_shape_of(type);
        /* a fixed shape's length is a multiple of 8: no padding */
        if (!s || w0 != s->fixed_hdr || cuc__get64(p + 8) != 0) {
            m->types |= types;
            return records_rest_ok(m, b, len, h, r, p);
        }
        if (CUC_UNLIKELY((size_t)(end - p) - CUC__WIRE_REC_HDR < (w0 >> 32)))
            return 0;
        if (s->rsv_len && !cuc__all_zero(p + CUC__WIRE_REC_HDR + s->rsv_off, s->rsv_len))
            return 0;
#if CUC__WIRE_REC_AS_BYTES
        memcpy(r, p, CUC__WIRE_REC_HDR);
#else
        r->type = (uint16_t)type;
        r->version = (uint16_t)(w0 >> 16);
        r->len = (uint32_t)(w0 >> 32);
        r->fd_first = 0;
        r->nfds = 0;
#endif
        r->off = (uint32_t)(p + CUC__WIRE_REC_HDR - (b + CUC__WIRE_HDR));
        types |= type < 32 ? 1u << type : 0;
        p += CUC__WIRE_REC_HDR + (w0 >> 32);
    }
    /* no fds: every record so far has none */
    if (CUC_UNLIKELY(p != end || h->nfds != 0))
        return 0;
    m->types |= types;
    m->nrelease = 0;
    m->nrefused = 0;
    m->nclaim = 0;
    return 1;
}

/* A message sized for h, with nothing in it yet. */
static int msg_alloc_for(const struct hdr *h, size_t data_len, cuc_msg **out)
{
    cuc_msg *m = cuc__msg_new();

    if (m && cuc__msg_reserve(m, h->nrecs, h->nfds, data_len) == 0) {
        *out = m;
        return 0;
    }
    cuc_msg_destroy(m);
    return cuc__seterr(CUC_E_NOMEM, "out of memory decoding a message of %u records, "
                       "%zu bytes", h->nrecs, data_len);
}

/* What a decode keeps of bytes that passed every check: the record area
 * (copied, or with adopt the block's own), the fds (each fds[i] then -1). */
static inline void take_bytes(cuc_msg *m, const uint8_t *b, size_t len, int *fds,
                              size_t nfds, const struct hdr *h, void *adopt)
{
    m->nrecs = h->nrecs;
    if (adopt) {
        m->data = (uint8_t *)adopt + CUC__WIRE_HDR;
        m->data_block = adopt;
        m->holds |= CUC__MSG_HOLDS_BLOCK;
        m->data_cap = len - CUC__WIRE_HDR;
    } else {
        memcpy(m->data, b + CUC__WIRE_HDR, len - CUC__WIRE_HDR);
    }
    m->data_len = len - CUC__WIRE_HDR;
    if (nfds)
        memcpy(m->fds, fds, nfds * sizeof(int));
    m->nfds = m->fds_owned = h->nfds;
    m->wire_len = len;
    for (size_t i = 0; i < nfds; i++)
        fds[i] = -1;
}

/* decode for bytes the quick checks refused (or out of memory there): every
 * check again, each naming what is wrong. */
static CUC_COLD int decode_checked(const void *bytes, size_t len, int *fds, size_t nfds,
                                   void *adopt, cuc_msg **out)
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
    rc = msg_alloc_for(&h, adopt ? 0 : len - CUC__WIRE_HDR, &m);
    if (rc)
        goto close_given;
    rc = walk_records(m, b, len, &h);
    if (rc)
        goto free_msg;
    take_bytes(m, b, len, fds, nfds, &h, adopt);
    *out = m;
    return 0;
free_msg:
    cuc_msg_destroy(m);
close_given:
    if (fds)
        cuc__close_fds(fds, nfds);
    return rc;
}

/* cuc__msg_decode, or with adopt (a malloc'ed block holding bytes) the
 * message's data is the block's record area instead of a copy of it. The
 * usual message passes the quick checks (header_ok, records_ok: nothing
 * named, no call); anything they refuse is decoded again by
 * decode_checked, which finds what is wrong and says so. */
static inline int decode(const void *bytes, size_t len, int *fds, size_t nfds, void *adopt,
                         cuc_msg **out)
{
    const uint8_t *b = bytes;
    struct hdr h;
    cuc_msg *m;

    if (CUC_LIKELY(b && out && (fds || !nfds) && header_ok(b, len, nfds, &h))) {
        m = cuc__msg_new();
        if (CUC_LIKELY(m && cuc__msg_reserve(m, h.nrecs, h.nfds,
                                             adopt ? 0 : len - CUC__WIRE_HDR) == 0 &&
                       records_ok(m, b, len, &h))) {
            take_bytes(m, b, len, fds, nfds, &h, adopt);
            *out = m;
            return 0;
        }
        cuc_msg_destroy(m);
    }
    return decode_checked(bytes, len, fds, nfds, adopt, out);
}

int cuc__msg_decode(const void *bytes, size_t len, int *fds, size_t nfds,
                    cuc_msg **out)
{
    return decode(bytes, len, fds, nfds, NULL, out);
}

int cuc__msg_decode_checked(const void *bytes, size_t len, int *fds, size_t nfds,
                            cuc_msg **out)
{
    return decode_checked(bytes, len, fds, nfds, NULL, out);
}

int cuc__msg_decode_adopt(void *buf, size_t len, int *fds, size_t nfds, cuc_msg **out,
                          int *adopted)
{
    /* a small message is copied into the message's own storage: the
     * caller keeps its buffer for the next */
    int adopt = buf && len - CUC__WIRE_HDR > CUC__MSG_INLINE_DATA && len > CUC__WIRE_HDR;
    int rc = decode(buf, len, fds, nfds, adopt ? buf : NULL, out);

    *adopted = rc == 0 && adopt;
    return rc;
}

int cuc__msg_from_bytes_after(const void *bytes, size_t len, cuc_msg **out)
{
    const uint8_t *b = bytes;
    size_t first, rest;
    uint8_t *copy;
    int adopted, rc;

    if (len < CUC__WIRE_HDR + CUC__WIRE_REC_HDR || cuc__get32(b + 8) == 0 ||
        cuc__get32(b + 12) != 0)
        return cuc__badmsg("cuc__msg_from_bytes_after: no first record, or fds");
    first = CUC__WIRE_REC_HDR + cuc__pad8(cuc__get32(b + CUC__WIRE_HDR + 4));
    if (first > len - CUC__WIRE_HDR)
        return cuc__badmsg("cuc__msg_from_bytes_after: the first record overruns");
    rest = len - CUC__WIRE_HDR - first;
    copy = malloc(CUC__WIRE_HDR + rest);
    if (!copy)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a %zu-byte message", len);
    memcpy(copy, b, CUC__WIRE_HDR);
    cuc__put32(copy + 8, cuc__get32(b + 8) - 1);
    cuc__put32(copy + 16, (uint32_t)(CUC__WIRE_HDR + rest));
    memcpy(copy + CUC__WIRE_HDR, b + CUC__WIRE_HDR + first, rest);
    rc = cuc__msg_decode_adopt(copy, CUC__WIRE_HDR + rest, NULL, 0, out, &adopted);
    if (rc || !adopted)
        free(copy);
    return rc;
}

int cuc_msg_from_bytes(const void *bytes, size_t len, cuc_msg **msg)
{
    return cuc__msg_decode(bytes, len, NULL, 0, msg);
}
