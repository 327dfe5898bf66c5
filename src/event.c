/* Events, reference counting, and the registry of events whose IPC handle
 * is known here (created here and sent, or opened here), so that getting a
 * handle this process already has returns that event. */
#include "objects.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KNOWN_FLAGS (CUC_EVENT_TIMING | CUC_EVENT_BLOCKING_SYNC | CUC_EVENT_IPC)

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static cuc_event *registry; /* events with have_ipc set */

static unsigned driver_flags(unsigned flags)
{
    unsigned f = CU_EVENT_DEFAULT;

    if (!(flags & CUC_EVENT_TIMING))
        f |= CU_EVENT_DISABLE_TIMING;
    if (flags & CUC_EVENT_BLOCKING_SYNC)
        f |= CU_EVENT_BLOCKING_SYNC;
    if (flags & CUC_EVENT_IPC)
        f |= CU_EVENT_INTERPROCESS;
    return f;
}

static int event_err(CUresult r, const char *call, const cuc_event *ev)
{
    return cuc__cuda_err(r, call, "%sevent on device %d (%s)",
                         ev->opened ? "opened IPC " : "", cuc_device_ordinal(ev->dev),
                         cuc_device_uuid_string(ev->dev));
}

static cuc_event *event_new(cuc_device *dev, CUevent cu, unsigned flags, int opened)
{
    cuc_event *ev = calloc(1, sizeof(*ev));

    if (!ev)
        return NULL;
    ev->dev = dev;
    ev->cu = cu;
    ev->flags = flags;
    ev->opened = opened;
    ev->refs = 1;
    return ev;
}

int cuc_event_create(cuc_device *dev, unsigned flags, cuc_event **out)
{
    cuc_event *ev;
    CUevent cu;
    CUresult r;
    int rc;

    if (!dev || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_create: NULL argument");
    if (flags & ~KNOWN_FLAGS)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_create: unknown flags 0x%x",
                           flags & ~KNOWN_FLAGS);
    if ((flags & CUC_EVENT_IPC) && (flags & CUC_EVENT_TIMING))
        return cuc__seterr(CUC_E_INVALID, "cuc_event_create: CUC_EVENT_IPC cannot be "
                           "combined with CUC_EVENT_TIMING: the driver requires "
                           "interprocess events to record no time "
                           "(CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING); "
                           "drop CUC_EVENT_TIMING, or time with a second, local event");
    rc = cuc__device_activate(dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventCreate(&cu, driver_flags(flags));
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuEventCreate", "flags 0x%x on device %d (%s)",
                             flags, cuc_device_ordinal(dev), cuc_device_uuid_string(dev));
    ev = event_new(dev, cu, flags, 0);
    if (!ev) {
        CUC_DRV->cuEventDestroy(cu);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an event");
    }
    *out = ev;
    return 0;
}

static void registry_remove(cuc_event *ev)
{
    cuc_event **pp;

    for (pp = &registry; *pp; pp = &(*pp)->next)
        if (*pp == ev) {
            *pp = ev->next;
            return;
        }
}

void cuc_event_destroy(cuc_event *ev)
{
    int last;

    if (!ev)
        return;
    pthread_mutex_lock(&registry_lock);
    last = --ev->refs == 0;
    if (last && ev->have_ipc)
        registry_remove(ev);
    pthread_mutex_unlock(&registry_lock);
    if (!last)
        return;
    if (cuc__device_activate(ev->dev) == 0)
        CUC_DRV->cuEventDestroy(ev->cu);
    free(ev);
}

