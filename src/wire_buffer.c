/* Buffer records: a buffer of an IPC pool as bytes (docs/wire-format.md).
 * Payload (104 bytes): pool id[16], size u64, offset u64 (0: no sub-buffer
 * views yet; the decoder checks it as a reserved field, the shape in
 * wire.h), lease id u64 (never 0), CUmemPoolPtrExportData[64]. */
#include "memory_impl.h"
#include "lease.h"

#include <string.h>

_Static_assert(CUC__BUFFER_PAYLOAD == 104u, "update the buffer shape in wire.h");

int cuc_msg_add_buffer(cuc_msg *m, const cuc_buffer *cb)
{
    cuc_buffer *b = (cuc_buffer *)cb;
    uint8_t p[CUC__BUFFER_PAYLOAD];
    CUmemPoolPtrExportData d;
    uint64_t id;
    int rc;

    if (!m || !b)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_buffer: NULL argument");
    rc = cuc__buffer_export(b, &d);
    if (rc)
        return rc;
    if (cuc_msg_count(m) >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u "
                           "records", CUC_MSG_MAX_RECORDS);
    id = cuc__lease_id_next();
    memcpy(p, b->pool->id, CUC_POOL_ID_LEN);
    cuc__put64(p + 16, (uint64_t)b->size);
    cuc__put64(p + 24, 0);
    cuc__put64(p + 32, id);
    memcpy(p + 40, d.reserved, sizeof(d.reserved));
    /* The lease first: a record without its lease would let the memory go
     * while the importer maps it. */
    rc = cuc__msg_lease_attach(m, id, &cuc__buffer_lease_ops, b);
    if (rc)
        return rc;
    rc = cuc__msg_add_record(m, CUC_RECORD_BUFFER, CUC_RECORD_BUFFER_VERSION, p,
                             sizeof(p), NULL, 0);
    if (rc)
        cuc__msg_lease_pop(m); /* no record: nothing to lease */
    return rc;
}

int cuc__buffer_rec_parse(const cuc_msg *m, size_t index, struct cuc__buffer_rec *out)
{
    struct cuc__record r;
    uint64_t size, off, lease;
    int rc;

    rc = cuc__msg_record_of(m, index, CUC_RECORD_BUFFER, &r);
    if (rc)
        return rc;
    if (r.len != CUC__BUFFER_PAYLOAD || r.nfds)
        return cuc__seterr(CUC_E_BADMSG, "buffer record %zu has a %u-byte payload and "
                           "%u fds, not %u and none", index, r.len, r.nfds,
                           CUC__BUFFER_PAYLOAD);
    size = cuc__get64(r.payload + 16);
    off = cuc__get64(r.payload + 24);
    lease = cuc__get64(r.payload + 32);
    if (size == 0 || size > SIZE_MAX)
        return cuc__seterr(CUC_E_BADMSG, "buffer record %zu: size %llu (payload offset "
                           "16) is not a buffer size", index, (unsigned long long)size);
    if (lease == 0)
        return cuc__seterr(CUC_E_BADMSG, "buffer record %zu: lease id 0 (payload "
                           "offset 32) is reserved", index);
    memcpy(out->pool_id, r.payload, CUC_POOL_ID_LEN);
    out->size = size;
    out->offset = off;
    out->lease_id = lease;
    memcpy(out->data.reserved, r.payload + 40, sizeof(out->data.reserved));
    return 0;
}

int cuc_msg_get_buffer(const cuc_msg *m, size_t index, cuc_buffer **out)
{
    struct cuc__buffer_rec rec;
    struct cuc__upstream up;
    char hex[2 * CUC_POOL_ID_LEN + 1];
    cuc_pool *pool;
    cuc_buffer *b;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_buffer: NULL argument");
    rc = cuc__buffer_rec_parse(m, index, &rec);
    if (rc)
        return rc;
    pool = cuc__pool_registry_find(rec.pool_id);
    if (!pool) {
        cuc__pool_id_hex(rec.pool_id, hex);
        return cuc__seterr(CUC_E_POOL_NOT_IMPORTED, "buffer record %zu belongs to pool "
                           "%s, which this process has not imported: get the pool's "
                           "record (cuc_msg_get_pool) first; the sender must send the "
                           "pool before its buffers", index, hex);
    }
    up.ch = cuc__msg_channel(m);
    up.id = rec.lease_id;
    if (up.ch)
        cuc__channel_ref(up.ch);
    rc = cuc__buffer_import(pool, &rec.data, (size_t)rec.size, &up, &b);
    if (rc && up.ch)
        cuc__channel_unref(up.ch);
    cuc_pool_unref(pool);
    if (!rc)
        *out = b;
    return rc;
}
