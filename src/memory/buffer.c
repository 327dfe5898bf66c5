/* Buffers: allocation, references, the pool's tables of its buffers by
 * export data and of its imports by pointer, the lease ops that keep a
 * freed buffer's memory while importers map it, and the free itself.
 *
 * A buffer is kept by its references (refs), by the messages it is
 * attached to (holds) and by its leases. The memory is freed when all
 * three reach zero; a last cuc_buffer_unref_async() that finds holds or
 * leases left records an event on its stream instead, and the free that
 * happens later, on whichever thread drops the last hold or lease, waits
 * for that event on the device's legacy stream. */
#include "memory/buffer.h"
#include "memory/release.h"
#include "os/proc.h"
#include "wire/records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffer objects ----
 * Views and imports come and go by the thousand a message, more than
 * malloc's per-thread cache holds: each thread keeps up to SPARES_MAX
 * freed objects for its next ones (freed when the thread exits). Not
 * under the sanitizers, so that a use after free is still caught. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPARES 0
#else
#define SPARES 1
#endif
#define SPARES_MAX 4096u

struct spare {
    struct spare *next;
};
static _Thread_local struct spare *spares;
static _Thread_local unsigned nspares;
static _Thread_local int spares_registered;
static pthread_key_t spares_key;
static pthread_once_t spares_once = PTHREAD_ONCE_INIT;
static int spares_key_ok;

static void spares_free(void *unused)
{
    (void)unused;
    while (spares) {
        struct spare *next = spares->next;
        free(spares);
        spares = next;
    }
    nspares = 0;
}

static void spares_init(void)
{
    spares_key_ok = pthread_key_create(&spares_key, spares_free) == 0;
}

static cuc_buffer *obj_alloc(void)
{
    cuc_buffer *b = (cuc_buffer *)spares;

    if (!SPARES || !b)
        return calloc(1, sizeof(*b));
    spares = spares->next;
    nspares--;
    memset(b, 0, sizeof(*b));
    return b;
}

void cuc__buffer_obj_free(cuc_buffer *b)
{
    struct spare *s = (struct spare *)b;

    if (!b)
        return;
    cuc__gate_unref(b->gate);
    if (!SPARES) {
        free(b);
        return;
    }
    if (nspares < SPARES_MAX && !spares_registered) {
        pthread_once(&spares_once, spares_init);
        spares_registered = spares_key_ok && pthread_setspecific(spares_key, &spares) == 0;
    }
    if (nspares >= SPARES_MAX || !spares_registered) {
        free(b);
        return;
    }
    s->next = spares;
    spares = s;
    nspares++;
}

int cuc__buffer_new(cuc_pool *pool, CUdeviceptr ptr, size_t size, int imported,
                    cuc_buffer **out)
{
    cuc_buffer *b = obj_alloc();

    if (!b)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a buffer");
    b->pool = cuc_pool_ref(pool);
    b->ptr = ptr;
    b->size = size;
    b->imported = imported;
    b->creator = cuc__pid();
    b->refs = 1;
    *out = b;
    return 0;
}

/* ---- the pool's tables by export data and by pointer ---- */

static cuc_buffer *of_node(const struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, cuc_buffer, node);
}

static cuc_buffer *of_ptr_node(const struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, cuc_buffer, by_ptr);
}

static int same_export(const struct cuc__hnode *n, const void *key)
{
    return memcmp(of_node(n)->export_data.reserved, key, CUC__EXPORT_KEY_LEN) == 0;
}

static int same_ptr(const struct cuc__hnode *n, const void *key)
{
    return of_ptr_node(n)->ptr == *(const CUdeviceptr *)key;
}

static uint64_t export_hash(const CUmemPoolPtrExportData *d)
{
    return cuc__hash_bytes(d->reserved, CUC__EXPORT_KEY_LEN);
}

int cuc__buffer_index_locked(cuc_buffer *b, const CUmemPoolPtrExportData *d, uint64_t hash)
{
    int rc;

    b->export_data = *d;
    b->node.hash = hash ? hash : export_hash(d);
    rc = cuc__htab_insert(&b->pool->bufs, &b->node);
    if (!rc && b->imported) {
        b->by_ptr.hash = cuc__hash_u64(b->ptr);
        rc = cuc__htab_insert(&b->pool->imports, &b->by_ptr);
        if (rc)
            cuc__htab_remove(&b->pool->bufs, &b->node);
        b->in_imports = rc == 0;
    }
    b->have_export = rc == 0;
    return rc;
}

