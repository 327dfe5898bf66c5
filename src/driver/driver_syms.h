/* The driver entry points cucore uses, each at the ABI version it is pinned
 * to. driver.c asks cuGetProcAddress for NAME at VERSION and stores the
 * result as PFN_NAME_vVERSION (cudaTypedefs.h); the simulator exports the
 * same names. Adding a call to libcuda means adding a line here, nowhere
 * else. */
#ifndef CUC_DRIVER_SYMS_H
#define CUC_DRIVER_SYMS_H

#define CUC_DRIVER_SYMS(X)                          \
    X(cuInit, 2000)                                 \
    X(cuDriverGetVersion, 2020)                     \
    X(cuGetErrorName, 6000)                         \
    X(cuGetErrorString, 6000)                       \
    X(cuDeviceGetCount, 2000)                       \
    X(cuDeviceGet, 2000)                            \
    X(cuDeviceGetUuid, 11040)                       \
    X(cuDeviceGetName, 2000)                        \
    X(cuDeviceGetAttribute, 2000)                   \
    X(cuDeviceTotalMem, 3020)                       \
    X(cuDeviceGetPCIBusId, 4010)                    \
    X(cuDeviceCanAccessPeer, 4000)                  \
    X(cuDevicePrimaryCtxRetain, 7000)               \
    X(cuDevicePrimaryCtxRelease, 11000)             \
    X(cuDevicePrimaryCtxGetState, 7000)             \
    X(cuCtxSetCurrent, 4000)                        \
    X(cuCtxGetCurrent, 4000)                        \
    X(cuCtxGetDevice, 2000)                         \
    X(cuCtxSynchronize, 2000)                       \
    X(cuCtxGetStreamPriorityRange, 5050)            \
    X(cuStreamCreateWithPriority, 5050)             \
    X(cuStreamDestroy, 4000)                        \
    X(cuStreamSynchronize, 2000)                    \
    X(cuStreamWaitEvent, 3020)                      \
    X(cuStreamQuery, 2000)                          \
    X(cuStreamGetPriority, 5050)                    \
    X(cuStreamGetFlags, 5050)                       \
    X(cuEventCreate, 2000)                          \
    X(cuEventRecord, 2000)                          \
    X(cuEventSynchronize, 2000)                     \
    X(cuEventQuery, 2000)                           \
    X(cuEventElapsedTime, 12080)                    \
    X(cuEventDestroy, 4000)                         \
    X(cuIpcGetEventHandle, 4010)                    \
    X(cuIpcOpenEventHandle, 4010)                   \
    X(cuLibraryLoadData, 12000)                     \
    X(cuLibraryUnload, 12000)                       \
    X(cuLibraryGetKernel, 12000)                    \
    X(cuKernelGetFunction, 12000)                   \
    X(cuKernelGetParamInfo, 12040)                  \
    X(cuLaunchKernelEx, 11060)                      \
    X(cuMemcpyAsync, 4000)                          \
    X(cuMemcpyHtoDAsync, 3020)                      \
    X(cuMemcpyDtoHAsync, 3020)                      \
    X(cuMemsetD8Async, 3020)                        \
    X(cuMemsetD16Async, 3020)                       \
    X(cuMemsetD32Async, 3020)                       \
    X(cuMemPoolCreate, 11020)                       \
    X(cuMemPoolDestroy, 11020)                      \
    X(cuMemPoolSetAccess, 11020)                    \
    X(cuMemPoolGetAccess, 11020)                    \
    X(cuMemPoolSetAttribute, 11020)                 \
    X(cuMemPoolGetAttribute, 11020)                 \
    X(cuMemPoolExportToShareableHandle, 11020)      \
    X(cuMemPoolImportFromShareableHandle, 11020)    \
    X(cuMemPoolExportPointer, 11020)                \
    X(cuMemPoolImportPointer, 11020)                \
    X(cuMemAllocFromPoolAsync, 11020)               \
    X(cuMemFreeAsync, 11020)                        \
    X(cuMemGetAllocationGranularity, 10020)         \
    X(cuMemCreate, 10020)                           \
    X(cuMemRelease, 10020)                          \
    X(cuMemExportToShareableHandle, 10020)          \
    X(cuMemImportFromShareableHandle, 10020)        \
    X(cuMemAddressReserve, 10020)                   \
    X(cuMemAddressFree, 10020)                      \
    X(cuMemMap, 10020)                              \
    X(cuMemUnmap, 10020)                            \
    X(cuMemSetAccess, 10020)                        \
    X(cuMemGetAccess, 10020)                        \
    X(cuMemRetainAllocationHandle, 11000)           \
    X(cuMemGetAllocationPropertiesFromHandle, 10020) \
    X(cuMemAlloc, 3020)                             \
    X(cuMemFree, 3020)                              \
    X(cuMemGetAddressRange, 3020)                   \
    X(cuMemAllocHost, 3020)                         \
    X(cuMemFreeHost, 2000)                          \
    X(cuMemAllocManaged, 6000)                      \
    X(cuIpcGetMemHandle, 4010)                      \
    X(cuIpcOpenMemHandle, 11000)                    \
    X(cuIpcCloseMemHandle, 4010)                    \
    X(cuPointerGetAttribute, 4000)                  \
    X(cuPointerGetAttributes, 7000)

#endif
