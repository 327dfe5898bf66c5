/* Events in messages: an IPC event travels as its handle and its device's
 * UUID (wire/rec_event.c). Export fetches the handle once and makes the
 * event findable by it; import finds the event this process already has
 * for a handle, or opens it and publishes it (event.c's table). */
#include "exec/event.h"
#include "wire/records.h"

#include <pthread.h>
#include <string.h>

static pthread_mutex_t import_lock = PTHREAD_MUTEX_INITIALIZER;

/* ev's IPC handle: known, or fetched from the driver now and published. */
static int export_handle(cuc_event *ev, CUipcEventHandle *h)
{
    CUC__CTX_KEEP(guard);
    cuc_event *had;
    CUresult r;
    int rc;

    if (cuc__event_known_handle(ev, h))
        return 0;
    rc = cuc__device_activate(&guard, ev->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuIpcGetEventHandle(h, ev->cu);
    if (r != CUDA_SUCCESS)
        return cuc__event_err(r, "cuIpcGetEventHandle", ev);
    had = cuc__event_publish(ev, h, &rc);
    cuc_event_unref(had); /* a handle is one event's: not expected */
    return rc;
}

int cuc_msg_add_event(cuc_msg *m, const cuc_event *cev)
{
    cuc_event *ev = (cuc_event *)cev;
    struct cuc_event_record rec;
    CUipcEventHandle h;
    int rc;

    if (!m || !ev)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_event: NULL argument");
    if (!(ev->flags & CUC_EVENT_IPC))
        return cuc__seterr(CUC_E_NOT_SERIALIZABLE,
                           "the event (on device %s) was created without "
                           "CUC_EVENT_IPC: only an IPC event can cross processes; "
                           "create it with cuc_event_create(dev, CUC_EVENT_IPC, &ev)",
                           ev->dev->uuid_str);
    rc = export_handle(ev, &h);
    if (rc)
        return rc;
    rec.device = ev->dev->uuid;
    rec.flags = ev->flags;
    memcpy(rec.handle, h.reserved, sizeof(rec.handle));
    return cuc__event_rec_put(m, &rec);
}

/* Opens h on dev as a new imported event, published under h (or the event
 * another thread published first). */
static int import_handle(cuc_device *dev, const CUipcEventHandle *h, cuc_event **out)
{
    CUC__CTX_KEEP(guard);
    cuc_event *ev, *had;
    CUevent cu;
    CUresult r;
    int rc;

    rc = cuc__device_activate(&guard, dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuIpcOpenEventHandle(&cu, *h);
    if (r == CUDA_ERROR_INVALID_DEVICE)
        return cuc__badmsg("event record: the record names device %s (local ordinal %d) "
                           "but cuIpcOpenEventHandle refused the handle in that device's "
                           "context (CUDA_ERROR_INVALID_DEVICE): the event was made on "
                           "another GPU", dev->uuid_str, dev->ordinal);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuIpcOpenEventHandle", "IPC event of device %d (%s); "
                             "the sending process must keep the event alive",
                             dev->ordinal, dev->uuid_str);
    ev = cuc__event_wrap(dev, cu, CUC_EVENT_IPC, 1);
    if (!ev) {
        CUC_DRV->cuEventDestroy(cu);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an event");
    }
    had = cuc__event_publish(ev, h, &rc);
    if (had || rc) {
        cuc_event_unref(ev);
        if (rc)
            return rc;
        ev = had;
    }
    *out = ev;
    return 0;
}

int cuc_msg_get_event(const cuc_msg *m, size_t index, cuc_event **event)
{
    struct cuc_event_record rec;
    CUipcEventHandle h;
    cuc_device *dev;
    cuc_event *ev;
    int rc;

    if (!m || !event)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_event: NULL argument");
    rc = cuc_msg_read_event(m, index, &rec);
    if (!rc)
        rc = cuc_device_get_by_uuid(&rec.device, &dev);
    if (rc)
        return rc;
    memcpy(h.reserved, rec.handle, sizeof(h.reserved));
    /* The driver need not open a handle in the process that made it; and
     * opening one twice would give two events for one: imports take turns,
     * so that a handle is opened once however many threads ask. */
    pthread_mutex_lock(&import_lock);
    ev = cuc__event_find(&h);
    if (!ev)
        rc = import_handle(dev, &h, &ev);
    pthread_mutex_unlock(&import_lock);
    if (rc)
        return rc;
    if (ev->dev != dev) {
        rc = cuc__badmsg("event record %zu names device %s, but this process has the "
                         "event of that handle on device %s", index, dev->uuid_str,
                         ev->dev->uuid_str);
        cuc_event_unref(ev);
        return rc;
    }
    *event = ev;
    return 0;
}
