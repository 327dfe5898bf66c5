/* The message container (msg.c, encode.c, decode.c): records in memory,
 * their encoding to bytes and the bounds-checked decoding of untrusted
 * bytes (docs/wire-format.md). Bytes only: nothing in wire/ calls the
 * driver or resolves a record; the record codecs (records.h) sit on top of
 * this, the objects on top of them. */
#ifndef CUC_WIRE_WIRE_H
#define CUC_WIRE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "cucore/msg.h"
#include "base/bytes.h"
#include "base/ref.h"
#include "wire/record_types.h"

/* Format version of the message container. */
#define CUC__WIRE_FORMAT 1u

/* Appends a record. payload is copied; fds are dup'ed (close-on-exec)
 * into the message, which owns the copies. CUC_E_INVALID outside the
 * type's shape (record_types.h), CUC_E_LIMIT past the message's limits. */
int cuc__msg_add_record(cuc_msg *m, uint16_t type, uint16_t version,
                        const void *payload, uint32_t len, const int *fds,
                        uint32_t nfds);

/* A record with no fds whose payload is head then tail, copied once into
 * the message (a kernel record's image goes in from the kernel's own
 * copy). The shape's reserved field must lie in head. */
int cuc__msg_add_record_tail(cuc_msg *m, uint16_t type, uint16_t version, const void *head,
                             uint32_t head_len, const void *tail, uint32_t tail_len);

/* Like cuc__msg_add_record, but the message takes ownership of fds (closed
 * by the message, also when this call fails). */
int cuc__msg_add_record_owned(cuc_msg *m, uint16_t type, uint16_t version,
                              const void *payload, uint32_t len, int *fds,
                              uint32_t nfds);

/* A view of record index: payload and fds stay owned by the message. */
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
 * ("record 3 is a pool record, not a buffer record") otherwise. */
int cuc__msg_record_of(const cuc_msg *m, size_t index, unsigned type,
                       struct cuc__record *rec);

/* cuc__msg_record_of, for a type whose payload is len bytes with nfds fds:
 * CUC_E_BADMSG ("stream record 3 has a 23-byte payload and 0 fds, not 24
 * and 0") otherwise. */
int cuc__msg_record_fixed(const cuc_msg *m, size_t index, unsigned type, uint32_t len,
                          uint32_t nfds, struct cuc__record *rec);

/* Moves fd k of record index out of the message to the caller. */
int cuc__msg_take_record_fd(cuc_msg *m, size_t index, uint32_t k, int *fd);

/* 1 if m holds a record of type (O(1)). */
int cuc__msg_has_type(const cuc_msg *m, unsigned type);

/* Serializes; *fds (borrowed from the message, valid until it changes) are
 * the fds to send beside the bytes, in wire order. bytes is malloc'd. */
int cuc__msg_encode(const cuc_msg *m, uint8_t **bytes, size_t *len,
                    const int **fds, size_t *nfds);

/* Encoding a window at a time, for a sender that writes each frame's part
 * straight into its frame (no copy of the whole message):
 * cuc__msg_encode_begin checks m as cuc__msg_encode does and gives the
 * encoded length and the fds; cuc__msg_encode_part writes bytes
 * [off, off + len) of the encoding to out. Windows go in increasing
 * order, the first at offset 0, with one cursor (its contents are the
 * encoder's). */
struct cuc__enc_cursor {
    uint32_t rec;
    size_t at;
};
int cuc__msg_encode_begin(const cuc_msg *m, size_t *len, const int **fds, size_t *nfds);
void cuc__msg_encode_part(const cuc_msg *m, size_t off, size_t len, uint8_t *out,
                          struct cuc__enc_cursor *cur);

/* m's bytes behind one more record in front (type, version, payload[0..plen),
 * no fds; the caller makes it within its type's shape): a detached
 * message's share record and its records in one pass. CUC_E_NEEDS_CHANNEL
 * for a message with fds, CUC_E_LIMIT past the format's limits. */
int cuc__msg_to_bytes_led(const cuc_msg *m, uint16_t type, uint16_t version,
                          const void *payload, uint32_t plen, void **bytes, size_t *len);
/* The message of the records of bytes (a message of no fds that decoded)
 * after its first: an attached message's records without its share
 * record, in one copy. */