cuc_buffer *cuc__buffer_find_locked(cuc_pool *pool, const CUmemPoolPtrExportData *d,
                                    uint64_t *hash)
{
    cuc_buffer *last = pool->last_found;

    *hash = 0;
    /* the records of many views of one allocation name it one after the
     * other: the one found last is compared before the export data is
     * hashed */
    if (last && last->state != CUC__BUF_FREEING &&
        memcmp(last->export_data.reserved, d->reserved, CUC__EXPORT_KEY_LEN) == 0)
        return last;
    *hash = export_hash(d);
    for (;;) {
        struct cuc__hnode *n = cuc__htab_find(&pool->bufs, *hash, same_export, d->reserved);
        if (!n)
            return NULL;
        if (of_node(n)->state != CUC__BUF_FREEING) {
            pool->last_found = of_node(n);
            return of_node(n);
        }
        /* an import of the same memory must wait until the driver's free
         * of the old one is done */
        pthread_cond_wait(&pool->cond, &pool->lock);
    }
}

cuc_buffer *cuc__buffer_import_at_locked(cuc_pool *pool, CUdeviceptr ptr)
{
    for (;;) {
        struct cuc__hnode *n =
            cuc__htab_find(&pool->imports, cuc__hash_u64(ptr), same_ptr, &ptr);
        if (!n)
            return NULL;
        if (of_ptr_node(n)->state != CUC__BUF_FREEING)
            return of_ptr_node(n);
        pthread_cond_wait(&pool->cond, &pool->lock); /* its free is under way */
    }
}

void cuc__buffer_forget_locked(cuc_buffer *b)
{
    if (b->have_export)
        cuc__htab_remove(&b->pool->bufs, &b->node);
    if (b->in_imports)
        cuc__htab_remove(&b->pool->imports, &b->by_ptr);
    b->have_export = b->in_imports = 0;
    if (b->pool->last_found == b)
        b->pool->last_found = NULL;
}

/* ---- allocation, references, the free ---- */

int cuc_buffer_alloc_async(cuc_pool *pool, size_t size, cuc_stream *stream,
                           cuc_buffer **out)
{
    CUC__CTX_KEEP(guard);
    CUdeviceptr ptr = 0;
    cuc_stream *s;
    CUresult r;
    int rc;

    if (!pool || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_alloc_async: NULL argument");
    if (pool->imported)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_alloc_async: pool %s was "
                           "imported from another process, and the driver does not "
                           "allocate from an imported pool: allocate in the process "
                           "that created it and send the buffer",
                           cuc__pool_id_hex(pool->id).s);
    if (pool->legacy)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_alloc_async: the pool of a "
                           "wrapped buffer (cuc_buffer_wrap) has no memory of its own: "
                           "allocate with cuMemAlloc and wrap it, or use a pool");
    if (size == 0) /* as cuda.core's: no memory, no driver call */
        return cuc__buffer_new(pool, 0, 0, 0, out);
    rc = cuc__stream_or_legacy(pool->dev, stream, &s);
    if (!rc)
        rc = cuc__device_activate(&guard, s->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuMemAllocFromPoolAsync(&ptr, size, pool->cu, s->cu);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemAllocFromPoolAsync", "%zu bytes from the %s "
                             "pool of device %d (%s)", size, cuc__pool_kind_name(pool->kind),
                             cuc_device_ordinal(pool->dev), cuc_device_uuid_string(pool->dev));
    rc = cuc__buffer_new(pool, ptr, size, 0, out);
    if (rc)
        CUC_DRV->cuMemFreeAsync(ptr, s->cu);
    return rc;
}

cuc_buffer *cuc_buffer_ref(cuc_buffer *b)
{
    if (!b)
        return NULL;
    pthread_mutex_lock(&b->pool->lock);
    b->refs++;
    pthread_mutex_unlock(&b->pool->lock);
    return b;
}

int cuc__buffer_unkept_locked(cuc_buffer *b)
{
    if (b->refs || b->holds || b->leases || b->state == CUC__BUF_FREEING)
        return 0;
    b->state = CUC__BUF_FREEING;
    return 1;
}

/* Moves the extra upstream leases out (pool->lock held). */
static struct cuc__upstream *take_extra_locked(cuc_buffer *b, size_t *n)
{
    struct cuc__upstream *e = b->extra;

