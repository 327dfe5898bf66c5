/* Launch configurations and kernel launches.
 *
 * A launch configuration is a plain value: grid, block and cluster
 * dimensions, dynamic shared memory and the cooperative flag. It holds no
 * stream (a stream is a per-process handle; cuc_launch takes it as an
 * argument), so it crosses processes as is.
 *
 * grid counts blocks, always: a launch of grid {8,1,1} with cluster
 * {2,1,1} runs 8 blocks in 4 clusters (cuLaunchKernelEx's gridDim). This
 * differs from cuda.core, whose LaunchConfig counts clusters in grid when
 * a cluster is set (grid 4 there is grid 8 here); convert when porting.
 *
 * Threads: configurations are values owned by the caller; every function
 * here is thread-safe on distinct configurations.
 */
#ifndef CUCORE_LAUNCH_H
#define CUCORE_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>
#include <cucore/msg.h>
#include <cucore/stream.h>
#include <cucore/kernel.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_launch_config {
    uint32_t grid[3];     /* blocks in x, y, z (not clusters: see above) */
    uint32_t block[3];    /* threads per block in x, y, z */
    uint32_t cluster[3];  /* blocks per cluster; 1,1,1 = no clusters */
    uint32_t shared_mem;  /* dynamic shared memory per block, bytes */
    uint32_t cooperative; /* 1: a cooperative launch (grid-wide sync) */
    uint32_t reserved[5]; /* must be 0 */
} cuc_launch_config;

/* Limits a configuration must respect (CUDA's limits on every GPU so far;
 * the driver may refuse less for a given device or kernel). */
#define CUC_LAUNCH_MAX_GRID_X 2147483647u
#define CUC_LAUNCH_MAX_GRID_YZ 65535u
#define CUC_LAUNCH_MAX_BLOCK_XY 1024u
#define CUC_LAUNCH_MAX_BLOCK_Z 64u
#define CUC_LAUNCH_MAX_THREADS 1024u       /* block x*y*z */
#define CUC_LAUNCH_MAX_CLUSTER 16u         /* cluster x*y*z */
#define CUC_LAUNCH_MAX_SHARED_MEM (1u << 20)

/* Grid, block and cluster 1,1,1; no shared memory; not cooperative.
 * NULL is a no-op. Cannot fail. */
CUC_API void cuc_launch_config_init(cuc_launch_config *cfg);

/* CUC_E_INVALID, naming the field, unless every dimension is at least 1
 * and within the limits above, each cluster dimension divides the grid
 * dimension, cooperative is 0 or 1 and reserved is 0. */
CUC_API int cuc_launch_config_check(const cuc_launch_config *cfg);

/* Launches kernel on stream (NULL: the legacy default stream of the
 * current device, else device 0: see cucore/stream.h) with
 * cuLaunchKernelEx: clusters and cooperative launch become launch
 * attributes. args is the driver's kernelParams: one pointer per kernel
 * parameter, to its value. The configuration is checked first
 * (cuc_launch_config_check). */
CUC_API int cuc_launch(cuc_stream *stream, const cuc_launch_config *cfg,
                       cuc_kernel *kernel, void **args);

/* cuc_launch with the size of each argument: nargs must be the kernel's
 * parameter count and sizes[i] the size of its parameter i
 * (cuc_kernel_params), else CUC_E_INVALID naming the kernel, the
 * parameter and both sizes, and nothing is launched. cuc_launch cannot
 * check this: the driver reads each parameter's own size from args[i],
 * past the end of a shorter value, and a missing argument's pointer from
 * past the end of args. sizes may be NULL when nargs is 0. */
CUC_API int cuc_launch_checked(cuc_stream *stream, const cuc_launch_config *cfg,
                               cuc_kernel *kernel, void **args, const size_t *sizes,
                               size_t nargs);

/* The configuration, as its fields (checked first: a configuration the
 * receiver would refuse is CUC_E_INVALID here). */
CUC_API int cuc_msg_add_launch_config(cuc_msg *msg, const cuc_launch_config *cfg);
/* An equal configuration (a value: nothing to resolve or release).
 * CUC_E_INVALID if the record is not a launch config; CUC_E_BADMSG when
 * a field breaks the rules of cuc_launch_config_check. */
CUC_API int cuc_msg_get_launch_config(const cuc_msg *msg, size_t index,
                                      cuc_launch_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
