/* Buffers: allocations from a memory pool (cucore/pool.h), stream-ordered,
 * and copies and fills of device and host memory.
 *
 * A buffer of an IPC pool can be sent in a message (cuc_msg_add_buffer):
 * it travels as bytes only, its pool's id, the driver's 64-byte pointer
 * export data, its size and a lease id. The receiver must have imported
 * the pool first (cuc_msg_get_pool, from an earlier record or message);
 * otherwise cuc_msg_get_buffer() is CUC_E_POOL_NOT_IMPORTED naming the
 * pool id. The export data is computed once per buffer, at its first
 * send, and cached (the driver's export costs ~18 us, sim/FACTS.md F32,
 * and it writes only 48 of the 64 bytes, F25: every record of a buffer
 * carries the cached ones).
 *
 * Importing the same buffer again in a process (the same pool id and
 * export data, from any message or channel) returns the same object with
 * one more reference, and the driver's mapping is made once: the driver
 * does not count repeated imports (cuda.core works around NVIDIA bug
 * 5570902 the same way). Each reference is dropped by
 * cuc_buffer_unref_async().
 * An imported buffer can be sent on to a third process (A -> B -> C; send
 * the pool first there too); a buffer that comes back to the process that
 * allocated it is the original object.
 *
 * Leases. The driver requires memory imported from a pool to be freed by
 * every importer before the exporter frees it. A buffer sent on a channel
 * is therefore leased to the receiver: each cuc_channel_send() of a
 * message holding it starts one lease, which ends when the receiver frees
 * its last reference (cucore sends the release then), or when its end of
 * the channel closes (it destroyed the channel and holds nothing from it
 * any more, or it died). The sender destroying its channel ends no lease
 * of a live peer: the peer may import what is in flight after that, and
 * no import ever hands out memory whose lease has ended (a peer that has
 * gone already has its leases ended by the destroy). The
 * sender's last cuc_buffer_unref_async() of a buffer with leases
 * outstanding returns at once and defers the driver's free until the last
 * lease ends; it then
 * runs, stream-ordered after the work that the free's stream had queued,
 * on the thread that noticed the end (see cucore/channel.h: the exporter
 * must receive, pump or wait on the channel to notice releases; once it
 * destroyed the channel, cuc_buffer_lease_wait() / cuc_pool_lease_wait()
 * with a NULL channel read the releases). An
 * imported buffer that was sent on stays mapped, and keeps its own lease
 * from upstream, until the downstream leases end too.
 *
 * A lease is the receiver's to end: a buffer record that the receiver
 * never gets (or fails to get, e.g. CUC_E_POOL_NOT_IMPORTED) keeps its
 * lease until the receiver's end of the channel closes. A record is
 * taken once per lease: getting it again while the buffer it gave is
 * alive returns that buffer, but once that buffer has released the lease
 * (its last reference went) the record is refused (CUC_E_NOT_FOUND), as
 * the sender may already have freed the memory.
 *
 * Fork: a buffer (and a pool) inherited through fork() is inert in the
 * child. Its cuc_buffer_unref_async() (cuc_pool_unref()) releases
 * nothing, sends nothing and makes no driver call: it frees only the
 * child's copy of the object and returns 0. The memory and its leases
 * stay the parent's; a child that needs CUDA must exec.
 *
 * Plain bytes carry no lease: a buffer in a message turned into bytes
 * (cuc_msg_to_bytes) and imported from them (cuc_msg_from_bytes) is not
 * leased, and the exporter must keep it allocated while the importer uses
 * it; such an importer releases nothing when it frees.
 *
 * When an importer's last reference goes, it releases every lease under
 * which the buffer arrived (once mapped, the same buffer may arrive again
 * under other leases, from the same or another channel): those other
 * leases are released at once, the lease it was first imported under
 * after the downstream leases have ended as well.
 *
 * Ownership: buffers are reference counted. cuc_buffer_alloc_async() and
 * cuc_msg_get_buffer() return a reference, cuc_buffer_ref() takes another,
 * and cuc_buffer_unref_async() drops one; the last one frees the memory,
 * in stream order on the stream it is given (hence _async: like every
 * stream-ordered memory operation of cucore, and CUDA's cuMemFreeAsync).
 *
 * Threads: every function here is thread-safe. A buffer must not be used
 * after the unref that drops the reference the caller holds. Getters take
 * a buffer that is not NULL and cannot fail.
 */