    *n = b->nextra;
    b->extra = NULL;
    b->nextra = b->extra_cap = 0;
    return e;
}

static void release_extra(struct cuc__upstream *e, size_t n)
{
    cuc__upstream_release(e, n);
    free(e);
}

/* Orders the free after b's deferred-free event. When the stream cannot
 * be told to wait, the host waits for the event instead; only when that
 * fails too is the memory left allocated (a free that might run before
 * the work on it finished could corrupt it: a leak is the lesser harm). */
static int wait_free_after(cuc_buffer *b, cuc_stream *s)
{
    CUresult r = CUC_DRV->cuStreamWaitEvent(s->cu, b->free_after, CU_EVENT_WAIT_DEFAULT);
    CUresult r2 = CUDA_SUCCESS;

    if (r != CUDA_SUCCESS)
        r2 = CUC_DRV->cuEventSynchronize(b->free_after);
    CUC_DRV->cuEventDestroy(b->free_after);
    b->free_after = NULL;
    if (r == CUDA_SUCCESS || r2 == CUDA_SUCCESS)
        return 0;
    cuc__cuda_err(r, "cuStreamWaitEvent", "deferred free of a %zu-byte buffer on "
                  "device %s", b->size, cuc_device_uuid_string(b->pool->dev));
    cuc__adderr("; then cuEventSynchronize failed too (%s): the buffer stays "
                "allocated (leaked) rather than freed before its work is done",
                cuc__cuda_name(r2));
    return CUC_E_DRIVER;
}

int cuc__buffer_free_on(cuc_buffer *b, cuc_stream *s)
{
    CUresult r = CUC_DRV->cuMemFreeAsync(b->ptr, s->cu);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemFreeAsync", "%s%zu-byte buffer of device %s",
                             b->imported ? "imported " : "", b->size,
                             cuc_device_uuid_string(b->pool->dev));
    return 0;
}

int cuc__buffer_free_memory(cuc_buffer *b, cuc_stream *stream, int sync)
{
    CUC__CTX_RESTORE(guard);
    cuc_stream *s;
    CUresult r;
    int rc;

    if (b->size == 0)
        return 0; /* a buffer of size 0 has no memory (it is never sent) */
    rc = cuc__stream_or_legacy(b->pool->dev, stream, &s);
    if (!rc)
        rc = cuc__device_activate(&guard, s->dev);
    if (!rc && b->free_after)
        rc = wait_free_after(b, s);
    if (rc)
        return rc;
    rc = cuc__buffer_free_on(b, s);
    if (rc)
        return rc;
    /* The exporter may reuse the memory once we release: the driver wants
     * the importer's free complete by then. */
    if (b->imported && sync) {
        r = CUC_DRV->cuStreamSynchronize(s->cu);
        if (r != CUDA_SUCCESS)
            return cuc__cuda_err(r, "cuStreamSynchronize", "after freeing an imported "
                                 "%zu-byte buffer of device %s", b->size,
                                 cuc_device_uuid_string(b->pool->dev));
    }
    return 0;
}

void cuc__ipc_forget_locked(cuc_buffer *root)
{
    if (!root->imported)
        cuc__htab_remove(&root->pool->bases, &root->ipc->by_base);
}

int cuc__ipc_free_memory(cuc_buffer *b, cuc_stream *stream)
{
    CUC__CTX_RESTORE(guard);
    cuc_stream *s;
    CUresult r = CUDA_SUCCESS;
    int rc;

    if (!b->free_after && !b->ipc->opened)
        return 0; /* the user's memory, nothing to wait for: no driver call */
    rc = cuc__stream_or_legacy(b->pool->dev, stream, &s);
    if (!rc)
        rc = cuc__device_activate(&guard, s->dev);
    if (rc)
        return rc;
    if (b->free_after && b->ipc->opened)
        r = CUC_DRV->cuStreamWaitEvent(s->cu, b->free_after, CU_EVENT_WAIT_DEFAULT);
    if (b->free_after)
        CUC_DRV->cuEventDestroy(b->free_after);
    b->free_after = NULL;
    if (!b->ipc->opened) /* the user's memory: it stays */
        return 0;
    /* The exporter may reuse the memory once we release. */
    if (r == CUDA_SUCCESS)
        r = CUC_DRV->cuStreamSynchronize(s->cu);
    if (r != CUDA_SUCCESS)
        rc = cuc__cuda_err(r, "cuStreamSynchronize", "before closing a %zu-byte "
                           "allocation opened by legacy IPC on device %s", b->size,
                           b->pool->dev->uuid_str);
    r = CUC_DRV->cuIpcCloseMemHandle(b->ptr);
    if (r != CUDA_SUCCESS && !rc)
        rc = cuc__cuda_err(r, "cuIpcCloseMemHandle", "%zu-byte allocation opened by "
                           "legacy IPC on device %s", b->size, b->pool->dev->uuid_str);
    return rc;
}

