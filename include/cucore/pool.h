/* Memory pools: stream-ordered pools of device memory or of pinned host
 * memory, optionally shared with other processes.
 *
 * A pool created with CUC_POOL_IPC can be sent in a message
 * (cuc_msg_add_pool): it travels as a POSIX fd (SCM_RIGHTS, so it needs a
 * channel: cuc_msg_to_bytes() refuses it with CUC_E_NEEDS_CHANNEL), its
 * random 128-bit pool id, its owner device's UUID, its kind and the handle
 * type. The receiver (cuc_msg_get_pool) imports it on the device with that
 * UUID, whatever the device's ordinal there, and registers it under its id,
 * so that buffers of the pool (cucore/memory.h) that arrive later find it.
 * An imported pool cannot allocate; it maps the buffers the owner sends.
 *
 * A pinned host pool lives in host memory; it is created for a device,
 * which gets read-write access to it, whose context the driver calls use,
 * and whose UUID it carries on the wire. An IPC pinned host pool uses the
 * driver's host NUMA location 0 (the one host location the driver exports
 * from), a local one the plain host location.
 *
 * An IPC pool is exported to the driver's shareable handle once, when it
 * is created (the driver refuses to export a pool's pointers before the
 * pool itself is exported); the pool keeps that fd and every message gets
 * a duplicate. An imported pool keeps a duplicate of the fd it was
 * imported from, so that it can be sent on to a third process (A -> B ->
 * C: the driver does not export an imported pool again). Each IPC pool
 * thus holds one fd while it lives.
 *
 * A pool that another allocator created (cuda.core's DeviceMemoryResource
 * with IPC enabled, a framework's pool) can be adopted (cuc_pool_adopt):
 * a cucore pool over the driver's pool that cucore never destroys, sent
 * and imported as a pool cucore created.
 *
 * Pools are reference counted: cuc_pool_create(), cuc_pool_adopt(),
 * cuc_pool_get_by_id() and cuc_msg_get_pool() return a reference, cuc_pool_ref() takes another,
 * cuc_pool_unref() drops one, and every buffer of the pool holds one, so a
 * pool lives until its last buffer is gone.
 *
 * Threads: every function here is thread-safe; a pool must not be used
 * after the unref of the caller's last reference. Getters take a pool that
 * is not NULL and cannot fail.
 */
#ifndef CUCORE_POOL_H
#define CUCORE_POOL_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>
#include <cucore/device.h>
#include <cucore/msg.h>
#include <cucore/channel.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_pool cuc_pool;

/* What a pool holds; the values are also those on the wire. */
enum cuc_pool_kind {
    CUC_POOL_DEVICE = 1,     /* device memory of its device */
    CUC_POOL_PINNED_HOST = 2 /* page-locked host memory */
};

/* How an IPC pool is named across processes; the values are also those on
 * the wire. */
enum cuc_pool_handle_type {
    CUC_POOL_HANDLE_POSIX_FD = 1 /* a POSIX fd, passed with SCM_RIGHTS */
};

/* cuc_pool_props.flags */
#define CUC_POOL_IPC 0x1u /* can be sent to other processes */

/* Bytes of a pool id. */
#define CUC_POOL_ID_LEN 16

struct cuc_pool_props {
    int kind;        /* enum cuc_pool_kind */
    unsigned flags;  /* 0 or CUC_POOL_IPC */
    size_t max_size; /* most bytes the pool may reserve; 0: the driver's default */
};

/* A pool record's fields (cuc_msg_read_pool). */
struct cuc_pool_record {
    uint8_t id[CUC_POOL_ID_LEN]; /* the pool id */
    cuc_uuid owner;              /* the owner device's UUID */
    int kind;                    /* enum cuc_pool_kind */
    int handle_type;             /* enum cuc_pool_handle_type */
    int fd;                      /* the pool's fd, still the message's (-1 if taken) */
};

/* A device pool, not IPC, of the driver's default size: kind
 * CUC_POOL_DEVICE, flags 0, max_size 0. NULL is a no-op. Cannot fail. */
CUC_API void cuc_pool_props_init(struct cuc_pool_props *props);

