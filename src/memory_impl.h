/* Internals of pools and buffers, shared by pool.c, pool_registry.c,
 * buffer.c, buffer_share.c, lease_wait.c, copy.c and their wire codecs
 * (wire_pool.c, wire_buffer.c).
 *
 * Locking. A pool's refs are atomic (the registry takes a reference only
 * from a non-zero count). Everything else that changes in a pool or in
 * any of its buffers is guarded by the pool's lock; no channel call and
 * no message destroy happens under it (lease callbacks take it). */
#ifndef CUC_MEMORY_IMPL_H
#define CUC_MEMORY_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "internal.h"
#include "htab.h"
#include "objects.h"
#include "wire.h"
#include "cucore/pool.h"
#include "cucore/memory.h"

/* ---- pool.c ---- */
struct cuc_pool {
    int refs; /* atomic */
    cuc_device *dev;
    CUmemoryPool cu;
    int kind;       /* enum cuc_pool_kind */
    unsigned flags; /* CUC_POOL_IPC */
    int imported;
    int fd; /* IPC: the shareable handle this pool keeps; else -1 */
    uint8_t id[CUC_POOL_ID_LEN];
    struct cuc__hnode reg_node; /* pool_registry.c, for IPC pools */

    pthread_mutex_t lock;
    pthread_cond_t cond;   /* a lease ended, a buffer's free completed */
    struct cuc__htab bufs; /* buffers by export data (buffer_share.c) */
    size_t leases;         /* leases on its buffers, freed or not */
};

/* Creates the pool object around an imported driver pool (takes fd). */
int cuc__pool_wrap_import(cuc_device *dev, CUmemoryPool cu, int kind, int fd,
                          const uint8_t id[CUC_POOL_ID_LEN], cuc_pool **out);
/* The pool id as 32 hex digits + NUL. */
void cuc__pool_id_hex(const uint8_t id[CUC_POOL_ID_LEN], char out[2 * CUC_POOL_ID_LEN + 1]);
const char *cuc__pool_kind_name(int kind);

/* ---- pool_registry.c: IPC pools of this process by id ---- */
/* Registers p (an IPC pool not yet shared with other threads). */
int cuc__pool_registry_add(cuc_pool *p);
/* The live pool with this id, with a new reference, or NULL. */
cuc_pool *cuc__pool_registry_find(const uint8_t id[CUC_POOL_ID_LEN]);
/* Forgets p (its last reference is gone). */
void cuc__pool_registry_remove(cuc_pool *p);

/* ---- buffer.c ---- */
enum cuc__buf_state {
    CUC__BUF_LIVE = 0,     /* references held */
    CUC__BUF_DEFERRED = 1, /* no reference; leases or messages keep it */
    CUC__BUF_FREEING = 2   /* the free is under way: not to be found */
};

/* Where an imported buffer came from: the channel (a reference) and the
 * lease id to release there. ch NULL: no lease (from plain bytes). */
struct cuc__upstream {
    cuc_channel *ch;
    uint64_t id;
};

struct cuc_buffer {
    cuc_pool *pool; /* a reference */
    CUdeviceptr ptr;
    size_t size;
    int imported;
    /* guarded by pool->lock */
    int refs;      /* cuc_buffer_alloc / _ref / cuc_msg_get_buffer */
    size_t holds;  /* messages holding it (lease attachments) */
    size_t leases; /* leases begun and not ended */
    int state;     /* enum cuc__buf_state */
    CUevent free_after; /* DEFERRED: recorded on the last free's stream */
    int have_export;
    CUmemPoolPtrExportData export_data;
    struct cuc__hnode node; /* in pool->bufs while have_export */
    struct cuc__upstream anchor; /* imported: the lease it was imported under */
    struct cuc__upstream *extra; /* further leases it arrived under */
    size_t nextra, extra_cap;
};

/* The message-side lease callbacks of a buffer (lease.h). */
extern const struct cuc__lease_ops cuc__buffer_lease_ops;

/* A new buffer object (refs 1) of pool at ptr; takes a pool reference. */
int cuc__buffer_new(cuc_pool *pool, CUdeviceptr ptr, size_t size, int imported,
                    cuc_buffer **out);
/* Called with pool->lock held when something that keeps buf went away:
 * 1 if nothing keeps it any more (its state is then FREEING and the caller
 * must call cuc__buffer_release() after unlocking). */
int cuc__buffer_unkept_locked(cuc_buffer *b);
/* Frees what buf holds: the driver's memory (stream, or after free_after
 * on the legacy stream), its entry in the pool's table, its upstream
 * leases, the pool reference. Returns the first failure. */
int cuc__buffer_release(cuc_buffer *b, cuc_stream *stream);

/* ---- buffer_share.c ---- */
/* buf's export data, computed by the driver the first time and cached;
 * buf then is findable by it in its pool. */
int cuc__buffer_export(const cuc_buffer *buf, CUmemPoolPtrExportData *out);
/* The buffer of pool with this export data, with a new reference: for a
 * pool created here, the allocation itself (CUC_E_NOT_FOUND if none); for
 * an imported pool, the existing import or a new one (a size that the
 * first import gave differently is CUC_E_BADMSG). up (ch may be NULL) is
 * recorded as a lease to release: taken over on success. */
int cuc__buffer_import(cuc_pool *pool, const CUmemPoolPtrExportData *data,
                       size_t size, const struct cuc__upstream *up, cuc_buffer **out);
/* The driver's part of a free, on stream (NULL: the device's legacy
 * stream): waits for a deferred free's event, cuMemFreeAsync, and for an
 * imported buffer, when sync, waits for the stream (the exporter may reuse
 * the memory once we release). The first failure is returned. */
int cuc__buffer_free_memory(cuc_buffer *b, cuc_stream *stream, int sync);
/* Removes buf from its pool's table (pool->lock held). */
void cuc__buffer_forget_locked(cuc_buffer *b);

/* ---- lease_wait.c ---- */
/* Waits (pool->cond) until *count <= max_left, pumping ch if given. what
 * names the object in the timeout message. */
int cuc__lease_wait(cuc_pool *pool, const size_t *count, cuc_channel *ch,
                    size_t max_left, int timeout_ms, const char *what);

/* ---- record payloads (docs/wire-format.md) ---- */
#define CUC__POOL_PAYLOAD 40u
#define CUC__BUFFER_PAYLOAD 104u

struct cuc__pool_rec {
    uint8_t id[CUC_POOL_ID_LEN];
    cuc_uuid owner;
    uint32_t kind;
    uint32_t handle_type;
    int fd; /* borrowed from the message */
};
struct cuc__buffer_rec {
    uint8_t pool_id[CUC_POOL_ID_LEN];
    uint64_t size;
    uint64_t offset;
    uint64_t lease_id;
    CUmemPoolPtrExportData data;
};

/* Each fetches record index, checks its type (else CUC_E_INVALID) and
 * every field (else CUC_E_BADMSG, naming it); nothing is resolved. */
int cuc__pool_rec_parse(const cuc_msg *m, size_t index, struct cuc__pool_rec *out);
int cuc__buffer_rec_parse(const cuc_msg *m, size_t index, struct cuc__buffer_rec *out);

#endif
