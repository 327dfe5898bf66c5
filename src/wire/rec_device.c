/* Device records: the 16-byte UUID and nothing else (an ordinal would name
 * another GPU in a process with other visibility). */
#include "wire/msg_impl.h"
#include "wire/records.h"
#include "base/error.h"

#include <string.h>

_Static_assert(CUC__DEVICE_PAYLOAD == sizeof(((cuc_uuid *)0)->bytes), "a device record is a UUID");

/* Inline where the record fits (msg_impl.h): the device record is the
 * smallest and most frequent, a round trip of one is a benchmark figure. */
int cuc__device_rec_put(cuc_msg *m, const cuc_uuid *uuid)
{
    if (CUC_LIKELY(cuc__msg_append_fits(m, CUC_RECORD_DEVICE, CUC_RECORD_DEVICE_VERSION,
                                        uuid->bytes, CUC__DEVICE_PAYLOAD)))
        return 0;
    return cuc__msg_add_record_owned(m, CUC_RECORD_DEVICE, CUC_RECORD_DEVICE_VERSION,
                                     uuid->bytes, sizeof(uuid->bytes), NULL, 0);
}

int cuc_msg_read_device(const cuc_msg *m, size_t index, cuc_uuid *uuid)
{
    struct cuc__record r;
    const uint8_t *p;
    int rc;

    if (!m || !uuid)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_device: NULL argument");
    p = cuc__msg_fixed_payload(m, index, CUC_RECORD_DEVICE, CUC__DEVICE_PAYLOAD);
    if (CUC_LIKELY(p != NULL)) {
        memcpy(uuid->bytes, p, CUC__DEVICE_PAYLOAD);
        return 0;
    }
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_DEVICE, CUC__DEVICE_PAYLOAD, 0, &r);
    if (rc)
        return rc;
    memcpy(uuid->bytes, r.payload, sizeof(uuid->bytes));
    return 0;
}