/* The driver's part of releasing memory another allocator owns: none, but
 * for a deferred free's event (the memory goes back to its owner, whose
 * release does not wait for streams: memory.h). */
static int adopted_free_memory(cuc_buffer *b)
{
    CUC__CTX_RESTORE(guard);

    if (!b->free_after)
        return 0;
    if (cuc__device_activate(&guard, b->pool->dev) == 0)
        CUC_DRV->cuEventDestroy(b->free_after);
    b->free_after = NULL;
    return 0;
}

void cuc__buffer_note_kept(void)
{
    cuc__adderr("; its leases are kept, not released (the exporter keeps the "
                "memory until the channel closes: leaked rather than reused while "
                "this process may still use it)");
}

/* A free that failed where no caller hears of it (a lease end, a message
 * destroyed): the pool remembers it for cuc_pool_lease_wait(). */
static void note_lost_locked(cuc_pool *pool, size_t bytes)
{
    if (!pool->lost)
        snprintf(pool->lost_msg, sizeof(pool->lost_msg), "%s", cuc_errmsg());
    pool->lost++;
    pool->lost_bytes += bytes;
}

/* stream (NULL: the legacy one) waits for what b's last unref ordered its
 * free after, if anything: a view's before its root is dropped, an
 * import's before the settler frees it (the same wait as a deferred
 * free's). The event goes either way. */
static int stream_wait_free_after(cuc_buffer *v, cuc_stream *stream)
{
    CUC__CTX_RESTORE(guard);
    cuc_stream *s;
    int rc;

    if (!v->free_after)
        return 0;
    rc = cuc__stream_or_legacy(v->pool->dev, stream, &s);
    if (!rc)
        rc = cuc__device_activate(&guard, s->dev);
    if (!rc)
        return wait_free_after(v, s);
    CUC_DRV->cuEventDestroy(v->free_after);
    v->free_after = NULL;
    return rc;
}

/* The view's release once its deferred-free event has been waited for,
 * entered with pool->lock held (released here). */
static int release_view_locked(cuc_buffer *v, cuc_stream *stream, int rc)
{
    CUC__CTX_RESTORE(guard);
    cuc_pool *pool = v->pool;
    cuc_buffer *root = v->root;
    struct cuc__upstream *extra;
    size_t nextra;
    int rc2, unsafe;

    if (v->in_views)
        cuc__htab_remove(&pool->views, &v->node);
    v->in_views = 0;
    extra = v->extra;
    nextra = v->nextra;
    v->extra = NULL;
    /* not the root's last reference (a slab's chunk, the user or other
     * views hold it): dropped here, under the lock already held */
    if (root->refs > 1) {
        root->refs--;
        root = NULL;
    }
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
    /* A carved range is reusable once what stream queued on it is done
     * (it waited for the last unref's stream above; if that failed, the
     * range is never reused). */
    if (v->carve) {
        rc2 = v->carve->freed(v->carve, stream, rc == 0);
        if (!rc)
            rc = rc2;
    }
    /* An imported root's last reference unmaps it and waits for the
     * stream before the view's leases go: the exporter may free then. If
     * the wait for the view's event failed, the root is dropped all the
     * same (an error is returned): keeping it forever would leak it. */
    rc2 = root ? cuc_buffer_unref_async(root, stream) : 0;
    unsafe = rc != 0 || rc2 != 0; /* its work may still run */
    if (!rc)
        rc = rc2;
    /* The exporter may write the view's bytes once it is released: what
     * this process queued on them must be done (the allocation may stay
     * mapped for other views, with no free to wait for). */
    if (v->imported && (v->anchor.leases || nextra)) {
        cuc_stream *s;
        CUresult r;
        rc2 = cuc__stream_or_legacy(pool->dev, stream, &s);
        if (!rc2)
            rc2 = cuc__device_activate(&guard, s->dev);
        if (!rc2 && (r = CUC_DRV->cuStreamSynchronize(s->cu)) != CUDA_SUCCESS)
            rc2 = cuc__cuda_err(r, "cuStreamSynchronize", "before releasing an "
                                "imported %zu-byte view", v->size);
        unsafe |= rc2 != 0;
        if (!rc)
            rc = rc2;
    }
    if (unsafe && v->imported) {
        /* what this process queued may still run: no release (13.8) */
        cuc__buffer_note_kept();
        cuc__upstream_keep(&v->anchor, 1);
        cuc__upstream_keep(extra, nextra);
    } else {
        cuc__upstream_release(&v->anchor, 1);
        cuc__upstream_release(extra, nextra);
    }
    free(extra);
    cuc__buffer_obj_free(v);
    cuc_pool_unref(pool);
    return rc;
}

