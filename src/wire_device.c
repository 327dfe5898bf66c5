/* Device records: the UUID and nothing else (an ordinal would mean another
 * GPU in a process with other visibility). */
#include "internal.h"
#include "wire.h"

#include <string.h>

int cuc_msg_add_device(cuc_msg *m, const cuc_device *dev)
{
    if (!m || !dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_device: NULL argument");
    return cuc__msg_add_record_owned(m, CUC_RECORD_DEVICE, 1, dev->uuid.bytes, 16, NULL, 0);
}

int cuc_msg_get_device(const cuc_msg *m, size_t index, cuc_device **dev)
{
    struct cuc__record r;
    cuc_uuid u;
    int rc;

    if (!dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_device: dev is NULL");
    rc = cuc__msg_record(m, index, &r);
    if (rc)
        return rc;
    if (r.type != CUC_RECORD_DEVICE || r.len != 16)
        return cuc__seterr(CUC_E_INVALID, "record %zu is not a device (type %u)", index,
                           r.type);
    memcpy(u.bytes, r.payload, 16);
    return cuc_device_get_by_uuid(&u, dev);
}
