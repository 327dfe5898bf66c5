/* Streams: created streams and the per-device default streams.
 *
 * A created stream (cuc_stream_create) is a driver handle that is valid only
 * in the process that created it; it never crosses a process boundary
 * (cuc_msg_add_stream refuses it with CUC_E_NOT_SERIALIZABLE). To order work
 * across processes, record an IPC event (cucore/event.h) and have the
 * receiver wait on it from a stream of its own.
 *
 * The default streams are per-device singletons that cucore never frees:
 *   cuc_stream_legacy()     CU_STREAM_LEGACY, the legacy default stream
 *                           (it synchronizes with every blocking stream of
 *                           the device's context);
 *   cuc_stream_per_thread() CU_STREAM_PER_THREAD, the calling thread's
 *                           default stream (one object per device; the
 *                           driver picks the thread's stream at each call);
 *   cuc_stream_default()    what CUDA's stream "0" means in this process:
 *                           the legacy or the per-thread stream, per the
 *                           default-stream mode below.
 * In CUDA the meaning of stream 0 is a compile-time choice of the code that
 * uses the runtime (--default-stream per-thread). cucore makes it a process
 * setting instead: cuc_stream_set_default_mode(), else the environment
 * variable CUCORE_DEFAULT_STREAM=legacy|per-thread read at first use, else
 * legacy. Default streams cross processes as their kind (legacy or
 * per-thread) and their device's UUID; "default" is resolved by the sender
 * and never travels as 0.
 *
 * NULL streams. Where a stream says where to order work (allocations,
 * unrefs and copies of memory, event records, launches), NULL means the
 * legacy default stream: of the device the call is about when it has one
 * (a pool's, a buffer's, an event's), else of the device current on the
 * calling thread (cuc_device_current), else of device 0, as the CUDA
 * runtime does. Where the stream is what the call acts on
 * (cuc_stream_synchronize, _query, _wait_event), NULL is CUC_E_INVALID.
 *
 * Every operation makes the stream's device context current on the calling
 * thread first (its primary context, as cuc_device_set_current does) and
 * leaves it so; teardowns put back the context they found
 * (cuc_device_set_current's comment).
 *
 * Threads: every function here is thread-safe; a created stream may be
 * used from several threads at once, as the driver allows, but must not be
 * destroyed while another thread uses it. Ownership: the creator of a
 * created stream owns it and destroys it; a wrapped one (cuc_stream_wrap)
 * is destroyed as a created one, its driver stream staying its maker's;
 * default streams belong to cucore. Getters take a stream that is not
 * NULL and cannot fail.
 */
#ifndef CUCORE_STREAM_H
#define CUCORE_STREAM_H

#include <stddef.h>

#include <cucore/version.h>
#include <cucore/device.h>
#include <cucore/msg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_stream cuc_stream;
typedef struct cuc_event cuc_event;

/* cuc_stream_create() flags. */
#define CUC_STREAM_NON_BLOCKING 0x1u /* no implicit sync with the legacy stream */

/* What a stream object is. The two default kinds are also their values on
 * the wire. */
enum cuc_stream_kind {
    CUC_STREAM_LEGACY_DEFAULT = 1,
    CUC_STREAM_PER_THREAD_DEFAULT = 2,
    CUC_STREAM_CREATED = 3
};

/* What cuc_stream_default() returns. */
enum cuc_stream_mode {
    CUC_STREAM_MODE_LEGACY = 1,
    CUC_STREAM_MODE_PER_THREAD = 2
};

/* A default stream record's fields (cuc_msg_read_stream). */
struct cuc_stream_record {
    int kind;        /* CUC_STREAM_LEGACY_DEFAULT or _PER_THREAD_DEFAULT */
    cuc_uuid device; /* the stream's device */
};

/* A new stream on dev, owned by the caller. flags: 0 or
 * CUC_STREAM_NON_BLOCKING. priority: lower numbers are higher priority, 0
 * is the default; it must lie in the range of dev's context
 * (cuCtxGetStreamPriorityRange: -5 to 0, sim/FACTS.md F9). CUC_E_INVALID: a
 * NULL argument, an unknown flag, a priority outside the range (the
 * message gives the range; the driver itself would clamp it silently).
 * CUC_E_DRIVER: the driver refused the range query or the stream. */
