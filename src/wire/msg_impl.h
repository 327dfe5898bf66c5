/* The message object, shared by msg.c (building and viewing), encode.c,
 * decode.c and the readers and writers of the smallest records (their
 * inline fast paths below); no file outside wire/ sees it. */
#ifndef CUC_WIRE_MSG_IMPL_H
#define CUC_WIRE_MSG_IMPL_H

#include "wire/wire.h"
#include "base/compiler.h"

#include <string.h>

#define CUC__MSG_INLINE_RECS 4
#define CUC__MSG_INLINE_FDS 4
#define CUC__MSG_INLINE_DATA 128

struct cuc__wire_rec {
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
    struct cuc__wire_rec *recs;
    uint8_t *data;
    int *fds;
    uint32_t nrecs, rec_cap;
    uint32_t nfds, fd_cap;
    uint32_t fds_owned; /* entries of fds that are not -1 */
    uint32_t nrelease;  /* release records, at most CUC__RELEASE_MAX_RECORDS */
    uint32_t types;     /* bit t set: a record of type t (< 32) is in it */
    size_t data_len, data_cap;
    void *data_block; /* the buffer data lies in when a decode adopted it, else NULL */
    size_t wire_len; /* encoded size */
    struct cuc__lease_att *atts; /* objects kept, leases to begin when sent */
    size_t natts, att_cap;
    struct cuc__ref *origin; /* the lease table it arrived from (a reference) */
    const struct cuc__origin_ops *origin_ops; /* what origin offers, or NULL */
    struct cuc__wire_rec rec_inline[CUC__MSG_INLINE_RECS];
    int fd_inline[CUC__MSG_INLINE_FDS];
    _Alignas(8) uint8_t data_inline[CUC__MSG_INLINE_DATA];
};

#define CUC__WIRE_MAGIC 0x4d435543u /* "CUCM" in little-endian byte order */

static inline size_t cuc__pad8(size_t n)
{
    return (n + 7u) & ~(size_t)7u;
}

/* A fresh, empty message (the thread's spare struct when it has one). */
cuc_msg *cuc__msg_new(void);
/* Makes room for need records, fds, data bytes (the arrays grown by
 * cuc__msg_grow when they must; inline, as a message that fits is the
 * rule). */
int cuc__msg_grow(cuc_msg *m, size_t nrecs, size_t nfds, size_t data_len);
static inline int cuc__msg_reserve(cuc_msg *m, size_t nrecs, size_t nfds, size_t data_len)
{
    if (CUC_LIKELY(nrecs <= m->rec_cap && nfds <= m->fd_cap && data_len <= m->data_cap))
        return 0;
    return cuc__msg_grow(m, nrecs, nfds, data_len);
}
/* The shape of type, or NULL for a type this cucore does not know. */
struct cuc__rec_shape {
    uint16_t type, version;
    uint32_t min_len, max_len, multiple, min_fds, max_fds;
    uint32_t rsv_off, rsv_len; /* a reserved field that must be zero */
};
extern const struct cuc__rec_shape cuc__rec_shapes[];
extern const unsigned cuc__rec_nshapes;
static inline const struct cuc__rec_shape *cuc__rec_shape_of(unsigned type)
{
    if (type >= cuc__rec_nshapes || cuc__rec_shapes[type].version == 0)
        return NULL;
    return &cuc__rec_shapes[type];
}

/* Appends a record of len bytes (no fds, no reserved field, not a release
 * record) when it fits the message's current arrays and limits: 1 done,
 * 0 the caller takes cuc__msg_add_record_owned, which checks and names
 * everything. With a constant len the copy inlines: a device record's
 * whole add is this. */
static inline int cuc__msg_append_fits(cuc_msg *m, uint16_t type, uint16_t version,
                                       const void *payload, uint32_t len)
{
    size_t off = cuc__pad8(m->data_len);
    struct cuc__wire_rec *r;

    if (CUC_UNLIKELY(m->nrecs >= m->rec_cap || m->nrecs >= CUC_MSG_MAX_RECORDS ||
                     off + len > m->data_cap ||
                     m->wire_len + CUC__WIRE_REC_HDR + cuc__pad8(len) > CUC_MSG_MAX_BYTES))
        return 0;
    r = &m->recs[m->nrecs++];
    r->type = type;
    r->version = version;
    r->len = len;
    r->off = (uint32_t)off;
    r->fd_first = 0;
    r->nfds = 0;
    memcpy(m->data + off, payload, len);
    m->data_len = off + len;
    m->types |= type < 32 ? 1u << type : 0;
    m->wire_len += CUC__WIRE_REC_HDR + cuc__pad8(len);
    return 1;
}

/* The payload of record index when it is of type, len bytes and no fds,
 * else NULL (the caller takes cuc__msg_record_fixed for the message). */
static inline const uint8_t *cuc__msg_fixed_payload(const cuc_msg *m, size_t index,
                                                    unsigned type, uint32_t len)
{
    const struct cuc__wire_rec *r;

    if (CUC_UNLIKELY(index >= m->nrecs))
        return NULL;
    r = &m->recs[index];
    if (CUC_UNLIKELY(r->type != type || r->len != len || r->nfds != 0))
        return NULL;
    return m->data + r->off;
}

#endif
