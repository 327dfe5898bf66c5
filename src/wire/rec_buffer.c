/* Buffer records: a buffer of an IPC pool as bytes. Payload (104 bytes):
 * pool id[16], size u64, offset u64 (0: a whole allocation; the decoder
 * checks it as a reserved field, the shape in record_types.h), lease id
 * u64 (never 0), export data[64]. A part of an allocation (a view,
 * cucore/memory.h) is a buffer view record (112 bytes): the same fields,
 * the offset meaningful, then the allocation's size u64, so that the
 * receiver can import the allocation without being told it separately and
 * check the part against it before touching anything. */
#include "wire/records.h"
#include "base/error.h"

#include <string.h>

_Static_assert(CUC__BUFFER_PAYLOAD == 104u, "update the buffer shape in record_types.h");
_Static_assert(CUC__BUFFER_VIEW_PAYLOAD == 112u,
               "update the buffer view shape in record_types.h");

/* A view record for a part of its allocation, else a plain one. */
static int is_view(const struct cuc_buffer_record *r)
{
    return r->offset != 0 || r->size != r->alloc_size;
}

void cuc__buffer_rec_write(const struct cuc_buffer_record *r, uint8_t *p)
{
    memcpy(p, r->pool_id, CUC_POOL_ID_LEN);
    cuc__put64(p + 16, r->size);
    cuc__put64(p + 24, r->offset);
    cuc__put64(p + 32, r->lease_id);
    memcpy(p + 40, r->export_data, CUC_BUFFER_EXPORT_LEN);
    if (is_view(r))
        cuc__put64(p + 104, r->alloc_size);
}

int cuc__buffer_rec_put(cuc_msg *m, const struct cuc_buffer_record *r)
{
    uint8_t p[CUC__BUFFER_VIEW_PAYLOAD];

    if (cuc_msg_record_count(m) >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u "
                           "records", CUC_MSG_MAX_RECORDS);
    cuc__buffer_rec_write(r, p);
    if (is_view(r))
        return cuc__msg_add_record(m, CUC_RECORD_BUFFER_VIEW, CUC_RECORD_BUFFER_VIEW_VERSION,
                                   p, CUC__BUFFER_VIEW_PAYLOAD, NULL, 0);
    return cuc__msg_add_record(m, CUC_RECORD_BUFFER, CUC_RECORD_BUFFER_VERSION, p,
                               CUC__BUFFER_PAYLOAD, NULL, 0);
}

int cuc__buffer_rec_add_leased(cuc_msg *m, int view, const struct cuc__lease_ops *ops,
                               void *obj, int held)
{
    if (view)
        return cuc__msg_add_leased(m, CUC_RECORD_BUFFER_VIEW, CUC_RECORD_BUFFER_VIEW_VERSION,
                                   CUC__BUFFER_VIEW_PAYLOAD, ops, obj, held);
    return cuc__msg_add_leased(m, CUC_RECORD_BUFFER, CUC_RECORD_BUFFER_VERSION,
                               CUC__BUFFER_PAYLOAD, ops, obj, held);
}

/* The part [off, off + size) of an allocation of alloc bytes, checked
 * without overflow: every field is the peer's. */
static int check_part(size_t index, uint64_t size, uint64_t off, uint64_t alloc)
{
    if (alloc == 0 || alloc > SIZE_MAX)
        return cuc__seterr(CUC_E_BADMSG, "buffer view record %zu: allocation size %llu "
                           "(payload offset 104) is not a buffer size", index,
                           (unsigned long long)alloc);
    if (size > alloc || off > alloc - size)
        return cuc__seterr(CUC_E_BADMSG, "buffer view record %zu: %llu bytes at offset "
                           "%llu (payload offsets 16, 24) do not fit in the %llu-byte "
                           "allocation it names", index, (unsigned long long)size,
                           (unsigned long long)off, (unsigned long long)alloc);
    return 0;
}

int cuc_msg_read_buffer(const cuc_msg *m, size_t index, struct cuc_buffer_record *out)
{
    struct cuc__record r;
    uint64_t size, off, lease, alloc;
    int rc, type = 0, view;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_buffer: NULL argument");
    (void)cuc_msg_record_type(m, index, &type);
    view = type == CUC_RECORD_BUFFER_VIEW;
    if (view)
        rc = cuc__msg_record_fixed(m, index, CUC_RECORD_BUFFER_VIEW,
                                   CUC__BUFFER_VIEW_PAYLOAD, 0, &r);
    else
        rc = cuc__msg_record_fixed(m, index, CUC_RECORD_BUFFER, CUC__BUFFER_PAYLOAD, 0, &r);
    if (rc)
        return rc;
    size = cuc__get64(r.payload + 16);
    off = cuc__get64(r.payload + 24);
    lease = cuc__get64(r.payload + 32);
    alloc = view ? cuc__get64(r.payload + 104) : size;
    if (size == 0 || size > SIZE_MAX)
        return cuc__seterr(CUC_E_BADMSG, "buffer record %zu: size %llu (payload offset "
                           "16) is not a buffer size", index, (unsigned long long)size);
    if (lease == 0)
        return cuc__seterr(CUC_E_BADMSG, "buffer record %zu: lease id 0 (payload "
                           "offset 32) is reserved", index);
    if (view && (rc = check_part(index, size, off, alloc)) != 0)
        return rc;
    memcpy(out->pool_id, r.payload, CUC_POOL_ID_LEN);
    out->size = size;
    out->offset = off;
    out->lease_id = lease;
    memcpy(out->export_data, r.payload + 40, CUC_BUFFER_EXPORT_LEN);
    out->alloc_size = alloc;
    return 0;
}