#ifndef CUCORE_MEMORY_H
#define CUCORE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>
#include <cucore/device.h>
#include <cucore/msg.h>
#include <cucore/channel.h>
#include <cucore/pool.h>
#include <cucore/stream.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_buffer cuc_buffer;

/* Bytes of a pool pointer's export data (CUmemPoolPtrExportData). */
#define CUC_BUFFER_EXPORT_LEN 64

/* A buffer record's fields (cuc_msg_read_buffer), of a buffer record or
 * of a buffer view record. */
struct cuc_buffer_record {
    uint8_t pool_id[CUC_POOL_ID_LEN];          /* its pool */
    uint64_t size;                             /* bytes, at least 1 */
    uint64_t offset;                           /* into the allocation: 0 but for a view */
    uint64_t lease_id;                         /* the exporter's lease */
    uint8_t export_data[CUC_BUFFER_EXPORT_LEN]; /* the driver's export data, of the allocation */
    uint64_t alloc_size;                       /* the allocation's bytes (size but for a view) */
};

/* What an ipc buffer record says (cuc_msg_read_ipc_buffer). */
#define CUC_IPC_HANDLE_LEN 64
#define CUC_IPC_HANDLE_LEGACY 1u /* cuIpcGetMemHandle's CUipcMemHandle */
struct cuc_ipc_buffer_record {
    cuc_uuid device;               /* the allocation's GPU */
    uint8_t exporter[16];          /* the exporting process's identity */
    uint64_t generation;           /* the exporter's number for this base */
    uint64_t base_size;            /* the allocation's bytes */
    uint64_t offset;               /* the buffer's start in it */
    uint64_t size;                 /* the buffer's bytes, at least 1 */
    uint64_t lease_id;             /* the exporter's lease */
    uint32_t handle_type;          /* CUC_IPC_HANDLE_LEGACY */
    uint8_t handle[CUC_IPC_HANDLE_LEN];
};

/* size bytes from pool, allocated in stream order on stream (NULL: the
 * legacy default stream of the pool's device), one reference for the
 * caller; the memory is usable by work queued on stream after this call
 * (or once it is synchronized). Size 0 (as cuda.core allows) gives a
 * buffer of size 0 whose pointer is NULL, with no driver call; its unref
 * makes none either, and it cannot be sent (cuc_msg_add_buffer).
 * CUC_E_INVALID: a NULL argument, or an imported pool (the message
 * says why: allocate in the exporting process and send the buffer).
 * CUC_E_DRIVER: the driver refused (out of memory in the pool: the driver's
 * code is in cuc_errcuda()). */
CUC_API int cuc_buffer_alloc_async(cuc_pool *pool, size_t size, cuc_stream *stream,
                                   cuc_buffer **out);

/* A view: the size bytes at offset in parent, as a buffer of its own
 * (one reference for the caller) whose address is parent's plus offset.
 * The view holds a reference to the allocation parent is part of, so the
 * memory stays allocated until the view is gone (the parent's last unref
 * then only drops the caller's reference). A view of a view is a view of
 * that allocation (offsets add up). No driver call, in any process.
 * Sent in a message (cuc_msg_add_buffer), a view travels as its
 * allocation's pool id and export data plus its offset and size (a buffer
 * view record, docs/wire-format.md): the receiver imports the allocation
 * once, the first time any part of it arrives, and resolves each view
 * with no driver call; the same view arriving again is the same object.
 * Leases are the view's: each send of a view leases the view, and the
 * allocation is freed only when its views and their leases have ended
 * (cuc_buffer_lease_wait() on the view waits for its own). A view of an
 * imported buffer can be sent on (A -> B -> C).
 * CUC_E_INVALID: a NULL argument, size 0, or a part that does not fit in
 * parent (the message gives the sizes). CUC_E_NOMEM. */
