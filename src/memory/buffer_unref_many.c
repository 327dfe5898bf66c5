/* cuc_buffer_unref_many_async: the importer's drop of many buffers at once. One
 * by one, each imported buffer costs a stream synchronize and a release
 * message (a sendmsg here, a recvmsg and a wake-up at the exporter); a
 * batch frees them all, synchronizes each stream once and sends one
 * release per channel. Buffers that need more than that (other references
 * left, leases of their own, a deferred free, not imported) take the
 * ordinary cuc_buffer_unref_async() path. A view in the batch frees no
 * memory: it drops its allocation (whose last reference unmaps it and
 * waits for the stream) before the releases go. While the share point
 * runs, an imported pool buffer dropped on the legacy stream goes the
 * ordinary way instead: the settler frees it with the others dropped
 * since its last turn, and no thread here waits (memory/settle.h). */
#include "memory/buffer.h"
#include "os/proc.h"

#include <stdlib.h>

/* 1 if b's last reference frees it at once with exactly one upstream
 * lease (pool->lock held): it then joins the batch (refs 1 -> 0,
 * FREEING); 0 if it must go through cuc_buffer_unref_async() (also a
 * pool allocation dropped on its legacy stream while the settler runs,
 * settled: the settler takes those). */
static int take_simple_locked(cuc_buffer *b, cuc_stream *stream, int settled)
{
    int take = b->imported && b->creator == cuc__pid() && b->refs == 1 && !b->holds &&
               !b->leases && !b->nextra && b->state != CUC__BUF_FREEING &&
               !(settled && !b->ipc && !b->root && cuc__buffer_on_legacy(b, stream));

    if (take) {
        b->refs = 0;
        b->state = CUC__BUF_FREEING;
    }
    return take;
}

/* Sorts bufs[0..n) into the batch (from the front of out) and the others
 * (from the back: *nothers of them, in reverse), one lock a run of
 * buffers of one pool. Returns the batch's size. */
static size_t take_batch(cuc_buffer *const *bufs, size_t n, cuc_stream *stream,
                         cuc_buffer **out, size_t *nothers)
{
    size_t nb = 0, no = 0;
    int settled = cuc__settle_running();

    for (size_t i = 0; i < n;) {
        cuc_pool *pool;
        if (!bufs[i]) {
            i++;
            continue;
        }
        pool = bufs[i]->pool;
        pthread_mutex_lock(&pool->lock);
        for (; i < n && bufs[i] && bufs[i]->pool == pool; i++) {
            if (take_simple_locked(bufs[i], stream, settled))
                out[nb++] = bufs[i];
            else
                out[n - 1 - no++] = bufs[i];
        }
        pthread_mutex_unlock(&pool->lock);
    }
    *nothers = no;
    return nb;
}

/* The stream the batch's frees go on, resolved and made current (under
 * the call's guard) once a run of buffers of one device. */
struct free_stream {
    struct cuc__ctx_guard *guard;
    cuc_device *dev;
    cuc_stream *s;
    int rc;
};

/* The driver's free of b (in the batch: no deferred-free event). */
static int free_one(cuc_buffer *b, cuc_stream *stream, struct free_stream *fs)
{
    if (fs->dev != b->pool->dev || !fs->s) {
        fs->dev = b->pool->dev;
        fs->rc = cuc__stream_or_legacy(fs->dev, stream, &fs->s);
        if (!fs->rc)
            fs->rc = cuc__device_activate(fs->guard, fs->s->dev);
        if (fs->rc)
            fs->s = NULL;
    }
    if (!fs->s)
        return cuc__buffer_free_memory(b, stream, 0); /* says what failed */
    return b->free_after ? cuc__buffer_free_memory(b, stream, 0) : cuc__buffer_free_on(b, fs->s);
}

/* Waits once for each distinct stream the batch's frees were queued on. */
static int sync_streams(cuc_buffer **batch, size_t n, cuc_stream *stream,
                        struct cuc__ctx_guard *g)
{
    CUstream done[8];
    cuc_device *last = NULL;
    size_t ndone = 0;
    int rc = 0;

    for (size_t i = 0; i < n; i++) {
        cuc_stream *s;
        size_t k;
        CUresult r;

        if (batch[i]->pool->dev == last)
            continue; /* the one just waited for, or given up on */
        last = batch[i]->pool->dev;
        if (cuc__stream_or_legacy(batch[i]->pool->dev, stream, &s))
            continue;
        for (k = 0; k < ndone && done[k] != s->cu; k++)
            ;
        if (k < ndone)
            continue;
        if (cuc__device_activate(g, s->dev) == 0) {
            r = CUC_DRV->cuStreamSynchronize(s->cu);
            if (r != CUDA_SUCCESS && !rc)
                rc = cuc__cuda_err(r, "cuStreamSynchronize", "after freeing %zu "
                                   "imported buffers", n);
        }
        if (ndone < CUC_ARRAY_LEN(done))
            done[ndone++] = s->cu;
    }
    return rc;
}

/* One release per channel, carrying the lease ids of every buffer of the
 * batch that came on it; ids is scratch of n entries. */
