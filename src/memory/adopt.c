/* Memory another allocator owns: what the driver says a pointer is
 * (cuc_memory_kind), such memory as buffers cucore never frees
 * (cuc_buffer_adopt: legacy memory through buffer_ipc.c, a pool's
 * allocation as a buffer of the adopted pool, found again through the
 * pool's table by pointer). The owner's releases are release.c's. */
#include "memory/adopt.h"
#include "memory/buffer.h"
#include "memory/release.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- what a pointer is ---- */

const char *cuc_memory_kind_name(int kind)
{
    static const char *const names[] = {"unknown", "legacy", "pool-ipc", "pool", "vmm-fd",
                                        "vmm", "managed", "host", "ipc-opened"};

    return kind >= 0 && (size_t)kind < CUC_ARRAY_LEN(names) ? names[kind] : "?";
}

/* VMM memory, which the driver gives no context (sim/FACTS.md F37, F38):
 * confirmed by the handle that maps it (F42). */
static int confirm_vmm(CUdeviceptr p, const char *fn)
{
    CUmemGenericAllocationHandle h;
    CUresult r = CUC_DRV->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)p);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemRetainAllocationHandle", "%s of %#llx: device "
                             "memory of no context, of no pool, that the driver does "
                             "not say is VMM memory either", fn, (unsigned long long)p);
    CUC_DRV->cuMemRelease(h); /* the retain's reference only */
    return 0;
}

/* The kind, from the attributes: the order matters (a pool's pinned host
 * memory is the pool's; managed memory reads as device memory). */
static int kind_of(CUdeviceptr p, const char *fn, unsigned type, unsigned managed,
                   unsigned legacy, const void *pool, unsigned long long types,
                   const void *ctx, int *kind)
{
    int fd = (types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;

    *kind = type == 0    ? CUC_MEMORY_UNKNOWN
            : managed    ? CUC_MEMORY_MANAGED
            : pool       ? (fd ? CUC_MEMORY_POOL_IPC : CUC_MEMORY_POOL)
            : legacy     ? CUC_MEMORY_LEGACY
            : !ctx       ? (fd ? CUC_MEMORY_VMM_FD : CUC_MEMORY_VMM)
            : type == CU_MEMORYTYPE_HOST ? CUC_MEMORY_HOST
                                         : CUC_MEMORY_IPC_OPENED;
    if (*kind != CUC_MEMORY_VMM_FD && *kind != CUC_MEMORY_VMM)
        return 0;
    return confirm_vmm(p, fn);
}

int cuc__memory_classify(CUdeviceptr p, const char *fn, struct cuc__mem_info *out)
{
    CUpointer_attribute at[9] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,       CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,   CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
        CU_POINTER_ATTRIBUTE_CONTEXT,          CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    /* 4 bytes for the type, ordinal and booleans, 8 for the rest
     * (sim/FACTS.md F37) */
    unsigned type = 0, managed = 0, legacy = 0;
    int ord = -1;
    void *pool = NULL, *ctx = NULL;
    unsigned long long types = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    void *data[9] = {&type, &ord, &managed, &legacy, &pool, &types, &ctx, &start, &size};
    CUresult r = CUC_DRV->cuPointerGetAttributes(9, at, data, p);
    int rc;

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuPointerGetAttributes", "%s of %#llx", fn,
                             (unsigned long long)p);
    rc = kind_of(p, fn, type, managed, legacy, pool, types, ctx, &out->kind);
    if (rc)
        return rc;
    out->ordinal = out->kind == CUC_MEMORY_UNKNOWN ? -1 : ord;
    out->host = type == CU_MEMORYTYPE_HOST;
    out->pool = pool;
    out->range_base = start;
    out->range_size = size;
    return 0;
}

