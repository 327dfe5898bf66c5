/* An importer's frees of imported pool memory, and its releases after
 * they complete (settle.h). While a settler runs, a device's queue holds
 * the pointers its importers dropped since the settler's last turn and
 * their upstream leases; a turn frees them on the device's legacy stream
 * together, records one event behind them and moves them to a fenced
 * batch, released when the event is seen complete: the caller pays a
 * queue entry, not a free (sim/FACTS.md F49).
 * Each device also counts its frees queued and those a synchronize of its
 * legacy stream has passed since: an import of a pointer, or an imported
 * pool's destroy, issues what is queued and synchronizes first when a
 * free was queued since (sim/FACTS.md F29, F46): an event seen complete
 * is enough for a release, not for those. */
#include "memory/settle.h"

#include "driver/driver.h"
#include "exec/stream.h"
#include "lease/lease.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A dropped pointer: up[first, first + n) of its batch are its leases. */
struct pending {
    CUdeviceptr ptr;
    size_t first, n;
    int failed; /* its cuMemFreeAsync failed: its leases are kept */
};

struct batch {
    CUevent ev; /* recorded behind the frees; NULL while queued */
    uint64_t upto; /* the device's frees this batch covers, counted */
    struct cuc__upstream *up;
    size_t n, cap;
    struct pending *frees;
    size_t nfrees, fcap, issued; /* frees[0, issued) are on the stream */
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

/* issue_lock, taken before lock, is held from taking a queued batch to
 * its frees being on the stream: a synchronize that holds it passes
 * every free counted before it (cuc__settle_wait). */
static pthread_mutex_t issue_lock = PTHREAD_MUTEX_INITIALIZER;
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

/* Room in *p (of *cap elements of size sz) for need: 0, or -1. */
static int reserve(void **p, size_t *cap, size_t need, size_t sz)
{
    size_t c = *cap ? *cap : 64;
    void *np;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    if (!(np = realloc(*p, c * sz)))
        return -1;
    *p = np;
    *cap = c;
    return 0;
}

/* Appends up[0..n) to b's leases, taken over (up[i].leases set NULL);
 * room reserved. */
static void take_leases(struct batch *b, struct cuc__upstream *up, size_t n)
{
    if (!n)
        return; /* up may be NULL */
    memcpy(b->up + b->n, up, n * sizeof(*up));
    b->n += n;
    for (size_t i = 0; i < n; i++)
        up[i].leases = NULL;
}

/* Queues ptr's free, with its leases anchor and extra[0..nextra), in q's
 * open batch (lock held): 0, or -1 without memory (nothing queued). */
static int queue_locked(struct devq *q, CUdeviceptr ptr, struct cuc__upstream *anchor,
                        struct cuc__upstream *extra, size_t nextra)
{
    struct batch *b = q->queued;
    size_t n = 1 + nextra;

    if (!b && !(b = q->queued = calloc(1, sizeof(*b))))
        return -1;
    if (reserve((void **)&b->up, &b->cap, b->n + n, sizeof(*b->up)) ||
        reserve((void **)&b->frees, &b->fcap, b->nfrees + 1, sizeof(*b->frees)))
        return -1;
    b->frees[b->nfrees++] = (struct pending){ptr, b->n, n, 0};
    take_leases(b, anchor, 1);
    take_leases(b, extra, nextra);
    return 0;
}

/* dev's legacy stream in *s, dev made current under g: 0, or the
 * failure. */
static int legacy_current(cuc_device *dev, struct cuc__ctx_guard *g, cuc_stream **s)
{
    int rc = cuc__stream_or_legacy(dev, NULL, s);

    return rc ? rc : cuc__device_activate(g, dev);
}

int cuc__settle_sync(cuc_device *dev)
{
    CUC__CTX_RESTORE(guard);
    cuc_stream *s;
    CUresult r;
    int rc = legacy_current(dev, &guard, &s);

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

/* b's frees are complete (ok) or unknown: each pointer's leases
 * released, or kept (never released: the memory may still be in use
 * here) when unknown or its free failed. */
static void settled(struct batch *b, int ok)
{
    for (size_t i = 0; i < b->nfrees; i++) {
        struct pending *f = &b->frees[i];
        if (ok && !f->failed)
            cuc__upstream_release(b->up + f->first, f->n);
        else
            cuc__upstream_keep(b->up + f->first, f->n);
    }
}

/* b's frees complete (ok) or unknown: its event kept for q's next batch
 * (a completed one) or destroyed, its leases settled, b freed. */
static void batch_end(struct devq *q, struct batch *b, int ok)
{
    if (b->ev && ok && q->nidle < IDLE_EVENTS)
        q->idle[q->nidle++] = b->ev;
    else if (b->ev)
        CUC_DRV->cuEventDestroy(b->ev);
    settled(b, ok);
    free(b->up);
    free(b->frees);
    free(b);
}

/* Puts b's frees not yet issued on stream s (its device current here); a
 * failed one keeps its leases. */
static void issue(struct batch *b, CUstream s)
{
    for (; b->issued < b->nfrees; b->issued++)
        if (CUC_DRV->cuMemFreeAsync(b->frees[b->issued].ptr, s) != CUDA_SUCCESS)
            b->frees[b->issued].failed = 1;
}

int cuc__settle_running(void)
{
    int on;

    pthread_mutex_lock(&lock);
    on = wake_fn != NULL;
    pthread_mutex_unlock(&lock);
    return on;
}

/* The settler gone meanwhile, or no memory to queue: ptr freed and its
 * stream synchronized here. */
static int free_now(cuc_device *dev, CUdeviceptr ptr)
{
    CUC__CTX_RESTORE(guard);
    cuc_stream *s;
    CUresult r;
    int rc = legacy_current(dev, &guard, &s);

    if (rc)
        return rc;
    r = CUC_DRV->cuMemFreeAsync(ptr, s->cu);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemFreeAsync", "imported memory of device %s",
                             dev->uuid_str);
    return cuc__settle_sync(dev);
}

int cuc__settle_free(cuc_device *dev, CUdeviceptr ptr, struct cuc__upstream *anchor,
                     struct cuc__upstream *extra, size_t nextra)
{
    void (*wake)(void *) = NULL;
    void *arg = NULL;
    struct devq *q;