static int release_view(cuc_buffer *v, cuc_stream *stream)
{
    int rc = stream_wait_free_after(v, stream);

    pthread_mutex_lock(&v->pool->lock);
    return release_view_locked(v, stream, rc);
}

/* 1 if b, which nothing keeps any more, can be released by
 * release_view_locked() without unlocking first: a view with no
 * deferred-free event to wait for. */
static int view_now(const cuc_buffer *b)
{
    return b->root && !b->free_after;
}

/* The driver's part of releasing b, a pool allocation of this process or
 * imported: an import dropped on its device's legacy stream while a
 * settler runs is left to it (*settling: cuc__settle_free once b can no
 * longer be found), after the stream waits for b's deferred-free event. */
static int free_own(cuc_buffer *b, cuc_stream *stream, int *settling)
{
    *settling = 0;
    if (!b->imported || !b->size || !cuc__buffer_on_legacy(b, stream) ||
        !cuc__settle_running())
        return cuc__buffer_free_memory(b, stream, 1);
    *settling = 1;
    return stream_wait_free_after(b, stream);
}

/* b's upstream leases (its anchor, and extra[0..nextra), freed here) once
 * its release is done: kept when the free failed (rc), else released
 * (those the settler took are NULL by now). */
static void release_upstream(cuc_buffer *b, struct cuc__upstream *extra, size_t nextra, int rc)
{
    if (rc && b->imported) { /* the memory may still be in use here: no release */
        cuc__upstream_keep(&b->anchor, 1);
        cuc__upstream_keep(extra, nextra);
    } else {
        cuc__upstream_release(&b->anchor, 1);
        cuc__upstream_release(extra, nextra);
    }
    free(extra);
}

static int release_as(cuc_buffer *b, cuc_stream *stream, int has_caller)
{
    cuc_pool *pool = b->pool;
    struct cuc__releases *adopted = b->adopted;
    struct cuc__upstream *extra;
    struct cuc__err_saved saved;
    size_t nextra;
    int rc, settling = 0, rc2;

    if (b->root)
        return release_view(b, stream); /* its own errors: a view frees nothing */
    if (!has_caller)
        cuc__err_save(&saved, 0);
    rc = b->ipc       ? cuc__ipc_free_memory(b, stream)
         : b->adopted ? adopted_free_memory(b)
                      : free_own(b, stream, &settling);
    if (rc && b->imported)
        cuc__buffer_note_kept();
    pthread_mutex_lock(&pool->lock);
    cuc__buffer_forget_locked(b);
    if (b->ipc)
        cuc__ipc_forget_locked(b);
    extra = take_extra_locked(b, &nextra);
    if (settling && !rc && (rc2 = cuc__settle_free(pool->dev, b->ptr, &b->anchor, extra,
                                                   nextra)) < 0) {
        rc = rc2;
        cuc__buffer_note_kept();
    }
    if (rc && !has_caller)
        note_lost_locked(pool, b->size);
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
    release_upstream(b, extra, nextra, rc);
    free(b->ipc);
    cuc__buffer_obj_free(b);
    cuc_pool_unref(pool);
    /* last: the owner may free the memory now */
    cuc__releases_run(adopted);
    if (!has_caller)
        cuc__err_restore(&saved);
    return rc;
}

int cuc__buffer_release(cuc_buffer *b, cuc_stream *stream)
{
    return release_as(b, stream, 1);
}

/* The event the deferred free of b will wait for, recorded on s now. If
 * the driver cannot make or record one, s is waited for here instead (the
 * later free is then ordered after its work without an event: *ev stays
 * NULL); only if that fails too is the failure returned. */