CUC_API int cuc_buffer_view(cuc_buffer *parent, size_t offset, size_t size,
                            cuc_buffer **out);

/* What the driver says memory is (cuc_memory_kind), which decides how
 * memory another allocator owns can be shared (cuc_buffer_adopt,
 * cuc_vmm_adopt). */
enum cuc_memory_kind {
    CUC_MEMORY_UNKNOWN = 0,    /* not CUDA's (malloc'd, a stack, a bad pointer) */
    CUC_MEMORY_LEGACY = 1,     /* cuMemAlloc / cudaMalloc: legacy IPC */
    CUC_MEMORY_POOL_IPC = 2,   /* of a memory pool exportable as POSIX fds */
    CUC_MEMORY_POOL = 3,       /* of a pool that is not (or one imported here) */
    CUC_MEMORY_VMM_FD = 4,     /* cuMemCreate memory requested with POSIX fd handles */
    CUC_MEMORY_VMM = 5,        /* cuMemCreate memory without them */
    CUC_MEMORY_MANAGED = 6,    /* cuMemAllocManaged / cudaMallocManaged */
    CUC_MEMORY_HOST = 7,       /* pinned or registered host memory */
    CUC_MEMORY_IPC_OPENED = 8  /* opened here from another process (cuIpcOpenMemHandle) */
};

/* What ptr is, as the driver says (one cuPointerGetAttributes: memory
 * type, managed, legacy-IPC capable, pool handle, allowed handle types,
 * context; for VMM memory cuMemRetainAllocationHandle confirms it), in
 * *kind (enum cuc_memory_kind), and the device it belongs to in *dev (the
 * pointer's device ordinal in this process; NULL for CUC_MEMORY_UNKNOWN
 * and for memory of no device, such as VMM memory on the host). ptr need
 * not be an allocation's start. Any device may be current; this changes
 * none. Thread-safe.
 * CUC_E_INVALID: kind or dev NULL. CUC_E_DRIVER: the driver refused a
 * query (named), never read as a kind. */
CUC_API int cuc_memory_kind(const void *ptr, int *kind, cuc_device **dev);
/* A short name of kind ("legacy", "pool-ipc", "pool", "vmm-fd", "vmm",
 * "managed", "host", "ipc-opened", "unknown"; "?" for other values): the
 * name the refusals of cuc_buffer_adopt use. A static string. */
CUC_API const char *cuc_memory_kind_name(int kind);

