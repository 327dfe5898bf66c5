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

/* A record that is not a plain device record at index (or no record): the
 * checked read, which names what it is. */
static CUC_COLD int rec_uuid_checked(const cuc_msg *m, size_t index, const cuc_uuid **uuid)
{
    struct cuc__record r;
    int rc = cuc__msg_record_fixed(m, index, CUC_RECORD_DEVICE, CUC__DEVICE_PAYLOAD, 0, &r);

    if (rc)
        return rc;
    *uuid = (const cuc_uuid *)r.payload;
    return 0;
}

int cuc__device_rec_uuid(const cuc_msg *m, size_t index, const cuc_uuid **uuid)
{
    const uint8_t *p = cuc__msg_fixed_payload(m, index, CUC_RECORD_DEVICE, CUC__DEVICE_PAYLOAD);

    if (CUC_LIKELY(p != NULL)) {
        *uuid = (const cuc_uuid *)p;
        return 0;
    }
    return rec_uuid_checked(m, index, uuid);
}

int cuc_msg_read_device(const cuc_msg *m, size_t index, cuc_uuid *uuid)
{
    const cuc_uuid *u;
    int rc;

    if (!m || !uuid)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_device: NULL argument");
    rc = cuc__device_rec_uuid(m, index, &u);
    if (rc)
        return rc;
    memcpy(uuid->bytes, u->bytes, sizeof(uuid->bytes));
    return 0;
}
