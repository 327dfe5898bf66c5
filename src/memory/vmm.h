/* Virtual-memory resources (vmm.c): allocate, map, grant access,
 * reference counts, the lease ops of an exporter's resource, the table of
 * resources imported from a channel (by lease), and the teardown that
 * undoes it all. Their records (vmm_share.c) export and import the chunks
 * through that table. */
#ifndef CUC_MEMORY_VMM_H
#define CUC_MEMORY_VMM_H

#include "cucore/vmm.h"
#include "base/htab.h"
#include "device/device.h"
#include "lease/lease.h"

/* refs, leases and the table node are guarded by vmm.c's one lock. */
struct cuc_vmm {
    size_t refs;   /* references: the caller's, messages', one per lease */
    pid_t creator; /* made in this process, or inherited through fork */
    size_t leases; /* leases begun and not ended (exporter) */

    cuc_device *owner;
    size_t npeers;
    cuc_device *peers[CUC_VMM_MAX_PEERS];
    size_t nchunks;
    size_t *sizes;                         /* nchunks entries */
    /* created: nchunks; adopted: the references retained here; imported:
     * NULL */
    CUmemGenericAllocationHandle *handles;
    CUdeviceptr base;
    size_t size;
    int imported;
    /* cuc_vmm_adopt: the mapping is another allocator's (in the table of
     * adopted resources by (base, size) through by_range); its releases
     * run at the teardown */
    int adopted;
    struct cuc__releases *releases;
    struct cuc__hnode by_range;
    struct cuc__leases *leases_from; /* imported from a channel: a reference */
    uint64_t lease_id;               /* imported: the exporter's lease id */
    struct cuc__hnode by_lease;      /* in the import table while leases_from */
};

/* The ops of the leases a message holding an exporter's resource begins. */
extern const struct cuc__lease_ops cuc__vmm_lease_ops;

/* Maps n chunks imported as handles h (released here: a mapping keeps its
 * memory) with the given sizes, contiguously, granting access to owner
 * and peers. The new object has one reference and is in no table. */
int cuc__vmm_wrap_import(cuc_device *owner, cuc_device *const *peers, size_t npeers,
                         CUmemGenericAllocationHandle *h, const uint64_t *sizes,
                         size_t n, cuc_vmm **out);

/* Peers must be able to reach the owner's memory for cuMemSetAccess to
 * grant it; asking first gives an error that names both (ctx prefixes
 * the message). */
int cuc__vmm_check_peer_access(const cuc_device *owner, const cuc_device *peer,
                               const char *ctx);

/* A new adopted resource of n chunks of owner (refs 1, handles and sizes
 * for the caller to fill, in no table). NULL: out of memory. */
cuc_vmm *cuc__vmm_new_adopted(cuc_device *owner, size_t n);
/* The adopted resource of exactly [base, base + size), with a new
 * reference and release added to its releases, or NULL (*rc 0), or a
 * failure (*rc: no memory for the release; nothing taken). */
cuc_vmm *cuc__vmm_adopted_find(CUdeviceptr base, size_t size, void (*release)(void *),
                               void *arg, int *rc);
/* Registers v (adopted, filled, refs 1) and adds release to it, unless
 * another thread registered one of its range first: that one is returned
 * (found as cuc__vmm_adopted_find) and v is left to the caller. */
cuc_vmm *cuc__vmm_adopted_publish(cuc_vmm *v, void (*release)(void *), void *arg, int *rc);
/* Frees an adopted resource that was never published: its retained
 * handles released. */
void cuc__vmm_adopted_discard(cuc_vmm *v);

/* The import of (leases, id), with a new reference, or NULL. */
cuc_vmm *cuc__vmm_imported(struct cuc__leases *leases, uint64_t id);
/* cuc_msg_add_vmm's record of v under lease_id, attaching nothing (a
 * share point re-serving a hold's record: the hold holds the lease). */
int cuc__msg_add_vmm_under(cuc_msg *m, cuc_vmm *v, uint64_t lease_id);
/* Registers v as the import of (leases, id) (a reference to leases is
 * taken), unless another thread got there first: then that one is
 * returned with a new reference and v is left alone. */
cuc_vmm *cuc__vmm_publish(cuc_vmm *v, struct cuc__leases *leases, uint64_t id, int *rc);

/* What a wait for v's leases watches. */
struct cuc__lease_gauge *cuc__vmm_gauge(cuc_vmm *v, struct cuc__lease_gauge *g);

/* Resources alive in this process (created or imported, not yet torn
 * down): for tests. */
size_t cuc__vmm_live(void);

#endif
