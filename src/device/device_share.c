/* Devices in messages: a device travels as its UUID (wire/rec_device.c)
 * and resolves to the local device with that UUID. */
#include "device/device.h"
#include "wire/records.h"

int cuc_msg_add_device(cuc_msg *m, const cuc_device *dev)
{
    if (!m || !dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_device: NULL argument");
    return cuc__device_rec_put(m, &dev->uuid);
}

int cuc_msg_get_device(const cuc_msg *m, size_t index, cuc_device **dev)
{
    const cuc_uuid *u;
    int rc;

    if (!m || !dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_device: NULL argument");
    rc = cuc__device_rec_uuid(m, index, &u);
    if (rc)
        return rc;
    return cuc_device_get_by_uuid(u, dev);
}
