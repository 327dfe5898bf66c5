/* An importer's releases after its frees complete (settle.h). A device's
 * queue holds the upstream leases of the frees queued on its legacy stream
 * since the settler's last turn; a turn records one event behind them and
 * moves them to a fenced batch, released when the event is seen complete.
 * Each device also counts its frees queued and those a synchronize of its
 * legacy stream has passed since: an import of a pointer, or an imported
 * pool's destroy, synchronizes first when a free was queued since
 * (sim/FACTS.md F29, F46): an event seen complete is enough for a release,
 * not for those. */
#include "memory/settle.h"

#include "driver/driver.h"
#include "exec/stream.h"
#include "lease/lease.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct batch {
    CUevent ev; /* recorded behind the frees; NULL while queued */
    uint64_t upto; /* the device's frees this batch covers, counted */
    struct cuc__upstream *up;
    size_t n, cap;
    struct batch *next;
};

#define IDLE_EVENTS 4

struct devq {
    cuc_device *dev;
    uint64_t added, synced; /* frees queued; of them, synchronized since */
    struct batch *queued; /* since the last turn */
    CUevent idle[IDLE_EVENTS]; /* completed, to record again (the settler's) */
    int nidle;
    struct devq *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void (*wake_fn)(void *);
static void *wake_arg;
static int busy; /* fences wait: the settler looks again soon, unwoken (lock) */
static struct devq *devs;     /* one a device, kept (lock) */
static struct fence {         /* recorded batches: the settler's alone */
    struct devq *q;
    struct batch *b;
    struct fence *next;
} *fenced;

static struct devq *devq_locked(cuc_device *dev)
{
    struct devq *q = devs;

    while (q && q->dev != dev)
        q = q->next;
    if (!q && (q = calloc(1, sizeof(*q))) != NULL) {
        q->dev = dev;
        q->next = devs;
        devs = q;
    }
    return q;
}

static void synced_locked(struct devq *q, uint64_t upto)
{
    if (q->synced < upto)
        q->synced = upto;
}

/* Appends up[0..n) to q's open batch (lock held): 0, or -1 without memory. */
static int queue_locked(struct devq *q, struct cuc__upstream *up, size_t n)
{
    struct batch *b = q->queued;

    if (!b && !(b = q->queued = calloc(1, sizeof(*b))))
        return -1;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        struct cuc__upstream *p;
        while (cap < b->n + n)
            cap *= 2;
        if (!(p = realloc(b->up, cap * sizeof(*p))))
            return -1;
        b->up = p, b->cap = cap;
    }
    memcpy(b->up + b->n, up, n * sizeof(*up));
    b->n += n;
    for (size_t i = 0; i < n; i++)
        up[i].leases = NULL; /* taken over */
    return 0;
}

int cuc__settle_sync(cuc_device *dev)
{
    CUC__CTX_RESTORE(guard);
    cuc_stream *s;
    CUresult r;
    int rc = cuc__stream_or_legacy(dev, NULL, &s);

    if (!rc)
        rc = cuc__device_activate(&guard, dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuStreamSynchronize(s->cu);
    return r == CUDA_SUCCESS ? 0
                             : cuc__cuda_err(r, "cuStreamSynchronize", "after freeing imported "
                                             "memory of device %s", dev->uuid_str);
}

/* cuc__settle_sync of dev; done, q's frees up to upto count as
 * synchronized (q NULL: none counted). 0, or the failure. */
static int sync_upto(cuc_device *dev, struct devq *q, uint64_t upto)
{
    int rc = cuc__settle_sync(dev);

    if (!rc && q) {
        pthread_mutex_lock(&lock);
        synced_locked(q, upto);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

void cuc__upstream_release(struct cuc__upstream *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!up[i].leases)
            continue;
        /* A channel already closed has nobody left to tell. */
        cuc__leases_release(up[i].leases, &up[i].id, 1);
        cuc__leases_unref(up[i].leases);
        up[i].leases = NULL;
    }
}

void cuc__upstream_keep(struct cuc__upstream *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!up[i].leases)
            continue;
        cuc__leases_unref(up[i].leases);
        up[i].leases = NULL;
    }
}

/* The frees behind up[0..n) are complete (ok) or unknown: released, or
 * kept (never released: the memory may still be in use here). */
static void settled(struct cuc__upstream *up, size_t n, int ok)
{
    if (ok)
        cuc__upstream_release(up, n);
    else
        cuc__upstream_keep(up, n);
}

/* b's frees complete (ok) or unknown: its event kept for q's next batch
 * (a completed one) or destroyed, its leases settled, b freed. */
static void batch_end(struct devq *q, struct batch *b, int ok)
{
    if (b->ev && ok && q->nidle < IDLE_EVENTS)
        q->idle[q->nidle++] = b->ev;
    else if (b->ev)
        CUC_DRV->cuEventDestroy(b->ev);
    settled(b->up, b->n, ok);
    free(b->up);
    free(b);
}

int cuc__settle_freeing(cuc_device *dev)
{
    struct devq *q = NULL;

    pthread_mutex_lock(&lock);
    if (wake_fn && (q = devq_locked(dev)) != NULL)
        q->added++;
    pthread_mutex_unlock(&lock);
    return q != NULL;
}

void cuc__settle_freed(cuc_device *dev)
{
    struct devq *q;

    pthread_mutex_lock(&lock);
    if ((q = devq_locked(dev)) != NULL)
        q->added++;
    pthread_mutex_unlock(&lock);
    if (!q)
        (void)cuc__settle_sync(dev); /* a failure here leaves the fd: F46 */
}

