/* cucore: CUDA devices, streams, events, memory pools, buffers, virtual
 * memory, kernels and launch configurations that cross process boundaries
 * on one machine with their physical meaning intact.
 *
 * Conventions, for every function in every module:
 *  - the return value is an int status: 0 on success, a negative CUC_E_*
 *    code on failure (cucore/error.h); cuc_errmsg() has the detail;
 *  - output parameters come last and are written only on success;
 *  - the CUDA driver is loaded at first use (cucore/driver.h).
 */
#ifndef CUCORE_H
#define CUCORE_H

#include <cucore/version.h>
#include <cucore/error.h>
#include <cucore/driver.h>
#include <cucore/device.h>
#include <cucore/msg.h>
#include <cucore/channel.h>
#include <cucore/stream.h>
#include <cucore/event.h>
#include <cucore/kernel.h>
#include <cucore/launch.h>
#include <cucore/pool.h>
#include <cucore/memory.h>
#include <cucore/vmm.h>

#endif
