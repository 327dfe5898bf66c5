/* A buffer's identity across processes: its pointer export data, computed
 * once and cached, and each pool's table of its buffers by export data,
 * through which an import finds the buffer this process already has
 * (mapped once: the driver does not count repeated imports) and a buffer
 * that comes back to its allocating process finds the original. */
#include "memory_impl.h"
#include "lease.h"

#include <stdlib.h>
#include <string.h>

static cuc_buffer *of_node(const struct cuc__hnode *n)
{
    return (cuc_buffer *)((char *)n - offsetof(cuc_buffer, node));
}

static int same_export(const struct cuc__hnode *n, const void *key)
{
    return memcmp(of_node(n)->export_data.reserved, key, sizeof(of_node(n)->export_data.reserved)) == 0;
}

static uint64_t export_hash(const CUmemPoolPtrExportData *d)
{
    return cuc__hash_bytes(d->reserved, sizeof(d->reserved));
}

static int pool_err(int status, const cuc_pool *p, const char *fmt)
{
    char hex[2 * CUC_POOL_ID_LEN + 1];

    cuc__pool_id_hex(p->id, hex);
    return cuc__seterr(status, fmt, hex);
}

int cuc__buffer_export(const cuc_buffer *cb, CUmemPoolPtrExportData *out)
{
    cuc_buffer *b = (cuc_buffer *)cb;
    cuc_pool *pool = b->pool;
    CUmemPoolPtrExportData d;
    CUresult r;
    int rc = 0;

    if (!(pool->flags & CUC_POOL_IPC))
        return cuc__seterr(CUC_E_NOT_SERIALIZABLE, "the buffer's %s pool (device %s) "
                           "was created without CUC_POOL_IPC: only buffers of an IPC "
                           "pool can cross processes; create the pool with "
                           ".flags = CUC_POOL_IPC", cuc__pool_kind_name(pool->kind),
                           cuc_device_uuid_string(pool->dev));
    pthread_mutex_lock(&pool->lock);
    if (b->have_export) {
        *out = b->export_data;
        pthread_mutex_unlock(&pool->lock);
        return 0;
    }
    pthread_mutex_unlock(&pool->lock);
    /* ~18 us in the driver: not under the pool's lock. Two threads racing
     * here both ask; the first answer is kept. */
    rc = cuc__device_activate(pool->dev);
    if (rc)
        return rc;
    memset(&d, 0, sizeof(d));
    r = CUC_DRV->cuMemPoolExportPointer(&d, b->ptr);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemPoolExportPointer", "%zu-byte buffer of the IPC "
                             "%s pool of device %s", b->size, cuc__pool_kind_name(pool->kind),
                             cuc_device_uuid_string(pool->dev));
    pthread_mutex_lock(&pool->lock);
    if (!b->have_export) {
        b->export_data = d;
        b->node.hash = export_hash(&d);
        rc = cuc__htab_insert(&pool->bufs, &b->node);
        b->have_export = rc == 0;
    }
    if (!rc)
        *out = b->export_data;
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

void cuc__buffer_forget_locked(cuc_buffer *b)
{
    if (b->have_export)
        cuc__htab_remove(&b->pool->bufs, &b->node);
    b->have_export = 0;
}

static int same_upstream(const struct cuc__upstream *a, const struct cuc__upstream *b)
{
    return a->ch == b->ch && a->id == b->id;
}

/* Records up on b, or drops it when b already has it (pool->lock held). */
static int add_upstream_locked(cuc_buffer *b, const struct cuc__upstream *up, int *dup)
{
    *dup = !up->ch || same_upstream(&b->anchor, up);
    for (size_t i = 0; !*dup && i < b->nextra; i++)
        *dup = same_upstream(&b->extra[i], up);
    if (*dup)
        return 0;
    if (b->nextra == b->extra_cap) {
        size_t cap = b->extra_cap ? 2 * b->extra_cap : 4;
        void *p = realloc(b->extra, cap * sizeof(*b->extra));
        if (!p)
            return cuc__seterr(CUC_E_NOMEM, "out of memory recording lease %llu of "
                               "an imported buffer", (unsigned long long)up->id);
        b->extra = p;
        b->extra_cap = cap;
    }
    b->extra[b->nextra++] = *up;
    return 0;
}

