/* The CUDA driver cucore runs on.
 *
 * cucore loads the driver the first time any function needs it:
 *   CUCORE_DRIVER unset or empty  -> libcuda.so.1 (the NVIDIA driver)
 *   CUCORE_DRIVER=sim             -> libcucore-sim.so, the simulated driver
 *                                    (no GPU needed; see sim/README.md)
 *   CUCORE_DRIVER=/path/lib.so    -> that library
 * Every entry point is resolved through cuGetProcAddress at the ABI version
 * cucore was written against, so a newer driver cannot change a signature
 * under us. Loading also calls cuInit(0).
 */
#ifndef CUCORE_DRIVER_H
#define CUCORE_DRIVER_H

#include <cucore/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cuc_driver_info {
    const char *path;    /* the library that was opened, as given to dlopen */
    int version;         /* cuDriverGetVersion(), e.g. 13000 */
    int simulated;       /* 1 for the cucore simulator */
};

/* Loads the driver now (idempotent) and describes it. Thread-safe: racing
 * first calls load once. info may be NULL; info->path is static storage.
 * CUC_E_NO_DRIVER: the library is missing or lacks an entry point cucore
 * needs (the message names the library and the entry point).
 * CUC_E_NO_DEVICE: cuInit found no device (the message gives
 * CUDA_VISIBLE_DEVICES). A failure is final for the process: later calls
 * report the same status and message. */
CUC_API int cuc_driver_load(struct cuc_driver_info *info);

#ifdef __cplusplus
}
#endif
#endif
