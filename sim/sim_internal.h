/* Internal interface of the simulated CUDA driver (libcucore-sim.so).
 *
 * One process-wide mutex (sim_lock) guards every table below; each entry
 * point takes it, validates its handles against the registries (a handle is
 * never dereferenced before it is found in its list) and releases it.
 * Only the CUDA entry points and cucoreSimInitError() are exported
 * (SIM_API); everything here is hidden by -fvisibility=hidden. */
#ifndef CUC_SIM_INTERNAL_H
#define CUC_SIM_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "sim_fault.h"

#define SIM_API __attribute__((visibility("default")))

#define SIM_MAX_GPUS 16
#define SIM_DEFAULT_GPUS 4
#define SIM_GRANULARITY ((size_t)2 << 20) /* VMM granularity, pool chunk */
#define SIM_PAGE ((size_t)4096)
#define SIM_DRIVER_VERSION 13000
#define SIM_PHYS_HOST (-1) /* "physical GPU" of a pinned host pool */

/* ---- global state (sim_init.c) ---------------------------------------- */

struct sim_gpu {
    CUuuid uuid;
    char uuid_str[44]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    int pci_domain, pci_bus, pci_device;
};

struct sim_state {
    int nphys;                          /* physical GPUs */
    struct sim_gpu phys[SIM_MAX_GPUS];
    int nvis;                           /* visible devices */
    int vis[SIM_MAX_GPUS];              /* visible ordinal -> physical index */
    size_t pool_bytes;                  /* default pool capacity */
    /* CUCORE_SIM_NO_PEER: nopeer[a][b] for physical GPUs a, b */
    unsigned char nopeer[SIM_MAX_GPUS][SIM_MAX_GPUS];
};

extern struct sim_state sim;

void sim_lock(void);
void sim_unlock(void);
/* CUDA_SUCCESS once cuInit succeeded, else CUDA_ERROR_NOT_INITIALIZED. */
CUresult sim_check_init(void);
/* Local (visible) ordinal of a physical GPU, or -1. */
int sim_phys_to_local(int phys);
/* Local (visible) ordinal of the GPU with this UUID, or -1. */
int sim_uuid_to_local(const CUuuid *uuid);
/* Non-zero when dev is a valid visible ordinal. */
int sim_dev_valid(CUdevice dev);
/* Records why cuInit fails, for cucoreSimInitError() (under the lock, in
 * cuInit only); returns rc. */
CUresult sim_init_why(CUresult rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Exported beside the CUDA entry points: that reason, or NULL (sim_init.c). */
SIM_API const char *cucoreSimInitError(void);
/* Random 64-bit value (getrandom, never 0). */
uint64_t sim_random64(void);

/* ---- devices (sim_device.c) ------------------------------------------- */

/* Fills sim.phys from CUCORE_SIM_GPUS / CUCORE_SIM_UUIDS; on failure says
 * which variable and why through sim_init_why(). */
CUresult sim_devices_setup(void);
/* Fills sim.nopeer from CUCORE_SIM_NO_PEER ("0-1,2-3": physical GPUs
 * that cannot reach each other); CUDA_ERROR_INVALID_VALUE if malformed. */
CUresult sim_peers_setup(void);
void sim_uuid_format(const CUuuid *u, char out[44]);

/* ---- CUDA_VISIBLE_DEVICES (sim_visible.c) ----------------------------- */

/* Parses env (NULL = unset) against the physical GPUs; writes the visible
 * list (physical indices) to out / *nout. Returns CUDA_SUCCESS,
 * CUDA_ERROR_NO_DEVICE (empty result) or CUDA_ERROR_INVALID_DEVICE
 * (a device named twice). */
CUresult sim_parse_visible(const char *env, const struct sim_gpu *gpus,
                           int ngpus, int out[SIM_MAX_GPUS], int *nout);

/* ---- contexts (sim_context.c) ----------------------------------------- */

struct CUctx_st {
    uint32_t magic;
    int dev;      /* visible ordinal */
    int refcount; /* primary-context retains; 0 = inactive */
};

/* The thread's current context, checked: INVALID_CONTEXT when none,
 * CONTEXT_IS_DESTROYED when it is an inactive primary context. Locked. */
CUresult sim_ctx_current(struct CUctx_st **out);
int sim_ctx_valid(CUcontext c);

/* CUDA 13's cuCtxSynchronize (v13000) takes the context to synchronise. */
SIM_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx);

/* ---- other ABI forms (sim_legacy.c, sim_ptsz.c) ----------------------- */

/* The 32-bit CUDA 2.0 forms, exported under the plain names as libcuda
 * does (cuda.h maps those names to the _v2 functions). */
