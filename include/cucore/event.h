/* Events, and IPC events that cross process boundaries.
 *
 * An event created with CUC_EVENT_IPC can be sent in a message: the record
 * carries the driver's 64-byte IPC handle and the device's UUID, and the
 * receiver gets an imported event it can wait on (cuc_stream_wait_event),
 * synchronize, query or record, as the driver allows for an opened IPC
 * event ("behaves like a locally created event with timing disabled"). An
 * IPC event means something only while the event it was opened from
 * exists: the sending process must keep it alive.
 *
 * Events are reference counted: cuc_event_create() and cuc_msg_get_event()
 * return a reference, cuc_event_ref() takes another, cuc_event_unref()
 * drops one; the last destroys the driver event. Getting an IPC event in
 * the process that created it (or one already imported here) returns
 * another reference to the same object rather than opening the handle
 * again.
 *
 * Threads: every function here is thread-safe; an event must not be used
 * after the unref of the caller's last reference. Getters take an event
 * that is not NULL and cannot fail.
 */
#ifndef CUCORE_EVENT_H
#define CUCORE_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>
#include <cucore/device.h>
#include <cucore/msg.h>
#include <cucore/stream.h> /* cuc_stream and cuc_event */

#ifdef __cplusplus
extern "C" {
#endif

/* cuc_event_create() flags. Without CUC_EVENT_TIMING the event records no
 * time (cheaper; CUDA's CU_EVENT_DISABLE_TIMING). */
#define CUC_EVENT_TIMING 0x1u        /* cuc_event_elapsed_ms works */
#define CUC_EVENT_BLOCKING_SYNC 0x2u /* synchronize blocks instead of spinning */
#define CUC_EVENT_IPC 0x4u           /* can be sent to another process */

/* Bytes of the driver's IPC event handle (CUipcEventHandle). */
#define CUC_EVENT_HANDLE_LEN 64

/* An event record's fields (cuc_msg_read_event). */
struct cuc_event_record {
    cuc_uuid device;                        /* the event's device */
    unsigned flags;                         /* CUC_EVENT_IPC, maybe _BLOCKING_SYNC */
    uint8_t handle[CUC_EVENT_HANDLE_LEN];   /* the driver's IPC handle */
};

/* A new event on dev, one reference for the caller. CUC_EVENT_IPC together
 * with CUC_EVENT_TIMING is CUC_E_INVALID: the driver requires IPC events
 * to record no time. */
CUC_API int cuc_event_create(cuc_device *dev, unsigned flags, cuc_event **out);

/* Takes another reference; returns event. NULL is returned as NULL. */
CUC_API cuc_event *cuc_event_ref(cuc_event *event);

/* Drops one reference; the last destroys the driver event (and forgets
 * its IPC handle). In a child that inherited the event through fork() it
 * frees only the child's copy: no driver call. NULL is a no-op. */
CUC_API void cuc_event_unref(cuc_event *event);

/* Captures the work queued on stream so far (NULL: the legacy default
 * stream of the event's device). The stream must belong to the event's
 * device (CUC_E_INVALID otherwise). */
CUC_API int cuc_event_record(cuc_event *event, cuc_stream *stream);

/* Waits until the captured work has completed. */
CUC_API int cuc_event_synchronize(cuc_event *event);

/* *done = 1 when the captured work has completed (or nothing was
 * recorded), 0 when it is pending. */
CUC_API int cuc_event_query(cuc_event *event, int *done);

/* Milliseconds between two completed, recorded timing events.
 * CUC_E_INVALID when either was created without CUC_EVENT_TIMING (imported
 * IPC events never have it); CUC_E_BUSY while one has not completed. */
CUC_API int cuc_event_elapsed_ms(cuc_event *start, cuc_event *end, float *ms);

/* The event's device. */
CUC_API cuc_device *cuc_event_device(const cuc_event *event);
/* The CUC_EVENT_* flags; an imported IPC event has CUC_EVENT_IPC only. */
CUC_API unsigned cuc_event_flags(const cuc_event *event);
/* 1 for an event imported from an IPC handle made in another process. */
CUC_API int cuc_event_is_imported(const cuc_event *event);
/* The driver's CUevent, for raw driver calls. */
CUC_API void *cuc_event_handle(const cuc_event *event);

/* An IPC event: its handle (fetched from the driver once and cached) and
 * its device's UUID. An event without CUC_EVENT_IPC is
 * CUC_E_NOT_SERIALIZABLE. The message holds no reference: keep the event
 * alive while receivers use it. */
CUC_API int cuc_msg_add_event(cuc_msg *msg, const cuc_event *event);
/* The fields of event record index, resolving nothing. CUC_E_INVALID if
 * the record is not an event; CUC_E_BADMSG for flags without CUC_EVENT_IPC
 * or with others than CUC_EVENT_BLOCKING_SYNC, or a malformed payload. */
CUC_API int cuc_msg_read_event(const cuc_msg *msg, size_t index,
                               struct cuc_event_record *rec);
/* The event of the record: a new reference for the caller. In the
 * creating process, or where the handle was imported before, the existing
 * object; elsewhere the handle is opened on the local device with the
 * record's UUID (CUC_E_NOT_VISIBLE when there is none), once however
 * many threads ask at the same time. CUC_E_BADMSG for a record whose UUID
 * disagrees with its handle: the handle is of an event this process has on
 * another device, or the driver refuses it in the named device's context
 * with CUDA_ERROR_INVALID_DEVICE (whether the real driver checks that is
 * not known: sim/FACTS.md F10). Any other refusal of the handle is the
 * driver's error, named: CUC_E_DRIVER for a handle no driver made or
 * whose event is gone (the sender must keep the event alive), CUC_E_NOMEM
 * for CUDA_ERROR_OUT_OF_MEMORY. Otherwise as cuc_msg_read_event. */
CUC_API int cuc_msg_get_event(const cuc_msg *msg, size_t index, cuc_event **event);

#ifdef __cplusplus
}
#endif
#endif