/* Memory another allocator owns (a framework's: PyTorch, CuPy, numba,
 * cuda.core), the size bytes at ptr on dev, as a buffer (one reference
 * for the caller) that cucore never frees; it is sent and imported as
 * cucore's own buffers are. By what the driver says it is
 * (cuc_memory_kind):
 *  - CUC_MEMORY_LEGACY: as cuc_buffer_wrap() (ipc buffer records; the
 *    receiver opens the base once per process);
 *  - CUC_MEMORY_POOL_IPC: its pool is adopted (cuc_pool_adopt(): the same
 *    handle is the same cuc_pool) and the allocation (the one
 *    cuMemGetAddressRange gives) becomes a buffer of it, so that its
 *    records are a pool's buffer records; a pointer into a pinned host
 *    pool allocation must be its start (the driver gives no base for
 *    one, and refuses to export a part).
 * [ptr, ptr + size) of a larger allocation is a view of it
 * (cuc_buffer_view()). The same allocation adopted (or wrapped) again in
 * the process is the same object: the same buffer, or a view of it.
 * release, when not NULL, is called once with arg, on whichever thread
 * drops the last use, when cucore no longer uses the memory: every
 * buffer and view of the allocation, every message holding one and every
 * lease of one (importers' included: an importer synchronizes before it
 * releases) has ended; the owner may then free it. It does not wait for
 * work this process queued on the memory through cucore on a stream:
 * synchronize that before dropping the last reference. Each adopt's
 * release runs once, all of them at that moment; a release must not
 * block on cucore objects of the same allocation. Not in a child of
 * fork(): an inherited buffer is inert and releases nothing there. On
 * failure release is not called.
 * CUC_E_INVALID: a NULL argument, size 0, a part past the allocation's
 * end, memory of another device, and every other kind, the message naming
 * the kind (cuc_memory_kind_name()) and what to use instead:
 * CUC_MEMORY_VMM_FD is shared with cuc_vmm_adopt(); a pool that is not
 * IPC-capable must be created with POSIX fd handles (cuda.core:
 * DeviceMemoryResourceOptions(ipc_enabled=True); cucore: CUC_POOL_IPC);
 * managed, host, unknown and VMM memory without fds are copied into a
 * buffer of a CUC_POOL_IPC pool; memory imported from another process is
 * sent on as the cuc_buffer it arrived as; so is memory of a pool cucore
 * created (send the cuc_buffer cuc_buffer_alloc_async() gave). The pool's
 * refusals of cuc_pool_adopt(). CUC_E_DRIVER: a driver query failed
 * (named). CUC_E_NOMEM. Thread-safe. */
CUC_API int cuc_buffer_adopt(cuc_device *dev, void *ptr, size_t size,
                             void (*release)(void *arg), void *arg, cuc_buffer **out);

/* Memory this program already has from cuMemAlloc / cudaMalloc on dev:
 * the size bytes at ptr as a buffer (one reference for the caller) that
 * does NOT own the memory. The caller keeps the allocation allocated until
 * the buffer is gone and its leases have ended (cuc_buffer_lease_wait();
 * the last unref frees nothing). Sent in a message (cuc_msg_add_buffer) it
 * travels as the allocation's legacy CUDA IPC handle (cuIpcGetMemHandle of
 * the base cuPointerGetAttributes finds) plus the offset and size, in an ipc
 * buffer record (docs/wire-format.md); the receiver opens each base once
 * (cuIpcOpenMemHandle, one open per base per process, closed when its
 * last buffer goes) and resolves later buffers in it with no driver call;
 * in the exporting process it resolves to the original pointer. Wrapping
 * a part of a base already wrapped here is a view of the same
 * allocation; when the base is one of the last 16 this process wrapped
 * (the common case: many buffers of one large allocation), with no driver
 * call. The handle is taken here, once per base.
 * CUC_E_INVALID: a NULL argument, size 0, a part past the allocation's
 * end, or memory that legacy IPC cannot share, the message saying what to
 * use instead: a pool allocation (cuc_buffer_adopt() when its pool is
 * IPC-capable; else allocate from a CUC_POOL_IPC pool and send that
 * cuc_buffer), VMM memory (cuc_vmm_adopt()), managed or host memory (not
 * shareable by IPC), memory opened from another process (send the
 * cuc_buffer it arrived as), memory of another device.
 * CUC_E_DRIVER: cuIpcGetMemHandle failed. */
CUC_API int cuc_buffer_wrap(cuc_device *dev, void *ptr, size_t size, cuc_buffer **out);
/* 1 for a buffer of memory shared by legacy CUDA IPC (cuc_buffer_wrap(),
 * or an ipc buffer record resolved; a view of one too). */
CUC_API int cuc_buffer_is_wrapped(const cuc_buffer *buf);

/* Takes another reference; returns buf. NULL is returned as NULL. */
CUC_API cuc_buffer *cuc_buffer_ref(cuc_buffer *buf);

