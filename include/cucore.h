/* cucore: CUDA devices, streams, events, memory pools, buffers, virtual
 * memory, kernels and launch configurations that cross process boundaries
 * on one machine with their physical meaning intact.
 *
 * Conventions, for every function in every module:
 *  - a function that can fail returns an int status: 0 on success, a
 *    negative CUC_E_* code on failure (cucore/error.h); cuc_errmsg() has
 *    the detail. A getter of a property that cannot fail returns it
 *    directly, and takes an object that is not NULL;
 *  - output parameters come last and are written only on success;
 *  - one verb per idea:
 *      reference-counted objects (cuc_event, cuc_pool, cuc_buffer,
 *      cuc_vmm): _ref takes a reference, _unref drops one (NULL-safe);
 *      what makes one (_create, cuc_buffer_alloc_async, cuc_msg_get_*,
 *      _get_by_id) returns one;
 *      single-owner objects (cuc_msg, a created cuc_stream, cuc_kernel,
 *      cuc_channel, cuc_listener): _destroy ends them (NULL-safe);
 *      singletons (cuc_device, the default streams) are never released;
 *      a stream-ordered memory operation ends in _async, as CUDA's do
 *      (cuc_buffer_alloc_async, cuc_buffer_unref_async, cuc_memcpy_async);
 *      records: cuc_msg_add_X writes an object, cuc_msg_read_X reads a
 *      record's fields and resolves nothing, cuc_msg_get_X resolves it to
 *      a local object;
 *  - a NULL stream, where a stream says where work is ordered, is the
 *    legacy default stream (cucore/stream.h, "NULL streams");
 *  - each header says, per function, who owns what it returns and whether
 *    it is thread-safe;
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
#include <cucore/slab.h>
#include <cucore/share.h>

#endif
