/* Virtual-memory resources: physical chunks mapped at one contiguous
 * address range, shared across processes as POSIX file descriptors.
 *
 * cuc_vmm_create() allocates each chunk on the owner device (cuMemCreate,
 * exportable as a POSIX fd), reserves one address range for all of them,
 * maps the chunks back to back in the order given and grants read-write
 * access to the owner and to every peer device. The driver maps whole
 * allocations only (offset 0, the allocation's full size), so a chunk is
 * the unit of mapping; every chunk size must be a multiple of the owner's
 * allocation granularity (cuc_vmm_granularity(), 2 MiB): sim/FACTS.md
 * F39.
 *
 * Sent in a message (cuc_msg_add_vmm), a resource travels as one fd per
 * chunk, the chunk sizes, the owner's and the peers' UUIDs and the handle
 * type; it needs a channel (cuc_msg_to_bytes() refuses the message with
 * CUC_E_NEEDS_CHANNEL). The receiver (cuc_msg_get_vmm) imports the chunks,
 * maps them at a fresh contiguous range of its own and grants access to
 * the owner and the peers, each resolved by UUID: the same GPUs, whatever
 * their ordinals there. docs/wire-format.md has the record layout.
 *
 * Leases. A resource sent on a channel is leased to the receiver until the
 * receiver releases what it imported (its last cuc_vmm_unref()), closes
 * the channel or dies, or the sender closes the channel. A resource whose
 * last reference is dropped while leases are outstanding stays allocated
 * and mapped until the last lease ends; then it is freed, on the thread
 * that noticed the end (see cucore/channel.h: the exporter must receive,
 * pump or wait on the channel to notice releases). cuc_vmm_lease_count()
 * and cuc_vmm_lease_wait() let the exporter see them.
 *
 * VMM memory another allocator mapped (PyTorch's expandable segments) is
 * shared by adopting its chunks (cuc_vmm_adopt): a resource over the
 * owner's mapping that exports each chunk's fd as a created one does and
 * never unmaps or frees the owner's memory.
 *
 * Resources are reference counted: cuc_vmm_create(), cuc_vmm_adopt() and
 * cuc_msg_get_vmm() return a reference, cuc_vmm_ref() takes another, cuc_vmm_unref() drops
 * one.
 *
 * Threads: every function here is thread-safe; a resource must not be
 * used after the unref of the caller's last reference. Getters take a
 * resource that is not NULL and cannot fail.
 */
#ifndef CUCORE_VMM_H
#define CUCORE_VMM_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>
#include <cucore/device.h>
#include <cucore/msg.h>
#include <cucore/channel.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_vmm cuc_vmm;

/* Most chunks and peers one resource may have. */
#define CUC_VMM_MAX_CHUNKS 1024u
#define CUC_VMM_MAX_PEERS 64u
/* Largest total size of one resource (256 TiB). */
#define CUC_VMM_MAX_BYTES ((uint64_t)1 << 48)

/* How a chunk's physical memory is named across processes; the values are
 * also those on the wire. */
enum cuc_vmm_handle_type {
    CUC_VMM_HANDLE_POSIX_FD = 1 /* one fd per chunk, passed with SCM_RIGHTS */
};

/* A device's access to a resource (cuc_vmm_access()). */
enum cuc_vmm_access_flags {
    CUC_VMM_ACCESS_NONE = 0,
    CUC_VMM_ACCESS_READ = 1,
    CUC_VMM_ACCESS_READWRITE = 3
};

/* A vmm record's fields (cuc_msg_read_vmm); the pointers point into the
 * message and live as long as it. */
struct cuc_vmm_record {
    int handle_type;        /* enum cuc_vmm_handle_type */
    size_t nchunks;         /* = its fd count, 1..CUC_VMM_MAX_CHUNKS */
    size_t npeers;          /* 0..CUC_VMM_MAX_PEERS */
    uint64_t lease_id;      /* the exporter's lease */
    cuc_uuid owner;         /* the owner device */
    const cuc_uuid *peers;  /* npeers UUIDs */
    uint64_t total;         /* sum of the chunk sizes */
    const int *fds;         /* nchunks fds, still the message's */
    const void *sizes;      /* nchunks little-endian u64: use
                             * cuc_vmm_record_chunk_size() */
};

/* The allocation granularity of dev for VMM chunks (the driver's minimum
 * granularity for pinned device memory with POSIX fd handles). */
CUC_API int cuc_vmm_granularity(const cuc_device *dev, size_t *granularity);