int cuc__settle_release(cuc_device *dev, struct cuc__upstream *up, size_t n)
{
    void (*wake)(void *) = NULL;
    void *arg = NULL;
    struct devq *q;
    uint64_t upto;
    int rc;

    pthread_mutex_lock(&lock);
    if (wake_fn && (q = devq_locked(dev)) != NULL) {
        int first = !q->queued;
        if (queue_locked(q, up, n) == 0) {
            wake = first && !busy ? wake_fn : NULL;
            arg = wake_arg;
            pthread_mutex_unlock(&lock);
            if (wake)
                wake(arg);
            return 0;
        }
    }
    q = devq_locked(dev); /* counted by cuc__settle_freeing: there */
    upto = q ? q->added : 0;
    pthread_mutex_unlock(&lock);
    rc = sync_upto(dev, q, upto); /* the settler gone, or no memory to queue: here */
    settled(up, n, rc == 0);
    return rc;
}

int cuc__settle_wait(cuc_device *dev)
{
    uint64_t upto = 0;
    struct devq *q;

    pthread_mutex_lock(&lock);
    for (q = devs; q && q->dev != dev; q = q->next)
        ;
    if (q && q->synced < q->added)
        upto = q->added;
    pthread_mutex_unlock(&lock);
    if (!upto)
        return 0; /* the usual case: no free queued since the last look */
    return sync_upto(dev, q, upto);
}

/* An event to record on q's device (current): one a batch of q completed,
 * or a new one. */
static int take_event(struct devq *q, CUevent *ev)
{
    if (q->nidle) {
        *ev = q->idle[--q->nidle];
        return 0;
    }
    return CUC_DRV->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS ? 0 : CUC_E_DRIVER;
}

/* Records an event behind q's open batch b (taken out of q, lock not
 * held) and fences it; without an event, synchronizes and settles it.
 * own: on the settler's own thread, where q's device stays current after
 * (no user code runs there: no set and restore a turn). */
static void fence(struct devq *q, struct batch *b, int own)
{
    CUC__CTX_RESTORE(restore);
    CUC__CTX_KEEP(keep);
    struct fence *f = malloc(sizeof(*f));
    cuc_stream *s;
    int rc = f ? cuc__stream_or_legacy(q->dev, NULL, &s) : CUC_E_NOMEM;

    if (!rc)
        rc = cuc__device_activate(own ? &keep : &restore, q->dev);
    if (!rc && (rc = take_event(q, &b->ev)) != 0)
        b->ev = NULL;
    if (!rc && CUC_DRV->cuEventRecord(b->ev, s->cu) != CUDA_SUCCESS)
        rc = CUC_E_DRIVER;
    if (!rc) {
        *f = (struct fence){q, b, fenced};
        fenced = f;
        return;
    }
    free(f);
    if (b->ev)
        CUC_DRV->cuEventDestroy(b->ev);
    b->ev = NULL;
    rc = sync_upto(q->dev, q, b->upto);
    batch_end(q, b, rc == 0);
}

/* Releases what f kept if its event completed: 1 when settled (f to be
 * freed), 0 while it waits. */
static int try_settle(struct fence *f)
{
    CUresult r = CUC_DRV->cuEventQuery(f->b->ev);

    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    batch_end(f->q, f->b, r == CUDA_SUCCESS);
    return 1;
}

/* A turn (cuc__settle_run); own: on the settler's own thread. */
static int run(int own)
{
    struct fence **pf = &fenced, *f;
    struct devq *q;
    int pending;

    for (;;) { /* each device's open batch, fenced */
        struct batch *b = NULL;
        pthread_mutex_lock(&lock);
        for (q = devs; q && !q->queued; q = q->next)
            ;
        if (q) {
            b = q->queued;
            q->queued = NULL;
            b->upto = q->added;
        }
        pthread_mutex_unlock(&lock);
        if (!b)
            break;
        fence(q, b, own);
    }
    while ((f = *pf) != NULL) {
        if (try_settle(f)) {
            *pf = f->next;
            free(f);
        } else {
            pf = &f->next;
        }
    }
    /* Frees queued during this turn woke nobody (busy): the next turn,
     * soon, takes them; once none waits, the next one queued wakes. */
    pthread_mutex_lock(&lock);
    for (q = devs; q && !q->queued; q = q->next)
        ;
    busy = (fenced != NULL || q != NULL) && wake_fn;
    pending = fenced != NULL || q != NULL;
    pthread_mutex_unlock(&lock);
    return pending;
}

int cuc__settle_run(void)
{
    return run(1);
}

void cuc__settle_start(void (*wake)(void *), void *arg)
{
    pthread_mutex_lock(&lock);
    wake_fn = wake;
    wake_arg = arg;
    pthread_mutex_unlock(&lock);
}

void cuc__settle_stop(void)
{
    pthread_mutex_lock(&lock);
    wake_fn = NULL;
    wake_arg = NULL;
    busy = 0;
    pthread_mutex_unlock(&lock);
    (void)run(0); /* what was queued, fenced */
    for (struct fence *f = fenced, *next; f; f = next) {
        next = f->next;
        batch_end(f->q, f->b, CUC_DRV->cuEventSynchronize(f->b->ev) == CUDA_SUCCESS);
        free(f);
    }
    fenced = NULL;
    for (struct devq *q = devs; q; q = q->next)
        while (q->nidle)
            CUC_DRV->cuEventDestroy(q->idle[--q->nidle]);
}

void cuc__settle_forget(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

    /* the parent's state, perhaps mid-change at the fork: left, not freed */
    memcpy(&lock, &fresh, sizeof(lock));
    wake_fn = NULL;
    wake_arg = NULL;
    busy = 0;
    devs = NULL;
    fenced = NULL;
}