/* Drops one reference. The last one frees the memory in stream order on
 * stream (NULL: the legacy default stream of the buffer's device), or,
 * while leases are outstanding, defers that until they end (see above).
 * An imported buffer's last unref unmaps it, waits for stream (so that the
 * exporter never reuses memory this process still reads), then sends the
 * releases; on the legacy default stream while this process's share point
 * runs (cucore/share.h) neither the free nor the wait is the caller's: the
 * share point's thread frees the buffers dropped since its last turn
 * together, records one event behind them and sends their releases once
 * it is complete (the buffer is unusable from the call on; its mapping
 * goes within a turn), and an import of the same memory frees what is
 * queued and waits for it first. NULL buf is a no-op returning 0. On an error (a stream of
 * another context, a driver failure) the reference is dropped all the
 * same, and the memory may stay allocated. An imported buffer whose free
 * or synchronize failed sends no release (the memory may still be in use
 * here): its leases stay with the exporter until the channel closes, and
 * the message says so (a free or wait left to the share point's thread
 * that fails keeps them the same way, and nobody is told). A deferred free that cannot make its event waits
 * for the stream instead; one whose stream cannot wait for that event
 * waits on the host (cuEventSynchronize); if that fails too the memory is
 * left allocated and cuc_pool_lease_wait() reports it. */
CUC_API int cuc_buffer_unref_async(cuc_buffer *buf, cuc_stream *stream);

/* cuc_buffer_unref_async() of each of the n buffers (NULL entries
 * skipped), for an importer done with many: their memory is freed on stream, each
 * stream is waited for once, and the releases go as one message per
 * channel, instead of one synchronize and one message per buffer. Buffers
 * this cannot batch (another reference left, leases of their own, not
 * imported) get an ordinary cuc_buffer_unref_async(), and so do imported
 * pool buffers on the legacy default stream while the share point runs:
 * its thread frees them together, and the caller waits for nothing. Every reference is
 * dropped whatever happens; the first failure is returned (as
 * cuc_buffer_unref_async()). CUC_E_INVALID: bufs is NULL with n > 0.
 * CUC_E_NOMEM: no memory for the batch (nothing was dropped). */
CUC_API int cuc_buffer_unref_many_async(cuc_buffer *const *bufs, size_t n,
                                        cuc_stream *stream);

/* The buffer's address: a device address (valid on its device, or in any
 * context with unified addressing) or, for a pinned host pool, a host
 * address that devices with access can use. A buffer got from an attached
 * message (cucore/share.h) may be used only once its exporter confirmed
 * the lease: this waits for that (as cuc_buffer_ready()) and returns NULL,
 * with cuc_errmsg() saying why, when the exporter refused it (the token
 * and what ended) or did not answer in time. Other buffers: cannot fail. */
CUC_API void *cuc_buffer_ptr(const cuc_buffer *buf);
/* 0 once buf's memory may be used: at once, but for a buffer from an
 * attached message, whose exporter must first confirm the lease (waited
 * for up to the share point's timeout). The refusal (CUC_E_NOT_FOUND
 * naming the token, CUC_E_EXPORTER_GONE, ...) or CUC_E_TIMEOUT otherwise,
 * and for every later call. */
CUC_API int cuc_buffer_ready(const cuc_buffer *buf);
/* Its size in bytes. */
CUC_API size_t cuc_buffer_size(const cuc_buffer *buf);
/* Its pool's device. */
CUC_API cuc_device *cuc_buffer_device(const cuc_buffer *buf);
/* The pool (no new reference: it lives at least as long as buf). */
CUC_API cuc_pool *cuc_buffer_pool(const cuc_buffer *buf);
/* 1 for a buffer imported from another process (a view of one too). */
CUC_API int cuc_buffer_is_imported(const cuc_buffer *buf);
/* 1 for a view (cuc_buffer_view(), or a view record resolved). */
CUC_API int cuc_buffer_is_view(const cuc_buffer *buf);
/* Where the buffer starts in its allocation: 0 but for a view. */
CUC_API size_t cuc_buffer_offset(const cuc_buffer *buf);
/* The buffer of buf's whole allocation, with one reference for the
 * caller: buf itself for an allocation, a view's root otherwise (buf
 * starts cuc_buffer_offset(buf) bytes into it). Many parts of one
 * allocation so become one object to send: one record, one import. */