static int order_after(cuc_buffer *b, cuc_stream *s, CUevent *ev)
{
    const char *call = "cuEventCreate";
    CUresult r = CUC_DRV->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING);

    if (r == CUDA_SUCCESS) {
        call = "cuEventRecord";
        r = CUC_DRV->cuEventRecord(*ev, s->cu);
        if (r != CUDA_SUCCESS) {
            CUC_DRV->cuEventDestroy(*ev);
            *ev = NULL;
        }
    }
    if (r == CUDA_SUCCESS)
        return 0;
    if (CUC_DRV->cuStreamSynchronize(s->cu) == CUDA_SUCCESS)
        return 0;
    return cuc__cuda_err(r, call, "ordering the deferred free of a %zu-byte buffer "
                         "after its stream (and cuStreamSynchronize of that stream "
                         "failed too: the free may run before that work is done)",
                         b->size);
}

/* A last reference dropped while messages or leases keep the memory: the
 * free will wait for what stream has queued so far. */
static int defer_free(cuc_buffer *b, cuc_stream *stream)
{
    CUC__CTX_RESTORE(guard);
    cuc_pool *pool = b->pool;
    CUevent ev = NULL, old = NULL;
    cuc_stream *s;
    int rc, last;

    rc = cuc__stream_or_legacy(pool->dev, stream, &s);
    if (!rc)
        rc = cuc__device_activate(&guard, s->dev);
    /* The later free goes on this device's legacy stream, which orders it
     * after everything already queued there: only another stream needs an
     * event (two driver calls now, two more then, per buffer). */
    if (!rc && !cuc__buffer_on_legacy(b, s))
        rc = order_after(b, s, &ev);
    pthread_mutex_lock(&pool->lock);
    if (!rc && b->refs == 0 && ev) {
        old = b->free_after;
        b->free_after = ev;
        ev = NULL;
    }
    b->holds--; /* the hold cuc_buffer_unref_async took */
    last = cuc__buffer_unkept_locked(b);
    pthread_mutex_unlock(&pool->lock);
    if (ev)
        CUC_DRV->cuEventDestroy(ev);
    if (old)
        CUC_DRV->cuEventDestroy(old);
    if (last) {
        int rc2 = cuc__buffer_release(b, stream);
        if (!rc)
            rc = rc2;
    }
    return rc;
}

/* The last reference of a buffer inherited through fork (DESIGN.md,
 * "Fork"): the memory, its leases and the driver are the parent's; only
 * this process's copy of the object goes (the lease tables' unrefs send
 * nothing from here: lease.h). */
static int drop_inherited(cuc_buffer *b)
{
    cuc_pool *pool = b->pool;

    pthread_mutex_lock(&pool->lock);
    if (pool->last_found == b)
        pool->last_found = NULL;
    pthread_mutex_unlock(&pool->lock);
    for (size_t i = 0; i < b->nextra; i++)
        cuc__leases_unref(b->extra[i].leases);
    free(b->extra);
    cuc__leases_unref(b->anchor.leases);
    free(b->ipc);
    cuc__releases_drop(b->adopted); /* the owner is the parent's */
    cuc__buffer_obj_free(b);
    cuc_pool_unref(pool);
    return 0;
}

int cuc_buffer_unref_async(cuc_buffer *b, cuc_stream *stream)
{
    cuc_pool *pool;
    struct cuc__upstream *extra;
    size_t nextra;
    int rc, kept;

    if (!b)
        return 0;
    pool = b->pool;
    pthread_mutex_lock(&pool->lock);
    if (b->refs <= 0) {
        pthread_mutex_unlock(&pool->lock);
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_unref_async: the buffer has "
                           "no reference left (dropped twice?)");
    }
    if (--b->refs > 0) {
        pthread_mutex_unlock(&pool->lock);
        return 0;
    }
    if (b->creator != cuc__pid()) {
        /* messages of the child may still hold it: the last goes then */
        int last = cuc__buffer_unkept_locked(b);
        pthread_mutex_unlock(&pool->lock);
        return last ? drop_inherited(b) : 0;
    }
    /* Leases that only repeat one we keep go now (memory.h). */
    extra = take_extra_locked(b, &nextra);
    kept = b->holds || b->leases;
    if (!kept && !nextra && view_now(b)) {
        b->state = CUC__BUF_FREEING;
        return release_view_locked(b, stream, 0);
    }
    if (kept && cuc__buffer_on_legacy(b, stream)) {
        /* the later free goes on a legacy stream, after all it has queued:
         * no event to make, nothing to do unlocked */
        b->state = CUC__BUF_DEFERRED;
        pthread_mutex_unlock(&pool->lock);
        release_extra(extra, nextra);
        return 0;
    }
    if (kept) {
        b->state = CUC__BUF_DEFERRED;
        b->holds++; /* keeps b while the event is made unlocked */
    } else {
        b->state = CUC__BUF_FREEING;
    }
    pthread_mutex_unlock(&pool->lock);
    release_extra(extra, nextra);
    if (kept)
        return defer_free(b, stream);
    rc = cuc__buffer_release(b, stream);
    return rc;
}