    pthread_mutex_lock(&lock);
    if (wake_fn && (q = devq_locked(dev)) != NULL) {
        int first = !q->queued;
        if (queue_locked(q, ptr, anchor, extra, nextra) == 0) {
            q->added++;
            wake = first && !busy ? wake_fn : NULL;
            arg = wake_arg;
            pthread_mutex_unlock(&lock);
            if (wake)
                wake(arg);
            return 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return free_now(dev, ptr);
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

/* Issues what q's open batch has not issued yet, here (lock held: the
 * batch stays the settler's, which records its event). */
static int issue_queued_locked(struct devq *q)
{
    CUC__CTX_RESTORE(guard);
    cuc_stream *s;
    int rc;

    if (!q->queued || q->queued->issued == q->queued->nfrees)
        return 0;
    rc = legacy_current(q->dev, &guard, &s);
    if (!rc)
        issue(q->queued, s->cu);
    return rc;
}

int cuc__settle_wait(cuc_device *dev)
{
    uint64_t upto = 0;
    struct devq *q;
    int rc = 0;

    pthread_mutex_lock(&issue_lock);
    pthread_mutex_lock(&lock);
    for (q = devs; q && q->dev != dev; q = q->next)
        ;
    if (q && q->synced < q->added) {
        upto = q->added;
        rc = issue_queued_locked(q);
    }
    pthread_mutex_unlock(&lock);
    if (upto && !rc) /* the usual case: no free queued since the last look */
        rc = sync_upto(dev, q, upto);
    pthread_mutex_unlock(&issue_lock);
    return rc;
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

/* Issues the frees of q's open batch b (taken out of q, lock not held),
 * records an event behind them and fences it: 0. Without an event (or
 * without the device): the failure, b's event gone, its frees not issued
 * failed; the caller settles it (unfenced). own: on the settler's own
 * thread, where q's device stays current after (no user code runs there:
 * no set and restore a turn). */
static int fence(struct devq *q, struct batch *b, int own)
{
    CUC__CTX_RESTORE(restore);
    CUC__CTX_KEEP(keep);
    struct fence *f = malloc(sizeof(*f));
    cuc_stream *s;
    int rc = legacy_current(q->dev, own ? &keep : &restore, &s);

    if (!rc)
        issue(b, s->cu);
    if (!rc && !f)
        rc = CUC_E_NOMEM;
    if (!rc && (rc = take_event(q, &b->ev)) != 0)
        b->ev = NULL;
    if (!rc && CUC_DRV->cuEventRecord(b->ev, s->cu) != CUDA_SUCCESS)
        rc = CUC_E_DRIVER;
    if (!rc) {
        *f = (struct fence){q, b, fenced};
        fenced = f;
        return 0;
    }
    free(f);
    if (b->ev)
        CUC_DRV->cuEventDestroy(b->ev);
    b->ev = NULL;
    for (size_t i = b->issued; i < b->nfrees; i++)
        b->frees[i].failed = 1;
    return rc;
}

/* An unfenced batch: its stream synchronized here, then settled (its
 * releases may end other frees, which queue: no settle lock held). */
static void unfenced(struct devq *q, struct batch *b)
{
    batch_end(q, b, sync_upto(q->dev, q, b->upto) == 0);
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

    for (;;) { /* each device's open batch, issued and fenced */
        struct batch *b = NULL;
        int failed;
        pthread_mutex_lock(&issue_lock);
        pthread_mutex_lock(&lock);
        for (q = devs; q && !q->queued; q = q->next)
            ;
        if (q) {
            b = q->queued;
            q->queued = NULL;
            b->upto = q->added;
        }
        pthread_mutex_unlock(&lock);
        failed = b && fence(q, b, own) != 0;
        pthread_mutex_unlock(&issue_lock);
        if (!b)
            break;
        if (failed)
            unfenced(q, b);
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
    memcpy(&issue_lock, &fresh, sizeof(issue_lock));
    wake_fn = NULL;
    wake_arg = NULL;
    busy = 0;
    devs = NULL;
    fenced = NULL;
}