CUC_API int cuc_stream_create(cuc_device *dev, unsigned flags, int priority,
                              cuc_stream **out);

/* A stream another library made (PyTorch's, CuPy's, cuda.core's: the
 * CUstream their __cuda_stream__ gives), handle, on dev, as a cuc_stream
 * that does not own it: cuc_stream_destroy() frees cucore's object only,
 * never the driver's stream, which its maker must keep until then. NULL
 * and CU_STREAM_LEGACY give dev's legacy default stream, and
 * CU_STREAM_PER_THREAD its per-thread one (the singletons). Any other
 * handle is a stream of kind CUC_STREAM_CREATED (not sent: a handle is
 * this process's) and must be a live stream: its flags are read with dev
 * current, and the driver does not validate a handle (a pointer that is
 * not a stream crashes the process: sim/FACTS.md F45). The driver cannot
 * say which context a stream belongs to here: the handle must be one of
 * dev's primary context (work ordered on it makes dev current).
 * CUC_E_INVALID: dev or out NULL. CUC_E_DRIVER: the driver refused the
 * handle (named). CUC_E_NOMEM. */
CUC_API int cuc_stream_wrap(cuc_device *dev, void *handle, cuc_stream **out);

/* Destroys a created stream (work already queued still runs); a wrapped
 * one's driver stream stays its maker's. NULL and the
 * default streams are a no-op: the singletons live as long as the
 * process. In a child that inherited the stream through fork() it frees
 * only the child's copy: no driver call. */
CUC_API void cuc_stream_destroy(cuc_stream *stream);

/* Waits until all work queued on the stream has completed. */
CUC_API int cuc_stream_synchronize(cuc_stream *stream);

/* Makes future work on stream wait until event completes (the event may
 * belong to another device, or be an IPC event imported from another
 * process). */
CUC_API int cuc_stream_wait_event(cuc_stream *stream, cuc_event *event);

/* *done = 1 when all queued work has completed, 0 when some is pending. */
CUC_API int cuc_stream_query(cuc_stream *stream, int *done);

/* The stream's device. */
CUC_API cuc_device *cuc_stream_device(const cuc_stream *stream);
/* enum cuc_stream_kind. */
CUC_API int cuc_stream_kind(const cuc_stream *stream);
/* The driver's CUstream (CU_STREAM_LEGACY / CU_STREAM_PER_THREAD for the
 * default streams), for raw driver calls: `CUstream s = cuc_stream_handle(x);`
 * Make the stream's device current before using it
 * (cuc_device_set_current). */
CUC_API void *cuc_stream_handle(const cuc_stream *stream);

/* The device's default-stream singletons (see above); never destroyed. */
CUC_API int cuc_stream_legacy(cuc_device *dev, cuc_stream **out);
CUC_API int cuc_stream_per_thread(cuc_device *dev, cuc_stream **out);
CUC_API int cuc_stream_default(cuc_device *dev, cuc_stream **out);

/* Sets what cuc_stream_default() returns from now on, for every thread
 * (enum cuc_stream_mode); overrides CUCORE_DEFAULT_STREAM. */
CUC_API int cuc_stream_set_default_mode(int mode);
/* The current mode. CUC_E_INVALID if CUCORE_DEFAULT_STREAM holds anything
 * but "legacy" or "per-thread" and no mode was set. */
CUC_API int cuc_stream_default_mode(int *mode);

/* A default stream, as its kind and its device's UUID. A created stream is
 * CUC_E_NOT_SERIALIZABLE (see the top of this file). */
CUC_API int cuc_msg_add_stream(cuc_msg *msg, const cuc_stream *stream);
/* The fields of stream record index, resolving nothing. CUC_E_INVALID if
 * the record is not a stream; CUC_E_BADMSG for a kind other than legacy or
 * per-thread, or a malformed payload. */
CUC_API int cuc_msg_read_stream(const cuc_msg *msg, size_t index,
                                struct cuc_stream_record *rec);
/* The default stream of that kind on the local device with the record's
 * UUID (the same singleton cuc_stream_legacy / _per_thread returns).
 * CUC_E_NOT_VISIBLE when the device is not visible here; otherwise as
 * cuc_msg_read_stream. */
CUC_API int cuc_msg_get_stream(const cuc_msg *msg, size_t index, cuc_stream **stream);

#ifdef __cplusplus
}
#endif
#endif
