/* Internals of streams, events and kernels (stream.c, event.c, kernel.c,
 * launch.c), shared with their wire codecs (wire_stream.c, wire_event.c,
 * wire_kernel.c, wire_launch.c) and the CLI's record dump. */
#ifndef CUC_OBJECTS_H
#define CUC_OBJECTS_H

#include "internal.h"
#include "hash.h"
#include "wire.h"
#include "cucore/stream.h"
#include "cucore/event.h"
#include "cucore/kernel.h"
#include "cucore/launch.h"

/* ---- stream.c ---- */
struct cuc_stream {
    cuc_device *dev;
    CUstream cu;
    int kind; /* enum cuc_stream_kind */
};

/* ---- event.c ---- */
struct cuc_event {
    cuc_device *dev;
    CUevent cu;
    unsigned flags;       /* CUC_EVENT_* */
    int opened;           /* opened from another process's handle */
    int refs;             /* guarded by event.c's registry lock */
    int have_ipc;         /* ipc is valid and the event is registered */
    CUipcEventHandle ipc;
    struct cuc_event *next; /* registry of events with a known handle */
};

/* The event's IPC handle, fetched from the driver on first use and cached
 * (the event is then findable by cuc__event_find_ipc). */
int cuc__event_ipc_handle(const cuc_event *ev, CUipcEventHandle *h);
/* The event of this process (created here, or opened here before) whose
 * handle is h, with a new reference taken; NULL if there is none. */
cuc_event *cuc__event_find_ipc(const CUipcEventHandle *h);
/* Opens h on dev (not checked against the registry: see
 * cuc__event_find_ipc). */
int cuc__event_open(cuc_device *dev, const CUipcEventHandle *h, cuc_event **out);

/* ---- kernel.c ---- */
struct cuc__library; /* one loaded image, shared by its kernels */

struct cuc_kernel {
    struct cuc__library *lib;
    CUkernel cu;
    char *name;
};

/* Checks that image matches kind and that its declared extents lie within
 * len; for PTX, *len is shortened to drop trailing NULs. why gets the
 * reason when it returns non-zero (CUC_E_INVALID). */
int cuc__image_check(int kind, const void *image, size_t *len, char *why, size_t whylen);
/* 1 if the kernel cache holds a library of exactly these image bytes
 * under this hash. A cached library's hash is always its own bytes' (it
 * was computed or checked before the load), so equal bytes prove the
 * claimed hash without hashing again: a receiver of an image it already
 * has pays a memcmp, not a SHA-256. */
int cuc__kernel_cache_has(int kind, const void *image, size_t len,
                          const uint8_t hash[CUC__SHA256_LEN]);
/* cuc_kernel_load after cuc__image_check, with the image's SHA-256 known. */
int cuc__kernel_load_checked(int kind, const void *image, size_t len,
                             const uint8_t hash[CUC__SHA256_LEN], const char *name,
                             cuc_kernel **out);
const char *cuc__image_kind_name(int kind);

/* ---- launch.c ---- */
/* 0, or the first rule cfg breaks, described in why. */
int cuc__launch_config_problem(const cuc_launch_config *cfg, char *why, size_t whylen);

/* ---- record payloads (docs/wire-format.md), parsed without resolving ---- */
#define CUC__STREAM_PAYLOAD 24u
#define CUC__EVENT_PAYLOAD 88u
#define CUC__LAUNCH_PAYLOAD 64u
#define CUC__KERNEL_FIXED 48u

struct cuc__stream_rec {
    uint32_t kind;
    cuc_uuid uuid;
};
struct cuc__event_rec {
    cuc_uuid uuid;
    CUipcEventHandle handle;
    uint32_t flags;
};
struct cuc__kernel_rec {
    uint32_t kind;
    uint8_t hash[CUC__SHA256_LEN];
    const char *name; /* NUL-terminated inside the payload */
    uint32_t name_len; /* without the NUL */
    const uint8_t *image;
    uint32_t image_len;
};

/* Each fetches record index, checks that it has the right type (else
 * CUC_E_INVALID) and that every field is well-formed (else CUC_E_BADMSG);
 * the kernel's hash is not checked against the bytes here. */
int cuc__stream_rec_parse(const cuc_msg *m, size_t index, struct cuc__stream_rec *out);
int cuc__event_rec_parse(const cuc_msg *m, size_t index, struct cuc__event_rec *out);
int cuc__kernel_rec_parse(const cuc_msg *m, size_t index, struct cuc__kernel_rec *out);

#endif
