/* What a pointer is: cuMemGetAddressRange, cuPointerGetAttribute and
 * cuPointerGetAttributes over every kind of memory the sim makes
 * (cuMemAlloc, managed, host, IPC-opened, pool, VMM). Each module says
 * what it knows of an address (sim_*_info); this file answers.
 *
 * Output widths follow cuda-python's bindings (NVIDIA's): MEMORY_TYPE,
 * DEVICE_ORDINAL, ALLOWED_HANDLE_TYPES, IS_GPU_DIRECT_RDMA_CAPABLE and
 * ACCESS_FLAGS 4 bytes; IS_MANAGED, IS_LEGACY_CUDA_IPC_CAPABLE, MAPPED,
 * SYNC_MEMOPS and IS_HW_DECOMPRESS_CAPABLE one byte (a C bool); ids,
 * sizes, addresses and handles 8. Values marked (guess) were not seen on
 * a real driver; see sim/README.md. */
#include "sim_internal.h"

#include <stdbool.h>
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
    /* (doc) NOT_FOUND for an address in no allocation (guess: freed,
     * unknown, 0, the end of an allocation, an unmapped part of a VMM
     * reservation). A pool pointer's range is its allocation (the bytes
     * asked for), a VMM pointer's the mapping (guess). */
    if (rc == CUDA_SUCCESS && !lookup((uintptr_t)dptr, ctx->dev, &info))
        rc = CUDA_ERROR_NOT_FOUND;
    if (rc == CUDA_SUCCESS) {
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

static void put_bool(void *data, int v)
{
    bool b = v != 0;
    memcpy(data, &b, sizeof(b));
}

static void put_u64(void *data, uint64_t v)
{
    memcpy(data, &v, sizeof(v));
}

static void put_ptr(void *data, const void *v)
{
    memcpy(data, &v, sizeof(v));
}

/* One attribute of a known pointer (info->kind != NONE), or of an
 * unknown one (NONE: the zeroes cuPointerGetAttributes gives, doc).
 * CUDA_ERROR_INVALID_VALUE for an attribute that has no value there
 * (and writes nothing); CUDA_ERROR_INVALID_VALUE for one the sim does
 * not know. */
static CUresult attr_value(CUpointer_attribute a, const struct sim_ptr_info *i,
                           uintptr_t p, int have_ctx, void *data)
{
    int known = i->kind != SIM_PTR_NONE;
    int device_mem = known && !i->host && i->kind != SIM_PTR_MANAGED;

    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        put_ptr(data, i->ctx);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        /* managed memory reads as device memory (guess) */
        put_u32(data, !known ? 0 : i->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (known && !have_ctx)
            return CUDA_ERROR_INVALID_CONTEXT; /* (doc) */
        put_u64(data, known ? (uint64_t)p : 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        /* (doc) none for memory the host cannot address */
        if (device_mem)
            return CUDA_ERROR_INVALID_VALUE;
        put_u64(data, known ? (uint64_t)p : 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        put_bool(data, 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        put_u64(data, i->id);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        put_bool(data, i->kind == SIM_PTR_MANAGED);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        put_u32(data, known ? (unsigned int)i->dev : 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        put_bool(data, i->kind == SIM_PTR_MEMALLOC);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        put_u64(data, i->range_base);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        put_u64(data, i->range_size);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        put_bool(data, known);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        put_u32(data, i->handle_types);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        put_u32(data, i->kind == SIM_PTR_MEMALLOC); /* (guess) */
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        put_u32(data, i->access);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        put_ptr(data, i->pool);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        put_u64(data, i->size);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        put_u64(data, i->base);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        put_bool(data, 0);
        return CUDA_SUCCESS;
    default: /* P2P_TOKENS and anything unknown */
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult CUDAAPI cuPointerGetAttribute(void *data,
                                               CUpointer_attribute attribute,
                                               CUdeviceptr ptr)
{
    struct sim_ptr_info info;
    int dev;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuPointerGetAttribute);
    if (rc)
        return rc;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    dev = current_dev();
    /* (doc) a pointer that is not CUDA's: CUDA_ERROR_INVALID_VALUE */
    if (!lookup((uintptr_t)ptr, dev, &info))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = attr_value(attribute, &info, (uintptr_t)ptr, dev >= 0, data);
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes,
                                                CUpointer_attribute *attributes,
                                                void **data, CUdeviceptr ptr)
{
    struct sim_ptr_info info;
    CUresult rc = sim_check_init();
    int dev;

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
    /* (doc) an unknown pointer is no error: every value is the zero one */
    lookup((uintptr_t)ptr, dev, &info);
    for (unsigned int k = 0; k < numAttributes && rc == CUDA_SUCCESS; k++) {
        unsigned char v[8] = {0};
        CUresult r = attr_value(attributes[k], &info, (uintptr_t)ptr, dev >= 0, v);
        if (r == CUDA_ERROR_INVALID_VALUE &&
            attributes[k] == CU_POINTER_ATTRIBUTE_HOST_POINTER)
            r = CUDA_SUCCESS; /* no host address: NULL (guess) */
        else if (r == CUDA_ERROR_INVALID_CONTEXT)
            r = CUDA_SUCCESS; /* no context: NULL (guess) */
        rc = r;
    }
    /* written only when every attribute is valid */
    for (unsigned int k = 0; k < numAttributes && rc == CUDA_SUCCESS; k++)
        if (attr_value(attributes[k], &info, (uintptr_t)ptr, dev >= 0, data[k]) !=
            CUDA_SUCCESS)
            memset(data[k], 0, sizeof(void *));
    sim_unlock();
    return rc;
}
