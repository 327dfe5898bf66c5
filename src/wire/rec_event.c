/* Event records: an IPC event as its driver handle and its device's UUID.
 * Payload (88 bytes): flags u32 (CUC_EVENT_*: IPC set, TIMING clear),
 * reserved u32 = 0 (checked by the decoder: its shape in record_types.h),
 * device UUID[16], IPC handle[64]. */
#include "wire/records.h"
#include "base/error.h"

#include <string.h>

_Static_assert(CUC__EVENT_PAYLOAD == 88u, "update the event shape in record_types.h");

#define WIRE_EVENT_FLAGS (CUC_EVENT_BLOCKING_SYNC | CUC_EVENT_IPC)

int cuc__event_rec_put(cuc_msg *m, const struct cuc_event_record *r)
{
    uint8_t p[CUC__EVENT_PAYLOAD];

    cuc__put32(p, r->flags & WIRE_EVENT_FLAGS);
    cuc__put32(p + 4, 0);
    memcpy(p + 8, r->device.bytes, 16);
    memcpy(p + 24, r->handle, CUC_EVENT_HANDLE_LEN);
    return cuc__msg_add_record(m, CUC_RECORD_EVENT, CUC_RECORD_EVENT_VERSION, p,
                               sizeof(p), NULL, 0);
}

int cuc_msg_read_event(const cuc_msg *m, size_t index, struct cuc_event_record *out)
{
    struct cuc__record r;
    uint32_t flags;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_event: NULL argument");
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_EVENT, CUC__EVENT_PAYLOAD, 0, &r);
    if (rc)
        return rc;
    flags = cuc__get32(r.payload);
    if (!(flags & CUC_EVENT_IPC) || (flags & ~WIRE_EVENT_FLAGS))
        return cuc__seterr(CUC_E_BADMSG, "event record %zu: flags 0x%x (payload "
                           "offset 0) must have CUC_EVENT_IPC and at most "
                           "CUC_EVENT_BLOCKING_SYNC besides", index, flags);
    out->flags = flags;
    memcpy(out->device.bytes, r.payload + 8, 16);
    memcpy(out->handle, r.payload + 24, CUC_EVENT_HANDLE_LEN);
    return 0;
}
