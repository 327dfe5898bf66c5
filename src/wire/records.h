/* The record codecs (rec_<type>.c): each turns one record type's fields
 * into its payload and back, checking every byte on the way in. Bytes
 * only: no driver call, no lookup, nothing resolved. The read side of each
 * is public (cuc_msg_read_<type>, in the object's header); the write side
 * is here, for the object that exports (its *_share.c), which checks that
 * the object may be sent first. Layouts: docs/wire-format.md. */
#ifndef CUC_WIRE_RECORDS_H
#define CUC_WIRE_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "cucore/device.h"
#include "cucore/stream.h"
#include "cucore/event.h"
#include "cucore/kernel.h"
#include "cucore/launch.h"
#include "cucore/pool.h"
#include "cucore/memory.h"
#include "cucore/vmm.h"
#include "cucore/share.h"
#include "wire/wire.h"

/* Fixed payload sizes. */
#define CUC__DEVICE_PAYLOAD 16u
#define CUC__STREAM_PAYLOAD 24u
#define CUC__EVENT_PAYLOAD 88u
#define CUC__LAUNCH_PAYLOAD 64u
#define CUC__KERNEL_FIXED 48u
#define CUC__POOL_PAYLOAD 40u
#define CUC__BUFFER_PAYLOAD 104u
#define CUC__BUFFER_VIEW_PAYLOAD 112u
#define CUC__IPC_BUFFER_PAYLOAD 144u
#define CUC__VMM_FIXED 40u
#define CUC__VMM_PAYLOAD_MAX \
    (CUC__VMM_FIXED + 16u * CUC_VMM_MAX_PEERS + 8u * CUC_VMM_MAX_CHUNKS)

int cuc__device_rec_put(cuc_msg *m, const cuc_uuid *uuid);
/* The UUID of device record index, where it lies in m (valid while m is
 * and is not added to); m is not NULL. cuc_msg_read_device without the
 * copy. */
int cuc__device_rec_uuid(const cuc_msg *m, size_t index, const cuc_uuid **uuid);
int cuc__stream_rec_put(cuc_msg *m, const struct cuc_stream_record *r);
int cuc__event_rec_put(cuc_msg *m, const struct cuc_event_record *r);
/* The configuration's 16 words, as they are (the rules are launch.c's). */
int cuc__launch_rec_put(cuc_msg *m, const cuc_launch_config *c);
int cuc__launch_rec_read(const cuc_msg *m, size_t index, cuc_launch_config *c);
/* CUC_E_LIMIT when the image does not fit a message. */
int cuc__kernel_rec_put(cuc_msg *m, const struct cuc_kernel_record *r);
/* A kernel by reference (r->image unused, r->image_len its length): a
 * kernel record whose image the peer said it holds. */
int cuc__kernel_ref_rec_put(cuc_msg *m, const struct cuc_kernel_record *r);

/* What names a loaded image: its kind, length and SHA-256. */
struct cuc__kernel_id {
    int kind;
    uint32_t image_len;
    uint8_t hash[CUC_KERNEL_HASH_LEN];
};
#define CUC__KERNEL_HELD_PAYLOAD 40u
/* A kernel held record: the receiver of a kernel record loaded its image
 * and keeps it for the channel's life (sent back on the channel). */
int cuc__kernel_held_rec_put(cuc_msg *m, const struct cuc__kernel_id *id);
/* Its fields, each checked (CUC_E_BADMSG). */
int cuc__kernel_held_rec_read(const cuc_msg *m, size_t index, struct cuc__kernel_id *id);
/* How many of m's records are of type. */
size_t cuc__msg_count_type(const cuc_msg *m, unsigned type);
/* A copy of m for one peer: each kernel record whose image held(ctx, id)
 * says the peer holds becomes a kernel ref record; every other record is
 * copied as it is (fds duplicated). *out is NULL (and 0 returned) when no
 * record became a ref: send m itself. Attachments are not copied (the
 * channel grants m's). */
int cuc__msg_kernel_refs(const cuc_msg *m, int (*held)(void *, const struct cuc__kernel_id *),
                         void *ctx, cuc_msg **out);
