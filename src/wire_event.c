/* Event records: an IPC event as its driver handle and its device's UUID.
 * Payload (88 bytes): flags u32 (CUC_EVENT_*: IPC set, TIMING clear),
 * reserved u32 = 0 (checked by the decoder: its shape in wire.h), device
 * UUID[16], CUipcEventHandle[64]. */
#include "objects.h"

#include <string.h>

_Static_assert(CUC__EVENT_PAYLOAD == 88u, "update the event shape in wire.h");

#define WIRE_EVENT_FLAGS (CUC_EVENT_BLOCKING_SYNC | CUC_EVENT_IPC)

int cuc_msg_add_event(cuc_msg *m, const cuc_event *ev)
{
    uint8_t p[CUC__EVENT_PAYLOAD];
    CUipcEventHandle h;
    int rc;

    if (!m || !ev)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_event: NULL argument");
    if (!(ev->flags & CUC_EVENT_IPC))
        return cuc__seterr(CUC_E_NOT_SERIALIZABLE,
                           "the event (on device %s) was created without "
                           "CUC_EVENT_IPC: only an IPC event can cross processes; "
                           "create it with cuc_event_create(dev, CUC_EVENT_IPC, &ev)",
                           cuc_device_uuid_string(ev->dev));
    rc = cuc__event_ipc_handle(ev, &h);
    if (rc)
        return rc;
    cuc__put32(p, ev->flags & WIRE_EVENT_FLAGS);
    cuc__put32(p + 4, 0);
    memcpy(p + 8, cuc_device_uuid(ev->dev)->bytes, 16);
    memcpy(p + 24, h.reserved, sizeof(h.reserved));
    return cuc__msg_add_record(m, CUC_RECORD_EVENT, CUC_RECORD_EVENT_VERSION, p,
                               sizeof(p), NULL, 0);
}

int cuc__event_rec_parse(const cuc_msg *m, size_t index, struct cuc__event_rec *out)
{
    struct cuc__record r;
    uint32_t flags;
    int rc;

    rc = cuc__msg_record_of(m, index, CUC_RECORD_EVENT, &r);
    if (rc)
        return rc;
    if (r.len != CUC__EVENT_PAYLOAD)
        return cuc__seterr(CUC_E_BADMSG, "event record %zu has a %u-byte payload, "
                           "not %u", index, r.len, CUC__EVENT_PAYLOAD);
    flags = cuc__get32(r.payload);
    if (!(flags & CUC_EVENT_IPC) || (flags & ~WIRE_EVENT_FLAGS))
        return cuc__seterr(CUC_E_BADMSG, "event record %zu: flags 0x%x (payload "
                           "offset 0) must have CUC_EVENT_IPC and at most "
                           "CUC_EVENT_BLOCKING_SYNC besides", index, flags);
    out->flags = flags;
    memcpy(out->uuid.bytes, r.payload + 8, 16);
    memcpy(out->handle.reserved, r.payload + 24, sizeof(out->handle.reserved));
    return 0;
}

int cuc_msg_get_event(const cuc_msg *m, size_t index, cuc_event **event)
{
    struct cuc__event_rec rec;
    cuc_device *dev;
    cuc_event *ev;
    int rc;

    if (!m || !event)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_event: NULL argument");
    rc = cuc__event_rec_parse(m, index, &rec);
    if (rc)
        return rc;
    rc = cuc_device_get_by_uuid(&rec.uuid, &dev);
    if (rc)
        return rc;
    /* The driver need not open a handle in the process that made it; and
     * opening one twice would give two events for one. */
    ev = cuc__event_find_ipc(&rec.handle);
    if (ev) {
        *event = ev;
        return 0;
    }
    rc = cuc__event_open(dev, &rec.handle, &ev);
    if (rc)
        return rc;
    *event = ev;
    return 0;
}