/* ---- the lease callbacks (lease.h) ---- */

static void hold(void *obj)
{
    cuc_buffer *b = obj;

    pthread_mutex_lock(&b->pool->lock);
    b->holds++;
    pthread_mutex_unlock(&b->pool->lock);
}

static void unhold(void *obj)
{
    cuc_buffer *b = obj;
    int last;

    pthread_mutex_lock(&b->pool->lock);
    b->holds--;
    last = cuc__buffer_unkept_locked(b);
    if (last && b->creator == cuc__pid() && view_now(b)) {
        release_view_locked(b, NULL, 0); /* no caller to report to */
        return;
    }
    pthread_mutex_unlock(&b->pool->lock);
    if (last && b->creator != cuc__pid())
        drop_inherited(b); /* an inherited message destroyed in a child */
    else if (last)
        release_as(b, NULL, 0); /* no caller to report to */
}

/* After the last hold of b went (its state FREEING): its release, as
 * unhold() makes it. */
static void unheld_last(cuc_buffer *b)
{
    if (b->creator != cuc__pid()) {
        drop_inherited(b); /* an inherited message destroyed in a child */
    } else if (view_now(b)) {
        pthread_mutex_lock(&b->pool->lock);
        release_view_locked(b, NULL, 0);
    } else {
        release_as(b, NULL, 0); /* no caller to report to */
    }
}

/* unhold for many (a message's buffers as it goes), one lock a run of
 * buffers of one pool; the releases of those it kept last follow. */
static void unhold_many(const struct cuc__lease_att *atts, size_t n)
{
    for (size_t i = 0; i < n;) {
        cuc_pool *pool = ((cuc_buffer *)atts[i].obj)->pool;
        cuc_buffer *last[64];
        size_t k = 0;
        pthread_mutex_lock(&pool->lock);
        for (; i < n && k < CUC_ARRAY_LEN(last) && ((cuc_buffer *)atts[i].obj)->pool == pool;
             i++) {
            cuc_buffer *b = atts[i].obj;
            b->holds--;
            if (cuc__buffer_unkept_locked(b))
                last[k++] = b;
        }
        pthread_mutex_unlock(&pool->lock);
        for (size_t j = 0; j < k; j++)
            unheld_last(last[j]);
    }
}

static void lease_begin(void *obj)
{
    cuc_buffer *b = obj;

    pthread_mutex_lock(&b->pool->lock);
    b->leases++;
    b->pool->leases++;
    pthread_mutex_unlock(&b->pool->lock);
}

/* lease_begin for many, one lock a run of buffers of one pool. */
static void lease_begin_many(const struct cuc__lease_att *atts, size_t n)
{
    for (size_t i = 0; i < n;) {
        cuc_pool *pool = ((cuc_buffer *)atts[i].obj)->pool;
        pthread_mutex_lock(&pool->lock);
        for (; i < n && ((cuc_buffer *)atts[i].obj)->pool == pool; i++) {
            ((cuc_buffer *)atts[i].obj)->leases++;
            pool->leases++;
        }
        pthread_mutex_unlock(&pool->lock);
    }
}

