/* VMM resources in messages: one fd per chunk beside the bytes, and the
 * chunk sizes, the owner's and the peers' UUIDs and the exporter's lease
 * id in the payload (wire/rec_vmm.c). Export makes the fds; import
 * resolves the devices by UUID, imports the chunks and maps them (vmm.c),
 * once per lease through vmm.c's table of imports. */
#include "memory/vmm.h"
#include "os/fd.h"
#include "os/fd_same.h"
#include "wire/records.h"

#include <stdio.h>
#include <string.h>

static int export_fds(const cuc_vmm *v, int *fds)
{
    CUC__CTX_KEEP(guard);
    char what[64];
    size_t i;
    int rc = cuc__device_activate(&guard, v->owner);

    if (rc)
        return rc;
    for (i = 0; i < v->nchunks; i++) {
        CUresult r = CUC_DRV->cuMemExportToShareableHandle(
            &fds[i], v->handles[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r != CUDA_SUCCESS) {
            cuc__close_fds(fds, i);
            return cuc__cuda_err(r, "cuMemExportToShareableHandle", "chunk %zu of %zu "
                                 "on device %s", i, v->nchunks, v->owner->uuid_str);
        }
        /* set close-on-exec whatever the driver did (it does for VMM
         * fds, not for pool fds: sim/FACTS.md F41, F23), or a child
         * exec'd meanwhile would inherit the chunk */
        snprintf(what, sizeof(what), "the fd of chunk %zu", i);
        rc = cuc__set_cloexec_or_close(fds[i], what);
        if (rc) {
            cuc__close_fds(fds, i);
            return rc;
        }
    }
    return 0;
}

/* The record of v under lease id (0: a new lease of the message); its
 * chunks exported afresh. */
static int add_vmm(cuc_msg *m, cuc_vmm *v, uint64_t id)
{
    cuc_uuid peers[CUC_VMM_MAX_PEERS];
    int fds[CUC_VMM_MAX_CHUNKS];
    int rc, attached = 0;

    if (v->imported)
        return cuc__seterr(CUC_E_NOT_SUPPORTED, "cuc_msg_add_vmm: this VMM resource "
                           "(%zu bytes on %s) was imported from another process; "
                           "send it from the process that created it", v->size,
                           v->owner->uuid_str);
    rc = cuc__vmm_rec_room(m, v->nchunks);
    if (!rc)
        rc = export_fds(v, fds);
    if (rc)
        return rc;
    /* The lease first: a record whose lease is missing could let the
     * exporter free memory the importer maps. */
    if (!id) {
        rc = cuc__msg_lease_attach(m, &cuc__vmm_lease_ops, v, &id);
        if (rc) {
            cuc__close_fds(fds, v->nchunks);
            return rc;
        }
        attached = 1;
    }
    for (size_t i = 0; i < v->npeers; i++)
        peers[i] = v->peers[i]->uuid;
    rc = cuc__vmm_rec_put(m, id, &v->owner->uuid, peers, v->npeers, v->sizes,
                          v->nchunks, fds);
    if (rc && attached)
        cuc__msg_lease_pop(m); /* no record: nothing to lease */
    return rc;
}

int cuc_msg_add_vmm(cuc_msg *m, const cuc_vmm *v)
{
    if (!m || !v)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_vmm: NULL argument");
    return add_vmm(m, (cuc_vmm *)v, 0);
}

int cuc__msg_add_vmm_under(cuc_msg *m, cuc_vmm *v, uint64_t lease_id)
{
    return add_vmm(m, v, lease_id);
}

/* A device of the record by UUID; the not-visible message says which. */
static int resolve(const cuc_uuid *u, size_t index, const char *role, cuc_device **d)
{
    char why[1024];
    int rc = cuc_device_get_by_uuid(u, d);

    if (rc == CUC_E_NOT_VISIBLE) {
        snprintf(why, sizeof(why), "%s", cuc_errmsg());
        cuc__seterr(rc, "vmm record %zu: its %s: %s", index, role, why);
    }
    return rc;
}

static int resolve_devices(const struct cuc_vmm_record *o, size_t index,
                           cuc_device **owner, cuc_device **peers)
{
    char role[32];
    int rc = resolve(&o->owner, index, "owner", owner);

    for (size_t i = 0; !rc && i < o->npeers; i++) {
        snprintf(role, sizeof(role), "peer %zu", i);
        rc = resolve(&o->peers[i], index, role, &peers[i]);
    }
    return rc;
}

static int check_granularity(const struct cuc_vmm_record *o, size_t index,
                             const cuc_device *owner, uint64_t *sizes)
{
    size_t g;
    int rc = cuc_vmm_granularity(owner, &g);

    if (rc)
        return rc;
    for (size_t i = 0; i < o->nchunks; i++) {
        sizes[i] = cuc_vmm_record_chunk_size(o, i);
        if (sizes[i] % g)
            return cuc__seterr(CUC_E_BADMSG, "vmm record %zu: chunk %zu is %llu bytes, "
                               "not a multiple of the granularity of %s (%zu)", index, i,
                               (unsigned long long)sizes[i], owner->uuid_str, g);
    }
    return 0;
}

/* The chunks of the record's fds (borrowed: the driver does not keep
 * them) as driver handles; on failure none is left. */
static int import_chunks(const struct cuc_vmm_record *o, CUmemGenericAllocationHandle *h)
{
    for (size_t i = 0; i < o->nchunks; i++) {
        CUresult r = CUC_DRV->cuMemImportFromShareableHandle(
            &h[i], (void *)(intptr_t)o->fds[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS) {
            int rc = cuc__cuda_err(r, "cuMemImportFromShareableHandle",
                                   "chunk %zu of %zu (fd %zu of the record)%s", i,
                                   o->nchunks, i,
                                   r == CUDA_ERROR_INVALID_DEVICE
                                       ? ": its GPU is not visible here" : "");
            while (i--)
                CUC_DRV->cuMemRelease(h[i]);
            return rc;
        }
    }
    return 0;
}

/* One chunk sent twice would be mapped at two offsets of one range. */
static int check_distinct_fds(const struct cuc_vmm_record *o, size_t index)
{
    for (size_t i = 0; i < o->nchunks; i++)
        for (size_t j = i + 1; j < o->nchunks; j++)
            if (cuc__fd_same_object(o->fds[i], o->fds[j]))
                return cuc__badmsg("vmm record %zu: chunks %zu and %zu are the same "
                                   "allocation (their fds are one file): a hostile or "
                                   "broken sender", index, i, j);
    return 0;
}

static int import(const struct cuc_vmm_record *o, size_t index, cuc_vmm **out)
{
    CUC__CTX_KEEP(guard);
    CUmemGenericAllocationHandle h[CUC_VMM_MAX_CHUNKS];
    cuc_device *owner, *peers[CUC_VMM_MAX_PEERS];
    uint64_t sizes[CUC_VMM_MAX_CHUNKS];
    int rc;

    rc = check_distinct_fds(o, index);
    if (!rc)
        rc = resolve_devices(o, index, &owner, peers);
    if (!rc)
        rc = check_granularity(o, index, owner, sizes);
    for (size_t i = 0; !rc && i < o->npeers; i++)
        rc = cuc__vmm_check_peer_access(owner, peers[i], "");
    if (!rc)
        rc = cuc__device_activate(&guard, owner);
    if (!rc)
        rc = import_chunks(o, h);
    if (rc)
        return rc;
    return cuc__vmm_wrap_import(owner, peers, o->npeers, h, sizes, o->nchunks, out);
}

int cuc_msg_get_vmm(const cuc_msg *m, size_t index, cuc_vmm **out)
{
    struct cuc_vmm_record o;
    struct cuc__leases *from;
    cuc_vmm *v, *had;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_vmm: NULL argument");
    rc = cuc_msg_read_vmm(m, index, &o);
    if (rc)
        return rc;
    if ((v = cuc__msg_local(m, index)) != NULL) { /* attached where it was made */
        *out = cuc_vmm_ref(v);
        return 0;
    }
    from = cuc__leases_of_msg(m);
    v = from ? cuc__vmm_imported(from, o.lease_id) : NULL;
    if (v) {
        *out = v;
        return 0;
    }
    rc = import(&o, index, &v);
    if (rc)
        return rc;
    had = from ? cuc__vmm_publish(v, from, o.lease_id, &rc) : NULL;
    if (had || rc) {
        cuc_vmm_unref(v); /* lost a race with another thread's get */
        if (rc)
            return rc;
        v = had;
    }
    *out = v;
    return 0;
}
