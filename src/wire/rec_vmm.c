/* VMM records: one fd per chunk beside the bytes; in the payload the handle
 * type, the counts, the exporter's lease id, the owner's and the peers'
 * UUIDs and the chunk sizes.
 *
 * Payload (40 + 16 * npeers + 8 * nchunks bytes):
 *   0  u32 handle type (CUC_VMM_HANDLE_POSIX_FD)
 *   4  u32 nchunks, = the record's fd count, 1..CUC_VMM_MAX_CHUNKS
 *   8  u32 npeers, 0..CUC_VMM_MAX_PEERS
 *   12 u32 reserved, 0 (checked by the decoder: the shape in record_types.h)
 *   16 u64 lease id, not 0
 *   24 owner UUID[16]
 *   40 peer UUIDs[16 * npeers]
 *   .. chunk sizes u64[nchunks] */
#include "wire/records.h"
#include "base/error.h"

#include <stdio.h>
#include <string.h>

_Static_assert(CUC__VMM_PAYLOAD_MAX == 9256u, "update the vmm shape in record_types.h");
_Static_assert(CUC__VMM_FIXED + 8u == 48u && CUC_VMM_MAX_CHUNKS == 1024u,
               "update the vmm shape in record_types.h");
_Static_assert(CUC_VMM_MAX_CHUNKS <= CUC_MSG_MAX_FDS, "chunks travel as fds");
_Static_assert(sizeof(cuc_uuid) == 16, "peer UUIDs are read in place");

int cuc__vmm_rec_room(const cuc_msg *m, size_t nchunks)
{
    if (cuc_msg_record_count(m) >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "the message already holds the maximum of %u "
                           "records", CUC_MSG_MAX_RECORDS);
    if (cuc_msg_fd_count(m) + nchunks > CUC_MSG_MAX_FDS)
        return cuc__seterr(CUC_E_LIMIT, "a VMM resource of %zu chunks needs %zu fds; "
                           "the message carries %zu of at most %u", nchunks,
                           nchunks, cuc_msg_fd_count(m), CUC_MSG_MAX_FDS);
    return 0;
}

int cuc__vmm_rec_put(cuc_msg *m, uint64_t lease_id, const cuc_uuid *owner,
                     const cuc_uuid *peers, size_t npeers, const size_t *sizes,
                     size_t nchunks, int *fds)
{
    uint8_t p[CUC__VMM_PAYLOAD_MAX];
    uint8_t *q = p + CUC__VMM_FIXED;
    size_t i;

    cuc__put32(p, CUC_VMM_HANDLE_POSIX_FD);
    cuc__put32(p + 4, (uint32_t)nchunks);
    cuc__put32(p + 8, (uint32_t)npeers);
    cuc__put32(p + 12, 0);
    cuc__put64(p + 16, lease_id);
    memcpy(p + 24, owner->bytes, 16);
    for (i = 0; i < npeers; i++, q += 16)
        memcpy(q, peers[i].bytes, 16);
    for (i = 0; i < nchunks; i++, q += 8)
        cuc__put64(q, sizes[i]);
    return cuc__msg_add_record_owned(m, CUC_RECORD_VMM, CUC_RECORD_VMM_VERSION, p,
                                     (uint32_t)(q - p), fds, (uint32_t)nchunks);
}

