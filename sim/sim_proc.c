/* cuGetProcAddress: the entry table, looked up by base name and requested
 * version as the real driver does (the highest version of the symbol not
 * above the request; the _ptsz form when asked for per-thread default
 * streams: FACTS.md F5), plus the exports under the plain (v1) names.
 *
 * Test knob: CUCORE_SIM_HIDE=cuMemCreate,cuInit makes those names
 * CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (with a NULL pointer). */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

typedef void (*sim_fn)(void);

struct sim_entry {
    const char *name;
    int version;    /* first CUDA version with this ABI */
    int per_thread; /* the _ptsz form, for PER_THREAD_DEFAULT_STREAM */
    sim_fn fn;
};

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion,
                       cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status);

/* ---- exports under the plain names ---------------------------------------
 * libcuda exports the first ABI of each entry point under its plain name
 * and cuGetProcAddress returns that symbol for requests below the next
 * version (FACTS.md F5). Where the later version kept the ABI, the plain
 * export here is the same function; the 32-bit forms are sim_legacy.c. */

#define SIM_ALIAS(ret, plain, params, args, target)                           \
    SIM_API ret CUDAAPI sim_alias_##plain params __asm__(#plain);             \
    SIM_API ret CUDAAPI sim_alias_##plain params { return target args; }

SIM_ALIAS(CUresult, cuStreamDestroy, (CUstream s), (s), cuStreamDestroy)
SIM_ALIAS(CUresult, cuEventDestroy, (CUevent e), (e), cuEventDestroy)
SIM_ALIAS(CUresult, cuDevicePrimaryCtxRelease, (CUdevice d), (d),
          cuDevicePrimaryCtxRelease)
SIM_ALIAS(CUresult, cuDeviceGetUuid, (CUuuid * u, CUdevice d), (u, d),
          cuDeviceGetUuid)
SIM_ALIAS(CUresult, cuEventElapsedTime, (float *ms, CUevent a, CUevent b),
          (ms, a, b), cuEventElapsedTime)
SIM_ALIAS(CUresult, cuIpcOpenMemHandle,
          (CUdeviceptr * p, CUipcMemHandle h, unsigned int f), (p, h, f),
          cuIpcOpenMemHandle)

/* libcuda's plain cuGetProcAddress is the CUDA 11.3 form (no status),
 * which cuGetProcAddress also returns for requests in [11030, 12000). */
SIM_API CUresult CUDAAPI sim_cuGetProcAddress_v1(const char *symbol,
                                                 void **pfn, int cudaVersion,
                                                 cuuint64_t flags)
    __asm__("cuGetProcAddress");
