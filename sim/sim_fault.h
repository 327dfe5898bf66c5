/* Fault injection and call counting inside the simulator (sim_fault.c).
 *
 * Every entry point's first statement is SIM_FAULT(name), name being the
 * base name cuGetProcAddress knows it by (the _v2, _ptsz and 32-bit forms
 * count as their base name). The hook counts the call and, when a fault
 * spec matches, returns the injected error before the entry point looks
 * at its arguments: an injected failure has no effect and writes no
 * output. */
#ifndef CUC_SIM_FAULT_H
#define CUC_SIM_FAULT_H

#include <cuda.h>

/* Every hooked entry point, by base name. */
#define SIM_ENTRY_NAMES(X)                                                     \
    X(cuInit)                                                                  \
    X(cuDriverGetVersion)                                                      \
    X(cuGetErrorName)                                                          \
    X(cuGetErrorString)                                                        \
    X(cuDeviceGetCount)                                                        \
    X(cuDeviceGet)                                                             \
    X(cuDeviceGetUuid)                                                         \
    X(cuDeviceGetName)                                                         \
    X(cuDeviceGetAttribute)                                                    \
    X(cuDeviceTotalMem)                                                        \
    X(cuDeviceGetPCIBusId)                                                     \
    X(cuDeviceCanAccessPeer)                                                   \
    X(cuDevicePrimaryCtxRetain)                                                \
    X(cuDevicePrimaryCtxRelease)                                               \
    X(cuDevicePrimaryCtxGetState)                                              \
    X(cuCtxSetCurrent)                                                         \
    X(cuCtxGetCurrent)                                                         \
    X(cuCtxGetDevice)                                                          \
    X(cuCtxSynchronize)                                                        \
    X(cuCtxGetStreamPriorityRange)                                             \
    X(cuStreamCreateWithPriority)                                              \
    X(cuStreamDestroy)                                                         \
    X(cuStreamSynchronize)                                                     \
    X(cuStreamWaitEvent)                                                       \
    X(cuStreamQuery)                                                           \
    X(cuStreamGetPriority)                                                     \
    X(cuStreamGetFlags)                                                        \
    X(cuEventCreate)                                                           \
    X(cuEventRecord)                                                           \
    X(cuEventSynchronize)                                                      \
    X(cuEventQuery)                                                            \
    X(cuEventElapsedTime)                                                      \
    X(cuEventDestroy)                                                          \
    X(cuIpcGetEventHandle)                                                     \
    X(cuIpcOpenEventHandle)                                                    \
    X(cuLibraryLoadData)                                                       \
    X(cuLibraryUnload)                                                         \
    X(cuLibraryGetKernel)                                                      \
    X(cuKernelGetFunction)                                                     \
    X(cuKernelGetParamInfo)                                                    \
    X(cuFuncGetParamInfo)                                                      \
    X(cuLaunchKernelEx)                                                        \
    X(cuMemcpyAsync)                                                           \
    X(cuMemcpyHtoDAsync)                                                       \
    X(cuMemcpyDtoHAsync)                                                       \
    X(cuMemcpyDtoH)                                                            \
    X(cuMemsetD8Async)                                                         \
    X(cuMemsetD16Async)                                                        \
    X(cuMemsetD32Async)                                                        \
    X(cuMemPoolCreate)                                                         \
    X(cuMemPoolDestroy)                                                        \
    X(cuMemPoolSetAccess)                                                      \
    X(cuMemPoolGetAccess)                                                      \
    X(cuMemPoolSetAttribute)                                                   \
    X(cuMemPoolGetAttribute)                                                   \
    X(cuMemPoolExportToShareableHandle)                                        \
    X(cuMemPoolImportFromShareableHandle)                                      \
    X(cuMemPoolExportPointer)                                                  \
    X(cuMemPoolImportPointer)                                                  \
    X(cuMemAllocFromPoolAsync)                                                 \
    X(cuMemFreeAsync)                                                          \
    X(cuMemGetAllocationGranularity)                                           \
    X(cuMemCreate)                                                             \
    X(cuMemRelease)                                                            \
    X(cuMemExportToShareableHandle)                                            \
    X(cuMemImportFromShareableHandle)                                          \
    X(cuMemAddressReserve)                                                     \
    X(cuMemAddressFree)                                                        \
    X(cuMemMap)                                                                \
    X(cuMemUnmap)                                                              \
    X(cuMemSetAccess)                                                          \
    X(cuMemGetAccess)                                                          \
    X(cuMemRetainAllocationHandle)                                             \
    X(cuMemGetAllocationPropertiesFromHandle)                                  \
    X(cuMemAlloc)                                                              \
    X(cuMemFree)                                                               \
    X(cuMemGetAddressRange)                                                    \
    X(cuMemAllocHost)                                                          \
    X(cuMemFreeHost)                                                           \
    X(cuMemAllocManaged)                                                       \
    X(cuIpcGetMemHandle)                                                       \
    X(cuIpcOpenMemHandle)                                                      \
    X(cuIpcCloseMemHandle)                                                     \
    X(cuPointerGetAttribute)                                                   \
    X(cuPointerGetAttributes)

enum sim_fn {
#define SIM_FN_ENUM_(n) SIM_FN_##n,
    SIM_ENTRY_NAMES(SIM_FN_ENUM_)
#undef SIM_FN_ENUM_
    SIM_FN_COUNT
};

/* Counts a call of fn; CUDA_SUCCESS, or the error a spec injects. */
CUresult sim_fault_enter(enum sim_fn fn);
/* CUresult for "CUDA_ERROR_NAME"; 0 when unknown (sim_error.c). */
int sim_error_by_name(const char *name, size_t len, CUresult *out);
const char *sim_error_name(CUresult e);

#define SIM_FAULT(name)                                                        \
    do {                                                                       \
        CUresult sim_fault_rc_ = sim_fault_enter(SIM_FN_##name);               \
        if (sim_fault_rc_ != CUDA_SUCCESS)                                     \
            return sim_fault_rc_;                                              \
    } while (0)

#endif
