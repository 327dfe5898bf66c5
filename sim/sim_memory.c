/* Copies and memset. Device pointers are host addresses (pool mappings and
 * VMM mappings), so a copy is memmove; pointers inside known device ranges
 * are checked (a freed block, an unmapped or inaccessible VMM range, a
 * size running past the allocation, or pool memory the stream's device has
 * no access to give CUDA_ERROR_INVALID_VALUE). cuMemAlloc, managed,
 * cuMemAllocHost and IPC-opened memory count as device memory. */
#include "sim_internal.h"

#include <string.h>

/* Classifies [p, p+n), used from local device dev (as the device side of
 * the copy when dev_side): device memory we know (checked), or not ours. */
static enum sim_range classify(uintptr_t p, size_t n, int write, int dev,
                               int dev_side)
{
    enum sim_range r = sim_alloc_range(p, n);

    if (r != SIM_RANGE_UNKNOWN)
        return r;
    r = sim_pool_range(p, n, dev, dev_side);
    if (r != SIM_RANGE_UNKNOWN)
        return r;
    return sim_vmm_range(p, n, write);
}

/* dev_dst / dev_src: 1 = must be device memory, 0 = host or device. */
static CUresult copy_common(void *dst, const void *src, size_t n,
                            CUstream hStream, int dev_dst, int dev_src)
{
    struct CUctx_st *ctx;
    enum sim_range rd, rs;
    CUresult rc = sim_check_init();
    uintptr_t end;

    if (rc)
        return rc;
    sim_lock();
    rc = sim_stream_check(hStream, &ctx);
    if (rc)
        goto out;
    if (n == 0)
        goto out;
    if (!dst || !src || __builtin_add_overflow((uintptr_t)dst, n, &end) ||
        __builtin_add_overflow((uintptr_t)src, n, &end)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    rd = classify((uintptr_t)dst, n, 1, ctx->dev, dev_dst);
    rs = classify((uintptr_t)src, n, 0, ctx->dev, dev_src);
    if (rd == SIM_RANGE_BAD || rs == SIM_RANGE_BAD ||
        (dev_dst && rd != SIM_RANGE_OK) || (dev_src && rs != SIM_RANGE_OK))
        rc = CUDA_ERROR_INVALID_VALUE;
out:
    sim_unlock();
    if (rc == CUDA_SUCCESS && n)
        memmove(dst, src, n); /* the stream is synchronous */
    return rc;
}

SIM_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src,
                                       size_t ByteCount, CUstream hStream)
{
    SIM_FAULT(cuMemcpyAsync);
    return copy_common((void *)(uintptr_t)dst, (const void *)(uintptr_t)src,
                       ByteCount, hStream, 0, 0);
}

SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice,
                                           const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{
    SIM_FAULT(cuMemcpyHtoDAsync);
    return copy_common((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                       hStream, 1, 0);
}

SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{
    SIM_FAULT(cuMemcpyDtoHAsync);
    return copy_common(dstHost, (const void *)(uintptr_t)srcDevice,
                       ByteCount, hStream, 0, 1);
}

/* Not used by cucore: the probes read through it (sim/testdata/probe_ipc.c). */
SIM_API CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_FAULT(cuMemcpyDtoH);
    return copy_common(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                       CU_STREAM_LEGACY, 0, 1);
}

/* N elements of width bytes at dstDevice set to the value in v. The
 * 16- and 32-bit forms need a dstDevice aligned to their width (cuda.h:
 * "must be two byte aligned", "four byte aligned"). */
static CUresult memset_common(CUdeviceptr dstDevice, const void *v, unsigned width,
                              size_t N, CUstream hStream)
{
    struct CUctx_st *ctx;
    unsigned char *dst = (unsigned char *)(uintptr_t)dstDevice;
    size_t bytes = 0;
    CUresult rc = sim_check_init();

    if (rc)
        return rc;
    sim_lock();
    rc = sim_stream_check(hStream, &ctx);
    if (rc == CUDA_SUCCESS && N &&
        (!dst || (uintptr_t)dst % width || sim_mul_overflow(N, width, &bytes) ||
         classify((uintptr_t)dst, bytes, 1, ctx->dev, 0) != SIM_RANGE_OK))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    if (rc != CUDA_SUCCESS || !N)
        return rc;
    if (width == 1) {
        memset(dst, *(const unsigned char *)v, N);
        return rc;
    }
    for (size_t i = 0; i < N; i++)
        memcpy(dst + i * width, v, width);
    return rc;
}

SIM_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice,
                                         unsigned char uc, size_t N,
                                         CUstream hStream)
{
    SIM_FAULT(cuMemsetD8Async);
    return memset_common(dstDevice, &uc, 1, N, hStream);
}

SIM_API CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice,
                                          unsigned short us, size_t N,
                                          CUstream hStream)
{
    SIM_FAULT(cuMemsetD16Async);
    return memset_common(dstDevice, &us, 2, N, hStream);
}

SIM_API CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice,
                                          unsigned int ui, size_t N,
                                          CUstream hStream)
{
    SIM_FAULT(cuMemsetD32Async);
    return memset_common(dstDevice, &ui, 4, N, hStream);
}