int cuc__msg_from_bytes_after(const void *bytes, size_t len, cuc_msg **out);

/* Parses bytes that arrived with nfds fds. Takes ownership of every fd in
 * fds, on success (into the message) and on failure (closed); either way
 * each fds[i] is set to -1 on return. The header's fd count must equal
 * nfds, and each fd must be referenced by exactly one record. O(len)
 * time and memory, no system call but close() on failure. */
int cuc__msg_decode(const void *bytes, size_t len, int *fds, size_t nfds,
                    cuc_msg **out);
/* cuc__msg_decode without its quick path (decode.c): the field-by-field
 * checks that name what they refuse, which the quick path falls back to.
 * Tests and the fuzzer hold the two to one answer for every input. */
int cuc__msg_decode_checked(const void *bytes, size_t len, int *fds, size_t nfds,
                            cuc_msg **out);

/* cuc__msg_decode of the len bytes at buf, a malloc'ed block: when it
 * succeeds with *adopted 1 the message took buf (its records are read in
 * place, and freed with it) instead of copying them; otherwise buf stays
 * the caller's. A message of more than the message's inline storage is
 * adopted (a channel's rejoined frames: a 1 MiB kernel record is not
 * copied again). */
int cuc__msg_decode_adopt(void *buf, size_t len, int *fds, size_t nfds, cuc_msg **out,
                          int *adopted);

/* ---- objects a message keeps alive, and leases on them ----
 *
 * An exporting object attaches itself to the message that carries its
 * record, under the lease id in that record. The message holds it from
 * attach (ref) to its destruction (unref). A channel that sends the
 * message begins a lease per attachment (begin), and the lease table ends
 * each exactly once (end, with why: enum cuc__lease_end in lease/lease.h),
 * on whichever thread notices: the object must lock or use atomics. Plain
 * bytes (cuc_msg_to_bytes) ignore attachments. */
struct cuc__lease_ops;
struct cuc__lease_att {
    uint64_t id;
    const struct cuc__lease_ops *ops;
    void *obj;
};
struct cuc__lease_ops {
    void (*begin)(void *obj);
    void (*end)(void *obj, uint64_t lease_id, int why);
    void (*ref)(void *obj);
    void (*unref)(void *obj);
    /* optional: begin, and unref, for each of atts[0..n) (all of these
     * ops), as one call each would, for a message of many (one lock a
     * run) */
    void (*begin_many)(const struct cuc__lease_att *atts, size_t n);
    void (*unref_many)(const struct cuc__lease_att *atts, size_t n);
    /* optional: the payload of obj's deferred record of type under
     * lease_id (cuc__msg_add_leased), its length's bytes to payload; only
     * what stays as it is while the message holds obj may go in, since it
     * runs at every encode and on the first read, on any thread */
    void (*put)(const void *obj, uint16_t type, uint64_t lease_id, uint8_t *payload);
};

/* Lease ids: a message's leases are one block, lease i the message's
 * attachment i: block << CUC__LEASE_INDEX_BITS | i, so that a lease table
 * keeps a sent message's leases as one grant (lease/lease.h). Blocks are
 * unique in the process and never 0. */
#define CUC__LEASE_INDEX_BITS 16u
#define CUC__LEASE_PER_BLOCK (1u << CUC__LEASE_INDEX_BITS) /* = CUC_MSG_MAX_RECORDS */
uint64_t cuc__msg_lease_block_next(void);

/* Attaches obj under the message's next lease id (*lease_id):
 * ops->ref(obj) now. CUC_E_LIMIT past CUC__LEASE_PER_BLOCK attachments. */
int cuc__msg_lease_attach(cuc_msg *m, const struct cuc__lease_ops *ops, void *obj,
                          uint64_t *lease_id);
/* cuc__msg_lease_attach() for an obj the caller has already taken the
 * message's reference to (its ops->ref done): on failure that reference
 * stays the caller's. */
int cuc__msg_lease_attach_held(cuc_msg *m, const struct cuc__lease_ops *ops, void *obj,
                               uint64_t *lease_id);
