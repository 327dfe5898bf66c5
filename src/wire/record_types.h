/* The shape of every record type the decoder knows: the newest payload
 * version it reads and what it enforces on decode and on add, keyed by the
 * public list (CUC_RECORD_TYPE_MAP in cucore/msg.h, which also gives each
 * type its value and its name):
 *   X(NAME, version, min_len, max_len, len_multiple (a power of two),
 *     min_fds, max_fds, reserved_off, reserved_len)
 * reserved_len bytes at payload offset reserved_off must be zero (0, 0: the
 * type has no reserved field). A record outside its shape is CUC_E_BADMSG
 * on decode (CUC_E_INVALID on add); a type not listed, or a version above
 * the one listed, is CUC_E_VERSION on decode. The codec that owns a
 * payload (rec_<name>.c) owns its line, and docs/wire-format.md its table:
 * bump the version when the payload changes, keep the shape what the
 * payload needs (tests/test_wire_doc.c checks the doc against the
 * encoders). */
#ifndef CUC_WIRE_RECORD_TYPES_H
#define CUC_WIRE_RECORD_TYPES_H

#include "cucore/msg.h"

/* Message header and record header sizes; payloads pad to 8 bytes. */
#define CUC__WIRE_HDR 24u
#define CUC__WIRE_REC_HDR 16u
/* The longest payload one message can hold. */
#define CUC__WIRE_PAYLOAD_MAX (CUC_MSG_MAX_BYTES - CUC__WIRE_HDR - CUC__WIRE_REC_HDR)

/* Release records (lease/lease.h): at most this many lease ids a record,
 * and release records a message (what fits CUC_MSG_MAX_BYTES); decode and
 * add refuse more. */
#define CUC__RELEASE_MAX_IDS 8192u
#define CUC__RELEASE_MAX_RECORDS 1000u
/* Refused records a message (lease/lease.h; a receiver sends one a
 * message): each costs the sender a lookup under its lease table's lock,
 * so decode and add refuse more. */
#define CUC__REFUSED_MAX_RECORDS 1000u

/* Held records (detached messages, rec_share.c) stand for a record with
 * fds: the longest payload of such a record (a vmm record's). Claim and
 * confirm records: at most this many a message; decode refuses more. */
#define CUC__HELD_INNER_MAX 9256u
#define CUC__CLAIM_MAX_RECORDS 4096u

#define CUC__RECORD_SHAPES(X)                                                 \
    X(DEVICE, 1, 16, 16, 8, 0, 0, 0, 0)                /* rec_device.c */     \
    X(STREAM, 1, 24, 24, 8, 0, 0, 4, 4)                /* rec_stream.c */     \
    X(EVENT, 1, 88, 88, 8, 0, 0, 4, 4)                 /* rec_event.c */      \
    X(LAUNCH_CONFIG, 1, 64, 64, 8, 0, 0, 44, 20)       /* rec_launch.c */     \
    X(KERNEL, 1, 51, CUC__WIRE_PAYLOAD_MAX, 1, 0, 0, 12, 4) /* rec_kernel.c */ \
    X(POOL, 1, 40, 40, 8, 1, 1, 0, 0)                  /* rec_pool.c */       \
    X(BUFFER, 1, 104, 104, 8, 0, 0, 24, 8)             /* rec_buffer.c */     \
    X(VMM, 1, 48, 9256, 8, 1, 1024, 12, 4)             /* rec_vmm.c */        \
    X(FD, 1, 8, 8, 8, 1, 1, 4, 4)                      /* rec_fd.c */         \
    X(RELEASE, 1, 8, 8u * CUC__RELEASE_MAX_IDS, 8, 0, 0, 0, 0) /* rec_release.c */ \
    X(KERNEL_REF, 1, 50, 4144, 1, 0, 0, 12, 4)   /* rec_kernel.c: 48 + 4096 */ \
    X(KERNEL_HELD, 1, 40, 40, 8, 0, 0, 0, 0)     /* rec_kernel.c */        \
    X(BUFFER_VIEW, 1, 112, 112, 8, 0, 0, 0, 0)         /* rec_buffer.c */     \
    X(IPC_BUFFER, 1, 144, 144, 8, 0, 0, 76, 4)         /* rec_ipc_buffer.c */ \
    X(REFUSED, 1, 8, 8, 8, 0, 0, 4, 4)                 /* rec_refused.c */    \
    X(SHARE, 1, 176, 176, 8, 0, 0, 48, 4)              /* rec_share.c */      \
    X(HELD, 1, 24, 16u + CUC__HELD_INNER_MAX, 8, 0, 0, 12, 4) /* rec_share.c */ \
    X(CLAIM, 1, 24, 24, 8, 0, 0, 20, 4)                /* rec_share.c */      \
    X(CONFIRM, 1, 24, 24, 8, 0, 0, 20, 4)              /* rec_share.c */

/* Payload versions, for the codecs: CUC_RECORD_DEVICE_VERSION, ... */
#define CUC__RECORD_VERSION_OF_(name, version, a, b, c, d, e, f, g) \
    CUC_RECORD_##name##_VERSION = version,
enum { CUC__RECORD_SHAPES(CUC__RECORD_VERSION_OF_) };
#undef CUC__RECORD_VERSION_OF_

#endif
