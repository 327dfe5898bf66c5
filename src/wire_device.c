/* Device records: the 16-byte UUID and nothing else (an ordinal would name
 * another GPU in a process with other visibility). */
#include "internal.h"
#include "wire.h"

#include <string.h>

int cuc_msg_add_device(cuc_msg *m, const cuc_device *dev)
{
    if (!m || !dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_device: NULL argument");
    return cuc__msg_add_record_owned(m, CUC_RECORD_DEVICE, CUC_RECORD_DEVICE_VERSION,
                                     dev->uuid.bytes, sizeof(dev->uuid.bytes), NULL, 0);
}

int cuc_msg_get_device(const cuc_msg *m, size_t index, cuc_device **dev)
{
    struct cuc__record r;
    cuc_uuid u;
    int rc;

    if (!m || !dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_device: NULL argument");
    rc = cuc__msg_record_of(m, index, CUC_RECORD_DEVICE, &r);
    if (rc)
        return rc;
    if (r.len != sizeof(u.bytes))
        return cuc__seterr(CUC_E_BADMSG, "device record %zu has a %u-byte payload, "
                           "not a 16-byte UUID", index, r.len);
    memcpy(u.bytes, r.payload, sizeof(u.bytes));
    return cuc_device_get_by_uuid(&u, dev);
}
