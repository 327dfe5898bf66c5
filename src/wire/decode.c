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
    uint32_t i, next_fd = 0, nrelease = 0;
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
    return 0;
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

/* cuc__msg_decode, or with adopt (a malloc'ed block holding bytes) the
 * message's data is the block's record area instead of a copy of it. */
static int decode(const void *bytes, size_t len, int *fds, size_t nfds, void *adopt,
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
    rc = msg_alloc_for(&h, adopt ? 0 : len - CUC__WIRE_HDR, &m);
    if (rc)
        goto close_given;
    rc = walk_records(m, b, len, &h);
    if (rc)
        goto free_msg;
    m->nrecs = h.nrecs;
    if (adopt) {
        m->data = (uint8_t *)adopt + CUC__WIRE_HDR;
        m->data_block = adopt;
        m->data_cap = len - CUC__WIRE_HDR;
    } else {
        memcpy(m->data, b + CUC__WIRE_HDR, len - CUC__WIRE_HDR);
    }
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

int cuc__msg_decode(const void *bytes, size_t len, int *fds, size_t nfds,
                    cuc_msg **out)
{
    return decode(bytes, len, fds, nfds, NULL, out);
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

int cuc_msg_from_bytes(const void *bytes, size_t len, cuc_msg **msg)
{
    return cuc__msg_decode(bytes, len, NULL, 0, msg);
}