/* Attaches obj under the next lease id (ops->ref(obj) unless held: then
 * the caller's reference is the message's, and stays the caller's on
 * failure) and appends a record of type, version and len bytes (no fds,
 * at most CUC__DEFERRED_MAX: msg_impl.h) whose payload the message does
 * not keep: ops->put writes it each time the message is encoded, and once
 * for the first reader of a record. A message of many buffers then keeps
 * 44 bytes a buffer, not 148. ops->put must write a payload inside the
 * type's shape (its reserved field 0): it is not checked. */
int cuc__msg_add_leased(cuc_msg *m, uint16_t type, uint16_t version, uint32_t len,
                        const struct cuc__lease_ops *ops, void *obj, int held);
/* Undoes the last attach (ops->unref runs), for an add that fails after
 * attaching. */
void cuc__msg_lease_pop(cuc_msg *m);
/* The attachments, in attach order. */
size_t cuc__msg_leases(const cuc_msg *m, const struct cuc__lease_att **atts);

/* ---- where a received message came from ----
 *
 * A message received on a channel holds a reference to the lease table it
 * must report releases to (lease/lease.h: cuc__leases_of_msg); a message
 * parsed from plain bytes has none. The message knows the table only as a
 * reference count (base/ref.h): wire/ sits below lease/. */
void cuc__msg_set_origin(cuc_msg *m, struct cuc__ref *origin);
struct cuc__ref *cuc__msg_origin(const cuc_msg *m);

/* What the leases of a message wait for before its objects' memory may
 * be used (lease/gate.h: an attached message's claim, which its share
 * point confirms), as a reference count; done(gate, m) runs when m is
 * destroyed, first, while its records and their taken marks are still
 * there. NULL for every other message. */
void cuc__msg_set_gate(cuc_msg *m, struct cuc__ref *gate,
                       void (*done)(struct cuc__ref *gate, const cuc_msg *m));
struct cuc__ref *cuc__msg_gate(const cuc_msg *m);

/* The object record index resolves to in this process, as is (an
 * attach in the process that detached the message: the hold's own VMM
 * resource), the message holding a reference the caller took for it,
 * dropped by unref at the destroy. cuc__msg_local: the object, or NULL. */
int cuc__msg_set_local(cuc_msg *m, size_t index, void *obj, void (*unref)(void *obj));
void *cuc__msg_local(const cuc_msg *m, size_t index);

/* Records whose lease a reader took: a received record resolved into an
 * object that holds its lease is marked, so that once that object has
 * released the lease a later resolve of the same record can be refused
 * (the sender may have freed the memory) instead of importing it again.
 * Readers may share a message: the marks are written atomically.
 * cuc__msg_taken_ready makes room for them (once a message: CUC_E_NOMEM,
 * or CUC_E_INVALID for a message with no origin, which carries no
 * lease); cuc__msg_set_taken marks record index (a no-op before the room
 * is made); cuc__msg_taken is 1 for a marked record. */
int cuc__msg_taken_ready(const cuc_msg *m);
int cuc__msg_taken(const cuc_msg *m, size_t index);
void cuc__msg_set_taken(const cuc_msg *m, size_t index);

/* What the origin offers an object resolved from the message (a kernel
 * whose image the peer may later name by reference): the lease table
 * implements it (lease.c), so that exec/ can answer the channel without
 * calling up.
 *   reply  sends m to the peer the message came from (0 without sending
 *          once the channel is closed here);
 *   keep   holds obj until the origin goes (then drop(obj)): 0 when kept
 *          now, 1 when obj was kept already (drop not taken), or a
 *          failure (nothing kept). */
struct cuc__origin_ops {
    int (*reply)(struct cuc__ref *origin, const cuc_msg *m);
    int (*keep)(struct cuc__ref *origin, void *obj, void (*drop)(void *obj));
};
void cuc__msg_set_origin_ops(cuc_msg *m, const struct cuc__origin_ops *ops);
/* The origin's reply: 0 and nothing sent for a message from plain bytes. */
int cuc__msg_origin_reply(const cuc_msg *m, const cuc_msg *reply);
/* The origin's keep: CUC_E_NOT_FOUND (no error message set) for a message
 * from plain bytes. */
int cuc__msg_origin_keep(const cuc_msg *m, void *obj, void (*drop)(void *obj));

#endif
