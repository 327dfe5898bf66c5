/* Devices, named by UUID.
 *
 * A device ordinal is an index into the devices *this process* sees, after
 * CUDA_VISIBLE_DEVICES; two processes can give the same ordinal to different
 * GPUs. The UUID is the GPU's identity everywhere, and the only identity
 * cucore puts on the wire.
 *
 * cuc_device objects are process-wide singletons: cuc_device_get() returns
 * the same pointer for an ordinal every time, from any thread, and they are
 * never freed (there is nothing to release).
 *
 * Threads: every function here is thread-safe. The first call that needs
 * the devices loads the driver and enumerates them once; racing first
 * calls wait for that one.
 *
 * Getters (cuc_device_ordinal() and the ones after it) take a device that
 * is not NULL, cannot fail and return values that live as long as the
 * process (strings included).
 */
#ifndef CUCORE_DEVICE_H
#define CUCORE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_device cuc_device;

/* 16 raw bytes, as cuDeviceGetUuid returns them. */
typedef struct cuc_uuid {
    uint8_t bytes[16];
} cuc_uuid;

/* "GPU-" + 36 characters + NUL. */
#define CUC_UUID_STRLEN 41

/* Capabilities that matter for sharing across processes
 * (cuc_device_caps()). */
enum cuc_device_cap {
    CUC_DEVICE_CAP_MEMORY_POOLS = 1u << 0,   /* stream-ordered pools */
    CUC_DEVICE_CAP_POOL_POSIX_FD = 1u << 1,  /* pools export as POSIX fds */
    CUC_DEVICE_CAP_VMM = 1u << 2,            /* virtual memory management */
    CUC_DEVICE_CAP_VMM_POSIX_FD = 1u << 3,   /* VMM chunks export as fds */
    CUC_DEVICE_CAP_IPC_EVENTS = 1u << 4,     /* cuIpcGetEventHandle works */
    CUC_DEVICE_CAP_FABRIC = 1u << 5,         /* fabric handles advertised */
    CUC_DEVICE_CAP_UNIFIED_ADDRESSING = 1u << 6
};

/* Number of devices this process sees (0 is never returned: no device is
 * CUC_E_NO_DEVICE, with the driver's reason in cuc_errmsg()). */
CUC_API int cuc_device_count(int *count);

/* The device at a local ordinal. CUC_E_INVALID if ordinal is out of range
 * (the message gives the count and CUDA_VISIBLE_DEVICES). */
CUC_API int cuc_device_get(int ordinal, cuc_device **dev);

/* The local device with this UUID, whatever its ordinal here. O(1) (a hash
 * table built once). CUC_E_NOT_VISIBLE if this process cannot see it: the
 * message names the UUID and lists the visible devices as ordinal=UUID. */
CUC_API int cuc_device_get_by_uuid(const cuc_uuid *uuid, cuc_device **dev);

/* Makes the device's primary context current on the calling thread
 * (retaining it on first use; cucore keeps it for the process lifetime).
 * Affects the calling thread only.
 *
 * Other calls: an operation that makes driver calls for a device's objects
 * (a create, an allocation, an import, a copy, a launch, a synchronize)
 * makes that device's primary context current the same way and leaves it
 * so (cucore/stream.h). A teardown (the last unref of a buffer, view,
 * pool, event, slab or VMM resource, cuc_stream_destroy, a lease ending
 * inside another call) puts back whatever context the thread had, none
 * included: it runs wherever the last reference happens to go (a garbage
 * collector, another thread's release), and a runtime such as PyTorch's
 * takes its current device from the current context (if the driver cannot
 * say what was current, the device's context stays). */
CUC_API int cuc_device_set_current(cuc_device *dev);

/* The device whose primary context is current on the calling thread,
 * whoever made it current (cucore, or a runtime such as PyTorch's: cucore
 * then retains that active primary context too, as it keeps every one it
 * uses), or CUC_E_NOT_FOUND if no context is current or the current one is
 * the application's own (cuCtxCreate); CUC_E_DRIVER naming the driver call
 * (cuCtxGetCurrent, cuCtxGetDevice, cuDevicePrimaryCtxGetState) if the
 * driver could not say. */
CUC_API int cuc_device_current(cuc_device **dev);

/* A scope that makes a device current and leaves the thread as it found
 * it (the Python package's `with device:`): cuc_device_context_save takes
 * the calling thread's current context, whatever it is (none, a primary
 * context, the application's own), as an opaque handle (NULL: none), and
 * cuc_device_context_restore makes that handle current again (NULL: none)
 * on the calling thread. A handle is the driver's context: it stays valid
 * while that context lives (cucore's primary contexts live as long as the
 * process). CUC_E_INVALID for a NULL out; CUC_E_DRIVER naming
 * cuCtxGetCurrent or cuCtxSetCurrent if the driver refused (a context
 * destroyed meanwhile). Affects the calling thread only. */
CUC_API int cuc_device_context_save(void **saved);
CUC_API int cuc_device_context_restore(void *saved);

/* The device's ordinal in this process. */
CUC_API int cuc_device_ordinal(const cuc_device *dev);
/* Its UUID (the one identity that crosses processes). */
CUC_API const cuc_uuid *cuc_device_uuid(const cuc_device *dev);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L prints it. */
CUC_API const char *cuc_device_uuid_string(const cuc_device *dev);
/* The driver's name for it ("NVIDIA H200"). */
CUC_API const char *cuc_device_name(const cuc_device *dev);
/* "00000000:19:00.0", as nvidia-smi --query-gpu=pci.bus_id prints it. */
CUC_API const char *cuc_device_pci_bus_id(const cuc_device *dev);
/* Compute capability; major or minor may be NULL. */
CUC_API void cuc_device_compute_capability(const cuc_device *dev, int *major, int *minor);
/* Bytes of device memory. */
CUC_API size_t cuc_device_total_memory(const cuc_device *dev);
/* Bitwise OR of enum cuc_device_cap. */
CUC_API unsigned cuc_device_caps(const cuc_device *dev);

/* UUIDs are plain values: the functions below touch no driver, are
 * thread-safe, and cuc_uuid_format / cuc_uuid_equal cannot fail (their
 * arguments must not be NULL). */

/* Parses "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" or the same without
 * prefix, in any case. "MIG-..." is CUC_E_NOT_SUPPORTED: a cuc_uuid is
 * the driver's 16 bytes with no kind (records carry just those), and
 * cucore formats every UUID as "GPU-...", so a MIG instance's UUID would
 * not survive a round trip; MIG devices are not supported. Anything else
 * (other lengths, misplaced or missing dashes, non-hex, trailing
 * characters) is CUC_E_INVALID. */
CUC_API int cuc_uuid_parse(const char *text, cuc_uuid *uuid);

/* Writes the "GPU-..." form (CUC_UUID_STRLEN bytes with the NUL). */
CUC_API void cuc_uuid_format(const cuc_uuid *uuid, char out[CUC_UUID_STRLEN]);

/* 1 if a and b are the same 16 bytes, else 0. */
CUC_API int cuc_uuid_equal(const cuc_uuid *a, const cuc_uuid *b);

#ifdef __cplusplus
}
#endif
#endif
