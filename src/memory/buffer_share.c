/* Buffers in messages: a buffer travels as its pool id, its pointer
 * export data (computed once and cached), its size and a lease id
 * (wire/rec_buffer.c). Import goes through the pool's table of buffers by
 * export data (buffer.c), so that the buffer this process already has is
 * found again (mapped once: the driver does not count repeated imports)
 * and a buffer that comes back to its allocating process is the original. */
#include "memory/buffer.h"
#include "wire/records.h"

#include <stdlib.h>
#include <string.h>

/* b's export data: cached, or computed by the driver now and made findable
 * in the pool's table. */
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
    if (!b->have_export)
        rc = cuc__buffer_index_locked(b, &d);
    if (!rc)
        *out = b->export_data;
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

static int same_upstream(const struct cuc__upstream *a, const struct cuc__upstream *b)
{
    return a->leases == b->leases && a->id == b->id;
}

/* Records up on b, or drops it when b already has it (pool->lock held). */
static int add_upstream_locked(cuc_buffer *b, const struct cuc__upstream *up, int *dup)
{
    *dup = !up->leases || same_upstream(&b->anchor, up);
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

/* Another reference to b, found again (pool->lock held). *stale gets the
 * event of a deferred free that no longer happens. */
static int take_again_locked(cuc_buffer *b, size_t size, const struct cuc__upstream *up,
                             CUevent *stale)
{
    int dup, rc;

    if (b->size != size)
        return cuc__seterr(CUC_E_BADMSG, "buffer record of pool %s: size %zu, but "
                           "the buffer with that export data is %zu bytes here",
                           cuc__pool_id_hex(b->pool->id).s, size, b->size);
    rc = add_upstream_locked(b, up, &dup);
    if (rc)
        return rc;
    if (dup && up->leases)
        cuc__leases_unref(up->leases);
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
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemPoolImportPointer", "buffer of %zu bytes of pool "
                             "%s (device %s): the export data does not name a live "
                             "allocation of that pool", size, cuc__pool_id_hex(pool->id).s,
                             pool->dev->uuid_str);
    rc = cuc__buffer_new(pool, ptr, size, 1, &b);
    if (!rc) {
        rc = cuc__buffer_index_locked(b, d);
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
    b->anchor = *up;
    *out = b;
    return 0;
}

/* The buffer of pool with export data d, with a new reference: for a pool
 * created here, the allocation itself (CUC_E_NOT_FOUND if none); for an
 * imported pool, the existing import or a new one (a size that the first
 * import gave differently is CUC_E_BADMSG). up (leases may be NULL) is
 * recorded as a lease to release: taken over on success. */
static int import(cuc_pool *pool, const CUmemPoolPtrExportData *d, size_t size,
                  const struct cuc__upstream *up, cuc_buffer **out)
{
    CUevent stale = NULL;
    cuc_buffer *b;
    int rc;

    pthread_mutex_lock(&pool->lock);
    b = cuc__buffer_find_locked(pool, d);
    if (b)
        rc = take_again_locked(b, size, up, &stale);
    else if (!pool->imported)
        rc = cuc__seterr(CUC_E_NOT_FOUND, "no buffer of pool %s, which was created in "
                         "this process, has this export data: it was freed here",
                         cuc__pool_id_hex(pool->id).s);
    else
        rc = import_new_locked(pool, d, size, up, &b);
    pthread_mutex_unlock(&pool->lock);
    if (stale && cuc__device_activate(pool->dev) == 0)
        CUC_DRV->cuEventDestroy(stale);
    if (!rc)
        *out = b;
    return rc;
}

int cuc_msg_add_buffer(cuc_msg *m, const cuc_buffer *cb)
{
    cuc_buffer *b = (cuc_buffer *)cb;
    struct cuc_buffer_record rec;
    CUmemPoolPtrExportData d;
    int rc;

    if (!m || !b)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_buffer: NULL argument");
    rc = cuc__buffer_export(b, &d);
    if (rc)
        return rc;
    memcpy(rec.pool_id, b->pool->id, CUC_POOL_ID_LEN);
    rec.size = b->size;
    rec.offset = 0;
    rec.lease_id = cuc__lease_id_next();
    memcpy(rec.export_data, d.reserved, sizeof(rec.export_data));
    /* The lease first: a record without its lease would let the memory go
     * while the importer maps it. */
    rc = cuc__msg_lease_attach(m, rec.lease_id, &cuc__buffer_lease_ops, b);
    if (rc)
        return rc;
    rc = cuc__buffer_rec_put(m, &rec);
    if (rc)
        cuc__msg_lease_pop(m); /* no record: nothing to lease */
    return rc;
}

int cuc_msg_get_buffer(const cuc_msg *m, size_t index, cuc_buffer **out)
{
    struct cuc_buffer_record rec;
    CUmemPoolPtrExportData d;
    struct cuc__upstream up;
    cuc_pool *pool;
    cuc_buffer *b;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_buffer: NULL argument");
    rc = cuc_msg_read_buffer(m, index, &rec);
    if (rc)
        return rc;
    pool = cuc__pool_find(rec.pool_id);
    if (!pool)
        return cuc__seterr(CUC_E_POOL_NOT_IMPORTED, "buffer record %zu belongs to pool "
                           "%s, which this process has not imported: get the pool's "
                           "record (cuc_msg_get_pool) first; the sender must send the "
                           "pool before its buffers", index,
                           cuc__pool_id_hex(rec.pool_id).s);
    memcpy(d.reserved, rec.export_data, sizeof(d.reserved));
    up.leases = cuc__leases_of_msg(m);
    up.id = rec.lease_id;
    if (up.leases)
        cuc__leases_ref(up.leases);
    rc = import(pool, &d, (size_t)rec.size, &up, &b);
    if (rc && up.leases)
        cuc__leases_unref(up.leases);
    cuc_pool_unref(pool);
    if (!rc)
        *out = b;
    return rc;
}