/* Allocates nchunks chunks of chunk_sizes[i] bytes on owner, maps them in
 * that order at one contiguous range and grants read-write access to owner
 * and to the npeers devices of peers. peers (and chunk_sizes) are read
 * once and copied: the caller's arrays are not used afterwards.
 * CUC_E_INVALID: a NULL argument (peers may be NULL when npeers is 0),
 * nchunks 0 or above CUC_VMM_MAX_CHUNKS, npeers above CUC_VMM_MAX_PEERS, a
 * peer that is NULL, the owner or named twice, a chunk size that is 0 or
 * not a multiple of the granularity, a total above CUC_VMM_MAX_BYTES.
 * CUC_E_NOT_SUPPORTED: the owner lacks VMM or POSIX fd handles
 * (cuc_device_caps()), or a peer cannot access the owner's memory
 * (cuDeviceCanAccessPeer). Driver failures (out of device memory:
 * CUC_E_NOMEM) are named with the chunk they hit; nothing stays allocated
 * or reserved on failure. */
CUC_API int cuc_vmm_create(const cuc_device *owner, const cuc_device *const *peers,
                           size_t npeers, const size_t *chunk_sizes, size_t nchunks,
                           cuc_vmm **out);

/* VMM memory another allocator mapped on dev: the physical chunks mapped
 * over [ptr, ptr + size), found chunk by chunk (the pointer's
 * MAPPING_BASE_ADDR / MAPPING_SIZE) and retained
 * (cuMemRetainAllocationHandle), as a resource of those chunks (one
 * reference for the caller) whose address is the first chunk's start;
 * *offset gets ptr's offset into it. Sent (cuc_msg_add_vmm) it travels as
 * a created resource does, one fd per chunk, and the receiver maps the
 * chunks contiguously. The resource has no peers (the receiver grants its
 * owner device access). cucore never unmaps the owner's mapping and
 * releases only the handle references it retained. The same chunks
 * adopted again (the same start and total size) are the same resource,
 * with one more reference. release, when not NULL, is called once with
 * arg, on whichever thread drops the last use, when cucore no longer uses
 * the memory: the resource, every message holding it and every lease of
 * it (the importer has unmapped) have ended; the owner may then unmap and
 * free it. Each adopt's release runs once, all of them then; not in a
 * child of fork(). On failure release is not called and nothing stays
 * retained.
 * CUC_E_INVALID: a NULL argument, size 0, memory that is not VMM memory
 * with POSIX fd handles (the message names its kind, cuc_memory_kind(),
 * and what to use: cuc_buffer_adopt() for cuMemAlloc and IPC pool
 * memory), a chunk created without the POSIX fd handle type or of another
 * device than dev, or a hole (an address in the range that nothing maps),
 * each named with its offset. CUC_E_LIMIT: more than CUC_VMM_MAX_CHUNKS
 * chunks. CUC_E_DRIVER: a driver query failed (named). Thread-safe. */
CUC_API int cuc_vmm_adopt(cuc_device *dev, void *ptr, size_t size,
                          void (*release)(void *arg), void *arg, cuc_vmm **out,
                          size_t *offset);

/* Takes one more reference (returns vmm; NULL is passed through). */
CUC_API cuc_vmm *cuc_vmm_ref(cuc_vmm *vmm);

/* Drops one reference. The last one unmaps and frees the resource (an
 * adopted one: releases the handles it retained, then calls its
 * releases), unless
 * it was sent on a channel and a lease is still outstanding: then that
 * happens when the last lease ends. An imported resource, when freed,
 * releases its lease (tells the exporter on the channel it came from; a
 * channel already closed is not an error). NULL is a no-op. Do not use
 * the resource after dropping your last reference, also while leases keep
 * it alive. */
CUC_API void cuc_vmm_unref(cuc_vmm *vmm);

/* Start of the contiguous range (a device pointer: CUdeviceptr). */
CUC_API void *cuc_vmm_ptr(const cuc_vmm *vmm);
/* Bytes of the range: the sum of the chunk sizes. */
CUC_API size_t cuc_vmm_size(const cuc_vmm *vmm);
/* The owner device (the one the chunks live on). */
CUC_API cuc_device *cuc_vmm_device(const cuc_vmm *vmm);
/* Number of peers. */
CUC_API size_t cuc_vmm_peer_count(const cuc_vmm *vmm);
/* Peer i, in the order given at creation (NULL when i is out of range). */
CUC_API cuc_device *cuc_vmm_peer(const cuc_vmm *vmm, size_t i);
/* Number of chunks. */
CUC_API size_t cuc_vmm_chunk_count(const cuc_vmm *vmm);
/* Size of chunk i (0 when i is out of range). */
CUC_API size_t cuc_vmm_chunk_size(const cuc_vmm *vmm, size_t i);
/* enum cuc_vmm_handle_type. */
CUC_API int cuc_vmm_handle_type(const cuc_vmm *vmm);
/* 1 for a resource imported from a message, 0 for one created or
 * adopted here. */