SIM_API CUresult CUDAAPI sim_cuDeviceTotalMem_v1(unsigned int *bytes,
                                                 CUdevice dev)
    __asm__("cuDeviceTotalMem");
SIM_API CUresult CUDAAPI sim_cuMemcpyHtoDAsync_v1(unsigned int dstDevice,
                                                  const void *srcHost,
                                                  unsigned int ByteCount,
                                                  CUstream hStream)
    __asm__("cuMemcpyHtoDAsync");
SIM_API CUresult CUDAAPI sim_cuMemcpyDtoHAsync_v1(void *dstHost,
                                                  unsigned int srcDevice,
                                                  unsigned int ByteCount,
                                                  CUstream hStream)
    __asm__("cuMemcpyDtoHAsync");

/* The per-thread default stream forms, under libcuda's names. */
SIM_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
SIM_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream,
                                                CUevent hEvent,
                                                unsigned int Flags);
SIM_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
SIM_API CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream hStream,
                                                  int *priority);
SIM_API CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream,
                                               unsigned int *flags);
SIM_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
SIM_API CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config,
                                               CUfunction f,
                                               void **kernelParams,
                                               void **extra);
SIM_API CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src,
                                            size_t ByteCount,
                                            CUstream hStream);
SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice,
                                                   const void *srcHost,
                                                   size_t ByteCount,
                                                   CUstream hStream);
SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost,
                                                   CUdeviceptr srcDevice,
                                                   size_t ByteCount,
                                                   CUstream hStream);
SIM_API CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice,
                                              unsigned char uc, size_t N,
                                              CUstream hStream);
SIM_API CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice,
                                               unsigned short us, size_t N,
                                               CUstream hStream);
SIM_API CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice,
                                               unsigned int ui, size_t N,
                                               CUstream hStream);
SIM_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
                                                      size_t bytesize,
                                                      CUmemoryPool pool,
                                                      CUstream hStream);
SIM_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr,
                                             CUstream hStream);

/* ---- streams (sim_stream.c) ------------------------------------------- */

/* Checks a stream handle (0, LEGACY, PER_THREAD or a live created stream).
 * *ctx_out gets the stream's context (the current one for the special
 * handles). Needs a current context. Locked. */
CUresult sim_stream_check(CUstream s, struct CUctx_st **ctx_out);
void sim_streams_ctx_gone(struct CUctx_st *ctx);

/* ---- events (sim_event.c) --------------------------------------------- */

void sim_events_ctx_gone(struct CUctx_st *ctx);
/* CUDA_SUCCESS for a live event, else CUDA_ERROR_INVALID_HANDLE. Locked. */
CUresult sim_event_check(CUevent e);

/* ---- libraries (sim_library.c, sim_image.c) --------------------------- */

/* What a kernel may take since CUDA 12.1 (and PTX ISA 8.1): 32764 bytes of
 * parameters, in PTX (there is no limit on their number: a PTX 8.1 .entry
 * with 4097 one-byte parameters is taken). A cubin's records are taken as
 * they are (sim_image.c). */
#define SIM_PARAM_SPACE 32764

/* One parameter in the device-side layout (cuKernelGetParamInfo). */
struct sim_param {
    uint32_t offset, size;
};

/* Where a kernel's parameter list came from. A fatbin may describe one
 * kernel twice (its cubin and its PTX): the higher source wins. */
enum sim_params_src {
    SIM_PARAMS_UNKNOWN = 0, /* a cubin's, until its .nv.info.NAME is read */
    SIM_PARAMS_PTX_REFUSED, /* PTX that loads, but that the driver's JIT
                             * refuses at first use (.ptr.shared) */
    SIM_PARAMS_PTX,         /* the .entry's parameter list */
    SIM_PARAMS_CUBIN        /* .nv.info.NAME: EIATTR_KPARAM_INFO records */
};

/* A kernel found in an image, with its parameters in ordinal order. */
struct sim_kname {
    char *name;
    struct sim_param *params; /* nparams of them; NULL when none */
    size_t nparams;
    enum sim_params_src src;
};

/* The kernels found in an image. refused_at_load is set when the image is
 * one the driver refuses at cuLibraryLoadData itself (a cubin's .nv.info
 * records misframed), not at cuLibraryGetKernel; sim_names_free leaves it. */
struct sim_names {
    struct sim_kname *v;
    size_t n, cap;
    int refused_at_load;
};
/* A hex digit's value (either case), or -1 (sim_hex.c). */
int sim_hexval(int c);
void sim_names_free(struct sim_names *names);
/* Reads a module image (PTX text, cubin ELF, fatbin) whose extent is only
 * known from its own headers. CUDA_ERROR_INVALID_IMAGE when malformed
 * (out->refused_at_load says whether at load), CUDA_ERROR_INVALID_PTX for
 * PTX whose .entry, parameter list or .version for its .target is. */