static void release_grouped(cuc_buffer **batch, size_t n, uint64_t *ids)
{
    for (size_t i = 0; i < n; i++) {
        struct cuc__leases *l = batch[i]->anchor.leases;
        size_t k = 0;

        if (!l)
            continue;
        for (size_t j = i; j < n; j++)
            if (batch[j]->anchor.leases == l) {
                ids[k++] = batch[j]->anchor.id;
                batch[j]->anchor.leases = NULL;
                if (j != i)
                    cuc__leases_unref(l); /* the reference each one held */
            }
        /* A channel already closed has nobody left to tell. */
        cuc__leases_release(l, ids, k);
        cuc__leases_unref(l);
    }
}

/* An imported legacy-IPC base of the batch, after its stream was waited
 * for (a base of the device made current last costs no driver call). */
static int close_opened(cuc_buffer *b, struct cuc__ctx_guard *g)
{
    CUresult r;
    int rc = cuc__device_activate(g, b->pool->dev);

    if (rc)
        return rc;
    r = CUC_DRV->cuIpcCloseMemHandle(b->ptr);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuIpcCloseMemHandle", "%zu-byte allocation opened by "
                             "legacy IPC on device %s", b->size, b->pool->dev->uuid_str);
    return 0;
}

/* Out of their pools' tables, one lock a run of one pool; a view's root
 * reference dropped there too when it is not the last (root then NULL:
 * the caller drops the others, which may unmap). */
static void forget_all(cuc_buffer **batch, size_t n)
{
    for (size_t i = 0; i < n;) {
        cuc_pool *pool = batch[i]->pool;
        pthread_mutex_lock(&pool->lock);
        for (; i < n && batch[i]->pool == pool; i++) {
            cuc_buffer *b = batch[i];
            cuc__buffer_forget_locked(b);
            if (b->ipc)
                cuc__ipc_forget_locked(b);
            if (b->in_views)
                cuc__htab_remove(&pool->views, &b->node);
            b->in_views = 0;
            if (b->root && b->root->refs > 1) {
                b->root->refs--;
                b->root = NULL;
            }
        }
        pthread_cond_broadcast(&pool->cond);
        pthread_mutex_unlock(&pool->lock);
    }
}

static void destroy_all(cuc_buffer **batch, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cuc_pool *pool = batch[i]->pool;
        free(batch[i]->ipc);
        cuc__buffer_obj_free(batch[i]);
        cuc_pool_unref(pool);
    }
}

int cuc_buffer_unref_many_async(cuc_buffer *const *bufs, size_t n, cuc_stream *stream)
{
    CUC__CTX_RESTORE(guard);
    cuc_buffer **batch;
    struct free_stream fs = {&guard, NULL, NULL, 0};
    uint64_t *ids;
    size_t nb, nothers;
    int rc = 0;

    if (!bufs && n)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_unref_many_async: bufs is NULL");
    batch = malloc(n * sizeof(*batch) + n * sizeof(*ids) + 1);
    if (!batch)
        return cuc__seterr(CUC_E_NOMEM, "out of memory dropping %zu buffers", n);
    ids = (uint64_t *)(batch + n);
    nb = take_batch(bufs, n, stream, batch, &nothers);
    for (size_t k = 0; k < nothers; k++) {
        int rc1 = cuc_buffer_unref_async(batch[n - 1 - k], stream);
        if (rc1 && !rc)
            rc = rc1;
    }
    for (size_t i = 0; i < nb; i++) {
        /* an opened legacy-IPC base is closed once the streams are done */
        int rc1 = batch[i]->root || batch[i]->ipc ? 0 : free_one(batch[i], stream, &fs);
        if (rc1) {
            /* its memory may still be in use: no release for it */
            cuc__upstream_keep(&batch[i]->anchor, 1);
            if (!rc) {
                rc = rc1;
                cuc__buffer_note_kept();
            }
        }
    }
    if (nb) {
        int rc1 = sync_streams(batch, nb, stream, &guard);
        if (rc1) {
            /* which frees are done is unknown: none is released */
            for (size_t i = 0; i < nb; i++)
                cuc__upstream_keep(&batch[i]->anchor, 1);
            if (!rc) {
                rc = rc1;
                cuc__buffer_note_kept();
            }
        }
    }
    for (size_t i = 0; i < nb; i++) {
        int rc1 = batch[i]->ipc ? close_opened(batch[i], &guard) : 0;
        if (rc1) {
            cuc__upstream_keep(&batch[i]->anchor, 1); /* as a failed free */
            if (!rc) {
                rc = rc1;
                cuc__buffer_note_kept();
            }
        }
    }
    forget_all(batch, nb);
    for (size_t i = 0; i < nb; i++) {
        /* before the releases: an allocation's last view unmaps it (the
         * roots not left NULL by forget_all) */
        int rc1 = batch[i]->root ? cuc_buffer_unref_async(batch[i]->root, stream) : 0;
        if (rc1 && !rc)
            rc = rc1;
    }
    release_grouped(batch, nb, ids);
    destroy_all(batch, nb);
    free(batch);
    return rc;
}