int cuc_memory_kind(const void *ptr, int *kind, cuc_device **dev)
{
    struct cuc__mem_info info;
    cuc_device *d = NULL;
    int rc = 0, n = 0;

    if (!kind || !dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_memory_kind: NULL argument");
    rc = cuc_device_count(&n); /* loads the driver */
    if (!rc)
        rc = cuc__memory_classify((CUdeviceptr)(uintptr_t)ptr, "cuc_memory_kind", &info);
    if (!rc && info.ordinal >= 0 && info.ordinal < n)
        rc = cuc_device_get(info.ordinal, &d);
    if (rc)
        return rc;
    *kind = info.kind;
    *dev = d;
    return 0;
}

/* ---- refusals ---- */

static const char *instead(int kind)
{
    switch (kind) {
    case CUC_MEMORY_POOL:
        return "its pool is not IPC-capable (created without POSIX fd handles, or "
               "imported here from another process): create the pool with handleTypes "
               "= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (cuda.core: "
               "DeviceMemoryResourceOptions(ipc_enabled=True); cucore: CUC_POOL_IPC), "
               "send on the cuc_buffer imported memory arrived as, or copy the bytes "
               "into a buffer of a CUC_POOL_IPC pool";
    case CUC_MEMORY_VMM_FD:
        return "VMM memory with POSIX fd handles is shared with cuc_vmm_adopt";
    case CUC_MEMORY_VMM:
        return "its VMM allocation was created without POSIX fd handles, so the "
               "driver cannot export it: create it with requestedHandleTypes = "
               "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, or copy the bytes into a "
               "buffer of a CUC_POOL_IPC pool";
    case CUC_MEMORY_MANAGED:
        return "managed memory cannot be shared by IPC: copy the bytes into a buffer "
               "of a CUC_POOL_IPC pool";
    case CUC_MEMORY_HOST:
        return "pinned or registered host memory cannot be shared by IPC: copy the "
               "bytes into a buffer of a CUC_POOL_IPC pool (a pinned host pool)";
    case CUC_MEMORY_IPC_OPENED:
        return "memory opened from another process: send on the cuc_buffer it "
               "arrived as";
    case CUC_MEMORY_LEGACY:
        return "cuMemAlloc memory is shared with cuc_buffer_adopt or cuc_buffer_wrap";
    case CUC_MEMORY_POOL_IPC:
        return "memory of an IPC-capable pool is shared with cuc_buffer_adopt";
    default:
        return "it is not CUDA memory (malloc'd?): copy the bytes into a buffer of a "
               "CUC_POOL_IPC pool";
    }
}

int cuc__memory_refuse(const char *fn, const void *ptr, int kind)
{
    return cuc__seterr(CUC_E_INVALID, "%s: %p is memory of kind \"%s\": %s", fn, ptr,
                       cuc_memory_kind_name(kind), instead(kind));
}

/* ---- a pool's allocation as a buffer ---- */

/* The adopted allocation of pool at base in *out, found (a new
 * reference, a deferred one revived; pool->lock held), or NULL: the
 * caller makes it. */
static int adopted_find_locked(cuc_pool *pool, CUdeviceptr base, size_t bsize,
                               cuc_buffer **out, CUevent *stale)
{
    cuc_buffer *b = cuc__buffer_import_at_locked(pool, base);

    *out = NULL;
    if (!b)
        return 0;
    if (b->size != bsize)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_adopt: the %zu-byte allocation at "
                           "%#llx is adopted already as %zu bytes: it was freed and "
                           "allocated again while cucore still used it (its release had "
                           "not run)", bsize, (unsigned long long)base, b->size);
    b->refs++;
    if (b->state == CUC__BUF_DEFERRED) {
        b->state = CUC__BUF_LIVE;
        *stale = b->free_after;
        b->free_after = NULL;
    }
    *out = b;
    return 0;
}

/* A new adopted allocation (refs 1), not yet findable. */
static int adopted_new(cuc_pool *pool, CUdeviceptr base, size_t bsize, cuc_buffer **out)
{
    cuc_buffer *b;
    int rc = cuc__buffer_new(pool, base, bsize, 0, &b);

    if (rc)
        return rc;
    rc = cuc__releases_add(&b->adopted, NULL, NULL);
    if (rc) {
        cuc__buffer_release(b, NULL); /* an adopted one frees nothing */
        return rc;
    }
    *out = b;
    return 0;
}

/* The adopted allocation of pool at base, found or made findable by its
 * pointer; a new reference. */
static int adopted_root(cuc_pool *pool, CUdeviceptr base, size_t bsize, cuc_buffer **out)
{
    cuc_buffer *b = NULL, *made = NULL;
    CUevent stale = NULL;
    int rc;

    pthread_mutex_lock(&pool->lock);
    rc = adopted_find_locked(pool, base, bsize, &b, &stale);
    pthread_mutex_unlock(&pool->lock);
    if (!rc && !b && (rc = adopted_new(pool, base, bsize, &made)) == 0) {
        pthread_mutex_lock(&pool->lock);
        rc = adopted_find_locked(pool, base, bsize, &b, &stale); /* another thread's? */
        if (!rc && !b) {
            made->by_ptr.hash = cuc__hash_u64(base);
            rc = cuc__htab_insert(&pool->imports, &made->by_ptr);
            made->in_imports = rc == 0;
            if (!rc) {
                b = made;
                made = NULL;
            }
        }
        pthread_mutex_unlock(&pool->lock);
    }
    if (stale)
        CUC_DRV->cuEventDestroy(stale);
    if (made)
        cuc__buffer_release(made, NULL);
    if (!rc)
        *out = b;
    return rc;
}

/* The refusal of memory of a pool that cucore created or imported here:
 * that memory has its cuc_buffer already. */
