/* Messages: CUDA objects as bytes that mean the same physical thing in
 * another process (docs/wire-format.md has the byte layout).
 *
 * A message is an ordered list of records. The sender adds objects
 * (cuc_msg_add_*, in each object's header); the message serializes to
 * bytes and, for objects backed by file descriptors, a list of fds that
 * must travel beside the bytes (see cucore/channel.h). The receiver parses
 * the bytes, which checks the container (every length, count and fd
 * index, each record type's payload length, fd count and reserved fields)
 * but no field's value, and resolves nothing. Then, per record:
 *   cuc_msg_record()      the raw view: type, version, payload, fd count;
 *   cuc_msg_read_*()      the record's fields, each value checked,
 *                         resolving nothing: no driver call, no object, no
 *                         reference;
 *   cuc_msg_get_*()       the local object the record names (a device by
 *                         UUID, an IPC event opened from its handle, an
 *                         imported pool, ...).
 *
 * Serialized input is untrusted: malformed bytes give CUC_E_BADMSG, an
 * unknown record type or a newer version CUC_E_VERSION for the whole
 * message (its fds are closed), never a crash.
 *
 * Threads: a message is not thread-safe; use one per thread, or lock
 * around every call on it. The functions that only read a message
 * (cuc_msg_record_count, _record, _read_*, _get_*, _to_bytes) may run in
 * several threads at once on one message that no thread changes.
 *
 * Ownership: the creator of a message (cuc_msg_create, cuc_msg_from_bytes,
 * cuc_channel_recv) owns it and destroys it; pointers into a record's
 * payload (views, names, images) are valid until then.
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

/* X(NAME, value, "name"): every record type on the wire. Values are part
 * of the format: never reuse one. */
#define CUC_RECORD_TYPE_MAP(X)             \
    X(DEVICE, 1, "device")                 \
    X(STREAM, 2, "stream")                 \
    X(EVENT, 3, "event")                   \
    X(LAUNCH_CONFIG, 4, "launch config")   \
    X(KERNEL, 5, "kernel")                 \
    X(POOL, 6, "pool")                     \
    X(BUFFER, 7, "buffer")                 \
    X(VMM, 8, "vmm")                       \
    X(FD, 9, "fd")                         \
    X(RELEASE, 10, "release")              \
    X(KERNEL_REF, 11, "kernel ref")        \
    X(KERNEL_HELD, 12, "kernel held")      \
    X(BUFFER_VIEW, 13, "buffer view")      \
    X(IPC_BUFFER, 14, "ipc buffer")        \
    X(REFUSED, 15, "refused")              \
    X(SHARE, 16, "share")                  \
    X(HELD, 17, "held")                    \
    X(CLAIM, 18, "claim")                  \
    X(CONFIRM, 19, "confirm")

enum cuc_record_type {
#define CUC_RECORD_ENUM_(name, value, text) CUC_RECORD_##name = (value),
    CUC_RECORD_TYPE_MAP(CUC_RECORD_ENUM_)
#undef CUC_RECORD_ENUM_
};

/* Most records and fds one message may hold; a parsed message over either
 * is CUC_E_BADMSG, adding past them CUC_E_LIMIT. */
#define CUC_MSG_MAX_RECORDS 65536u
#define CUC_MSG_MAX_FDS 4096u
/* Largest serialized message. */
#define CUC_MSG_MAX_BYTES (64u << 20)

/* A record as it is in the message (cuc_msg_record()). */
struct cuc_record_view {
    int type;            /* enum cuc_record_type */
    unsigned version;    /* the record's payload version */
    const void *payload; /* len bytes, owned by the message */
    size_t len;
    size_t nfds;         /* fds the record carries (taken ones included) */
};

/* A new, empty message. Thread-safe. The caller owns *msg. */
CUC_API int cuc_msg_create(cuc_msg **msg);

/* Frees the message, closes every fd it still owns and drops the
 * references it holds on the objects added to it. NULL is a no-op. */
CUC_API void cuc_msg_destroy(cuc_msg *msg);

/* Number of records (0 for NULL). Cannot fail. */
CUC_API size_t cuc_msg_record_count(const cuc_msg *msg);

/* The type of record index (enum cuc_record_type). CUC_E_INVALID: NULL
 * argument or index out of range. */
CUC_API int cuc_msg_record_type(const cuc_msg *msg, size_t index, int *type);

/* The raw view of record index: its type, version, payload (pointing into
 * the message) and fd count. CUC_E_INVALID: NULL argument or index out of
 * range. */
CUC_API int cuc_msg_record(const cuc_msg *msg, size_t index, struct cuc_record_view *view);

/* Short lower-case name of a record type ("device", "launch config");
 * "unknown" for a type not listed. Static storage, never NULL. Thread-safe. */
CUC_API const char *cuc_record_type_name(int type);

/* Number of fds the message still owns (0 for NULL). Cannot fail. */
CUC_API size_t cuc_msg_fd_count(const cuc_msg *msg);

/* A device, by its UUID alone. CUC_E_INVALID: NULL argument; CUC_E_LIMIT:
 * the message is full (it is then unchanged). */
CUC_API int cuc_msg_add_device(cuc_msg *msg, const cuc_device *dev);
/* The UUID of device record index, without looking it up. CUC_E_INVALID:
 * not a device record; CUC_E_BADMSG: malformed. */
CUC_API int cuc_msg_read_device(const cuc_msg *msg, size_t index, cuc_uuid *uuid);
/* The local device with the record's UUID: in the sending process the very
 * same singleton. CUC_E_NOT_VISIBLE names the UUID and lists the visible
 * devices. CUC_E_INVALID if the record is not a device. */
CUC_API int cuc_msg_get_device(const cuc_msg *msg, size_t index, cuc_device **dev);

/* A plain file descriptor (a socket, a memfd, ...). The message dups fd
 * (close-on-exec): the caller keeps its own. tag is carried as is. Plain
 * bytes cannot carry it: cuc_msg_to_bytes() then fails with
 * CUC_E_NEEDS_CHANNEL. */
CUC_API int cuc_msg_add_fd(cuc_msg *msg, int fd, uint32_t tag);
/* Takes the fd out of record index: the caller owns *fd afterwards, and a
 * second take of the same record is CUC_E_INVALID. tag may be NULL. */
CUC_API int cuc_msg_take_fd(cuc_msg *msg, size_t index, int *fd, uint32_t *tag);

/* Serializes to a malloc'd buffer (the caller free()s it).
 * CUC_E_NEEDS_CHANNEL if the message carries fds (send it with
 * cuc_channel_send()). */
CUC_API int cuc_msg_to_bytes(const cuc_msg *msg, void **bytes, size_t *len);
/* The size cuc_msg_to_bytes() / cuc_msg_to_buffer() would produce (0 for
 * NULL). Cannot fail. */
CUC_API size_t cuc_msg_wire_size(const cuc_msg *msg);
/* Serializes into buf (cap bytes) instead of a new allocation: for a
 * sender that reuses one buffer. *len gets the size written.
 * CUC_E_LIMIT (nothing written) if cap < cuc_msg_wire_size(msg);
 * CUC_E_NEEDS_CHANNEL as cuc_msg_to_bytes(). */
CUC_API int cuc_msg_to_buffer(const cuc_msg *msg, void *buf, size_t cap, size_t *len);
/* Parses bytes that carry no fds into a new message the caller owns (the
 * bytes are copied). Thread-safe. */
CUC_API int cuc_msg_from_bytes(const void *bytes, size_t len, cuc_msg **msg);

#ifdef __cplusplus
}
#endif
#endif
