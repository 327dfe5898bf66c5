/* Encoding a message to its bytes (docs/wire-format.md). */
#include "wire/msg_impl.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

static int find_taken(const cuc_msg *m)
{
    uint32_t i;

    for (i = 0; i < m->nrecs; i++) {
        const struct cuc__wire_rec *r = &m->recs[i];
        uint32_t k;
        for (k = 0; k < r->nfds; k++)
            if (m->fds[r->fd_first + k] < 0)
                return cuc__seterr(CUC_E_INVALID, "fd %u of record %u (%s) was "
                                   "taken out of the message: it can no longer "
                                   "be sent", k, i, cuc_record_type_name(r->type));
    }
    return cuc__seterr(CUC_E_INVALID, "message fd table is inconsistent");
}

/* The padded payload of r to p: len bytes of data, zeros to the next 8. */
static CUC_COLD void put_payload_long(const cuc_msg *m, const struct cuc__wire_rec *r,
                                      uint8_t *p)
{
    size_t padded = cuc__pad8(r->len);

    if (r->len)
        memcpy(p, m->data + r->off, r->len);
    if (padded != r->len)
        memset(p + r->len, 0, padded - r->len);
}

/* put_payload_long, with the payloads of 8 and 16 bytes (a device
 * record's, a release of one id, an fd record's) copied by two moves
 * rather than a call. */
static inline void put_payload(const cuc_msg *m, const struct cuc__wire_rec *r, uint8_t *p)
{
    uint32_t len = r->len; /* read once: the stores to p might alias r, as far
                              as the compiler knows */

    if (len == 16)
        memcpy(p, m->data + r->off, 16);
    else if (len == 8)
        memcpy(p, m->data + r->off, 8);
    else
        put_payload_long(m, r, p);
}

/* Writes the message's m->wire_len bytes to out (inline in
 * cuc_msg_to_buffer, whose whole work it is). */