int cuc_event_record(cuc_event *ev, cuc_stream *s)
{
    CUresult r;
    int rc;

    if (!ev || !s)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_record: NULL argument");
    if (s->dev != ev->dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_record: the event belongs to "
                           "device %d (%s), the stream to device %d (%s): record on a "
                           "stream of the event's device", cuc_device_ordinal(ev->dev),
                           cuc_device_uuid_string(ev->dev), cuc_device_ordinal(s->dev),
                           cuc_device_uuid_string(s->dev));
    rc = cuc__device_activate(ev->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventRecord(ev->cu, s->cu);
    if (r != CUDA_SUCCESS)
        return event_err(r, "cuEventRecord", ev);
    return 0;
}

int cuc_event_synchronize(cuc_event *ev)
{
    CUresult r;
    int rc;

    if (!ev)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_synchronize: event is NULL");
    rc = cuc__device_activate(ev->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventSynchronize(ev->cu);
    if (r != CUDA_SUCCESS)
        return event_err(r, "cuEventSynchronize", ev);
    return 0;
}

int cuc_event_query(cuc_event *ev, int *done)
{
    CUresult r;
    int rc;

    if (!ev || !done)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_query: NULL argument");
    rc = cuc__device_activate(ev->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventQuery(ev->cu);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) {
        *done = r == CUDA_SUCCESS;
        return 0;
    }
    return event_err(r, "cuEventQuery", ev);
}

int cuc_event_elapsed_ms(cuc_event *start, cuc_event *end, float *ms)
{
    float v = 0;
    CUresult r;
    int rc;

    if (!start || !end || !ms)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_elapsed_ms: NULL argument");
    if (!(start->flags & CUC_EVENT_TIMING) || !(end->flags & CUC_EVENT_TIMING))
        return cuc__seterr(CUC_E_INVALID, "cuc_event_elapsed_ms: the %s event was "
                           "created without CUC_EVENT_TIMING%s",
                           !(start->flags & CUC_EVENT_TIMING) ? "start" : "end",
                           (start->opened || end->opened)
                               ? " (an opened IPC event never records time)" : "");
    rc = cuc__device_activate(start->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventElapsedTime(&v, start->cu, end->cu);
    if (r == CUDA_ERROR_NOT_READY)
        return cuc__seterr(CUC_E_BUSY, "cuc_event_elapsed_ms: an event has not "
                           "completed yet (cuEventElapsedTime: CUDA_ERROR_NOT_READY); "
                           "synchronize on the end event first");
    if (r != CUDA_SUCCESS)
        return event_err(r, "cuEventElapsedTime", start);
    *ms = v;
    return 0;
}

int cuc__event_ipc_handle(const cuc_event *cev, CUipcEventHandle *h)
{
    cuc_event *ev = (cuc_event *)cev;
    CUresult r = CUDA_SUCCESS;
    int rc;

    pthread_mutex_lock(&registry_lock);
    if (!ev->have_ipc) {
        rc = cuc__device_activate(ev->dev);
        if (rc) {
            pthread_mutex_unlock(&registry_lock);
            return rc;
        }
        r = CUC_DRV->cuIpcGetEventHandle(&ev->ipc, ev->cu);
        if (r == CUDA_SUCCESS) {
            ev->have_ipc = 1;
            ev->next = registry;
            registry = ev;
        }
    }
    if (r == CUDA_SUCCESS)
        *h = ev->ipc;
    pthread_mutex_unlock(&registry_lock);
    if (r != CUDA_SUCCESS)
        return event_err(r, "cuIpcGetEventHandle", ev);
    return 0;
}

cuc_event *cuc__event_find_ipc(const CUipcEventHandle *h)
{
    cuc_event *ev;

    pthread_mutex_lock(&registry_lock);
    for (ev = registry; ev; ev = ev->next)
        if (memcmp(ev->ipc.reserved, h->reserved, sizeof(h->reserved)) == 0) {
            ev->refs++;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    return ev;
}

int cuc__event_open(cuc_device *dev, const CUipcEventHandle *h, cuc_event **out)
{
    cuc_event *ev;
    CUevent cu;
    CUresult r;
    int rc;

    rc = cuc__device_activate(dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuIpcOpenEventHandle(&cu, *h);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuIpcOpenEventHandle", "IPC event of device %d (%s); "
                             "the sending process must keep the event alive",
                             cuc_device_ordinal(dev), cuc_device_uuid_string(dev));
    ev = event_new(dev, cu, CUC_EVENT_IPC, 1);
    if (!ev) {
        CUC_DRV->cuEventDestroy(cu);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an event");
    }
    ev->ipc = *h;
    pthread_mutex_lock(&registry_lock);
    ev->have_ipc = 1;
    ev->next = registry;
    registry = ev;
    pthread_mutex_unlock(&registry_lock);
    *out = ev;
    return 0;
}

cuc_device *cuc_event_device(const cuc_event *ev) { return ev->dev; }
unsigned cuc_event_flags(const cuc_event *ev) { return ev->flags; }
int cuc_event_is_opened(const cuc_event *ev) { return ev->opened; }
void *cuc_event_handle(const cuc_event *ev) { return ev->cu; }