CUC_API cuc_buffer *cuc_buffer_root(cuc_buffer *buf);

/* Leases of this buffer not yet ended (sent from this process and not
 * released, as the channels have noticed so far). */
CUC_API int cuc_buffer_lease_count(const cuc_buffer *buf, size_t *n);

/* Waits until at most max_left leases of buf remain, or timeout_ms has
 * passed (-1: forever; CUC_E_TIMEOUT names how many are left). With ch,
 * pumps that channel while waiting (cuc_channel_pump(): messages other
 * than releases are queued for cuc_channel_recv(); a full queue is
 * CUC_E_BUSY); with ch NULL (and once ch's peer has gone) it pumps no
 * live channel: it reads the links of channels this process destroyed
 * while their leases were held (cuc_channel_destroy) and counts the ends
 * that other threads' receives, pumps and lease waits notice on the live
 * ones. The caller must hold a reference to buf. */
CUC_API int cuc_buffer_lease_wait(cuc_buffer *buf, cuc_channel *ch, size_t max_left,
                                  int timeout_ms);

/* Copies n bytes from src to dst in stream order on stream (NULL: the
 * legacy default stream of the current device, else of device 0: see
 * cucore/stream.h; the stream's device context is made current). Either
 * may be device memory (a
 * buffer's address plus an offset) or host memory: the driver infers the
 * direction (unified addressing). Pageable host memory makes the copy
 * return only once the host side has been read or written.
 * CUC_E_INVALID: a NULL pointer with n > 0. CUC_E_DRIVER: the driver
 * refused (a range outside any allocation, for instance). n 0 does
 * nothing (no driver call; NULL pointers are then fine, as a buffer of
 * size 0 has). */
CUC_API int cuc_memcpy_async(void *dst, const void *src, size_t n, cuc_stream *stream);
/* cuc_memcpy_async(), then waits for stream (n 0: nothing to wait for). */
CUC_API int cuc_memcpy(void *dst, const void *src, size_t n, cuc_stream *stream);

/* Sets n bytes at dst (device memory or pinned host pool memory) to value,
 * in stream order on stream (NULL as for cuc_memcpy_async()). Errors as
 * cuc_memcpy_async(); n 0 does nothing. */
CUC_API int cuc_memset_async(void *dst, uint8_t value, size_t n, cuc_stream *stream);
/* cuc_memset_async(), then waits for stream (n 0: nothing to wait for). */
CUC_API int cuc_memset(void *dst, uint8_t value, size_t n, cuc_stream *stream);

/* Sets count values of width bytes (1, 2 or 4) at dst to value, in
 * stream order on stream (NULL as for cuc_memcpy_async()), through the
 * driver's cuMemsetD8/D16/D32Async: a 2- or 4-byte value is written in
 * the host's byte order (little-endian), as a uint16_t or uint32_t array
 * holds it. count 0 does nothing. CUC_E_INVALID: a width other than 1, 2
 * or 4, a value that does not fit in width bytes, dst NULL or not aligned
 * to width (the driver needs it) with count > 0. CUC_E_DRIVER: as
 * cuc_memcpy_async(). Thread-safe. */
CUC_API int cuc_fill_async(void *dst, uint32_t value, unsigned width, size_t count,
                           cuc_stream *stream);
/* cuc_fill_async(), then waits for stream (count 0: nothing to wait for). */
CUC_API int cuc_fill(void *dst, uint32_t value, unsigned width, size_t count,
                     cuc_stream *stream);

/* A buffer of an IPC pool: its pool id, export data (computed now the
 * first time, then cached), size and a new lease id. The message holds a
 * reference to buf until it is destroyed, so the buffer stays allocated
 * that long; each cuc_channel_send() of the message starts a lease. The
 * receiver needs the pool: add it to this message before the buffer, or
 * send it earlier. The importer may touch the memory only once the
 * allocation and the writes it should see are complete: synchronize their
 * stream before sending (or send an IPC event to wait on).
 * CUC_E_NOT_SERIALIZABLE: the pool was created without CUC_POOL_IPC.
 * CUC_E_INVALID: a NULL argument, or a buffer of size 0 (nothing to
 * share: send its size instead).
 * CUC_E_DRIVER: the driver refused to export the pointer. */