/* r->fd is duplicated into the message. */
int cuc__pool_rec_put(cuc_msg *m, const struct cuc_pool_record *r);
/* A buffer record, or, when r is a part of its allocation (offset > 0 or
 * size < alloc_size), a buffer view record. */
int cuc__buffer_rec_put(cuc_msg *m, const struct cuc_buffer_record *r);
/* The payload of r (a view record's when r is a part) to p. */
void cuc__buffer_rec_write(const struct cuc_buffer_record *r, uint8_t *p);
/* A buffer record (view: a buffer view record) that obj's ops->put writes
 * with cuc__buffer_rec_write when the message is encoded, attached under
 * the message's next lease id (wire.h: cuc__msg_add_leased). */
int cuc__buffer_rec_add_leased(cuc_msg *m, int view, const struct cuc__lease_ops *ops,
                               void *obj, int held);
int cuc__ipc_buffer_rec_put(cuc_msg *m, const struct cuc_ipc_buffer_record *r);
/* The message takes fds[0..nchunks) (closed on failure too); CUC_E_LIMIT,
 * the message unchanged and the fds closed, when it has no room. */
int cuc__vmm_rec_put(cuc_msg *m, uint64_t lease_id, const cuc_uuid *owner,
                     const cuc_uuid *peers, size_t npeers, const size_t *sizes,
                     size_t nchunks, int *fds);
/* CUC_E_LIMIT without a change when the message has no room for a vmm
 * record of nchunks chunks. */
int cuc__vmm_rec_room(const cuc_msg *m, size_t nchunks);

/* Release messages: as many as n ids need (each with up to
 * CUC__RELEASE_MAX_RECORDS records), built one at a time. */
int cuc__release_msg_build(const uint64_t *ids, size_t n, size_t *done, cuc_msg **out);
/* How many of m's records are release records (a message holds only
 * releases or none). */
size_t cuc__release_rec_count(const cuc_msg *m);
/* The ids of release record index: n ids, little-endian at *ids. */
int cuc__release_rec_read(const cuc_msg *m, size_t index, const uint8_t **ids, size_t *n);

/* Refused messages (rec_refused.c): one record telling the sender that
 * the message whose first frame had sequence number seq was dropped
 * unread (the receiver had no room for its fds). */
int cuc__refused_msg_build(uint32_t seq, cuc_msg **out);
/* How many of m's records are refused records. */
size_t cuc__refused_rec_count(const cuc_msg *m);
/* The sequence number of refused record index. */
int cuc__refused_rec_read(const cuc_msg *m, size_t index, uint32_t *seq);

/* Detached messages and the share point's protocol (rec_share.c). */
#define CUC__SHARE_PAYLOAD 176u
#define CUC__HELD_HDR 16u
#define CUC__CLAIM_PAYLOAD 24u
/* Claim flags: send the held records with their fds (the importer lacks
 * some); give the claim back (nothing of the hold was used). */
#define CUC__CLAIM_FETCH 1u
#define CUC__CLAIM_GIVE_BACK 2u
#define CUC__CLAIM_FLAGS (CUC__CLAIM_FETCH | CUC__CLAIM_GIVE_BACK)
int cuc__share_rec_put(cuc_msg *m, const struct cuc_share_record *r);
/* Its payload, to p. */
int cuc__share_rec_write(const struct cuc_share_record *r, uint8_t p[CUC__SHARE_PAYLOAD]);
/* h->payload (h->len bytes) is copied; h->type's record is not checked. */
int cuc__held_rec_put(cuc_msg *m, const struct cuc_held_record *h);
int cuc__claim_rec_put(cuc_msg *m, const uint8_t token[16], uint32_t flags);
/* CUC_E_BADMSG for flags this cucore does not define. */
int cuc__claim_rec_read(const cuc_msg *m, size_t index, uint8_t token[16], uint32_t *flags);
/* status: 0 or a negative CUC_E_* code. */
int cuc__confirm_rec_put(cuc_msg *m, const uint8_t token[16], int status);
/* CUC_E_BADMSG for a status that is no CUC_E_* code. */
int cuc__confirm_rec_read(const cuc_msg *m, size_t index, uint8_t token[16], int *status);

#endif
