/* The 32-bit CUDA 2.0 forms of cuDeviceTotalMem, cuMemcpyHtoDAsync and
 * cuMemcpyDtoHAsync, which libcuda still has (FACTS.md F5). What they
 * answer was not measured; here a size above 4 GiB reads as UINT_MAX, and a 32-bit device
 * pointer is checked like any other (none of this sim's allocations lies
 * below 4 GiB, so copies to or from one are refused). */
#include "sim_internal.h"

#include <limits.h>

SIM_API CUresult CUDAAPI sim_cuDeviceTotalMem_v1(unsigned int *bytes,
                                                 CUdevice dev)
{
    size_t b = 0;
    CUresult rc = cuDeviceTotalMem(bytes ? &b : NULL, dev);

    if (rc == CUDA_SUCCESS)
        *bytes = b > UINT_MAX ? UINT_MAX : (unsigned int)b;
    return rc;
}

SIM_API CUresult CUDAAPI sim_cuMemcpyHtoDAsync_v1(unsigned int dstDevice,
                                                  const void *srcHost,
                                                  unsigned int ByteCount,
                                                  CUstream hStream)
{
    return cuMemcpyHtoDAsync((CUdeviceptr)dstDevice, srcHost, ByteCount,
                             hStream);
}

SIM_API CUresult CUDAAPI sim_cuMemcpyDtoHAsync_v1(void *dstHost,
                                                  unsigned int srcDevice,
                                                  unsigned int ByteCount,
                                                  CUstream hStream)
{
    return cuMemcpyDtoHAsync(dstHost, (CUdeviceptr)srcDevice, ByteCount,
                             hStream);
}
