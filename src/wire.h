/* Internal interface of the wire format (wire.c): the generic record
 * container that each object module (device.c, stream.c, kernel.c,
 * memory.c) fills with its own payload, and that channel.c moves with its
 * fds. Layout: docs/wire-format.md. */
#ifndef CUC_WIRE_H
#define CUC_WIRE_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cucore/msg.h"

/* Format version of the message container (docs/wire-format.md). */
#define CUC__WIRE_FORMAT 1u
/* Message header and record header sizes; payloads pad to 8 bytes. */
#define CUC__WIRE_HDR 24u
#define CUC__WIRE_REC_HDR 16u

/* Release records (lease.h): at most this many lease ids a record, and
 * release records a message (what fits CUC_MSG_MAX_BYTES); decode and add
 * refuse more. */
#define CUC__RELEASE_MAX_IDS 8192u
#define CUC__RELEASE_MAX_RECORDS 1000u
/* The longest payload one message can hold. */
#define CUC__WIRE_PAYLOAD_MAX (CUC_MSG_MAX_BYTES - CUC__WIRE_HDR - CUC__WIRE_REC_HDR)

/* Every record type the decoder knows, with the newest payload version it
 * reads and the shape it enforces on decode and on add:
 *   X(type, version, min_len, max_len, len_multiple (a power of two),
 *     min_fds, max_fds, reserved_off, reserved_len)
 * reserved_len bytes at payload offset reserved_off must be zero (0, 0: the
 * type has no reserved field). A record outside its shape is CUC_E_BADMSG
 * on decode (CUC_E_INVALID on add); a type not listed, or a version above
 * the one listed, is CUC_E_VERSION on decode. The module that owns a
 * payload owns its line, and docs/wire-format.md its table: bump the
 * version when the payload changes, keep the shape what the payload needs
 * (tests/test_wire_doc.c checks the doc against the encoders). */
#define CUC__RECORD_TYPES(X)                                                    \
    X(CUC_RECORD_DEVICE, 1, 16, 16, 8, 0, 0, 0, 0)          /* wire_device.c */ \
    X(CUC_RECORD_STREAM, 1, 24, 24, 8, 0, 0, 4, 4)          /* wire_stream.c */ \
    X(CUC_RECORD_EVENT, 1, 88, 88, 8, 0, 0, 4, 4)           /* wire_event.c */  \
    X(CUC_RECORD_LAUNCH_CONFIG, 1, 64, 64, 8, 0, 0, 44, 20) /* wire_launch.c */ \
    X(CUC_RECORD_KERNEL, 1, 51, CUC__WIRE_PAYLOAD_MAX, 1, 0, 0, 12, 4) /* wire_kernel.c */ \
    X(CUC_RECORD_POOL, 1, 40, 40, 8, 1, 1, 0, 0)            /* wire_pool.c */   \
    X(CUC_RECORD_BUFFER, 1, 104, 104, 8, 0, 0, 24, 8)       /* wire_buffer.c */ \
    X(CUC_RECORD_VMM, 1, 48, 9256, 8, 1, 1024, 12, 4)       /* wire_vmm.c */    \
    X(CUC_RECORD_FD, 1, 8, 8, 8, 1, 1, 4, 4)                /* wire_fd.c */     \
    X(CUC_RECORD_RELEASE, 1, 8, 8u * CUC__RELEASE_MAX_IDS, 8, 0, 0, 0, 0) /* lease.c */

/* Payload versions, for cuc__msg_add_record callers. */
#define CUC__RECORD_VERSION_OF_(type, version, a, b, c, d, e, f, g) type##_VERSION = version,
enum { CUC__RECORD_TYPES(CUC__RECORD_VERSION_OF_) };
#undef CUC__RECORD_VERSION_OF_

/* Short lower-case name of a record type ("device", "fd", ...);
 * "unknown" for a type not listed. Never NULL. */
const char *cuc__record_type_name(unsigned type);

/* Appends a record. payload is copied; fds are dup'ed (F_DUPFD_CLOEXEC)
 * into the message, which owns the copies. */
int cuc__msg_add_record(cuc_msg *m, uint16_t type, uint16_t version,
                        const void *payload, uint32_t len, const int *fds,
                        uint32_t nfds);

/* Like cuc__msg_add_record, but the message takes ownership of fds (closed
 * by the message, also when this call fails). */
int cuc__msg_add_record_owned(cuc_msg *m, uint16_t type, uint16_t version,
                              const void *payload, uint32_t len, int *fds,
                              uint32_t nfds);

/* A view of record index: payload stays owned by the message. */
struct cuc__record {
    uint16_t type;
    uint16_t version;
    uint32_t len;
    const uint8_t *payload;
    uint32_t nfds;
    const int *fds; /* nfds entries, -1 where taken */
};
int cuc__msg_record(const cuc_msg *m, size_t index, struct cuc__record *rec);

/* cuc__msg_record, for a record that must be of type: CUC_E_INVALID
 * ("record 3 is a pool record, not a buffer") otherwise. */
int cuc__msg_record_of(const cuc_msg *m, size_t index, unsigned type,
                       struct cuc__record *rec);

/* Moves fd k of record index out of the message to the caller. */
int cuc__msg_take_record_fd(cuc_msg *m, size_t index, uint32_t k, int *fd);

/* Serializes; *fds (borrowed from the message, valid until it changes) are
 * the fds to send beside the bytes, in wire order. bytes is malloc'd. */
int cuc__msg_encode(const cuc_msg *m, uint8_t **bytes, size_t *len,
                    const int **fds, size_t *nfds);

/* Parses bytes that arrived with nfds fds. Takes ownership of every fd in
 * fds, on success (into the message) and on failure (closed); either way
 * each fds[i] is set to -1 on return. The header's fd count must equal
 * nfds, and each fd must be referenced by exactly one record. O(len)
 * time and memory, no system call but close() on failure. */
int cuc__msg_decode(const void *bytes, size_t len, int *fds, size_t nfds,
                    cuc_msg **out);

/* Leases to register when the message is sent on a channel (lease.h). */
struct cuc__lease_ops;
struct cuc__lease_att {
    uint64_t id;
    const struct cuc__lease_ops *ops;
    void *obj;
};
/* Attaches object obj under lease_id (its record's payload carries the id):
 * calls ops->ref(obj) now and ops->unref(obj) when the message is
 * destroyed. See lease.h for what the channel does with it. */
int cuc__msg_lease_attach(cuc_msg *m, uint64_t lease_id,
                          const struct cuc__lease_ops *ops, void *obj);
/* Undoes the last cuc__msg_lease_attach (ops->unref runs), for an add
 * that fails after attaching. */
void cuc__msg_lease_pop(cuc_msg *m);
/* The attached leases, in attach order. */
size_t cuc__msg_leases(const cuc_msg *m, const struct cuc__lease_att **atts);

/* The channel a message was received on (NULL if it was parsed from
 * bytes); the message holds a reference on it (cuc__channel_ref) until
 * destroyed, and an object imported from it should take its own. */
struct cuc_channel *cuc__msg_channel(const cuc_msg *m);
void cuc__msg_set_channel(cuc_msg *m, struct cuc_channel *ch);

/* Little-endian helpers for payload codecs: a memcpy and a byte-order
 * conversion compile to one load or store (byte-at-a-time loops did not,
 * and cost a device round trip half its time). */
static inline void cuc__put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static inline void cuc__put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static inline void cuc__put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static inline uint16_t cuc__get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static inline uint32_t cuc__get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static inline uint64_t cuc__get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

#endif
