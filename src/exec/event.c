/* Events, reference counting, and the table of events whose IPC handle is
 * known here (created here and sent, or imported here), so that getting a
 * handle this process already has returns that event. */
#include "exec/event.h"
#include "exec/stream.h"
#include "os/proc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KNOWN_FLAGS (CUC_EVENT_TIMING | CUC_EVENT_BLOCKING_SYNC | CUC_EVENT_IPC)

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuc__htab by_handle; /* events with have_ipc set */

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

int cuc__event_err(CUresult r, const char *call, const cuc_event *ev)
{
    return cuc__cuda_err(r, call, "%sevent on device %d (%s)",
                         ev->imported ? "opened IPC " : "", ev->dev->ordinal,
                         ev->dev->uuid_str);
}

cuc_event *cuc__event_wrap(cuc_device *dev, CUevent cu, unsigned flags, int imported)
{
    cuc_event *ev = calloc(1, sizeof(*ev));

    if (!ev)
        return NULL;
    ev->dev = dev;
    ev->cu = cu;
    ev->flags = flags;
    ev->imported = imported;
    ev->creator = cuc__pid();
    ev->refs = 1;
    return ev;
}

int cuc_event_create(cuc_device *dev, unsigned flags, cuc_event **out)
{
    CUC__CTX_KEEP(guard);
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
    rc = cuc__device_activate(&guard, dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventCreate(&cu, driver_flags(flags));
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuEventCreate", "flags 0x%x on device %d (%s)",
                             flags, cuc_device_ordinal(dev), cuc_device_uuid_string(dev));
    ev = cuc__event_wrap(dev, cu, flags, 0);
    if (!ev) {
        CUC_DRV->cuEventDestroy(cu);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an event");
    }
    *out = ev;
    return 0;
}

static uint64_t handle_hash(const CUipcEventHandle *h)
{
    return cuc__hash_bytes(h->reserved, sizeof(h->reserved));
}

static int same_handle(const struct cuc__hnode *n, const void *key)
{
    const cuc_event *ev = CUC_CONTAINER_OF(n, cuc_event, by_handle);

    return memcmp(ev->ipc.reserved, key, sizeof(ev->ipc.reserved)) == 0;
}

/* table_lock held. */
static cuc_event *find_locked(const CUipcEventHandle *h)
{
    struct cuc__hnode *n = cuc__htab_find(&by_handle, handle_hash(h), same_handle,
                                          h->reserved);

    return n ? CUC_CONTAINER_OF(n, cuc_event, by_handle) : NULL;
}

cuc_event *cuc__event_find(const CUipcEventHandle *h)
{
    cuc_event *ev;

    pthread_mutex_lock(&table_lock);
    ev = find_locked(h);
    if (ev)
        ev->refs++;
    pthread_mutex_unlock(&table_lock);
    return ev;
}

int cuc__event_known_handle(const cuc_event *ev, CUipcEventHandle *h)
{
    int known;

    pthread_mutex_lock(&table_lock);
    known = ev->have_ipc;
    if (known)
        *h = ev->ipc;
    pthread_mutex_unlock(&table_lock);
    return known;
}

cuc_event *cuc__event_publish(cuc_event *ev, const CUipcEventHandle *h, int *rc)
{
    cuc_event *had;

    *rc = 0;
    pthread_mutex_lock(&table_lock);
    had = find_locked(h);
    if (had && had != ev) {
        had->refs++;
    } else if (!had) {
        ev->ipc = *h;
        ev->by_handle.hash = handle_hash(h);
        *rc = cuc__htab_insert(&by_handle, &ev->by_handle);
        ev->have_ipc = *rc == 0;
    }
    pthread_mutex_unlock(&table_lock);
    return had == ev ? NULL : had;
}

cuc_event *cuc_event_ref(cuc_event *ev)
{
    if (ev) {
        pthread_mutex_lock(&table_lock);
        ev->refs++;
        pthread_mutex_unlock(&table_lock);
    }
    return ev;
}

void cuc_event_unref(cuc_event *ev)
{
    CUC__CTX_RESTORE(guard);
    int last;

    if (!ev)
        return;
    pthread_mutex_lock(&table_lock);
    last = --ev->refs == 0;
    if (last && ev->have_ipc) {
        cuc__htab_remove(&by_handle, &ev->by_handle);
        if (by_handle.count == 0)
            cuc__htab_free(&by_handle); /* nothing left for a leak checker */
    }
    pthread_mutex_unlock(&table_lock);
    if (!last)
        return;
    /* Inherited through fork: the driver's event is the parent's. */
    if (ev->creator == cuc__pid() && cuc__device_activate(&guard, ev->dev) == 0)
        CUC_DRV->cuEventDestroy(ev->cu);
    free(ev);
}