static int bad(size_t index, const char *fmt, ...) CUC_PRINTF(2, 3);
static int bad(size_t index, const char *fmt, ...)
{
    char what[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return cuc__seterr(CUC_E_BADMSG, "vmm record %zu: %s", index, what);
}

static int read_counts(const struct cuc__record *r, size_t index, struct cuc_vmm_record *o)
{
    uint32_t nchunks, npeers;
    uint64_t want;

    if (r->len < CUC__VMM_FIXED)
        return bad(index, "%u-byte payload is shorter than its %u-byte fixed part",
                   r->len, CUC__VMM_FIXED);
    o->handle_type = (int)cuc__get32(r->payload);
    nchunks = cuc__get32(r->payload + 4);
    npeers = cuc__get32(r->payload + 8);
    if (o->handle_type != CUC_VMM_HANDLE_POSIX_FD)
        return bad(index, "handle type %u (payload offset 0) is not one this cucore "
                   "imports (%u, POSIX fd)", cuc__get32(r->payload),
                   CUC_VMM_HANDLE_POSIX_FD);
    if (nchunks == 0 || nchunks > CUC_VMM_MAX_CHUNKS)
        return bad(index, "chunk count %u (payload offset 4) outside 1..%u", nchunks,
                   CUC_VMM_MAX_CHUNKS);
    if (nchunks != r->nfds)
        return bad(index, "chunk count %u (payload offset 4) but %u fds: one fd per "
                   "chunk", nchunks, r->nfds);
    if (npeers > CUC_VMM_MAX_PEERS)
        return bad(index, "peer count %u (payload offset 8) exceeds %u", npeers,
                   CUC_VMM_MAX_PEERS);
    want = CUC__VMM_FIXED + 16ull * npeers + 8ull * nchunks;
    if (r->len != want)
        return bad(index, "%u-byte payload; %u peers and %u chunks make %llu", r->len,
                   npeers, nchunks, (unsigned long long)want);
    o->nchunks = nchunks;
    o->npeers = npeers;
    return 0;
}

static int read_uuids(size_t index, const struct cuc_vmm_record *o)
{
    size_t i, j;

    for (i = 0; i < o->npeers; i++) {
        char text[CUC_UUID_STRLEN];
        cuc_uuid_format(&o->peers[i], text);
        if (cuc_uuid_equal(&o->peers[i], &o->owner))
            return bad(index, "peer %zu (payload offset %zu) is the owner, %s", i,
                       CUC__VMM_FIXED + 16 * i, text);
        for (j = 0; j < i; j++)
            if (cuc_uuid_equal(&o->peers[i], &o->peers[j]))
                return bad(index, "peers %zu and %zu are both %s", j, i, text);
    }
    return 0;
}

static int read_sizes(size_t index, struct cuc_vmm_record *o)
{
    size_t at = CUC__VMM_FIXED + 16 * o->npeers;
    uint64_t sum = 0;

    for (size_t i = 0; i < o->nchunks; i++) {
        uint64_t s = cuc_vmm_record_chunk_size(o, i);
        if (s == 0)
            return bad(index, "chunk %zu has size 0 (payload offset %zu)", i, at + 8 * i);
        if (__builtin_add_overflow(sum, s, &sum) || sum > CUC_VMM_MAX_BYTES)
            return bad(index, "chunk sizes 0..%zu (from payload offset %zu) add up to "
                       "more than %llu bytes", i, at,
                       (unsigned long long)CUC_VMM_MAX_BYTES);
    }
    o->total = sum;
    return 0;
}

uint64_t cuc_vmm_record_chunk_size(const struct cuc_vmm_record *rec, size_t i)
{
    if (!rec || i >= rec->nchunks)
        return 0;
    return cuc__get64((const uint8_t *)rec->sizes + 8 * i);
}

int cuc_msg_read_vmm(const cuc_msg *m, size_t index, struct cuc_vmm_record *out)
{
    struct cuc_vmm_record o;
    struct cuc__record r;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_vmm: NULL argument");
    rc = cuc__msg_record_of(m, index, CUC_RECORD_VMM, &r);
    if (!rc)
        rc = read_counts(&r, index, &o);
    if (rc)
        return rc;
    o.lease_id = cuc__get64(r.payload + 16);
    if (o.lease_id == 0)
        return bad(index, "lease id 0 (payload offset 16) is reserved");
    memcpy(o.owner.bytes, r.payload + 24, 16);
    o.peers = (const cuc_uuid *)(const void *)(r.payload + CUC__VMM_FIXED);
    o.sizes = r.payload + CUC__VMM_FIXED + 16 * o.npeers;
    rc = read_uuids(index, &o);
    if (!rc)
        rc = read_sizes(index, &o);
    if (rc)
        return rc;
    for (size_t i = 0; i < o.nchunks; i++)
        if (r.fds[i] < 0)
            return cuc__seterr(CUC_E_INVALID, "vmm record %zu: fd %zu was taken out of "
                               "the message", index, i);
    o.fds = r.fds;
    *out = o;
    return 0;
}