static void lease_end(void *obj, uint64_t id, int why)
{
    cuc_buffer *b = obj;
    cuc_pool *pool = b->pool;
    int last;

    (void)id;
    (void)why; /* released, closed, died or never sent: the same to us */
    pthread_mutex_lock(&pool->lock);
    b->leases--;
    last = cuc__buffer_unkept_locked(b);
    if (!last) {
        pool->leases--;
        pthread_cond_broadcast(&pool->cond);
        pthread_mutex_unlock(&pool->lock);
        return;
    }
    /* The pool counts the lease until the free it allowed is done: a
     * pool's lease wait, on another thread, returns with its frees done. */
    cuc_pool_ref(pool);
    if (view_now(b)) {
        release_view_locked(b, NULL, 0);
    } else {
        pthread_mutex_unlock(&pool->lock);
        release_as(b, NULL, 0);
    }
    pthread_mutex_lock(&pool->lock);
    pool->leases--;
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
    cuc_pool_unref(pool);
}

/* The record of b, as it is while a message holds it (its export data
 * cached, nothing of it changing), under lease_id. */
static void fill_record(const cuc_buffer *b, uint64_t lease_id, struct cuc_buffer_record *rec)
{
    const cuc_buffer *root = b->root ? b->root : b;

    memcpy(rec->pool_id, b->pool->id, CUC_POOL_ID_LEN);
    rec->size = b->size;
    rec->offset = b->offset;
    rec->alloc_size = root->size;
    rec->lease_id = lease_id;
    memcpy(rec->export_data, root->export_data.reserved, sizeof(rec->export_data));
}

/* The lease ops' put (wire.h): a message's record of the buffer. */
static void put_record(const void *obj, uint16_t type, uint64_t lease_id, uint8_t *p)
{
    struct cuc_buffer_record rec;

    (void)type; /* the buffer's shape chose it at the add */
    fill_record(obj, lease_id, &rec);
    cuc__buffer_rec_write(&rec, p);
}

const struct cuc__lease_ops cuc__buffer_lease_ops = {lease_begin,      lease_end, hold, unhold,
                                                     lease_begin_many, unhold_many,
                                                     put_record};

/* ---- getters, lease counts ---- */

/* ---- gates: an attached buffer's memory waits for its lease ---- */

void cuc__buffer_set_gate(cuc_buffer *b, const cuc_msg *m)
{
    struct cuc__gate *g = cuc__gate_of_msg(m), *none = NULL;

    if (!g || __atomic_load_n(&b->gate, __ATOMIC_ACQUIRE))
        return;
    cuc__gate_ref(g);
    if (!__atomic_compare_exchange_n(&b->gate, &none, g, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        cuc__gate_unref(g); /* another message gave it one first */
}

int cuc__buffer_pass(const cuc_buffer *b)
{
    const cuc_buffer *r = b->root ? b->root : b;
    struct cuc__gate *g = __atomic_load_n(&b->gate, __ATOMIC_ACQUIRE);
    int rc = cuc__gate_pass(g, "an attached buffer");

    if (!rc && r != b)
        rc = cuc__gate_pass(__atomic_load_n(&r->gate, __ATOMIC_ACQUIRE),
                            "the allocation of an attached view");
    return rc;
}

int cuc_buffer_ready(const cuc_buffer *b)
{
    if (!b)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_ready: buf is NULL");
    return cuc__buffer_pass(b);
}

void *cuc_buffer_ptr(const cuc_buffer *b)
{
    if (CUC_UNLIKELY(cuc__buffer_pass(b) != 0))
        return NULL;
    return (void *)(uintptr_t)b->ptr;
}
size_t cuc_buffer_size(const cuc_buffer *b) { return b->size; }
cuc_device *cuc_buffer_device(const cuc_buffer *b) { return b->pool->dev; }
cuc_pool *cuc_buffer_pool(const cuc_buffer *b) { return b->pool; }
int cuc_buffer_is_imported(const cuc_buffer *b) { return b->imported; }

int cuc_buffer_lease_count(const cuc_buffer *cb, size_t *n)
{
    cuc_buffer *b = (cuc_buffer *)cb;

    if (!b || !n)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_lease_count: NULL argument");
    pthread_mutex_lock(&b->pool->lock);
    *n = b->leases;
    pthread_mutex_unlock(&b->pool->lock);
    return 0;
}

static void buffer_describe(const void *obj, char *out, size_t len)
{
    const cuc_buffer *b = obj;

    snprintf(out, len, "the %zu-byte buffer at %p", b->size, (void *)(uintptr_t)b->ptr);
}

struct cuc__lease_gauge *cuc__buffer_gauge(cuc_buffer *b, struct cuc__lease_gauge *g)
{
    *g = (struct cuc__lease_gauge){&b->pool->lock, &b->pool->cond, &b->leases,
                                   buffer_describe, b};
    return g;
}