int cuc_event_record(cuc_event *ev, cuc_stream *stream)
{
    CUC__CTX_KEEP(guard);
    cuc_stream *s;
    CUresult r;
    int rc;

    if (!ev)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_record: event is NULL");
    rc = cuc__stream_or_legacy(ev->dev, stream, &s);
    if (rc)
        return rc;
    if (s->dev != ev->dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_record: the event belongs to "
                           "device %d (%s), the stream to device %d (%s): record on a "
                           "stream of the event's device", cuc_device_ordinal(ev->dev),
                           cuc_device_uuid_string(ev->dev), cuc_device_ordinal(s->dev),
                           cuc_device_uuid_string(s->dev));
    rc = cuc__device_activate(&guard, ev->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventRecord(ev->cu, s->cu);
    if (r != CUDA_SUCCESS)
        return cuc__event_err(r, "cuEventRecord", ev);
    return 0;
}

int cuc_event_synchronize(cuc_event *ev)
{
    CUC__CTX_KEEP(guard);
    CUresult r;
    int rc;

    if (!ev)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_synchronize: event is NULL");
    rc = cuc__device_activate(&guard, ev->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventSynchronize(ev->cu);
    if (r != CUDA_SUCCESS)
        return cuc__event_err(r, "cuEventSynchronize", ev);
    return 0;
}

int cuc_event_query(cuc_event *ev, int *done)
{
    CUC__CTX_KEEP(guard);
    CUresult r;
    int rc;

    if (!ev || !done)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_query: NULL argument");
    rc = cuc__device_activate(&guard, ev->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventQuery(ev->cu);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) {
        *done = r == CUDA_SUCCESS;
        return 0;
    }
    return cuc__event_err(r, "cuEventQuery", ev);
}

int cuc_event_elapsed_ms(cuc_event *start, cuc_event *end, float *ms)
{
    CUC__CTX_KEEP(guard);
    float v = 0;
    CUresult r;
    int rc;

    if (!start || !end || !ms)
        return cuc__seterr(CUC_E_INVALID, "cuc_event_elapsed_ms: NULL argument");
    if (!(start->flags & CUC_EVENT_TIMING) || !(end->flags & CUC_EVENT_TIMING))
        return cuc__seterr(CUC_E_INVALID, "cuc_event_elapsed_ms: the %s event was "
                           "created without CUC_EVENT_TIMING%s",
                           !(start->flags & CUC_EVENT_TIMING) ? "start" : "end",
                           (start->imported || end->imported)
                               ? " (an opened IPC event never records time)" : "");
    rc = cuc__device_activate(&guard, start->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuEventElapsedTime(&v, start->cu, end->cu);
    if (r == CUDA_ERROR_NOT_READY)
        return cuc__seterr(CUC_E_BUSY, "cuc_event_elapsed_ms: an event has not "
                           "completed yet (cuEventElapsedTime: CUDA_ERROR_NOT_READY); "
                           "synchronize on the end event first");
    if (r != CUDA_SUCCESS)
        return cuc__event_err(r, "cuEventElapsedTime", start);
    *ms = v;
    return 0;
}

/* A stream's wait on an event (cucore/stream.h): here, beside the event,
 * so that streams need not know events. */
int cuc_stream_wait_event(cuc_stream *s, cuc_event *ev)
{
    CUC__CTX_KEEP(guard);
    CUresult r;
    int rc;

    if (!s || !ev)
        return cuc__seterr(CUC_E_INVALID, "cuc_stream_wait_event: NULL argument");
    rc = cuc__stream_activate(&guard, s);
    if (rc)
        return rc;
    r = CUC_DRV->cuStreamWaitEvent(s->cu, ev->cu, CU_EVENT_WAIT_DEFAULT);
    if (r != CUDA_SUCCESS)
        return cuc__stream_err(r, "cuStreamWaitEvent", s);
    return 0;
}

cuc_device *cuc_event_device(const cuc_event *ev) { return ev->dev; }
unsigned cuc_event_flags(const cuc_event *ev) { return ev->flags; }
int cuc_event_is_imported(const cuc_event *ev) { return ev->imported; }
void *cuc_event_handle(const cuc_event *ev) { return ev->cu; }