SIM_API CUresult CUDAAPI sim_cuGetProcAddress_v1(const char *symbol,
                                                 void **pfn, int cudaVersion,
                                                 cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

/* Names are base names; E's function is the one cuda.h maps the base name
 * to (cuStreamDestroy -> cuStreamDestroy_v2, ...), EF names it, P is the
 * per-thread-stream form (sim_ptsz.c). */
#define E(name, ver) {#name, ver, 0, (sim_fn)name},
#define EF(name, ver, fn) {#name, ver, 0, (sim_fn)fn},
#define P(name, ver, fn) {#name, ver, 1, (sim_fn)fn},
static const struct sim_entry sim_table[] = {
    E(cuInit, 2000)
    E(cuDriverGetVersion, 2020)
    E(cuGetErrorName, 6000)
    E(cuGetErrorString, 6000)
    E(cuDeviceGetCount, 2000)
    E(cuDeviceGet, 2000)
    EF(cuDeviceGetUuid, 9020, sim_alias_cuDeviceGetUuid)
    E(cuDeviceGetUuid, 11040)
    E(cuDeviceGetName, 2000)
    E(cuDeviceGetAttribute, 2000)
    EF(cuDeviceTotalMem, 2000, sim_cuDeviceTotalMem_v1)
    E(cuDeviceTotalMem, 3020)
    E(cuDeviceGetPCIBusId, 4010)
    E(cuDeviceCanAccessPeer, 4000)
    E(cuDevicePrimaryCtxRetain, 7000)
    EF(cuDevicePrimaryCtxRelease, 7000, sim_alias_cuDevicePrimaryCtxRelease)
    E(cuDevicePrimaryCtxRelease, 11000)
    E(cuDevicePrimaryCtxGetState, 7000)
    E(cuCtxSetCurrent, 4000)
    E(cuCtxGetCurrent, 4000)
    E(cuCtxGetDevice, 2000)
    E(cuCtxSynchronize, 2000)
    EF(cuCtxSynchronize, 13000, cuCtxSynchronize_v2)
    E(cuCtxGetStreamPriorityRange, 5050)
    E(cuStreamCreateWithPriority, 5050)
    EF(cuStreamDestroy, 2000, sim_alias_cuStreamDestroy)
    E(cuStreamDestroy, 4000)
    E(cuStreamSynchronize, 2000)
    P(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz)
    E(cuStreamWaitEvent, 3020)
    P(cuStreamWaitEvent, 7000, cuStreamWaitEvent_ptsz)
    E(cuStreamQuery, 2000)
    P(cuStreamQuery, 7000, cuStreamQuery_ptsz)
    E(cuStreamGetPriority, 5050)
    P(cuStreamGetPriority, 7000, cuStreamGetPriority_ptsz)
    E(cuStreamGetFlags, 5050)
    P(cuStreamGetFlags, 7000, cuStreamGetFlags_ptsz)
    E(cuEventCreate, 2000)
    E(cuEventRecord, 2000)
    P(cuEventRecord, 7000, cuEventRecord_ptsz)
    E(cuEventSynchronize, 2000)
    E(cuEventQuery, 2000)
    EF(cuEventElapsedTime, 2000, sim_alias_cuEventElapsedTime)
    E(cuEventElapsedTime, 12080)
    EF(cuEventDestroy, 2000, sim_alias_cuEventDestroy)
    E(cuEventDestroy, 4000)
    E(cuIpcGetEventHandle, 4010)
    E(cuIpcOpenEventHandle, 4010)
    E(cuLibraryLoadData, 12000)
    E(cuLibraryUnload, 12000)
    E(cuLibraryGetKernel, 12000)
    E(cuKernelGetFunction, 12000)
    E(cuKernelGetParamInfo, 12040)
    E(cuFuncGetParamInfo, 12040)
    E(cuLaunchKernelEx, 11060)
    P(cuLaunchKernelEx, 11060, cuLaunchKernelEx_ptsz)
    E(cuMemcpyAsync, 4000)
    P(cuMemcpyAsync, 7000, cuMemcpyAsync_ptsz)
    EF(cuMemcpyHtoDAsync, 2000, sim_cuMemcpyHtoDAsync_v1)
    E(cuMemcpyHtoDAsync, 3020)
    P(cuMemcpyHtoDAsync, 7000, cuMemcpyHtoDAsync_v2_ptsz)
    EF(cuMemcpyDtoHAsync, 2000, sim_cuMemcpyDtoHAsync_v1)
    E(cuMemcpyDtoHAsync, 3020)
    P(cuMemcpyDtoHAsync, 7000, cuMemcpyDtoHAsync_v2_ptsz)
    E(cuMemcpyDtoH, 3020)
    E(cuMemsetD8Async, 3020)
    P(cuMemsetD8Async, 7000, cuMemsetD8Async_ptsz)
    E(cuMemsetD16Async, 3020)
    P(cuMemsetD16Async, 7000, cuMemsetD16Async_ptsz)
    E(cuMemsetD32Async, 3020)
    P(cuMemsetD32Async, 7000, cuMemsetD32Async_ptsz)
    E(cuMemPoolCreate, 11020)
    E(cuMemPoolDestroy, 11020)
    E(cuMemPoolSetAccess, 11020)
    E(cuMemPoolGetAccess, 11020)
    E(cuMemPoolSetAttribute, 11020)
    E(cuMemPoolGetAttribute, 11020)
    E(cuMemPoolExportToShareableHandle, 11020)
    E(cuMemPoolImportFromShareableHandle, 11020)
    E(cuMemPoolExportPointer, 11020)
    E(cuMemPoolImportPointer, 11020)
    E(cuMemAllocFromPoolAsync, 11020)
    P(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz)
    E(cuMemFreeAsync, 11020)
    P(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz)
    E(cuMemGetAllocationGranularity, 10020)
    E(cuMemCreate, 10020)
    E(cuMemRelease, 10020)
    E(cuMemExportToShareableHandle, 10020)
    E(cuMemImportFromShareableHandle, 10020)
    E(cuMemAddressReserve, 10020)
    E(cuMemAddressFree, 10020)
    E(cuMemMap, 10020)
    E(cuMemUnmap, 10020)
    E(cuMemSetAccess, 10020)
    E(cuMemGetAccess, 10020)
    E(cuMemRetainAllocationHandle, 11000)
    E(cuMemGetAllocationPropertiesFromHandle, 10020)
    E(cuMemAlloc, 3020)
    E(cuMemFree, 3020)
    E(cuMemGetAddressRange, 3020)
    E(cuMemAllocHost, 3020)
    E(cuMemFreeHost, 2000)
    E(cuMemAllocManaged, 6000)
    E(cuIpcGetMemHandle, 4010)
    EF(cuIpcOpenMemHandle, 4010, sim_alias_cuIpcOpenMemHandle)
    E(cuIpcOpenMemHandle, 11000)
    E(cuIpcCloseMemHandle, 4010)
    E(cuPointerGetAttribute, 4000)
    E(cuPointerGetAttributes, 7000)
    EF(cuGetProcAddress, 11030, sim_cuGetProcAddress_v1)
    E(cuGetProcAddress, 12000)
};
#undef E
#undef EF
#undef P

/* Is name listed in CUCORE_SIM_HIDE (comma-separated, exact names)? */
static int hidden(const char *name)
{
    const char *h = getenv("CUCORE_SIM_HIDE");
    size_t n = strlen(name);

    while (h && *h) {
        const char *e = strchr(h, ',');
        size_t len = e ? (size_t)(e - h) : strlen(h);
        while (len && *h == ' ') {
            h++;
            len--;
        }
        while (len && h[len - 1] == ' ')
            len--;
        if (len == n && memcmp(h, name, n) == 0)
            return 1;
        if (!e)
            break;
        h = e + 1;
    }
    return 0;
}

/* As the driver (seen on 580 / CUDA 13.0): a symbol that is unknown, hidden
 * or too new for the request gives CUDA_SUCCESS with *pfn = NULL and the
 * reason in *symbolStatus; a request above the driver's own version, or
 * unknown flags, is CUDA_ERROR_INVALID_VALUE and touches neither. */
static CUresult lookup(const char *symbol, void **pfn, int cudaVersion,
                       cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    const struct sim_entry *best = NULL, *best_pt = NULL;
    int found = 0;

    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE; /* (the driver crashes) */
    if (cudaVersion > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (hidden(symbol))
        return CUDA_SUCCESS;
    for (size_t i = 0; i < sizeof(sim_table) / sizeof(sim_table[0]); i++) {
        const struct sim_entry *e = &sim_table[i];
        const struct sim_entry **b = e->per_thread ? &best_pt : &best;
        if (strcmp(e->name, symbol) != 0)
            continue;
        found = 1;
        if (e->version <= cudaVersion && (!*b || e->version > (*b)->version))
            *b = e;
    }
    if (!found)
        return CUDA_SUCCESS;
    if (best_pt && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        best = best_pt;
    if (!best) {
        if (status)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_SUCCESS;
    }
    *pfn = (void *)best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn,
                                          int cudaVersion, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult
                                              *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