static int not_adoptable_pool(const cuc_pool *pool, CUdeviceptr ptr)
{
    return cuc__seterr(CUC_E_INVALID, "cuc_buffer_adopt: %#llx is memory of pool %s, "
                       "which cucore %s here: send on the cuc_buffer %s",
                       (unsigned long long)ptr, cuc__pool_id_hex(pool->id).s,
                       pool->imported ? "imported" : "created",
                       pool->imported ? "it arrived as"
                                      : "that cuc_buffer_alloc_async gave");
}

/* The allocation of an IPC pool's memory that [ptr, ptr + size) is in, as
 * an adopted buffer of the adopted pool. A device pool's allocation is
 * the one cuMemGetAddressRange gives; the driver gives none for a pinned
 * host pool's (sim/FACTS.md F34), so ptr must be its start, which the
 * export of the pointer checks (F26). */
static int pool_root(cuc_device *dev, CUdeviceptr ptr, size_t size,
                     const struct cuc__mem_info *info, cuc_buffer **out)
{
    CUdeviceptr base = ptr;
    size_t bsize = info->range_size;
    CUmemPoolPtrExportData d;
    cuc_pool *pool = NULL;
    int rc;

    if (!info->host) {
        CUresult r = CUC_DRV->cuMemGetAddressRange(&base, &bsize, ptr);
        if (r != CUDA_SUCCESS)
            return cuc__cuda_err(r, "cuMemGetAddressRange", "cuc_buffer_adopt of %#llx, "
                                 "memory of an IPC pool", (unsigned long long)ptr);
    }
    if (ptr < base || ptr - base >= bsize || size > bsize - (size_t)(ptr - base))
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_adopt: %zu bytes at %#llx do not "
                           "fit in its %zu-byte allocation at %#llx", size,
                           (unsigned long long)ptr, bsize, (unsigned long long)base);
    rc = cuc_pool_adopt(dev, info->pool, info->host ? CUC_POOL_PINNED_HOST : CUC_POOL_DEVICE,
                        &pool);
    if (!rc && !pool->adopted)
        rc = not_adoptable_pool(pool, ptr);
    if (!rc)
        rc = adopted_root(pool, base, bsize, out);
    cuc_pool_unref(pool); /* the buffer holds one */
    if (rc || !info->host)
        return rc;
    rc = cuc__buffer_export(*out, &d);
    if (rc) {
        cuc_buffer_unref_async(*out, NULL);
        cuc__adderr(" (cuc_buffer_adopt: pinned host pool memory is adopted from the "
                    "start of its allocation, which %#llx may not be)",
                    (unsigned long long)ptr);
    }
    return rc;
}

/* [ptr, ptr + size) of root (a reference, taken over) as the caller's
 * buffer, with release added to the allocation's. */
static int adopt_part(cuc_buffer *root, CUdeviceptr ptr, size_t size,
                      void (*release)(void *), void *arg, cuc_buffer **out)
{
    cuc_buffer *b = root;
    int rc = 0;

    if (ptr != root->ptr || size != root->size)
        rc = cuc_buffer_view(root, (size_t)(ptr - root->ptr), size, &b);
    if (!rc && release) {
        pthread_mutex_lock(&root->pool->lock);
        rc = cuc__releases_add(&root->adopted, release, arg);
        pthread_mutex_unlock(&root->pool->lock);
    }
    if (b != root)
        cuc_buffer_unref_async(root, NULL); /* the view holds it */
    if (rc && b)
        cuc_buffer_unref_async(b, NULL);
    if (!rc)
        *out = b;
    return rc;
}

int cuc_buffer_adopt(cuc_device *dev, void *p, size_t size, void (*release)(void *),
                     void *arg, cuc_buffer **out)
{
    CUC__CTX_KEEP(guard);
    CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)p;
    struct cuc__mem_info info;
    cuc_buffer *root = NULL;
    int rc;

    if (!dev || !p || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_adopt: NULL argument");
    if (size == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_adopt: size 0 (nothing to share: "
                           "adopt at least one byte)");
    rc = cuc__device_activate(&guard, dev);
    if (!rc)
        rc = cuc__memory_classify(ptr, "cuc_buffer_adopt", &info);
    if (rc)
        return rc;
    if (info.kind != CUC_MEMORY_LEGACY && info.kind != CUC_MEMORY_POOL_IPC)
        return cuc__memory_refuse("cuc_buffer_adopt", p, info.kind);
    if (info.ordinal != dev->ordinal)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_adopt: %p is memory of device %d, "
                           "not of device %d (%s): adopt it with its own device", p,
                           info.ordinal, dev->ordinal, dev->uuid_str);
    rc = info.kind == CUC_MEMORY_LEGACY
             ? cuc__ipc_root(dev, ptr, size, info.range_base, info.range_size, &root)
             : pool_root(dev, ptr, size, &info, &root);
    if (rc)
        return rc;
    return adopt_part(root, ptr, size, release, arg, out);
}
