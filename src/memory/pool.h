/* Memory pools (pool.c): creation (and the one export of an IPC pool's
 * fd), the object around an imported pool, references, and the table of
 * this process's IPC pools by id, through which buffer records find their
 * pool and a pool record that arrives twice gives the same object. Their
 * records (pool_share.c) import through that table.
 *
 * Locking. refs is atomic (the table takes a reference only from a
 * non-zero count). Everything else that changes in a pool or in any of its
 * buffers is guarded by the pool's lock; no channel call and no message
 * destroy happens under it (lease ends take it). */
#ifndef CUC_MEMORY_POOL_H
#define CUC_MEMORY_POOL_H

#include <pthread.h>

#include "cucore/pool.h"
#include "base/hex.h"
#include "base/htab.h"
#include "device/device.h"
#include "lease/lease.h"

struct cuc_pool {
    int refs; /* atomic */
    cuc_device *dev;
    CUmemoryPool cu;
    int kind;       /* enum cuc_pool_kind */
    unsigned flags; /* CUC_POOL_IPC */
    int imported;
    int adopted; /* cuc_pool_adopt: the driver's pool is its creator's */
    int legacy; /* the device's pool of legacy-IPC memory: no driver pool */
    pid_t creator; /* made here, or inherited through fork (inert) */
    int fd; /* IPC: the shareable handle this pool keeps; else -1 */
    uint8_t id[CUC_POOL_ID_LEN];
    struct cuc__hnode by_id; /* in the table of IPC pools */
    struct cuc__hnode by_cu; /* and by the driver's handle */

    pthread_mutex_t lock;
    pthread_cond_t cond;   /* a lease ended, a buffer's free completed */
    struct cuc__htab bufs; /* buffers by export data (buffer.c) */
    /* by pointer (buffer.c): imported allocations; in an adopted pool, the
     * allocations adopted (adopt.c) */
    struct cuc__htab imports;
    struct cuc_buffer *last_found; /* of bufs: views of one allocation arrive in runs */
    struct cuc__htab views; /* views by (allocation, offset, size) (buffer_view.c) */
    struct cuc__htab bases; /* legacy: wrapped allocations by base (buffer_ipc.c) */
    size_t leases;         /* leases on its buffers, freed or not */
    /* frees that failed where no caller could be told (buffer.c), until
     * cuc_pool_lease_wait() reports them */
    size_t lost, lost_bytes;
    char lost_msg[512]; /* the first one's message */
};

/* The one way to name a pool in a message: its id in hex,
 * cuc__pool_id_hex(id).s. */
static inline struct cuc__hex16 cuc__pool_id_hex(const uint8_t id[CUC_POOL_ID_LEN])
{
    return cuc__id16_hex(id);
}
/* "device", "pinned host" or "?". */
const char *cuc__pool_kind_name(int kind);

/* The object around pool cu imported from fd (both taken: kept, or
 * destroyed and closed), registered under id, one reference for the
 * caller; or, when a live pool has that id or handle already, that pool
 * with a new reference (cu destroyed: the driver counts each import of
 * one pool, sim/FACTS.md F47). Called with cuc__pool_import_lock held. */
int cuc__pool_wrap_import(cuc_device *dev, CUmemoryPool cu, int kind, int fd,
                          const uint8_t id[CUC_POOL_ID_LEN], cuc_pool **out);

/* Held around a pool's import (find, cuMemPoolImportFromShareableHandle,
 * registration) and around an imported pool's last reference and destroy:
 * the driver gives a second import of a pool the first one's handle,
 * counted; an import while another thread destroyed that handle crashed
 * it, and a second import keeps an fd for good (sim/FACTS.md F47). */
extern pthread_mutex_t cuc__pool_import_lock;

/* The pool that buffers of legacy-IPC memory of dev belong to (no driver
 * pool: cu NULL; bufs keyed by (exporter, generation), buffer_ipc.c),
 * made the first time, kept for the process; with a new reference. */
int cuc__pool_legacy(cuc_device *dev, cuc_pool **out);

/* The live IPC pool with this id, with a new reference, or NULL. */
cuc_pool *cuc__pool_find(const uint8_t id[CUC_POOL_ID_LEN]);
/* The live IPC pool (created, imported or adopted here) whose driver
 * handle is cu, with a new reference, or NULL. */
cuc_pool *cuc__pool_find_handle(CUmemoryPool cu);

/* 0, or CUC_E_DRIVER describing the frees of p's buffers that failed
 * where no caller could be told since the last call (they are then
 * forgotten). */
int cuc__pool_take_lost(cuc_pool *p);

/* What a wait for the pool's leases watches. */
struct cuc__lease_gauge *cuc__pool_gauge(cuc_pool *p, struct cuc__lease_gauge *g);

#endif