/* A new pool for dev, with a fresh random pool id; one reference for the
 * caller. An IPC pool is exported
 * here, once (see above).
 * CUC_E_INVALID: a NULL argument, an unknown kind or flag.
 * CUC_E_NOT_SUPPORTED: dev has no memory pools, or (CUC_POOL_IPC) its pools
 * cannot be exported as POSIX fds (cuc_device_caps()).
 * CUC_E_DRIVER (and the driver's code in cuc_errcuda()): the driver refused
 * to create or export the pool. */
CUC_API int cuc_pool_create(cuc_device *dev, const struct cuc_pool_props *props,
                            cuc_pool **out);

/* A cucore pool over pool_handle, a CUmemoryPool of dev that cucore did
 * not create, of kind (enum cuc_pool_kind: what the pool holds; the
 * receiver grants a pinned host pool's device access by it); one
 * reference for the caller. The pool must be exportable as a POSIX fd:
 * it is exported here, once, as cucore's IPC pools are, and gets a fresh
 * random pool id; its buffers (cuc_buffer_adopt(), or
 * cuc_buffer_alloc_async()) then send and import exactly as those of a
 * CUC_POOL_IPC pool. cucore never destroys the driver's pool: its creator
 * keeps it alive while the cucore pool, its buffers and their leases
 * live (cuc_pool_lease_wait()). The same handle adopted again in the
 * process, or the handle of a pool cucore created or imported here, gives
 * that same cuc_pool with one more reference.
 * CUC_E_INVALID: a NULL argument, an unknown kind, or a pool the driver
 * will not export as a POSIX fd (the message says it is not IPC-capable
 * and how to make one: handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
 * cuda.core: DeviceMemoryResourceOptions(ipc_enabled=True)).
 * CUC_E_DRIVER: another refusal of the export (named). Thread-safe. */
CUC_API int cuc_pool_adopt(cuc_device *dev, void *pool_handle, int kind, cuc_pool **out);

/* Takes another reference; returns pool. NULL is returned as NULL. */
CUC_API cuc_pool *cuc_pool_ref(cuc_pool *pool);

/* Drops one reference. The last one destroys the driver's pool (or, for an
 * imported pool, its import; an adopted pool's stays its creator's),
 * closes the pool's fd and removes the pool from this process's pools by
 * id. NULL is a no-op. */
CUC_API void cuc_pool_unref(cuc_pool *pool);

/* The pool's 128-bit id (random; an imported pool has its owner's). */
CUC_API void cuc_pool_id(const cuc_pool *pool, uint8_t id[CUC_POOL_ID_LEN]);
/* The device the pool belongs to (for a pinned host pool, the device it was
 * created for). An imported pool's device is the local device with the
 * owner's UUID. */
CUC_API cuc_device *cuc_pool_device(const cuc_pool *pool);
/* enum cuc_pool_kind. */
CUC_API int cuc_pool_kind(const cuc_pool *pool);
/* 1 for an IPC pool (created with CUC_POOL_IPC, or imported). */
CUC_API int cuc_pool_is_ipc(const cuc_pool *pool);
/* 1 for a pool imported from another process. */
CUC_API int cuc_pool_is_imported(const cuc_pool *pool);
/* 1 for a pool adopted (cuc_pool_adopt) over another allocator's pool. */
CUC_API int cuc_pool_is_adopted(const cuc_pool *pool);
/* The driver's CUmemoryPool, for raw driver calls. */
CUC_API void *cuc_pool_handle(const cuc_pool *pool);

/* A device's access to a pool's memory (cuc_pool_set_access). */
enum cuc_pool_access {
    CUC_POOL_ACCESS_NONE = 0,
    CUC_POOL_ACCESS_READ = 1, /* refused: the driver has no read-only pools */
    CUC_POOL_ACCESS_READWRITE = 3
};

