/* Messages: CUDA objects as bytes that mean the same physical thing in
 * another process (docs/wire-format.md has the byte layout).
 *
 * A message is an ordered list of records. The sender adds objects; the
 * message serializes to bytes (and, for objects backed by file descriptors,
 * a list of fds that must travel beside the bytes: see cucore/channel.h).
 * The receiver parses the bytes, which checks the container (every length,
 * count and fd index, each record type's payload length, fd count and
 * reserved fields) but no field's value and resolves nothing;
 * cuc_msg_get_*() then checks one record's fields and resolves it to a
 * local object (a device by UUID, an IPC event by its handle, ...).
 *
 * Serialized input is untrusted: malformed bytes give CUC_E_BADMSG, an
 * unknown record type or a newer version CUC_E_VERSION for the whole
 * message (its fds are closed), never a crash.
 * A message is not thread-safe; use one per thread or lock around it.
 */
#ifndef CUCORE_MSG_H
#define CUCORE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>
#include <cucore/device.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_msg cuc_msg;

/* Record types on the wire. Values are part of the format: never reuse. */
enum cuc_record_type {
    CUC_RECORD_DEVICE = 1,
    CUC_RECORD_STREAM = 2,
    CUC_RECORD_EVENT = 3,
    CUC_RECORD_LAUNCH_CONFIG = 4,
    CUC_RECORD_KERNEL = 5,
    CUC_RECORD_POOL = 6,
    CUC_RECORD_BUFFER = 7,
    CUC_RECORD_VMM = 8,
    CUC_RECORD_FD = 9,
    CUC_RECORD_RELEASE = 10
};

/* Most records and fds one message may hold; a parsed message over either
 * is CUC_E_BADMSG, adding past them CUC_E_LIMIT. */
#define CUC_MSG_MAX_RECORDS 65536u
#define CUC_MSG_MAX_FDS 4096u
/* Largest serialized message. */
#define CUC_MSG_MAX_BYTES (64u << 20)

CUC_API int cuc_msg_create(cuc_msg **msg);
/* Frees the message and closes every fd it still owns. NULL is a no-op. */
CUC_API void cuc_msg_destroy(cuc_msg *msg);

/* Number of records. */
CUC_API size_t cuc_msg_count(const cuc_msg *msg);
/* The type of record index (enum cuc_record_type). */
CUC_API int cuc_msg_record_type(const cuc_msg *msg, size_t index, int *type);
/* Number of fds the message carries. */
CUC_API size_t cuc_msg_fd_count(const cuc_msg *msg);

/* A device, by its UUID alone. */
CUC_API int cuc_msg_add_device(cuc_msg *msg, const cuc_device *dev);
/* The local device with the record's UUID: in the sending process the very
 * same singleton. CUC_E_NOT_VISIBLE names the UUID and lists the visible
 * devices. CUC_E_INVALID if the record is not a device. */
CUC_API int cuc_msg_get_device(const cuc_msg *msg, size_t index, cuc_device **dev);

/* A plain file descriptor (a socket, a memfd, ...). The message dups fd:
 * the caller keeps its own. tag is carried as is. Plain bytes cannot carry
 * it: cuc_msg_to_bytes() then fails with CUC_E_NEEDS_CHANNEL. */
CUC_API int cuc_msg_add_fd(cuc_msg *msg, int fd, uint32_t tag);
/* Takes the fd out of record index: the caller owns *fd afterwards, and a
 * second take of the same record is CUC_E_INVALID. */
CUC_API int cuc_msg_take_fd(cuc_msg *msg, size_t index, int *fd, uint32_t *tag);

/* Serializes to a malloc'd buffer (free() it). CUC_E_NEEDS_CHANNEL if the
 * message carries fds (send it with cuc_channel_send()). */
CUC_API int cuc_msg_to_bytes(const cuc_msg *msg, void **bytes, size_t *len);
/* The size cuc_msg_to_bytes() / cuc_msg_to_buffer() would produce. */
CUC_API size_t cuc_msg_wire_size(const cuc_msg *msg);
/* Serializes into buf (cap bytes) instead of a new allocation: for a
 * sender that reuses one buffer. *len gets the size written.
 * CUC_E_LIMIT (nothing written) if cap < cuc_msg_wire_size(msg);
 * CUC_E_NEEDS_CHANNEL as cuc_msg_to_bytes(). */
CUC_API int cuc_msg_to_buffer(const cuc_msg *msg, void *buf, size_t cap, size_t *len);
/* Parses bytes that carry no fds. */
CUC_API int cuc_msg_from_bytes(const void *bytes, size_t len, cuc_msg **msg);

#ifdef __cplusplus
}
#endif
#endif
