/* Internals of virtual-memory resources, shared by vmm.c (lifetime, map,
 * access), vmm_lease.c (leases the exporter holds) and wire_vmm.c (the
 * record and the import cache). */
#ifndef CUC_VMM_IMPL_H
#define CUC_VMM_IMPL_H

#include <pthread.h>

#include "internal.h"
#include "cucore/vmm.h"

struct cuc_vmm {
    /* guarded by cuc__vmm_lock */
    size_t refs;   /* references: the caller's, messages', one per lease */
    size_t leases; /* leases begun and not ended (exporter) */
    struct cuc_vmm *next; /* import cache (imported from a channel) */

    cuc_device *owner;
    size_t npeers;
    cuc_device *peers[CUC_VMM_MAX_PEERS];
    size_t nchunks;
    size_t *sizes;                        /* nchunks entries */
    CUmemGenericAllocationHandle *handles; /* created: nchunks; imported: NULL */
    CUdeviceptr base;
    size_t size;
    int imported;
    cuc_channel *channel; /* imported from it (a reference), or NULL */
    uint64_t lease_id;    /* imported: the exporter's lease id */
};

/* One lock for every resource's counts and for the import cache; lease
 * ends broadcast cuc__vmm_cond (CLOCK_MONOTONIC). */
extern pthread_mutex_t cuc__vmm_lock;
void cuc__vmm_cond_init(void);
int cuc__vmm_cond_wait_until(int64_t deadline_ms);
void cuc__vmm_cond_broadcast(void);

/* Maps n chunks imported from fds (borrowed: the driver does not keep
 * them) with the given sizes, contiguously, granting access to owner and
 * peers. The new object has one reference and is not in the import
 * cache. */
int cuc__vmm_import(cuc_device *owner, cuc_device *const *peers, size_t npeers,
                    const int *fds, const uint64_t *sizes, size_t n, cuc_vmm **out);

/* Drops a reference with cuc__vmm_lock held; returns 1 if it was the last
 * (the caller then calls cuc__vmm_teardown after unlocking). Removes an
 * imported object from the import cache when it was the last. */
int cuc__vmm_unref_locked(cuc_vmm *v);
void cuc__vmm_teardown(cuc_vmm *v);

/* vmm_lease.c: the lease operations of an exporter's resource. */
extern const struct cuc__lease_ops cuc__vmm_lease_ops;

/* wire_vmm.c: the import cache (cuc__vmm_lock held). */
void cuc__vmm_cache_remove(cuc_vmm *v);

/* Resources alive in this process (created or imported, not yet torn
 * down): for tests. */
size_t cuc__vmm_live(void);

/* ---- the record payload (docs/wire-format.md) ---- */
#define CUC__VMM_FIXED 40u
#define CUC__VMM_PAYLOAD_MAX \
    (CUC__VMM_FIXED + 16u * CUC_VMM_MAX_PEERS + 8u * CUC_VMM_MAX_CHUNKS)

struct cuc__vmm_rec {
    uint32_t handle_type;
    uint32_t nchunks, npeers;
    uint64_t lease_id;
    cuc_uuid owner;
    const uint8_t *peers; /* npeers UUIDs of 16 bytes, in the payload */
    const uint8_t *sizes; /* nchunks u64, in the payload */
    uint64_t total;
    const int *fds; /* nchunks, borrowed from the message */
};

/* Fetches record index, checks its type (else CUC_E_INVALID) and every
 * field (else CUC_E_BADMSG, naming it). Resolves nothing. */
int cuc__vmm_rec_parse(const cuc_msg *m, size_t index, struct cuc__vmm_rec *out);

#endif