/* Grants (CUC_POOL_ACCESS_READWRITE) or revokes (CUC_POOL_ACCESS_NONE)
 * dev's access to the memory of pool, for the buffers it has and will
 * have: copies and kernels on dev's streams may then use (or no longer
 * use) them. In this process only: an importer sets its own access on an
 * imported pool, whatever the exporter granted (the driver keeps access
 * per process). A device pool's own device always has read-write access;
 * a pinned host pool's devices are granted as any. Errors:
 * CUC_E_NOT_SUPPORTED for CUC_POOL_ACCESS_READ (the driver refuses
 * read-only access to pools: sim/FACTS.md F20) and for
 * a device that cannot reach the owner's memory (cuDeviceCanAccessPeer
 * 0), naming both UUIDs; CUC_E_INVALID for revoking the owner's access
 * (the driver: CUDA_ERROR_INVALID_DEVICE), another access value or a NULL
 * argument; a driver failure is CUC_E_DRIVER naming the pool and device.
 * Thread-safe. */
CUC_API int cuc_pool_set_access(cuc_pool *pool, cuc_device *dev, int access);
/* dev's access to pool in this process (enum cuc_pool_access), as the
 * driver reports it. */
CUC_API int cuc_pool_get_access(const cuc_pool *pool, cuc_device *dev, int *access);

/* The IPC pool of this process (created or imported here) whose id is id,
 * with a new reference; CUC_E_POOL_NOT_IMPORTED, naming the id in hex,
 * when there is none. */
CUC_API int cuc_pool_get_by_id(const uint8_t id[CUC_POOL_ID_LEN], cuc_pool **pool);

/* Leases not yet ended on the buffers of this pool that this process sent
 * (cucore/memory.h), including those of buffers whose last reference is
 * gone and whose free is deferred. Counts what the channels have noticed
 * so far. */
CUC_API int cuc_pool_lease_count(const cuc_pool *pool, size_t *n);

/* Waits until at most max_left leases of the pool's buffers remain, or
 * timeout_ms has passed (-1: forever; CUC_E_TIMEOUT names how many are
 * left). With ch, pumps that channel while waiting (cuc_channel_pump():
 * messages other than releases are queued for cuc_channel_recv(); a full
 * queue is CUC_E_BUSY); with ch NULL (and once ch's peer has gone) it
 * pumps no live channel: it reads the links of channels this process
 * destroyed while their leases were held (cuc_channel_destroy) and counts
 * the ends that other threads' receives, pumps and lease waits notice on
 * the live ones. Deferred frees whose last lease ended have run when it
 * returns 0. A deferred free that failed where no caller could be told (it
 * ran in a lease end, inside another call) is reported here, once:
 * CUC_E_DRIVER with how many failed, the bytes left allocated (leaked
 * rather than freed while work might still use them) and the first
 * failure's message. The caller must hold a reference to pool. */
CUC_API int cuc_pool_lease_wait(cuc_pool *pool, cuc_channel *ch, size_t max_left,
                                int timeout_ms);

/* An IPC pool: its fd (duplicated into the message, which owns the copy),
 * id, owner UUID, kind and handle type. Plain bytes cannot carry it
 * (cuc_msg_to_bytes() is CUC_E_NEEDS_CHANNEL). A pool without CUC_POOL_IPC
 * is CUC_E_NOT_SERIALIZABLE. An imported pool can be sent on. */
CUC_API int cuc_msg_add_pool(cuc_msg *msg, const cuc_pool *pool);

/* The fields of pool record index, resolving nothing (the fd stays the
 * message's). CUC_E_INVALID: not a pool record. CUC_E_BADMSG: a
 * malformed record (kind, handle type, payload length, fd count; named). */
CUC_API int cuc_msg_read_pool(const cuc_msg *msg, size_t index,
                              struct cuc_pool_record *rec);

/* The pool of record index, with a new reference. A pool already known
 * here (created here, or imported before) is that same object, and the
 * record's fd is left unused; otherwise the pool is imported on the local
 * device with the record's owner UUID and registered under its id. The
 * message keeps its fd (it is duplicated, not taken).
 * CUC_E_INVALID: the record is not a pool record, or its fd was taken.
 * CUC_E_BADMSG: a malformed record (as cuc_msg_read_pool), or an id
 * already known here with another owner or kind.
 * CUC_E_NOT_VISIBLE: the owner's UUID is not visible here (the message
 * names it and lists the visible devices).
 * CUC_E_DRIVER: the driver refused the import (an fd that is no pool's). */
CUC_API int cuc_msg_get_pool(const cuc_msg *msg, size_t index, cuc_pool **pool);

#ifdef __cplusplus
}
#endif
#endif
