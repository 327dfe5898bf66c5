/* What a pointer is: cuMemGetAddressRange, cuPointerGetAttribute and
 * cuPointerGetAttributes over every kind of memory the sim makes
 * (cuMemAlloc, managed, host, IPC-opened, pool, VMM). Each module says
 * what it knows of an address (sim_*_info); this file answers as the
 * driver does (FACTS.md F34, F37, F38), in its widths: MEMORY_TYPE,
 * DEVICE_ORDINAL, IS_MANAGED, IS_LEGACY_CUDA_IPC_CAPABLE, MAPPED,
 * IS_GPU_DIRECT_RDMA_CAPABLE and ACCESS_FLAGS 4 bytes, the rest 8.
 * SYNC_MEMOPS and IS_HW_DECOMPRESS_CAPABLE were not asked: 4 bytes, 0,
 * like the other booleans. */
#include "sim_internal.h"

#include <string.h>

/* The current context's device, or -1. Locked. */
static int current_dev(void)
{
    struct CUctx_st *c;

    return sim_ctx_current(&c) == CUDA_SUCCESS ? c->dev : -1;
}

static int lookup(uintptr_t p, int dev, struct sim_ptr_info *info)
{
    memset(info, 0, sizeof(*info));
    if (p == 0)
        return 0;
    return sim_alloc_info(p, dev, info) || sim_pool_info(p, dev, info) ||
           sim_vmm_info(p, dev, info);
}

SIM_API CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase,
                                              size_t *psize, CUdeviceptr dptr)
{
    struct sim_ptr_info info;
    struct CUctx_st *ctx;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemGetAddressRange);
    if (rc)
        return rc;
    sim_lock();
    rc = sim_ctx_current(&ctx); /* (doc) INVALID_CONTEXT is listed */
    /* The allocation holding the pointer: a cuMemAlloc, managed, host or
     * IPC-opened block, a pool allocation (the bytes asked for, on the
     * exporter and on an importer), a VMM mapping. An address in none (0,
     * freed, malloc'ed, the first byte past a block, an unmapped part of a
     * reservation, and a pinned host pool's pointer on its exporter) is
     * CUDA_ERROR_NOT_FOUND, and the outputs are zeroed (FACTS.md F34). */
    if (rc == CUDA_SUCCESS &&
        (!lookup((uintptr_t)dptr, ctx->dev, &info) || info.no_range)) {
        rc = CUDA_ERROR_NOT_FOUND;
        info.base = 0;
        info.size = 0;
    }
    if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_FOUND) {
        if (pbase)
            *pbase = (CUdeviceptr)info.base;
        if (psize)
            *psize = info.size;
    }
    sim_unlock();
    return rc;
}

static void put_u32(void *data, unsigned int v)
{
    memcpy(data, &v, sizeof(v));
}

static void put_u64(void *data, uint64_t v)
{
    memcpy(data, &v, sizeof(v));
}

static void put_ptr(void *data, const void *v)
{
    memcpy(data, &v, sizeof(v));
}

enum attr_rc {
    A_OK,      /* written */
    A_NONE,    /* no such value here: NULL written; INVALID_VALUE alone */
    A_NOCTX,   /* needs a current context: nothing written */
    A_UNKNOWN  /* not an attribute the sim knows: nothing written */
};

