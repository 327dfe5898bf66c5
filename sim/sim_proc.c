/* cuGetProcAddress: the entry table, looked up by base name and requested
 * version as the real driver does (the highest version of the symbol not
 * above the request), plus the exports under the plain (v1) names whose
 * ABI is that of the versioned function.
 *
 * Test knob: CUCORE_SIM_HIDE=cuMemCreate,cuInit makes those names
 * CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (with a NULL pointer). */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

typedef void (*sim_fn)(void);

struct sim_entry {
    const char *name;
    int version; /* first CUDA version with this ABI */
    sim_fn fn;
};

static CUresult CUDAAPI sim_cuGetProcAddress_v1(const char *symbol,
                                                void **pfn, int cudaVersion,
                                                cuuint64_t flags);

/* Names are base names; the function is the one cuda.h maps the base name
 * to (cuStreamDestroy -> cuStreamDestroy_v2, ...). Only versions with the
 * ABI of what is implemented are listed: the 32-bit-pointer v1 forms of
 * cuDeviceTotalMem, cuMemcpyHtoDAsync and cuMemcpyDtoHAsync are not. */
#define E(name, ver) {#name, ver, (sim_fn)name},
#define EF(name, ver, fn) {#name, ver, (sim_fn)fn},
static const struct sim_entry sim_table[] = {
    E(cuInit, 2000)
    E(cuDriverGetVersion, 2020)
    E(cuGetErrorName, 6000)
    E(cuGetErrorString, 6000)
    E(cuDeviceGetCount, 2000)
    E(cuDeviceGet, 2000)
    E(cuDeviceGetUuid, 9020)
    E(cuDeviceGetUuid, 11040)
    E(cuDeviceGetName, 2000)
    E(cuDeviceGetAttribute, 2000)
    E(cuDeviceTotalMem, 3020)
    E(cuDeviceGetPCIBusId, 4010)
    E(cuDeviceCanAccessPeer, 4000)
    E(cuDevicePrimaryCtxRetain, 7000)
    E(cuDevicePrimaryCtxRelease, 7000)
    E(cuDevicePrimaryCtxRelease, 11000)
    E(cuCtxSetCurrent, 4000)
    E(cuCtxGetCurrent, 4000)
    E(cuCtxSynchronize, 2000)
    EF(cuCtxSynchronize, 13000, cuCtxSynchronize_v2)
    E(cuStreamCreateWithPriority, 5050)
    E(cuStreamDestroy, 2000)
    E(cuStreamDestroy, 4000)
    E(cuStreamSynchronize, 2000)
    E(cuStreamWaitEvent, 3020)
    E(cuStreamQuery, 2000)
    E(cuStreamGetPriority, 5050)
    E(cuStreamGetFlags, 5050)
    E(cuEventCreate, 2000)
    E(cuEventRecord, 2000)
    E(cuEventSynchronize, 2000)
    E(cuEventQuery, 2000)
    E(cuEventElapsedTime, 2000)
    E(cuEventElapsedTime, 12080)
    E(cuEventDestroy, 2000)
    E(cuEventDestroy, 4000)
    E(cuIpcGetEventHandle, 4010)
    E(cuIpcOpenEventHandle, 4010)
    E(cuLibraryLoadData, 12000)
    E(cuLibraryUnload, 12000)
    E(cuLibraryGetKernel, 12000)
    E(cuKernelGetFunction, 12000)
    E(cuLaunchKernelEx, 11060)
    E(cuMemcpyAsync, 4000)
    E(cuMemcpyHtoDAsync, 3020)
    E(cuMemcpyDtoHAsync, 3020)
    E(cuMemsetD8Async, 3020)
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
    E(cuMemFreeAsync, 11020)
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
    EF(cuGetProcAddress, 11030, sim_cuGetProcAddress_v1)
    E(cuGetProcAddress, 12000)
};
#undef E
#undef EF

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
    const struct sim_entry *best = NULL;
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
    /* Streams are synchronous: the per-thread and legacy forms are the
     * same functions. */
    for (size_t i = 0; i < sizeof(sim_table) / sizeof(sim_table[0]); i++) {
        const struct sim_entry *e = &sim_table[i];
        if (strcmp(e->name, symbol) != 0)
            continue;
        found = 1;
        if (e->version <= cudaVersion &&
            (!best || e->version > best->version))
            best = e;
    }
    if (!found)
        return CUDA_SUCCESS;
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

/* The CUDA 11.3 form (no status), reachable through cuGetProcAddress for
 * requests in [11030, 12000). */
static CUresult CUDAAPI sim_cuGetProcAddress_v1(const char *symbol,
                                                void **pfn, int cudaVersion,
                                                cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

/* ---- exports under the plain names ---------------------------------------
 * Each has the same ABI as its versioned function. The plain
 * cuGetProcAddress is exported with the 5-argument (CUDA 12) signature, as
 * cucore expects; libcuda's plain symbol is the 4-argument v11030 form. */

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
SIM_ALIAS(CUresult, cuGetProcAddress,
          (const char *sym, void **pfn, int ver, cuuint64_t fl,
           CUdriverProcAddressQueryResult *st),
          (sym, pfn, ver, fl, st), cuGetProcAddress)
