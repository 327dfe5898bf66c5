/* Buffer records: a buffer of an IPC pool as bytes. Payload (104 bytes):
 * pool id[16], size u64, offset u64 (0: no sub-buffer views yet; the
 * decoder checks it as a reserved field, the shape in record_types.h),
 * lease id u64 (never 0), export data[64]. */
#include "wire/records.h"
#include "base/error.h"

#include <string.h>

_Static_assert(CUC__BUFFER_PAYLOAD == 104u, "update the buffer shape in record_types.h");

int cuc__buffer_rec_put(cuc_msg *m, const struct cuc_buffer_record *r)
{
    uint8_t p[CUC__BUFFER_PAYLOAD];

    if (cuc_msg_record_count(m) >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u "
                           "records", CUC_MSG_MAX_RECORDS);
    memcpy(p, r->pool_id, CUC_POOL_ID_LEN);
    cuc__put64(p + 16, r->size);
    cuc__put64(p + 24, r->offset);
    cuc__put64(p + 32, r->lease_id);
    memcpy(p + 40, r->export_data, CUC_BUFFER_EXPORT_LEN);
    return cuc__msg_add_record(m, CUC_RECORD_BUFFER, CUC_RECORD_BUFFER_VERSION, p,
                               sizeof(p), NULL, 0);
}

int cuc_msg_read_buffer(const cuc_msg *m, size_t index, struct cuc_buffer_record *out)
{
    struct cuc__record r;
    uint64_t size, off, lease;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_buffer: NULL argument");
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_BUFFER, CUC__BUFFER_PAYLOAD, 0, &r);
    if (rc)
        return rc;
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
    memcpy(out->export_data, r.payload + 40, CUC_BUFFER_EXPORT_LEN);
    return 0;
}
