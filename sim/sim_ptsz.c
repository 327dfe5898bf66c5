/* The per-thread default stream (_ptsz) forms. cuGetProcAddress returns
 * them for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, as libcuda does
 * (FACTS.md F5). In them stream 0 is the calling
 * thread's default stream; work here is synchronous, so that is all that
 * sets them apart from the plain forms. */
#include "sim_internal.h"

static CUstream per_thread(CUstream s)
{
    return s ? s : CU_STREAM_PER_THREAD;
}

SIM_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    return cuStreamSynchronize(per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream,
                                                CUevent hEvent,
                                                unsigned int Flags)
{
    return cuStreamWaitEvent(per_thread(hStream), hEvent, Flags);
}

SIM_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
    return cuStreamQuery(per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream hStream,
                                                  int *priority)
{
    return cuStreamGetPriority(per_thread(hStream), priority);
}

SIM_API CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream,
                                               unsigned int *flags)
{
    return cuStreamGetFlags(per_thread(hStream), flags);
}

SIM_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return cuEventRecord(hEvent, per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config,
                                               CUfunction f,
                                               void **kernelParams,
                                               void **extra)
{
    CUlaunchConfig c;

    if (!config)
        return cuLaunchKernelEx(config, f, kernelParams, extra);
    c = *config;
    c.hStream = per_thread(c.hStream);
    return cuLaunchKernelEx(&c, f, kernelParams, extra);
}

SIM_API CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src,
                                            size_t ByteCount,
                                            CUstream hStream)
{
    return cuMemcpyAsync(dst, src, ByteCount, per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice,
                                                   const void *srcHost,
                                                   size_t ByteCount,
                                                   CUstream hStream)
{
    return cuMemcpyHtoDAsync(dstDevice, srcHost, ByteCount,
                             per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost,
                                                   CUdeviceptr srcDevice,
                                                   size_t ByteCount,
                                                   CUstream hStream)
{
    return cuMemcpyDtoHAsync(dstHost, srcDevice, ByteCount,
                             per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice,
                                              unsigned char uc, size_t N,
                                              CUstream hStream)
{
    return cuMemsetD8Async(dstDevice, uc, N, per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice,
                                               unsigned short us, size_t N,
                                               CUstream hStream)
{
    return cuMemsetD16Async(dstDevice, us, N, per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice,
                                               unsigned int ui, size_t N,
                                               CUstream hStream)
{
    return cuMemsetD32Async(dstDevice, ui, N, per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
                                                      size_t bytesize,
                                                      CUmemoryPool pool,
                                                      CUstream hStream)
{
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, per_thread(hStream));
}

SIM_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr,
                                             CUstream hStream)
{
    return cuMemFreeAsync(dptr, per_thread(hStream));
}