static inline __attribute__((always_inline)) void encode_to(const cuc_msg *m, uint8_t *out)
{
    const struct cuc__wire_rec *r = m->recs, *end = r + m->nrecs;
    uint8_t *p = out + CUC__WIRE_HDR;

    /* magic, format, flags 0; the counts; the total length and a reserved
     * 0 (wire_len < 2^32) */
    cuc__put64(out, CUC__WIRE_MAGIC | (uint64_t)CUC__WIRE_FORMAT << 32);
    cuc__put64(out + 8, m->nrecs | (uint64_t)m->nfds << 32);
    cuc__put64(out + 16, m->wire_len);
    for (; r < end; r++) {
#if CUC__WIRE_REC_AS_BYTES
        memcpy(p, r, CUC__WIRE_REC_HDR);
#else
        cuc__put64(p, r->type | (uint64_t)r->version << 16 | (uint64_t)r->len << 32);
        cuc__put64(p + 8, r->fd_first | (uint64_t)r->nfds << 32);
#endif
        if (CUC_UNLIKELY(r->off & CUC__REC_DEFERRED))
            cuc__msg_put_deferred(m, r, p + CUC__WIRE_REC_HDR);
        else
            put_payload(m, r, p + CUC__WIRE_REC_HDR);
        p += CUC__WIRE_REC_HDR + cuc__pad8(r->len);
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


/* ---- encoding a window at a time (a frame's part, with no copy of the
 * whole message) ---- */

int cuc__msg_encode_begin(const cuc_msg *m, size_t *len, const int **fds, size_t *nfds)
{
    if (!m || !len || !fds || !nfds)
        return cuc__seterr(CUC_E_INVALID, "cuc__msg_encode_begin: NULL argument");
    if (CUC_UNLIKELY(m->fds_owned != m->nfds))
        return find_taken(m);
    *len = m->wire_len;
    *fds = m->fds;
    *nfds = m->nfds;
    return 0;
}

/* Copies the part of src (n bytes at message offset at; NULL: zeros) that
 * falls in the window [off, off + len) to out. */
static void emit(const void *src, size_t at, size_t n, size_t off, size_t len, uint8_t *out)
{
    size_t lo = at > off ? at : off, hi = at + n < off + len ? at + n : off + len;

    if (lo >= hi)
        return;
    if (src)
        memcpy(out + (lo - off), (const uint8_t *)src + (lo - at), hi - lo);
    else
        memset(out + (lo - off), 0, hi - lo);
}

/* r's payload where it lies, or a deferred record's written to tmp. */
static const uint8_t *payload_of(const cuc_msg *m, const struct cuc__wire_rec *r,
                                 uint8_t tmp[CUC__DEFERRED_MAX])
{
    if (!(r->off & CUC__REC_DEFERRED))
        return m->data + r->off;
    cuc__msg_put_deferred(m, r, tmp);
    return tmp;
}

void cuc__msg_encode_part(const cuc_msg *m, size_t off, size_t len, uint8_t *out,
                          struct cuc__enc_cursor *cur)
{
    uint8_t h[CUC__WIRE_HDR], tmp[CUC__DEFERRED_MAX];

    if (off < CUC__WIRE_HDR) {
        cuc__put32(h, CUC__WIRE_MAGIC);
        cuc__put16(h + 4, CUC__WIRE_FORMAT);
        cuc__put16(h + 6, 0);
        cuc__put32(h + 8, m->nrecs);
        cuc__put32(h + 12, m->nfds);
        cuc__put32(h + 16, (uint32_t)m->wire_len);
        cuc__put32(h + 20, 0);
        emit(h, 0, CUC__WIRE_HDR, off, len, out);
        cur->rec = 0;
        cur->at = CUC__WIRE_HDR;
    }
    for (; cur->rec < m->nrecs && cur->at < off + len; cur->rec++) {
        const struct cuc__wire_rec *r = &m->recs[cur->rec];
        size_t padded = cuc__pad8(r->len), at = cur->at;

        if (at + CUC__WIRE_REC_HDR + padded <= off) { /* before the window */
            cur->at += CUC__WIRE_REC_HDR + padded;
            continue;
        }
        if (at >= off && at + CUC__WIRE_REC_HDR + padded <= off + len) {
            /* the common case: all of it in the window */
            uint8_t *p = out + (at - off);
            cuc__put16(p, r->type);
            cuc__put16(p + 2, r->version);
            cuc__put32(p + 4, r->len);
            cuc__put32(p + 8, r->fd_first);
            cuc__put32(p + 12, r->nfds);
            p += CUC__WIRE_REC_HDR;
            if (r->off & CUC__REC_DEFERRED) {
                cuc__msg_put_deferred(m, r, p);
            } else {
                if (r->len)
                    memcpy(p, m->data + r->off, r->len);
                memset(p + r->len, 0, padded - r->len);
            }
            cur->at += CUC__WIRE_REC_HDR + padded;
            continue;
        }
        cuc__put16(h, r->type);
        cuc__put16(h + 2, r->version);
        cuc__put32(h + 4, r->len);
        cuc__put32(h + 8, r->fd_first);
        cuc__put32(h + 12, r->nfds);
        emit(h, at, CUC__WIRE_REC_HDR, off, len, out);
        emit(payload_of(m, r, tmp), at + CUC__WIRE_REC_HDR, r->len, off, len, out);
        emit(NULL, at + CUC__WIRE_REC_HDR + r->len, padded - r->len, off, len, out);
        if (at + CUC__WIRE_REC_HDR + padded > off + len)
            break; /* it goes on in the next window: start there again */
        cur->at += CUC__WIRE_REC_HDR + padded;
    }
}

int cuc__msg_to_bytes_led(const cuc_msg *m, uint16_t type, uint16_t version,
                          const void *payload, uint32_t plen, void **bytes, size_t *len)
{
    size_t lead = CUC__WIRE_REC_HDR + cuc__pad8(plen), total;
    uint8_t *out;

    if (m->nfds)
        return needs_channel(m);
    if (m->nrecs >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "the message holds the most records a message may: "
                           "no room for one more in front");
    total = m->wire_len + lead;
    if (total > CUC_MSG_MAX_BYTES)
        return cuc__seterr(CUC_E_LIMIT, "the message would be %zu bytes, more than the "
                           "maximum of %u", total, CUC_MSG_MAX_BYTES);
    out = malloc(total);
    if (!out)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a %zu-byte message", total);
    /* m at lead bytes in, its records where they belong; then its header,
     * which the lead record covers, written over by the real one */
    encode_to(m, out + lead);
    cuc__put64(out, CUC__WIRE_MAGIC | (uint64_t)CUC__WIRE_FORMAT << 32);
    cuc__put64(out + 8, m->nrecs + 1u);
    cuc__put64(out + 16, total);
    cuc__put64(out + CUC__WIRE_HDR, type | (uint64_t)version << 16 | (uint64_t)plen << 32);
    cuc__put64(out + CUC__WIRE_HDR + 8, 0);
    memcpy(out + CUC__WIRE_HDR + CUC__WIRE_REC_HDR, payload, plen);
    memset(out + CUC__WIRE_HDR + CUC__WIRE_REC_HDR + plen, 0, lead - CUC__WIRE_REC_HDR - plen);
    *bytes = out;
    *len = total;
    return 0;
}
