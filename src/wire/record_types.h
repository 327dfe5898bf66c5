/* The shape of every record type the decoder knows: the newest payload
 * version it reads and what it enforces on decode and on add, keyed by the
 * public list (CUC_RECORD_TYPE_MAP in cucore/msg.h, which also gives each
 * type its value and its name):
 *   X(NAME, version, min_len, max_len, len_multiple (a power of two),
 *     min_fds, max_fds)
 * A record outside its shape is CUC_E_BADMSG on decode (CUC_E_INVALID on
 * add); a type not listed, or a version above the one listed, is
 * CUC_E_VERSION on decode. The codec that owns a payload (rec_<name>.c)
 * owns its line: bump the version when the payload changes, narrow the
 * shape to what the payload needs. */
#ifndef CUC_WIRE_RECORD_TYPES_H
#define CUC_WIRE_RECORD_TYPES_H

#include "cucore/msg.h"

#define CUC__RECORD_SHAPES(X)                                  \
    X(DEVICE, 1, 16, 16, 1, 0, 0)                              \
    X(STREAM, 1, 0, CUC_MSG_MAX_BYTES, 1, 0, 0)                \
    X(EVENT, 1, 0, CUC_MSG_MAX_BYTES, 1, 0, 0)                 \
    X(LAUNCH_CONFIG, 1, 0, CUC_MSG_MAX_BYTES, 1, 0, 0)         \
    X(KERNEL, 1, 0, CUC_MSG_MAX_BYTES, 1, 0, 0)                \
    X(POOL, 1, 40, 40, 8, 1, 1)                                \
    X(BUFFER, 1, 104, 104, 8, 0, 0)                            \
    X(VMM, 1, 48, 9256, 8, 1, 1024) /* rec_vmm.c */            \
    X(FD, 1, 8, 8, 1, 1, 1)                                    \
    X(RELEASE, 1, 8, CUC_MSG_MAX_BYTES, 8, 0, 0)

/* Payload versions, for the codecs: CUC_RECORD_DEVICE_VERSION, ... */
#define CUC__RECORD_VERSION_OF_(name, version, a, b, c, d, e) \
    CUC_RECORD_##name##_VERSION = version,
enum { CUC__RECORD_SHAPES(CUC__RECORD_VERSION_OF_) };
#undef CUC__RECORD_VERSION_OF_

#endif