/* One attribute of a pointer lookup() found. */
static enum attr_rc attr_known(CUpointer_attribute a, const struct sim_ptr_info *i,
                               uintptr_t p, int have_ctx, void *data)
{
    int device_mem = !i->host && i->kind != SIM_PTR_MANAGED;

    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        put_ptr(data, i->ctx);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: /* managed memory: device */
        put_u32(data, i->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!have_ctx)
            return A_NOCTX; /* (doc) */
        put_u64(data, i->no_devptr ? 0 : (uint64_t)p);
        return i->no_devptr ? A_NONE : A_OK;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        put_u64(data, device_mem ? 0 : (uint64_t)p);
        return device_mem ? A_NONE : A_OK;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        put_u32(data, 0);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        put_u64(data, i->id);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        put_u32(data, i->kind == SIM_PTR_MANAGED);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        put_u32(data, (unsigned int)i->dev);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        put_u32(data, i->kind == SIM_PTR_MEMALLOC);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        put_u64(data, i->range_base);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        put_u64(data, i->range_size);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        put_u32(data, 1);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        put_u64(data, i->handle_types);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        put_u32(data, (unsigned int)i->rdma);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        put_u32(data, i->access);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        put_ptr(data, i->pool);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        put_u64(data, i->map_size);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        put_u64(data, i->map_base);
        return A_OK;
    default: /* P2P_TOKENS (not modelled) and anything unknown */
        return A_UNKNOWN;
    }
}

/* What cuPointerGetAttributes gives for a pointer that is not CUDA's
 * (FACTS.md F37): zeroes, except HOST_POINTER (the pointer),
 * DEVICE_ORDINAL (-2), and the range, left alone. */
static enum attr_rc attr_unknown(CUpointer_attribute a, uintptr_t p, void *data)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        put_u64(data, (uint64_t)p);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        put_u32(data, (unsigned int)-2);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        put_u32(data, 0);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        put_u64(data, 0);
        return A_OK;
    default:
        return A_UNKNOWN;
    }
}

SIM_API CUresult CUDAAPI cuPointerGetAttribute(void *data,
                                               CUpointer_attribute attribute,
                                               CUdeviceptr ptr)
{
    struct sim_ptr_info info;
    enum attr_rc r;
    int dev;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuPointerGetAttribute);
    if (rc)
        return rc;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    dev = current_dev();
    /* not CUDA's memory: CUDA_ERROR_INVALID_VALUE, nothing written (doc;
     * "attr.malloc") */
    if (!lookup((uintptr_t)ptr, dev, &info)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        r = attr_known(attribute, &info, (uintptr_t)ptr, dev >= 0, data);
        rc = r == A_OK ? CUDA_SUCCESS
             : r == A_NOCTX ? CUDA_ERROR_INVALID_CONTEXT
                            : CUDA_ERROR_INVALID_VALUE;
    }
    sim_unlock();
    return rc;
}

/* A scratch slot for checking an attribute before writing the caller's. */
static enum attr_rc attr_any(CUpointer_attribute a, const struct sim_ptr_info *i,
                             int known, uintptr_t p, int have_ctx, void *data)
{
    enum attr_rc r = known ? attr_known(a, i, p, have_ctx, data)
                           : attr_unknown(a, p, data);

    if (r == A_NOCTX) { /* no context: NULL (guess) */
        put_u64(data, 0);
        r = A_OK;
    }
    return r == A_NONE ? A_OK : r; /* no value: the NULL written */
}

SIM_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes,
                                                CUpointer_attribute *attributes,
                                                void **data, CUdeviceptr ptr)
{
    struct sim_ptr_info info;
    CUresult rc = sim_check_init();
    int dev, known;

    SIM_FAULT(cuPointerGetAttributes);
    if (rc)
        return rc;
    if (numAttributes && (!attributes || !data))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int k = 0; k < numAttributes; k++)
        if (!data[k])
            return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    dev = current_dev();
    /* (doc) a pointer that is not CUDA's is no error */
    known = lookup((uintptr_t)ptr, dev, &info);
    /* an unknown attribute: CUDA_ERROR_INVALID_VALUE, nothing written
     * (guess) */
    for (unsigned int k = 0; k < numAttributes && rc == CUDA_SUCCESS; k++) {
        unsigned char scratch[8];
        if (attr_any(attributes[k], &info, known, (uintptr_t)ptr, dev >= 0,
                     scratch) == A_UNKNOWN)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    for (unsigned int k = 0; k < numAttributes && rc == CUDA_SUCCESS; k++)
        attr_any(attributes[k], &info, known, (uintptr_t)ptr, dev >= 0, data[k]);
    sim_unlock();
    return rc;
}