CUC_API int cuc_msg_add_buffer(cuc_msg *msg, const cuc_buffer *buf);

/* The fields of buffer (or buffer view) record index, resolving nothing.
 * CUC_E_INVALID: neither. CUC_E_BADMSG: a malformed record (size 0, a
 * nonzero offset in a buffer record, lease id 0, payload length, fds; in
 * a view record an allocation size 0 or a part that does not fit in it). */
CUC_API int cuc_msg_read_buffer(const cuc_msg *msg, size_t index,
                                struct cuc_buffer_record *rec);

/* The fields of ipc buffer record index, resolving nothing.
 * CUC_E_INVALID: not one. CUC_E_BADMSG: a malformed record (size or base
 * size 0, a part past the base, generation or lease id 0, payload length).
 * CUC_E_VERSION: a handle type this cucore does not know. */
CUC_API int cuc_msg_read_ipc_buffer(const cuc_msg *msg, size_t index,
                                    struct cuc_ipc_buffer_record *rec);

/* The buffer of record index (a buffer, buffer view or ipc buffer record), with a
 * new reference (see above for the same buffer imported twice, and for
 * leases). A view record whose part is the whole allocation resolves to
 * the allocation.
 * CUC_E_INVALID: the record is neither.
 * CUC_E_BADMSG: a malformed record (as cuc_msg_read_buffer), an
 * allocation size other than that of the same buffer imported before, or
 * one larger than the allocation the driver mapped (cuMemGetAddressRange:
 * the message gives both sizes).
 * CUC_E_POOL_NOT_IMPORTED: this process has not imported the buffer's pool
 * (the message names the pool id in hex): get the pool record first.
 * CUC_E_NOT_FOUND: the buffer's pool was created here, but no buffer of it
 * has that export data (it was freed); or the record arrived on a channel
 * and was taken before, and the buffer it gave has released its lease
 * since (the message names the record and the lease: the sender may have
 * freed the memory; keep the reference while the memory is in use).
 * CUC_E_DRIVER: the driver refused the export data (or the IPC handle).
 * An ipc buffer record: CUC_E_BADMSG also for a handle or base size other
 * than the one its (exporter, generation) first gave; CUC_E_NOT_FOUND for
 * one of this process whose base is no longer wrapped; CUC_E_NOT_VISIBLE
 * (as a device record) for a GPU not visible here. */
CUC_API int cuc_msg_get_buffer(const cuc_msg *msg, size_t index, cuc_buffer **buf);

/* cuc_msg_get_buffer() of records first .. first + n - 1 into bufs[0..n),
 * a new reference each: the same buffers, the same errors (the first one
 * met), at a lower cost a buffer (the pool, or for ipc buffer records the
 * device and its legacy pool, looked up once and its lock taken once for
 * each run of up to 64 records of one pool or one GPU). On failure bufs
 * is not written and no reference is left taken. A range with a record
 * that is not a buffer's is refused before anything is imported
 * (CUC_E_INVALID). A failure met after part of the range was imported (a
 * malformed record, a pool not imported, the driver's refusal, a size
 * larger than it mapped) drops those buffers again as
 * cuc_buffer_unref_many_async() would, as a loop of cuc_msg_get_buffer()
 * that cleans up after itself does: their leases end with it, so the
 * sender may free them, and taking those records again is refused
 * (CUC_E_NOT_FOUND, above).
 * CUC_E_INVALID also for a NULL argument or a range past the message's
 * records. CUC_E_NOMEM. */
CUC_API int cuc_msg_get_buffers(const cuc_msg *msg, size_t first, size_t n,
                                cuc_buffer **bufs);

#ifdef __cplusplus
}
#endif
#endif