CUresult sim_image_scan(const void *code, struct sim_names *out);
/* Same with a known length (the test and fuzz entry). */
CUresult sim_image_scan_len(const void *code, size_t len,
                            struct sim_names *out);
void sim_functions_ctx_gone(struct CUctx_st *ctx);

/* ---- memory ranges (sim_memory.c, sim_alloc.c, sim_pool.c, sim_vmm.c) -- */

enum sim_range {
    SIM_RANGE_UNKNOWN = 0, /* not device memory we know: host memory */
    SIM_RANGE_OK,          /* inside a live allocation, size fits */
    SIM_RANGE_BAD          /* inside a pool / reservation but not usable */
};
/* Locked. dev is the local ordinal of the device the copy is issued from
 * (its stream's context): pool memory that device has no access to is
 * SIM_RANGE_BAD. */
enum sim_range sim_alloc_range(uintptr_t p, size_t n);
/* dev_side: the copy needs device memory there (HtoD's destination,
 * DtoH's source). */
enum sim_range sim_pool_range(uintptr_t p, size_t n, int dev, int dev_side);
/* A synchronize passed the imported pointers' frees: a destroyed pool
 * they kept goes now (FACTS.md F46). Under the lock. */
void sim_pool_retire_locked(void);
enum sim_range sim_vmm_range(uintptr_t p, size_t n, int write);

/* What a pointer is, for cuMemGetAddressRange and cuPointerGetAttribute
 * (sim_pointer.c). Filled by the *_info functions of the owning module;
 * 0 from them means "not mine". Locked. */
enum sim_ptr_kind {
    SIM_PTR_NONE = 0,
    SIM_PTR_MEMALLOC, /* cuMemAlloc */
    SIM_PTR_MANAGED,  /* cuMemAllocManaged */
    SIM_PTR_HOST,     /* cuMemAllocHost */
    SIM_PTR_OPENED,   /* cuIpcOpenMemHandle */
    SIM_PTR_POOL,     /* a pool allocation, or an imported pool pointer */
    SIM_PTR_VMM       /* a cuMemMap mapping */
};
struct sim_ptr_info {
    enum sim_ptr_kind kind;
    uintptr_t base;        /* the allocation: cuMemGetAddressRange */
    size_t size;
    int no_range;          /* cuMemGetAddressRange says NOT_FOUND anyway */
    uintptr_t range_base;  /* RANGE_START_ADDR / RANGE_SIZE */
    size_t range_size;
    uintptr_t map_base;    /* MAPPING_BASE_ADDR / MAPPING_SIZE */
    size_t map_size;
    int host;              /* host memory (CU_MEMORYTYPE_HOST) */
    int no_devptr;         /* DEVICE_POINTER is INVALID_VALUE */
    int dev;               /* DEVICE_ORDINAL: a local ordinal */
    struct CUctx_st *ctx;  /* CONTEXT, or NULL */
    CUmemoryPool pool;     /* MEMPOOL_HANDLE, or NULL */
    uint64_t id;           /* BUFFER_ID / MEMORY_BLOCK_ID */
    unsigned int handle_types; /* ALLOWED_HANDLE_TYPES */
    unsigned int access;   /* ACCESS_FLAGS of the device asked about */
    int rdma;              /* IS_GPU_DIRECT_RDMA_CAPABLE */
};
/* dev: local ordinal of the current context's device, or -1. */
int sim_alloc_info(uintptr_t p, int dev, struct sim_ptr_info *out);
int sim_pool_info(uintptr_t p, int dev, struct sim_ptr_info *out);
int sim_vmm_info(uintptr_t p, int dev, struct sim_ptr_info *out);
/* A new BUFFER_ID: unique in the process, never reused. Locked. */
uint64_t sim_next_buffer_id(void);
/* cuMemAlloc / managed / host allocations and IPC mappings made in ctx go
 * with it (its primary context released to zero). Locked. */
void sim_allocs_ctx_gone(struct CUctx_st *ctx);

/* ---- peers (sim_device.c) ----------------------------------------------- */

/* Whether local device a can reach local device b's memory (always for
 * a == b; CUCORE_SIM_NO_PEER lists the pairs that cannot). */
int sim_peer_ok(int a, int b);

/* ---- small helpers ----------------------------------------------------- */

static inline int sim_mul_overflow(size_t a, size_t b, size_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}

static inline int sim_add_overflow(size_t a, size_t b, size_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

static inline size_t sim_round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

#endif
