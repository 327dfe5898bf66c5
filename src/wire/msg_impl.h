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

/* A record as the message keeps it: its header's fields in their wire
 * order (on a little-endian host the first 16 bytes are the header's
 * bytes, copied as they are by the encoder and the decoder), then where
 * its payload lies. */
struct cuc__wire_rec {
    uint16_t type;
    uint16_t version;
    uint32_t len;
    uint32_t fd_first; /* index into the fd table */
    uint32_t nfds;
    uint32_t off; /* payload offset in the data arena, or a deferred
                     record's attachment (CUC__REC_DEFERRED) */
};
/* off of a record whose payload is not kept: its attachment (the index in
 * the low bits) writes it when the message is encoded or first read
 * (cuc__msg_add_leased). Arena offsets stay below 2^31: a message is at
 * most CUC_MSG_MAX_BYTES. */
#define CUC__REC_DEFERRED 0x80000000u
/* The longest payload a deferred record may have. */
#define CUC__DEFERRED_MAX 112u
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define CUC__WIRE_REC_AS_BYTES 1
#else
#define CUC__WIRE_REC_AS_BYTES 0
#endif

/* What a message holds beyond its inline storage (cuc_msg.holds): a
 * message with none of these and no fds is destroyed by handing it back
 * to the thread's cache, with no test of each resource. A bit is set when
 * the thing is taken and never cleared before the destroy, which frees
 * whatever is there. */
#define CUC__MSG_HOLDS_HEAP 1u   /* an array may have moved to the heap */
#define CUC__MSG_HOLDS_BLOCK 2u  /* data lies in an adopted block */
#define CUC__MSG_HOLDS_ATTS 4u   /* an attachment array */
#define CUC__MSG_HOLDS_ORIGIN 8u /* a reference to a lease table */
#define CUC__MSG_HOLDS_GATE 16u  /* a reference to a gate */

/* Arrays start in the inline storage, so that a small message costs one
 * malloc; they move to the heap when they outgrow it. The storage fields
 * (the arrays, their capacities, atts, origin) of a message in the
 * thread's cache are those of a fresh one: cuc__msg_new sets only the
 * counts. */
struct cuc_msg {
    struct cuc__wire_rec *recs;
    uint8_t *data;
    int *fds;
    uint32_t rec_cap, fd_cap;
    size_t data_cap;
    void *data_block; /* the buffer data lies in when a decode adopted it, else NULL */
    struct cuc__lease_att *atts; /* objects kept, leases to begin when sent */
    size_t natts, att_cap;
    struct cuc__ref *origin; /* the lease table it arrived from (a reference) */
    struct cuc__ref *gate;   /* what its leases wait for (a reference), or NULL */
    void (*gate_done)(struct cuc__ref *gate, const cuc_msg *m);
    struct cuc__locals *locals; /* objects some records resolve to here, or NULL */
    /* the counts, reset by cuc__msg_new */
    uint32_t nrecs, nfds;
    uint32_t fds_owned; /* entries of fds that are not -1 */
    uint32_t nrelease;  /* release records, at most CUC__RELEASE_MAX_RECORDS */
    uint32_t nrefused;  /* refused records, at most CUC__REFUSED_MAX_RECORDS */
    uint32_t nclaim;    /* claim and confirm records, at most CUC__CLAIM_MAX_RECORDS */
    uint32_t types;     /* bit t set: a record of type t (< 32) is in it */
    uint32_t holds;     /* CUC__MSG_HOLDS_* */
    size_t data_len;
    size_t wire_len; /* encoded size */
    const struct cuc__origin_ops *origin_ops; /* what origin offers, or NULL */
    /* the payloads of the deferred records, written by the first reader
     * of one (a slot of CUC__DEFERRED_MAX bytes per attachment then), or
     * NULL; freed by the destroy. Set once, atomically: readers may share
     * a message. */
    uint8_t *side;
    /* a bit a record: a reader took the record's lease into an object
     * (wire.h: cuc__msg_taken), or NULL before the first; set once,
     * atomically, and freed by the destroy (only a message with an
     * origin is marked: it is destroyed through destroy_holding) */
    uint8_t *taken;
    uint64_t lease_block; /* its attachments' lease ids' block (wire.h), once it has one */
    struct cuc__wire_rec rec_inline[CUC__MSG_INLINE_RECS];
    int fd_inline[CUC__MSG_INLINE_FDS];
    _Alignas(8) uint8_t data_inline[CUC__MSG_INLINE_DATA];
};

#define CUC__WIRE_MAGIC 0x4d435543u /* "CUCM" in little-endian byte order */

static inline size_t cuc__pad8(size_t n)
{
    return (n + 7u) & ~(size_t)7u;
}

/* The thread's spare message (msg.c): storage fresh, counts not. */
struct cuc__msg_cache {
    cuc_msg *spare;  /* or NULL */
    int registered; /* the thread's key is set: a spare is freed at its exit */
};
extern _Thread_local struct cuc__msg_cache cuc__msg_cache;
/* A fresh message from malloc, its counts not set; NULL when out of memory. */
cuc_msg *cuc__msg_alloc(void);

/* A fresh, empty message (the thread's spare struct when it has one);
 * inline: every create and decode starts here. */
static inline cuc_msg *cuc__msg_new(void)
{
    cuc_msg *m = cuc__msg_cache.spare;

    if (CUC_LIKELY(m != NULL))
        cuc__msg_cache.spare = NULL;
    else if (!(m = cuc__msg_alloc()))
        return NULL;
    m->nrecs = 0;
    m->nfds = 0;
    m->fds_owned = 0;
    m->nrelease = 0;
    m->nrefused = 0;
    m->nclaim = 0;
    m->types = 0;
    m->holds = 0;
    m->data_len = 0;
    m->wire_len = CUC__WIRE_HDR;
    m->origin_ops = NULL;
    return m;
}
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
    /* For a type of one payload length (a multiple of 8) and no fds, the
     * first 8 bytes of its record header at the newest version (type,
     * version, length; the fd words are 0): a record that starts so is
     * within the shape but for its reserved field. ~0 for other types,
     * and for refused records, which the decoder counts (a cap). */
    uint64_t fixed_hdr;
};
/* The highest record type + 1: the shape table's length. */
#define CUC__REC_NSHAPES 20u
extern const struct cuc__rec_shape cuc__rec_shapes[CUC__REC_NSHAPES];
static inline const struct cuc__rec_shape *cuc__rec_shape_of(unsigned type)
{
    if (type >= CUC__REC_NSHAPES || cuc__rec_shapes[type].version == 0)
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
    if (CUC_UNLIKELY(r->type != type || r->len != len || r->nfds != 0 ||
                     (r->off & CUC__REC_DEFERRED)))
        return NULL;
    return m->data + r->off;
}

/* The payload of deferred record r to p (its padded length; the writer
 * fills len bytes, the pad is zeroed here). */
static inline void cuc__msg_put_deferred(const cuc_msg *m, const struct cuc__wire_rec *r,
                                         uint8_t *p)
{
    const struct cuc__lease_att *a = &m->atts[r->off & ~CUC__REC_DEFERRED];

    a->ops->put(a->obj, r->type, a->id, p);
    if (r->len & 7u)
        memset(p + r->len, 0, 8u - (r->len & 7u));
}
/* The payload of deferred record w, for a reader: CUC_E_NOMEM when the
 * side arena cannot be had. */
int cuc__msg_deferred_payload(const cuc_msg *m, const struct cuc__wire_rec *w,
                              const uint8_t **payload);

#endif
