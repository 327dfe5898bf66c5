/* Buffers in messages: a buffer travels as its pool id, its pointer
 * export data (computed once and cached), its size and a lease id
 * (wire/rec_buffer.c); a view as its allocation's, plus its offset and
 * the allocation's size. Import goes through the pool's table of buffers
 * by export data (buffer.c: by the bytes of it the driver writes), so
 * that the buffer this process already has is found again (mapped once:
 * the driver does not count repeated imports) and a buffer that comes
 * back to its allocating process is the original; a new import whose
 * pointer is an import already here (the same allocation under other
 * export data) makes no second object; a view then through the pool's
 * table of views
 * (buffer_view.c), with no driver call once its allocation is here.
 * Wrapped legacy-IPC memory (buffer_ipc.c) travels as an ipc buffer
 * record and imports through its device's legacy pool the same way. */
#include "memory/buffer.h"
#include "memory/settle.h"
#include "wire/records.h"

#include <stdlib.h>
#include <string.h>

/* b's export data: cached, or computed by the driver now and made findable
 * in the pool's table. */
int cuc__buffer_export(const cuc_buffer *cb, CUmemPoolPtrExportData *out)
{
    CUC__CTX_KEEP(guard);
    cuc_buffer *b = (cuc_buffer *)cb;
    cuc_pool *pool = b->pool;
    CUmemPoolPtrExportData d;
    CUresult r;
    int rc = 0;

    if (b->root)
        return cuc__buffer_export(b->root, out);
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
    rc = cuc__device_activate(&guard, pool->dev);
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
        rc = cuc__buffer_index_locked(b, &d, 0);
    if (!rc)
        *out = b->export_data;
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

static int same_upstream(const struct cuc__upstream *a, const struct cuc__upstream *b)
{
    return a->leases == b->leases && a->id == b->id;
}

/* 1 if b holds the lease up (it arrived under it, and has not released it). */
static int holds_upstream(const cuc_buffer *b, const struct cuc__upstream *up)
{
    if (same_upstream(&b->anchor, up))
        return 1;
    for (size_t i = 0; i < b->nextra; i++)
        if (same_upstream(&b->extra[i], up))
            return 1;
    return 0;
}

/* Records up on b, or drops it when b already has it (pool->lock held). */
static int add_upstream_locked(cuc_buffer *b, const struct cuc__upstream *up, int *dup)
{
    /* An import that began with a view has no lease of its own: the first
     * record of the whole allocation gives it one, kept to the end. */
    if (up->leases && b->imported && !b->anchor.leases) {
        b->anchor = *up;
        *dup = 0;
        return 0;
    }
    *dup = !up->leases || holds_upstream(b, up);
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

/* Finding 13.7: export data names an allocation, but its size is the
 * record's word. The driver mapped the allocation: a record may claim no
 * more than that. */
static int check_mapped(cuc_pool *pool, CUdeviceptr ptr, uint64_t alloc_size)
{
    CUdeviceptr base = 0;
    size_t mapped = 0;
    CUresult r = CUC_DRV->cuMemGetAddressRange(&base, &mapped, ptr);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemGetAddressRange", "checking the size of a buffer "
                             "imported from pool %s (device %s)",
                             cuc__pool_id_hex(pool->id).s, pool->dev->uuid_str);
    if (base != ptr || alloc_size > mapped)
        return cuc__seterr(CUC_E_BADMSG, "buffer record of pool %s claims a %llu-byte "
                           "allocation, but the allocation its export data names is "
                           "%zu bytes (at offset %llu of what the driver mapped): "
                           "refused", cuc__pool_id_hex(pool->id).s,
                           (unsigned long long)alloc_size, mapped,
                           (unsigned long long)(ptr - base));
    return 0;
}

/* The driver's import of a record gave the pointer of b, an import this
 * process has already: the same allocation, named by other export data
 * (in the bytes the driver writes, which two exports of one pointer
 * agree on: docs/wire-format.md). Refused; the import is not undone, as
 * the driver does not count imports of one pointer and its free would
 * unmap b too (sim/FACTS.md F29). */
static int imported_twice(const cuc_buffer *b, uint64_t alloc_size)
{
    return cuc__seterr(CUC_E_BADMSG, "buffer record of pool %s (a %llu-byte allocation): "
                       "the driver mapped it at the address of the %zu-byte buffer this "
                       "process imported from that pool under other export data: one "
                       "allocation named two ways, refused (a sender sends the export "
                       "data it cached)", cuc__pool_id_hex(b->pool->id).s,
                       (unsigned long long)alloc_size, b->size);
}

/* A new import of the allocation of export data d, of hash (or 0), with
 * refs 1 and no lease yet, the pool's device made current under g: 0 with
 * *out new; 1 with *out the import of d that another thread made
 * meanwhile (its free, at the same address, was awaited): the caller
 * takes it again; or a failure. */
static int import_new_locked(cuc_pool *pool, const CUmemPoolPtrExportData *d, uint64_t hash,
                             uint64_t alloc_size, struct cuc__ctx_guard *g,
                             cuc_buffer **out)
{
    CUmemPoolPtrExportData copy = *d;
    CUdeviceptr ptr = 0;
    cuc_buffer *b;
    CUresult r;
    int rc;

    rc = cuc__device_activate(g, pool->dev);
    if (!rc)
        rc = cuc__settle_wait(pool->dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuMemPoolImportPointer(&ptr, pool->cu, &copy);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemPoolImportPointer", "buffer of %llu bytes of pool "
                             "%s (device %s): %s", (unsigned long long)alloc_size,
                             cuc__pool_id_hex(pool->id).s, pool->dev->uuid_str,
                             r == CUDA_ERROR_ALREADY_MAPPED
                                 ? "the allocation is mapped here already, under other "
                                   "export data: one allocation named two ways, refused"
                                 : "the export data does not name a live allocation of "
                                   "that pool");
    b = cuc__buffer_import_at_locked(pool, ptr);
    if (b && memcmp(b->export_data.reserved, d->reserved, CUC__EXPORT_KEY_LEN) == 0) {
        *out = b;
        return 1;
    }
    if (b)
        return imported_twice(b, alloc_size);
    rc = check_mapped(pool, ptr, alloc_size);
    if (!rc)
        rc = cuc__buffer_new(pool, ptr, (size_t)alloc_size, 1, &b);
    if (!rc) {
        rc = cuc__buffer_index_locked(b, d, hash);
        if (rc) {
            b->refs = 0;
            cuc__buffer_obj_free(b);
            cuc_pool_unref(pool); /* not the last: the caller holds one */
        }
    }
    if (rc) {
        if (CUC_DRV->cuMemFreeAsync(ptr, CU_STREAM_LEGACY) == CUDA_SUCCESS)
            cuc__settle_freed(pool->dev);
        return rc;
    }
    *out = b;
    return 0;
}

/* The allocation of pool with export data d and alloc_size bytes, with a
 * new reference: for a pool created here, the allocation itself
 * (CUC_E_NOT_FOUND if none); for an imported pool, the existing import or
 * a new one (a size that the first import gave differently is
 * CUC_E_BADMSG). *fresh says it was imported now. */
static int root_locked(cuc_pool *pool, const CUmemPoolPtrExportData *d, uint64_t alloc_size,
                       struct cuc__ctx_guard *g, cuc_buffer **out, int *fresh,
                       CUevent *stale)
{
    static const struct cuc__upstream none;
    uint64_t hash;
    cuc_buffer *b = cuc__buffer_find_locked(pool, d, &hash);
    int rc = 1;

    *fresh = 0;
    if (!b && !pool->imported)
        return cuc__seterr(CUC_E_NOT_FOUND, "no buffer of pool %s, which was created in "
                           "this process, has this export data: it was freed here",
                           cuc__pool_id_hex(pool->id).s);
    if (!b) {
        rc = import_new_locked(pool, d, hash, alloc_size, g, &b);
        *fresh = rc == 0;
    }
    if (rc == 1)
        rc = take_again_locked(b, (size_t)alloc_size, &none, stale);
    if (!rc)
        *out = b;
    return rc;
}

/* The view of root at (off, size) with a new reference, found or made;
 * takes over the caller's reference to root. up as for import(). */
static int view_locked(cuc_buffer *root, uint64_t off, uint64_t size,
                       const struct cuc__upstream *up, cuc_buffer **out, CUevent *stale)
{
    cuc_buffer *v = cuc__view_find_locked(root, (size_t)off, (size_t)size);
    int rc;

    if (v) {
        rc = take_again_locked(v, (size_t)size, up, stale);
        if (!rc)
            root->refs--; /* the view found holds its own */
    } else {
        rc = cuc__view_new(root, (size_t)off, (size_t)size, &v);
        if (!rc) {
            v->anchor = *up;
            cuc__view_insert_locked(v); /* not found just now */
        }
    }
    if (!rc)
        *out = v;
    return rc;
}

/* The part (off, size) of root with a new reference: root itself for a
 * record of all of it (fresh: imported now), else a view of it; takes over
 * the caller's reference to root on success. up as for import(). */
static int attach_locked(cuc_buffer *root, int fresh, uint64_t off, uint64_t size,
                         const struct cuc__upstream *up, cuc_buffer **out, CUevent *stale)
{
    int rc = 0, dup;

    if (off != 0 || size != root->size)
        return view_locked(root, off, size, up, out, stale);
    if (fresh) {
        root->anchor = *up;
    } else {
        rc = add_upstream_locked(root, up, &dup);
        if (!rc && dup && up->leases)
            cuc__leases_unref(up->leases);
    }
    if (!rc)
        *out = root;
    return rc;
}

/* The legacy-IPC allocation rec names, with a new reference: the one
 * opened (or wrapped, in the exporting process) for its (exporter,
 * generation), else opened now (pool->lock held). */
static int ipc_root_locked(cuc_pool *pool, const struct cuc_ipc_buffer_record *rec,
                           cuc_buffer **out, int *fresh, CUevent *stale)
{
    static const struct cuc__upstream none;
    cuc_buffer *b = cuc__ipc_find_locked(pool, rec->exporter, rec->generation);
    int rc;

    *fresh = 0;
    if (b && memcmp(b->ipc->handle.reserved, rec->handle, CUC_IPC_HANDLE_LEN) != 0)
        return cuc__seterr(CUC_E_BADMSG, "ipc buffer record of generation %llu: its "
                           "handle differs from the one that generation first gave "
                           "here: refused", (unsigned long long)rec->generation);
    if (b)
        rc = take_again_locked(b, (size_t)rec->base_size, &none, stale);
    else if (cuc__ipc_is_self(rec->exporter))
        rc = cuc__seterr(CUC_E_NOT_FOUND, "ipc buffer record of generation %llu was "
                         "wrapped in this process, and is no longer: its buffers are "
                         "gone", (unsigned long long)rec->generation);
    else
        rc = cuc__ipc_open_locked(pool, rec, &b), *fresh = 1;
    if (!rc)
        *out = b;
    return rc;
}

/* A wrapped buffer's record: its allocation's handle and identity. */
static int add_ipc(cuc_msg *m, cuc_buffer *b)
{
    struct cuc_ipc_buffer_record rec;
    cuc_buffer *root = b->root ? b->root : b;
    int rc;

    cuc__ipc_fill(root, &rec);
    rec.offset = b->offset;
    rec.size = b->size;
    rc = cuc__msg_lease_attach(m, &cuc__buffer_lease_ops, b, &rec.lease_id);
    if (rc)
        return rc;
    rc = cuc__ipc_buffer_rec_put(m, &rec);
    if (rc)
        cuc__msg_lease_pop(m);
    return rc;
}

/* b's export data when it is cached, with the hold a message takes on b,
 * under one lock: 1, or 0 with nothing taken. */
static int cached_export_hold(cuc_buffer *b, CUmemPoolPtrExportData *out)
{
    const cuc_buffer *root = b->root ? b->root : b;
    int have;

    pthread_mutex_lock(&b->pool->lock); /* a view's pool is its root's */
    have = root->have_export;
    if (have) {
        *out = root->export_data;
        b->holds++;
    }
    pthread_mutex_unlock(&b->pool->lock);
    return have;
}

int cuc_msg_add_buffer(cuc_msg *m, const cuc_buffer *cb)
{
    cuc_buffer *b = (cuc_buffer *)cb;
    CUmemPoolPtrExportData d;
    int rc, held, view;

    if (!m || !b)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_buffer: NULL argument");
    if (b->size == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_buffer: the buffer has size 0: "
                           "there is nothing to share (send its size, and allocate "
                           "0 bytes on the other side)");
    if ((b->root ? b->root : b)->ipc)
        return add_ipc(m, b);
    held = cached_export_hold(b, &d);
    rc = held ? 0 : cuc__buffer_export(b, &d);
    if (rc)
        return rc;
    /* The record and its lease in one: the message keeps b, and b's record
     * is written from b when the message is encoded. */
    view = b->offset != 0 || (b->root && b->size != b->root->size);
    rc = cuc__buffer_rec_add_leased(m, view, &cuc__buffer_lease_ops, b, held);
    if (rc && held)
        cuc__buffer_lease_ops.unref(b);
    return rc;
}

/* ---- a record taken again ---- */

/* Record i, taken before, whose lease its buffer released: refused, where
 * an import would hand out memory whose lease has ended. */
static int lease_ended(size_t i, uint64_t lease_id)
{
    return cuc__seterr(CUC_E_NOT_FOUND, "buffer record %zu of this message was taken "
                       "before and the buffer it gave has been dropped since: its lease "
                       "%llu ended, and the sender may have freed the memory; keep a "
                       "reference to the buffer while it is in use, or have it sent "
                       "again", i, (unsigned long long)lease_id);
}

/* Record i was taken before (cuc__msg_taken): its lease is still held
 * when root (the allocation found by the record, or NULL) or its part
 * (off, size) holds up; else the object it gave was dropped and the lease
 * released. */
static int check_retake_locked(cuc_buffer *root, uint64_t off, uint64_t size,
                               const struct cuc__upstream *up, size_t i)
{
    cuc_buffer *part = root;

    if (root && (off != 0 || size != root->size))
        part = cuc__view_find_locked(root, (size_t)off, (size_t)size);
    return part && holds_upstream(part, up) ? 0 : lease_ended(i, up->id);
}

/* ---- many buffers of a message at once ---- */

/* The most imports made under one hold of a pool's lock (their stale
 * events wait in an array until it is released). */
#define RUN_MAX 64u

/* What a run's records must share, and how one of them is taken under
 * the pool's lock (*root: a root reference to drop if the take failed
 * after finding it): 1 when record i is not of the run (it ends there),
 * 0 with *out, or a failure. */
struct run {
    cuc_pool *pool;
    const cuc_uuid *device; /* ipc records: their GPU's UUID; else NULL */
    struct cuc__leases *leases;
    struct cuc__ctx_guard *guard; /* get_run's: its imports' device made current */
};

static int take_pool_locked(const cuc_msg *m, size_t i, struct run *r,
                            struct cuc__upstream *up, cuc_buffer **root, cuc_buffer **out,
                            CUevent stale[2])
{
    struct cuc_buffer_record rec;
    CUmemPoolPtrExportData d;
    int rc, fresh;

    if (cuc_msg_read_buffer(m, i, &rec) != 0 ||
        memcmp(rec.pool_id, r->pool->id, CUC_POOL_ID_LEN) != 0)
        return 1;
    up->id = rec.lease_id;
    memcpy(d.reserved, rec.export_data, sizeof(d.reserved));
    if (up->leases && cuc__msg_taken(m, i)) {
        uint64_t hash;
        rc = check_retake_locked(cuc__buffer_find_locked(r->pool, &d, &hash), rec.offset,
                                 rec.size, up, i);
        if (rc)
            return rc;
    }
    rc = root_locked(r->pool, &d, rec.alloc_size, r->guard, root, &fresh, &stale[0]);
    if (!rc)
        rc = attach_locked(*root, fresh, rec.offset, rec.size, up, out, &stale[1]);
    return rc;
}

static int take_ipc_locked(const cuc_msg *m, size_t i, struct run *r,
                           struct cuc__upstream *up, cuc_buffer **root, cuc_buffer **out,
                           CUevent stale[2])
{
    struct cuc_ipc_buffer_record rec;
    int rc, fresh;

    if (cuc_msg_read_ipc_buffer(m, i, &rec) != 0 ||
        memcmp(&rec.device, r->device, sizeof(rec.device)) != 0)
        return 1;
    up->id = rec.lease_id;
    if (up->leases && cuc__msg_taken(m, i)) {
        rc = check_retake_locked(cuc__ipc_find_locked(r->pool, rec.exporter,
                                                      rec.generation),
                                 rec.offset, rec.size, up, i);
        if (rc)
            return rc;
    }
    rc = ipc_root_locked(r->pool, &rec, root, &fresh, &stale[0]);
    if (!rc)
        rc = attach_locked(*root, fresh, rec.offset, rec.size, up, out, &stale[1]);
    return rc;
}

/* The buffers of records [i, i + n) of m of one run (take: what it is),
 * up to RUN_MAX of them under one hold of the pool's lock: *took of them
 * into out (references), stopping before a record of another type or
 * another run. On failure none is left taken. */
static int get_run(const cuc_msg *m, size_t i, size_t n, int type, struct run *r,
                   cuc_buffer **out, size_t *took)
{
    int (*take)(const cuc_msg *, size_t, struct run *, struct cuc__upstream *,
                cuc_buffer **, cuc_buffer **, CUevent *) =
        type == CUC_RECORD_IPC_BUFFER ? take_ipc_locked : take_pool_locked;
    size_t k = 0, most = n < RUN_MAX ? n : RUN_MAX;
    CUevent stale[2 * RUN_MAX];
    cuc_buffer *root = NULL;
    CUC__CTX_KEEP(guard);
    int rc = 0, t;

    memset(stale, 0, 2 * most * sizeof(stale[0]));
    r->guard = &guard;
    pthread_mutex_lock(&r->pool->lock);
    for (; k < most; k++) {
        struct cuc__upstream up = {r->leases, 0};
        if (cuc_msg_record_type(m, i + k, &t) ||
            (t == CUC_RECORD_IPC_BUFFER) != (type == CUC_RECORD_IPC_BUFFER))
            break;
        if (r->leases)
            cuc__leases_ref(r->leases); /* up's: the buffer takes it over, or drops it */
        root = NULL;
        rc = take(m, i + k, r, &up, &root, &out[k], &stale[2 * k]);
        if (rc) {
            if (r->leases)
                cuc__leases_unref(r->leases);
            break;
        }
        if (r->leases)
            cuc__msg_set_taken(m, i + k);
    }
    pthread_mutex_unlock(&r->pool->lock);
    if (rc == 1)
        rc = 0; /* the run ends before record i + k */
    else if (!rc)
        root = NULL; /* every root taken went into a buffer */
    for (size_t j = 0; j < 2 * k + 2 && j < 2 * most; j++)
        if (stale[j] && cuc__device_activate(&guard, r->pool->dev) == 0)
            CUC_DRV->cuEventDestroy(stale[j]);
    if (rc && root)
        cuc_buffer_unref_async(root, NULL); /* the reference the find took */
    if (rc) {
        cuc_buffer_unref_many_async(out, k, NULL);
        return rc;
    }
    *took = k;
    return 0;
}

/* The run record i of m begins: its pool found (a reference), or, for an
 * ipc buffer record, its GPU and that GPU's legacy pool. The failure
 * names what is missing. */
static int run_at(const cuc_msg *m, size_t i, int type, struct run *r)
{
    struct cuc_ipc_buffer_record ir;
    struct cuc_buffer_record rec;
    cuc_device *dev;
    int rc;

    r->leases = cuc__leases_of_msg(m);
    r->guard = NULL;
    r->device = NULL;
    if (type == CUC_RECORD_IPC_BUFFER) {
        rc = cuc_msg_read_ipc_buffer(m, i, &ir);
        if (!rc)
            rc = cuc_device_get_by_uuid(&ir.device, &dev);
        if (!rc)
            rc = cuc__pool_legacy(dev, &r->pool);
        if (!rc)
            r->device = &dev->uuid;
        return rc;
    }
    rc = cuc_msg_read_buffer(m, i, &rec);
    if (rc)
        return rc;
    r->pool = cuc__pool_find(rec.pool_id);
    if (!r->pool && r->leases && cuc__msg_taken(m, i))
        return lease_ended(i, rec.lease_id); /* its buffer held the pool */
    if (!r->pool)
        return cuc__seterr(CUC_E_POOL_NOT_IMPORTED, "buffer record %zu belongs to pool "
                           "%s, which this process has not imported: get the pool's "
                           "record (cuc_msg_get_pool) first; the sender must send the "
                           "pool before its buffers", i, cuc__pool_id_hex(rec.pool_id).s);
    return 0;
}

/* The buffers of an attached message wait for its claim's answer. */
static int gate_all(const cuc_msg *m, cuc_buffer **bufs, size_t n)
{
    if (cuc__gate_of_msg(m))
        for (size_t k = 0; k < n; k++)
            cuc__buffer_set_gate(bufs[k], m);
    return 0;
}

/* An import from an attached message that failed may have been of memory
 * whose hold had ended (the driver then refuses stale export data): the
 * exporter's refusal of the claim, when it comes, says so better than the
 * driver. */
static int refusal_first(const cuc_msg *m, int rc)
{
    struct cuc__gate *g = cuc__gate_of_msg(m);
    struct cuc__err_saved saved;
    int why;

    if (!g || rc == CUC_E_NOMEM)
        return rc;
    cuc__err_save(&saved, rc);
    why = cuc__gate_pass(g, "an attached buffer");
    return why && why != CUC_E_TIMEOUT ? why : cuc__err_restore(&saved);
}

/* The buffers of records [i, i + n) of m from the run that begins at i:
 * *took of them (at least one) into out. */
static int get_from(const cuc_msg *m, size_t i, size_t n, cuc_buffer **out, size_t *took)
{
    struct run r;
    int type = 0, rc;

    (void)cuc_msg_record_type(m, i, &type);
    rc = run_at(m, i, type, &r);
    if (!rc && r.leases && (rc = cuc__msg_taken_ready(m)) != 0)
        cuc_pool_unref(r.pool);
    if (rc)
        return rc;
    rc = get_run(m, i, n, type, &r, out, took);
    cuc_pool_unref(r.pool);
    if (!rc && *took == 0) /* cannot be: run_at read record i as the run does */
        rc = cuc__seterr(CUC_E_BADMSG, "buffer record %zu could not be read twice alike", i);
    return rc ? refusal_first(m, rc) : gate_all(m, out, *took);
}

int cuc_msg_get_buffer(const cuc_msg *m, size_t index, cuc_buffer **out)
{
    size_t took;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_buffer: NULL argument");
    return get_from(m, index, 1, out, &took);
}

int cuc_msg_get_buffers(const cuc_msg *m, size_t first, size_t n, cuc_buffer **out)
{
    cuc_buffer *small[RUN_MAX], **got = small;
    size_t done = 0, took;
    int rc = 0, type;

    if (!m || (n && !out))
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_buffers: NULL argument");
    if (first > cuc_msg_record_count(m) || n > cuc_msg_record_count(m) - first)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_buffers: records %zu..%zu of a "
                           "message of %zu", first, first + n, cuc_msg_record_count(m));
    /* a record of another kind is refused before anything is imported */
    for (size_t i = first; i < first + n; i++)
        if (cuc_msg_record_type(m, i, &type) == 0 && type != CUC_RECORD_BUFFER &&
            type != CUC_RECORD_BUFFER_VIEW && type != CUC_RECORD_IPC_BUFFER)
            return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_buffers: record %zu is %s %s "
                               "record, not a buffer's: nothing was taken", i,
                               strchr("aeiou", cuc_record_type_name(type)[0]) ? "an" : "a",
                               cuc_record_type_name(type));
    if (n > RUN_MAX && !(got = malloc(n * sizeof(*got))))
        return cuc__seterr(CUC_E_NOMEM, "out of memory for %zu buffers", n);
    while (!rc && done < n) {
        rc = get_from(m, first + done, n - done, got + done, &took);
        if (!rc)
            done += took;
    }
    if (rc)
        cuc_buffer_unref_many_async(got, done, NULL); /* nothing taken on failure */
    else if (n)
        memcpy(out, got, n * sizeof(*got));
    if (got != small)
        free(got);
    return rc;
}
