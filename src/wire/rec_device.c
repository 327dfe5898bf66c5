/* Device records: the 16-byte UUID and nothing else (an ordinal would name
 * another GPU in a process with other visibility). */
#include "wire/records.h"
#include "base/error.h"

#include <string.h>

int cuc__device_rec_put(cuc_msg *m, const cuc_uuid *uuid)
{
    return cuc__msg_add_record_owned(m, CUC_RECORD_DEVICE, CUC_RECORD_DEVICE_VERSION,
                                     uuid->bytes, sizeof(uuid->bytes), NULL, 0);
}

int cuc_msg_read_device(const cuc_msg *m, size_t index, cuc_uuid *uuid)
{
    struct cuc__record r;
    int rc;

    if (!m || !uuid)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_device: NULL argument");
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_DEVICE, CUC__DEVICE_PAYLOAD, 0, &r);
    if (rc)
        return rc;
    memcpy(uuid->bytes, r.payload, sizeof(uuid->bytes));
    return 0;
}
