/* The CUDA driver cucore runs on.
 *
 * cucore loads the driver the first time any function needs it:
 *   CUCORE_DRIVER unset or empty  -> libcuda.so.1 (the NVIDIA driver)
 *   CUCORE_DRIVER=sim             -> libcucore-sim.so, the simulated driver
 *                                    (no GPU needed; see sim/README.md)
 *   CUCORE_DRIVER=/path/lib.so    -> that library
 * Every entry point is resolved through cuGetProcAddress at the ABI version
 * cucore was written against, so a newer driver cannot change a signature
 * under us; the newest of those versions makes the oldest driver cucore
 * runs on: CUDA 12.8 (cuDriverGetVersion() 12080). Loading also calls
 * cuInit(0).
 *
 * Where CUCORE_DRIVER=sim finds libcucore-sim.so, first found wins:
 *   1. next to the file that holds cucore's code (symlinks resolved): the
 *      shared libcucore, so an installed libdir/libcucore.so loads
 *      libdir/libcucore-sim.so; for a program that linked libcucore.a, the
 *      program's own directory; for the pip-installed Python package, whose
 *      extension module holds the library, its cucore/ directory, where
 *      python/setup.py puts the simulator;
 *   2. in the path from that directory to the installed libdir, fixed when
 *      cucore is configured as a relative path (bindir to libdir, "../lib"):
 *      an installed bin/cucore loads lib/libcucore-sim.so. The build tree
 *      has the same layout (every library in build/lib, every program one
 *      directory below build/), so programs built there find the one built
 *      there;
 *   3. the bare name "libcucore-sim.so", through the dynamic loader's search
 *      (LD_LIBRARY_PATH, the program's RUNPATH, ld.so.cache): for a program
 *      linked with libcucore.a that lives elsewhere, or set CUCORE_DRIVER to
 *      the simulator's path.
 * No absolute path is compiled in: an installed tree can be moved.
 */
#ifndef CUCORE_DRIVER_H
#define CUCORE_DRIVER_H

#include <cucore/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cuc_driver_info {
    const char *path;    /* the library that was opened, as given to dlopen */
    int version;         /* cuDriverGetVersion(), e.g. 13000; 0 if that call failed */
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