/* The buffer of pool with export data d that is not being freed, waiting
 * for one that is (pool->lock held). */
static cuc_buffer *find_locked(cuc_pool *pool, const CUmemPoolPtrExportData *d)
{
    for (;;) {
        struct cuc__hnode *n = cuc__htab_find(&pool->bufs, export_hash(d), same_export,
                                              d->reserved);
        if (!n)
            return NULL;
        if (of_node(n)->state != CUC__BUF_FREEING)
            return of_node(n);
        /* an import of the same memory must wait until the driver's free
         * of the old one is done */
        pthread_cond_wait(&pool->cond, &pool->lock);
    }
}

/* Another reference to b, found again (pool->lock held). *stale gets the
 * event of a deferred free that no longer happens. */
static int take_again_locked(cuc_buffer *b, size_t size, const struct cuc__upstream *up,
                             CUevent *stale)
{
    int dup, rc;

    if (b->size != size) {
        char hex[2 * CUC_POOL_ID_LEN + 1];
        cuc__pool_id_hex(b->pool->id, hex);
        return cuc__seterr(CUC_E_BADMSG, "buffer record of pool %s: size %zu, but "
                           "the buffer with that export data is %zu bytes here", hex,
                           size, b->size);
    }
    rc = add_upstream_locked(b, up, &dup);
    if (rc)
        return rc;
    if (dup && up->ch)
        cuc__channel_unref(up->ch);
    b->refs++;
    if (b->state == CUC__BUF_DEFERRED) {
        b->state = CUC__BUF_LIVE;
        *stale = b->free_after;
        b->free_after = NULL;
    }
    return 0;
}

static int import_new_locked(cuc_pool *pool, const CUmemPoolPtrExportData *d, size_t size,
                             const struct cuc__upstream *up, cuc_buffer **out)
{
    CUmemPoolPtrExportData copy = *d;
    CUdeviceptr ptr = 0;
    cuc_buffer *b;
    CUresult r;
    int rc;

    rc = cuc__device_activate(pool->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuMemPoolImportPointer(&ptr, pool->cu, &copy);
    if (r != CUDA_SUCCESS) {
        char hex[2 * CUC_POOL_ID_LEN + 1];
        cuc__pool_id_hex(pool->id, hex);
        return cuc__cuda_err(r, "cuMemPoolImportPointer", "buffer of %zu bytes of pool "
                             "%s (device %s): the export data does not name a live "
                             "allocation of that pool", size, hex,
                             cuc_device_uuid_string(pool->dev));
    }
    rc = cuc__buffer_new(pool, ptr, size, 1, &b);
    if (!rc) {
        b->export_data = *d;
        b->node.hash = export_hash(d);
        rc = cuc__htab_insert(&pool->bufs, &b->node);
        if (rc) {
            b->refs = 0;
            free(b);
            cuc_pool_unref(pool); /* not the last: the caller holds one */
        }
    }
    if (rc) {
        CUC_DRV->cuMemFreeAsync(ptr, CU_STREAM_LEGACY);
        return rc;
    }
    b->have_export = 1;
    b->anchor = *up;
    *out = b;
    return 0;
}

int cuc__buffer_import(cuc_pool *pool, const CUmemPoolPtrExportData *d, size_t size,
                       const struct cuc__upstream *up, cuc_buffer **out)
{
    CUevent stale = NULL;
    cuc_buffer *b;
    int rc;

    pthread_mutex_lock(&pool->lock);
    b = find_locked(pool, d);
    if (b)
        rc = take_again_locked(b, size, up, &stale);
    else if (!pool->imported)
        rc = pool_err(CUC_E_NOT_FOUND, pool, "no buffer of pool %s, which was created "
                      "in this process, has this export data: it was freed here");
    else
        rc = import_new_locked(pool, d, size, up, &b);
    pthread_mutex_unlock(&pool->lock);
    if (stale && cuc__device_activate(pool->dev) == 0)
        CUC_DRV->cuEventDestroy(stale);
    if (!rc)
        *out = b;
    return rc;
}
