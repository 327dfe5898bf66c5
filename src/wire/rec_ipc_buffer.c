/* Ipc buffer records: a part of memory shared by legacy CUDA IPC
 * (cuc_buffer_wrap, cucore/memory.h). Payload (144 bytes): device
 * UUID[16], exporter identity[16], generation u64, base size u64, offset
 * u64, size u64, lease id u64, handle type u32, reserved u32 (zero: the
 * shape in record_types.h), handle[64]. The generation is the exporter's
 * number for one wrapped base: the driver gives a base freed and
 * allocated again at the same address the same handle bytes, so the
 * importer keys what it opened on (exporter, generation), not on them. */
#include "wire/records.h"
#include "base/error.h"

#include <string.h>

_Static_assert(CUC__IPC_BUFFER_PAYLOAD == 144u,
               "update the ipc buffer shape in record_types.h");

int cuc__ipc_buffer_rec_put(cuc_msg *m, const struct cuc_ipc_buffer_record *r)
{
    uint8_t p[CUC__IPC_BUFFER_PAYLOAD];

    if (cuc_msg_record_count(m) >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "message already holds the maximum of %u "
                           "records", CUC_MSG_MAX_RECORDS);
    memcpy(p, r->device.bytes, 16);
    memcpy(p + 16, r->exporter, 16);
    cuc__put64(p + 32, r->generation);
    cuc__put64(p + 40, r->base_size);
    cuc__put64(p + 48, r->offset);
    cuc__put64(p + 56, r->size);
    cuc__put64(p + 64, r->lease_id);
    cuc__put32(p + 72, r->handle_type);
    cuc__put32(p + 76, 0);
    memcpy(p + 80, r->handle, CUC_IPC_HANDLE_LEN);
    return cuc__msg_add_record(m, CUC_RECORD_IPC_BUFFER, CUC_RECORD_IPC_BUFFER_VERSION, p,
                               CUC__IPC_BUFFER_PAYLOAD, NULL, 0);
}

/* Every field is the peer's: the part is checked without overflow. */
static int check_fields(size_t index, const struct cuc_ipc_buffer_record *r)
{
    if (r->handle_type != CUC_IPC_HANDLE_LEGACY)
        return cuc__seterr(CUC_E_VERSION, "ipc buffer record %zu: handle type %u "
                           "(payload offset 72) is not one this cucore knows (1: legacy "
                           "CUDA IPC)", index, r->handle_type);
    if (r->generation == 0 || r->lease_id == 0)
        return cuc__seterr(CUC_E_BADMSG, "ipc buffer record %zu: %s 0 (payload offset "
                           "%d) is reserved", index, r->generation ? "lease id" :
                           "generation", r->generation ? 64 : 32);
    if (r->base_size == 0 || r->base_size > SIZE_MAX)
        return cuc__seterr(CUC_E_BADMSG, "ipc buffer record %zu: base size %llu (payload "
                           "offset 40) is not a buffer size", index,
                           (unsigned long long)r->base_size);
    if (r->size == 0 || r->size > r->base_size || r->offset > r->base_size - r->size)
        return cuc__seterr(CUC_E_BADMSG, "ipc buffer record %zu: %llu bytes at offset "
                           "%llu (payload offsets 56, 48) do not fit in the %llu-byte "
                           "allocation it names", index, (unsigned long long)r->size,
                           (unsigned long long)r->offset,
                           (unsigned long long)r->base_size);
    return 0;
}

int cuc_msg_read_ipc_buffer(const cuc_msg *m, size_t index,
                            struct cuc_ipc_buffer_record *out)
{
    struct cuc_ipc_buffer_record r;
    struct cuc__record rec;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_ipc_buffer: NULL argument");
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_IPC_BUFFER, CUC__IPC_BUFFER_PAYLOAD,
                               0, &rec);
    if (rc)
        return rc;
    memcpy(r.device.bytes, rec.payload, 16);
    memcpy(r.exporter, rec.payload + 16, 16);
    r.generation = cuc__get64(rec.payload + 32);
    r.base_size = cuc__get64(rec.payload + 40);
    r.offset = cuc__get64(rec.payload + 48);
    r.size = cuc__get64(rec.payload + 56);
    r.lease_id = cuc__get64(rec.payload + 64);
    r.handle_type = cuc__get32(rec.payload + 72);
    memcpy(r.handle, rec.payload + 80, CUC_IPC_HANDLE_LEN);
    rc = check_fields(index, &r);
    if (!rc)
        *out = r;
    return rc;
}
