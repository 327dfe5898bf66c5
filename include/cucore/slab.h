/* Slabs: a sub-allocator over an IPC pool for many small buffers.
 *
 * cuc_buffer_alloc_async() gives each buffer its own pool allocation,
 * and its first send costs one driver export of the pointer (~18 us:
 * sim/FACTS.md F32). A slab allocator instead allocates large blocks (slabs) from
 * the pool and carves buffers out of them: each carved buffer is a view
 * of its slab (cucore/memory.h, cuc_buffer_view), so it travels as a
 * buffer view record and the receiver imports each slab once and resolves
 * every buffer in it with no driver call. A program that allocates and
 * sends thousands of small buffers pays one export and one import per
 * slab.
 *
 * Carving. Buffers start at multiples of CUC_SLAB_ALIGN bytes inside
 * their slab, and take their size rounded up to that (first fit over the
 * slabs, oldest first). A size larger than the slab size is not carved:
 * it gets its own pool allocation (cuc_buffer_alloc_async(), a plain
 * buffer, exported per pointer when sent). A new slab is allocated, on
 * the caller's stream, when no slab has room.
 *
 * Reuse. A carved buffer is freed like any buffer, by its last
 * cuc_buffer_unref_async(); its range goes back to its slab only when
 * its leases have ended too (the view's release), and is handed out again
 * only once the stream-ordered free has passed: an event is recorded
 * after the release on the stream it runs on (which first waits for the
 * stream of the last unref), and the range is reused once that event has
 * completed (cuEventQuery, at a later cuc_slab_alloc_async()). Ranges
 * released on the device's legacy stream (a NULL stream, and every
 * release that a lease's end makes) share one event, recorded on that
 * stream by the next cuc_slab_alloc_async() or cuc_slab_stats(): no
 * driver call at their release, one event and one query for all of
 * them. A range released on another stream gets an event of its own at
 * its release. If an event cannot be recorded, that stream is
 * synchronized instead; if that fails too, the range is never reused (it
 * is returned with its slab when the allocator goes; for a legacy-stream
 * range the release has already returned, so it is not reported). A slab
 * whose ranges are all free goes back to the pool at once, freed in
 * stream order after the events of its ranges.
 *
 * Ownership: refcounted. cuc_slab_create() returns a reference,
 * cuc_slab_ref() takes another, cuc_slab_unref() drops one; every carved
 * buffer holds one, so the allocator lives until its last buffer is
 * released. The allocator holds a reference to its pool.
 *
 * Threads: every function here is thread-safe.
 */
#ifndef CUCORE_SLAB_H
#define CUCORE_SLAB_H

#include <stddef.h>

#include <cucore/version.h>
#include <cucore/pool.h>
#include <cucore/memory.h>
#include <cucore/stream.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_slab cuc_slab;

/* Where carved buffers start in their slab, and the unit of their sizes. */
#define CUC_SLAB_ALIGN 256

/* An allocator carving buffers out of slab_size-byte allocations of pool
 * (slab_size rounded up to CUC_SLAB_ALIGN); one reference for the caller.
 * CUC_E_INVALID: a NULL argument, slab_size 0, or a pool that is imported
 * or not IPC (views of a local pool's memory need no slabs: allocate
 * plainly). CUC_E_NOMEM. */
CUC_API int cuc_slab_create(cuc_pool *pool, size_t slab_size, cuc_slab **out);

/* Takes another reference; returns slab. NULL is returned as NULL. */
CUC_API cuc_slab *cuc_slab_ref(cuc_slab *slab);

/* Drops one reference. NULL is a no-op. */
CUC_API void cuc_slab_unref(cuc_slab *slab);

/* size bytes carved from a slab (a view of it) or, for more than the slab
 * size, a buffer of its own; one reference for the caller, usable by work
 * queued on stream (NULL: the legacy default stream of the pool's device)
 * after this call. Freed by cuc_buffer_unref_async().
 * CUC_E_INVALID: a NULL argument or size 0. CUC_E_NOMEM: no host memory,
 * or the pool has no room for a new slab (cuc_errcuda() is then the
 * driver's out of memory). CUC_E_DRIVER: the driver refused a new slab
 * otherwise (cuc_errcuda()). */
CUC_API int cuc_slab_alloc_async(cuc_slab *slab, size_t size, cuc_stream *stream,
                                 cuc_buffer **out);

/* Slabs the allocator holds now (allocated from the pool, not yet
 * returned), and of their bytes those carved out or waiting for their
 * free's event (those seen complete now are free). Either pointer may
 * be NULL. */
CUC_API int cuc_slab_stats(cuc_slab *slab, size_t *slabs, size_t *bytes_in_use);

#ifdef __cplusplus
}
#endif
#endif