CUC_API int cuc_vmm_is_imported(const cuc_vmm *vmm);
/* 1 for a resource adopted over another allocator's mapping. */
CUC_API int cuc_vmm_is_adopted(const cuc_vmm *vmm);

/* dev's access to the whole range, as the driver reports it
 * (cuMemGetAccess on every chunk; the weakest wins): enum
 * cuc_vmm_access_flags. */
CUC_API int cuc_vmm_access(const cuc_vmm *vmm, const cuc_device *dev, unsigned *flags);

/* Leases of this resource not yet ended (0 for an imported one). Counts
 * what the channels have noticed so far. */
CUC_API int cuc_vmm_lease_count(const cuc_vmm *vmm, size_t *n);

/* Waits until at most max_left leases of vmm remain, or timeout_ms has
 * passed (CUC_E_TIMEOUT, naming how many are left). With ch, pumps that
 * channel while waiting (cuc_channel_pump(): messages other than releases
 * are queued for cuc_channel_recv(), and a full queue is CUC_E_BUSY);
 * with ch NULL (and once ch's peer has gone) it pumps no live channel: it
 * reads the links of channels this process destroyed while their leases
 * were held (cuc_channel_destroy) and counts the ends that other threads'
 * receives, pumps and lease waits notice on the live ones. The caller
 * must hold a reference to vmm. */
CUC_API int cuc_vmm_lease_wait(cuc_vmm *vmm, cuc_channel *ch, size_t max_left,
                               int timeout_ms);

/* The resource: one fd per chunk (exported from the driver now, owned by
 * the message), the chunk sizes, the owner's and the peers' UUIDs, the
 * handle type and a lease id. The message holds a reference to vmm until
 * it is destroyed; each cuc_channel_send() of it starts a lease (the lease
 * id is the message's: sending one message twice on the same channel while
 * the first lease lasts fails with CUC_E_INVALID; use a new message).
 * Plain bytes cannot carry it: cuc_msg_to_bytes() is CUC_E_NEEDS_CHANNEL.
 * CUC_E_NOT_SUPPORTED for an imported resource (send it from the process
 * that created it); CUC_E_LIMIT when the message already holds the most
 * records or fds it may (it is then unchanged); the driver's error when an
 * export fails. */
CUC_API int cuc_msg_add_vmm(cuc_msg *msg, const cuc_vmm *vmm);

/* The fields of vmm record index, resolving nothing (the fds stay the
 * message's). CUC_E_INVALID: not a vmm record, or one of its fds was
 * taken. CUC_E_BADMSG: a malformed record (counts, sizes, UUIDs, handle
 * type, fd count: named). */
CUC_API int cuc_msg_read_vmm(const cuc_msg *msg, size_t index, struct cuc_vmm_record *rec);
/* Size of chunk i of a record read by cuc_msg_read_vmm (0 when i is out
 * of range). Cannot fail. */
CUC_API uint64_t cuc_vmm_record_chunk_size(const struct cuc_vmm_record *rec, size_t i);

/* Imports record index: a new reference to a resource mapped here at a
 * fresh contiguous range, with read-write access for the owner and the
 * peers resolved by UUID. Getting the same record of a message received on
 * a channel again, while the import lives, returns the same object
 * (another reference); after its last reference is dropped (which releases
 * the lease), getting it again imports anew, without a lease. A record of
 * a message that came on no channel is imported with no lease. The message
 * keeps its fds (they are imported, not taken).
 * CUC_E_INVALID and CUC_E_BADMSG as cuc_msg_read_vmm, and CUC_E_BADMSG
 * for a chunk size that is not a multiple of the granularity and for two
 * chunks that are one allocation (their fds one open file, or one regular
 * file: the message names both chunk indices). The owner
 * or a peer not visible here: CUC_E_NOT_VISIBLE, naming which and its
 * UUID, and listing the visible devices (a peer is never dropped
 * silently). CUC_E_NOT_SUPPORTED: a peer here cannot access the owner's
 * memory (cuDeviceCanAccessPeer). A chunk the driver refuses gives the
 * driver's error, naming the chunk: an fd that is not a VMM allocation
 * (CUC_E_DRIVER), a size that is not its allocation's
 * (CUC_E_NOT_SUPPORTED, from cuMemMap). Nothing stays mapped on failure. */
CUC_API int cuc_msg_get_vmm(const cuc_msg *msg, size_t index, cuc_vmm **vmm);

#ifdef __cplusplus
}
#endif
#endif
