/* Pool records: an IPC pool as its fd, id, owner UUID, kind and handle
 * type. Payload (40 bytes): pool id[16], owner device UUID[16], kind u32
 * (enum cuc_pool_kind), handle type u32 (enum cuc_pool_handle_type); one
 * fd. */
#include "wire/records.h"
#include "base/error.h"

#include <string.h>

_Static_assert(CUC__POOL_PAYLOAD == 40u, "update the pool shape in record_types.h");

int cuc__pool_rec_put(cuc_msg *m, const struct cuc_pool_record *r)
{
    uint8_t p[CUC__POOL_PAYLOAD];

    memcpy(p, r->id, CUC_POOL_ID_LEN);
    memcpy(p + 16, r->owner.bytes, 16);
    cuc__put32(p + 32, (uint32_t)r->kind);
    cuc__put32(p + 36, (uint32_t)r->handle_type);
    return cuc__msg_add_record(m, CUC_RECORD_POOL, CUC_RECORD_POOL_VERSION, p, sizeof(p),
                               &r->fd, 1);
}

int cuc_msg_read_pool(const cuc_msg *m, size_t index, struct cuc_pool_record *out)
{
    struct cuc__record r;
    uint32_t kind, ht;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_pool: NULL argument");
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_POOL, CUC__POOL_PAYLOAD, 1, &r);
    if (rc)
        return rc;
    kind = cuc__get32(r.payload + 32);
    if (kind != CUC_POOL_DEVICE && kind != CUC_POOL_PINNED_HOST)
        return cuc__seterr(CUC_E_BADMSG, "pool record %zu: kind %u (payload offset 32) "
                           "is neither device (%d) nor pinned host (%d)", index, kind,
                           CUC_POOL_DEVICE, CUC_POOL_PINNED_HOST);
    ht = cuc__get32(r.payload + 36);
    if (ht != CUC_POOL_HANDLE_POSIX_FD)
        return cuc__seterr(CUC_E_BADMSG, "pool record %zu: handle type %u (payload "
                           "offset 36) is not POSIX fd (%d), the only one this cucore "
                           "reads", index, ht, CUC_POOL_HANDLE_POSIX_FD);
    memcpy(out->id, r.payload, CUC_POOL_ID_LEN);
    memcpy(out->owner.bytes, r.payload + 16, 16);
    out->kind = (int)kind;
    out->handle_type = (int)ht;
    out->fd = r.fds[0];
    return 0;
}
