/* Virtual-memory resources: allocate the chunks (or wrap imported ones),
 * reserve one range, map the chunks back to back, grant access; reference
 * counting, leases, the table of imports, and the teardown that undoes it
 * all. */
#include "memory/vmm.h"
#include "memory/release.h"
#include "os/clock.h"
#include "os/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One lock for every resource's counts and for the import table; lease
 * ends broadcast cond. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;
static struct cuc__htab imports; /* by (leases_from, lease_id) */
static struct cuc__htab adopted; /* by (base, size) */
static size_t live;

static void cond_init_once(void)
{
    cuc__cond_init(&cond);
}

size_t cuc__vmm_live(void)
{
    size_t n;

    pthread_mutex_lock(&lock);
    n = live;
    pthread_mutex_unlock(&lock);
    return n;
}

static CUmemAllocationProp chunk_prop(const cuc_device *owner)
{
    CUmemAllocationProp p;

    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = owner->cu;
    return p;
}

int cuc_vmm_granularity(const cuc_device *dev, size_t *granularity)
{
    CUmemAllocationProp p;
    size_t g = 0;
    CUresult r;

    if (!dev || !granularity)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_granularity: NULL argument");
    p = chunk_prop(dev);
    r = CUC_DRV->cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemGetAllocationGranularity", "device %d (%s)",
                             dev->ordinal, dev->uuid_str);
    if (g == 0 || (g & (g - 1)))
        return cuc__seterr(CUC_E_DRIVER, "cuMemGetAllocationGranularity gave %zu "
                           "for device %d (%s): not a power of two", g, dev->ordinal,
                           dev->uuid_str);
    *granularity = g;
    return 0;
}

/* The object, with room for n chunk sizes and (created only) handles. */
static cuc_vmm *vmm_new(cuc_device *owner, cuc_device *const *peers, size_t npeers,
                        size_t n, int with_handles)
{
    size_t bytes = sizeof(cuc_vmm) + n * sizeof(size_t) +
                   (with_handles ? n * sizeof(CUmemGenericAllocationHandle) : 0);
    cuc_vmm *v = calloc(1, bytes);

    if (!v)
        return NULL;
    v->refs = 1;
    v->creator = cuc__pid();
    v->owner = owner;
    v->npeers = npeers;
    if (npeers)
        memcpy(v->peers, peers, npeers * sizeof(*peers));
    v->nchunks = n;
    v->sizes = (size_t *)(v + 1);
    if (with_handles)
        v->handles = (CUmemGenericAllocationHandle *)(v->sizes + n);
    return v;
}

static void count_live(int delta)
{
    pthread_mutex_lock(&lock);
    live += (size_t)delta;
    pthread_mutex_unlock(&lock);
}

int cuc__vmm_check_peer_access(const cuc_device *owner, const cuc_device *peer,
                               const char *ctx)
{
    int can = 0;
    CUresult r = CUC_DRV->cuDeviceCanAccessPeer(&can, peer->cu, owner->cu);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuDeviceCanAccessPeer", "%speer %s, owner %s", ctx,
                             peer->uuid_str, owner->uuid_str);
    if (!can)
        return cuc__seterr(CUC_E_NOT_SUPPORTED, "%speer device %d (%s) cannot access "
                           "the memory of owner device %d (%s) "
                           "(cuDeviceCanAccessPeer is 0): leave it out of the peers",
                           ctx, peer->ordinal, peer->uuid_str, owner->ordinal,
                           owner->uuid_str);
    return 0;
}

/* Read-write for the owner and every peer, over the whole range. */
static int grant_access(cuc_vmm *v)
{
    CUmemAccessDesc d[1 + CUC_VMM_MAX_PEERS];
    size_t i;
    CUresult r;

    memset(d, 0, sizeof(d));
    for (i = 0; i <= v->npeers; i++) {
        const cuc_device *dev = i ? v->peers[i - 1] : v->owner;
        d[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d[i].location.id = dev->cu;
        d[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    r = CUC_DRV->cuMemSetAccess(v->base, v->size, d, v->npeers + 1);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemSetAccess", "read-write for owner %s and %zu "
                             "peers over %zu bytes", v->owner->uuid_str, v->npeers,
                             v->size);
    return 0;
}

/* Reserves the range and maps handles h[0..n) back to back; on failure
 * nothing stays mapped or reserved. */
static int map_all(cuc_vmm *v, const CUmemGenericAllocationHandle *h)
{
    size_t i, off = 0;
    CUresult r;
    int rc;

    r = CUC_DRV->cuMemAddressReserve(&v->base, v->size, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemAddressReserve", "%zu bytes for %zu chunks",
                             v->size, v->nchunks);
    for (i = 0; i < v->nchunks; i++) {
        r = CUC_DRV->cuMemMap(v->base + off, v->sizes[i], 0, h[i], 0);
        if (r != CUDA_SUCCESS) {
            rc = cuc__cuda_err(r, "cuMemMap", "chunk %zu of %zu (%zu bytes at offset "
                               "%zu)%s", i, v->nchunks, v->sizes[i], off,
                               r == CUDA_ERROR_NOT_SUPPORTED
                                   ? ": the size is not the allocation's" : "");
            goto unmap;
        }
        off += v->sizes[i];
    }
    rc = grant_access(v);
    if (rc)
        goto unmap;
    return 0;
unmap:
    if (off)
        CUC_DRV->cuMemUnmap(v->base, off);
    CUC_DRV->cuMemAddressFree(v->base, v->size);
    v->base = 0;
    return rc;
}

static void release_handles(const CUmemGenericAllocationHandle *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        CUC_DRV->cuMemRelease(h[i]);
}

static int check_peers(const cuc_device *owner, const cuc_device *const *peers,
                       size_t npeers)
{
    size_t i, j;
    int rc;

    for (i = 0; i < npeers; i++) {
        if (!peers[i])
            return cuc__seterr(CUC_E_INVALID, "cuc_vmm_create: peer %zu is NULL", i);
        if (peers[i] == owner)
            return cuc__seterr(CUC_E_INVALID, "cuc_vmm_create: peer %zu is the owner "
                               "(%s), which always has access", i, owner->uuid_str);
        for (j = 0; j < i; j++)
            if (peers[j] == peers[i])
                return cuc__seterr(CUC_E_INVALID, "cuc_vmm_create: peers %zu and %zu "
                                   "are both %s", j, i, peers[i]->uuid_str);
        rc = cuc__vmm_check_peer_access(owner, peers[i], "cuc_vmm_create: ");
        if (rc)
            return rc;
    }
    return 0;
}

static int check_sizes(const cuc_device *owner, const size_t *sizes, size_t n,
                       size_t *total)
{
    size_t g, i, sum = 0;
    int rc = cuc_vmm_granularity(owner, &g);

    if (rc)
        return rc;
    for (i = 0; i < n; i++) {
        if (sizes[i] == 0 || sizes[i] % g)
            return cuc__seterr(CUC_E_INVALID, "cuc_vmm_create: chunk %zu is %zu bytes, "
                               "not a positive multiple of the granularity of device "
                               "%s (%zu bytes; cuc_vmm_granularity())", i, sizes[i],
                               owner->uuid_str, g);
        if (__builtin_add_overflow(sum, sizes[i], &sum) || sum > CUC_VMM_MAX_BYTES)
            return cuc__seterr(CUC_E_INVALID, "cuc_vmm_create: chunks 0..%zu add up to "
                               "more than CUC_VMM_MAX_BYTES (%llu)", i,
                               (unsigned long long)CUC_VMM_MAX_BYTES);
    }
    *total = sum;
    return 0;
}

static int check_create_args(const cuc_device *owner, const cuc_device *const *peers,
                             size_t npeers, const size_t *sizes, size_t n, cuc_vmm **out)
{
    if (!owner || !sizes || !out || (npeers && !peers))
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_create: NULL argument");
    if (n == 0 || n > CUC_VMM_MAX_CHUNKS)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_create: %zu chunks (1..%u)", n,
                           CUC_VMM_MAX_CHUNKS);
    if (npeers > CUC_VMM_MAX_PEERS)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_create: %zu peers (at most %u)",
                           npeers, CUC_VMM_MAX_PEERS);
    if ((owner->caps & (CUC_DEVICE_CAP_VMM | CUC_DEVICE_CAP_VMM_POSIX_FD)) !=
        (CUC_DEVICE_CAP_VMM | CUC_DEVICE_CAP_VMM_POSIX_FD))
        return cuc__seterr(CUC_E_NOT_SUPPORTED, "device %d (%s) does not support "
                           "virtual memory management with POSIX fd handles",
                           owner->ordinal, owner->uuid_str);
    return check_peers(owner, peers, npeers);
}

static int create_chunks(cuc_vmm *v)
{
    CUmemAllocationProp p = chunk_prop(v->owner);
    size_t i;
    CUresult r;

    for (i = 0; i < v->nchunks; i++) {
        r = CUC_DRV->cuMemCreate(&v->handles[i], v->sizes[i], &p, 0);
        if (r != CUDA_SUCCESS) {
            int rc = cuc__cuda_err(r, "cuMemCreate", "chunk %zu of %zu (%zu bytes) on "
                                   "device %d (%s)", i, v->nchunks, v->sizes[i],
                                   v->owner->ordinal, v->owner->uuid_str);
            release_handles(v->handles, i);
            return rc;
        }
    }
    return 0;
}

int cuc_vmm_create(const cuc_device *owner, const cuc_device *const *peers, size_t npeers,
                   const size_t *chunk_sizes, size_t nchunks, cuc_vmm **out)
{
    CUC__CTX_KEEP(guard);
    size_t total = 0;
    cuc_vmm *v;
    int rc;

    rc = check_create_args(owner, peers, npeers, chunk_sizes, nchunks, out);
    if (!rc)
        rc = check_sizes(owner, chunk_sizes, nchunks, &total);
    if (!rc)
        rc = cuc__device_activate(&guard, owner);
    if (rc)
        return rc;
    v = vmm_new((cuc_device *)owner, (cuc_device *const *)peers, npeers, nchunks, 1);
    if (!v)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a VMM resource of %zu "
                           "chunks", nchunks);
    memcpy(v->sizes, chunk_sizes, nchunks * sizeof(size_t));
    v->size = total;
    rc = create_chunks(v);
    if (rc)
        goto free_v;
    rc = map_all(v, v->handles);
    if (rc)
        goto release;
    count_live(1);
    *out = v;
    return 0;
release:
    release_handles(v->handles, v->nchunks);
free_v:
    free(v);
    return rc;
}

int cuc__vmm_wrap_import(cuc_device *owner, cuc_device *const *peers, size_t npeers,
                         CUmemGenericAllocationHandle *h, const uint64_t *sizes,
                         size_t n, cuc_vmm **out)
{
    cuc_vmm *v = vmm_new(owner, peers, npeers, n, 0);
    int rc;

    if (!v) {
        release_handles(h, n);
        return cuc__seterr(CUC_E_NOMEM, "out of memory importing %zu chunks", n);
    }
    for (size_t i = 0; i < n; i++) {
        v->sizes[i] = (size_t)sizes[i];
        v->size += (size_t)sizes[i];
    }
    v->imported = 1;
    rc = map_all(v, h);
    /* A mapping keeps its memory: the handles are not needed past here. */
    release_handles(h, n);
    if (rc) {
        free(v);
        return rc;
    }
    count_live(1);
    *out = v;
    return 0;
}

cuc_vmm *cuc_vmm_ref(cuc_vmm *v)
{
    if (v) {
        pthread_mutex_lock(&lock);
        v->refs++;
        pthread_mutex_unlock(&lock);
    }
    return v;
}

/* ---- the table of imports, by (lease table, lease id) ---- */

struct lease_key {
    const struct cuc__leases *leases;
    uint64_t id;
};

static uint64_t lease_hash(const struct cuc__leases *l, uint64_t id)
{
    return cuc__hash_u64((uint64_t)(uintptr_t)l * 0x9e3779b97f4a7c15ull ^ id);
}

static int same_lease(const struct cuc__hnode *n, const void *key)
{
    const cuc_vmm *v = CUC_CONTAINER_OF(n, cuc_vmm, by_lease);
    const struct lease_key *k = key;

    return v->leases_from == k->leases && v->lease_id == k->id;
}

/* lock held. */
static cuc_vmm *imported_locked(const struct cuc__leases *l, uint64_t id)
{
    struct lease_key k = {l, id};
    struct cuc__hnode *n = cuc__htab_find(&imports, lease_hash(l, id), same_lease, &k);

    return n ? CUC_CONTAINER_OF(n, cuc_vmm, by_lease) : NULL;
}

cuc_vmm *cuc__vmm_imported(struct cuc__leases *l, uint64_t id)
{
    cuc_vmm *v;

    pthread_mutex_lock(&lock);
    v = imported_locked(l, id);
    if (v)
        v->refs++;
    pthread_mutex_unlock(&lock);
    return v;
}

cuc_vmm *cuc__vmm_publish(cuc_vmm *v, struct cuc__leases *l, uint64_t id, int *rc)
{
    cuc_vmm *had;

    *rc = 0;
    pthread_mutex_lock(&lock);
    had = imported_locked(l, id);
    if (had) {
        had->refs++;
    } else {
        v->by_lease.hash = lease_hash(l, id);
        *rc = cuc__htab_insert(&imports, &v->by_lease);
        if (!*rc) {
            cuc__leases_ref(l);
            v->leases_from = l;
            v->lease_id = id;
        }
    }
    pthread_mutex_unlock(&lock);
    return had;
}

/* ---- the table of adopted resources, by (base, size) ---- */

struct range_key {
    CUdeviceptr base;
    size_t size;
};

static uint64_t range_hash(CUdeviceptr base, size_t size)
{
    return cuc__hash_u64((uint64_t)base ^ cuc__hash_u64(size));
}

static int same_range(const struct cuc__hnode *n, const void *key)
{
    const cuc_vmm *v = CUC_CONTAINER_OF(n, cuc_vmm, by_range);
    const struct range_key *k = key;

    return v->base == k->base && v->size == k->size;
}

/* lock held: the live adopted resource of the range, with a new
 * reference and release added, or NULL. */
static cuc_vmm *adopted_ref_locked(CUdeviceptr base, size_t size, void (*release)(void *),
                                   void *arg, int *rc)
{
    struct range_key k = {base, size};
    struct cuc__hnode *n = cuc__htab_find(&adopted, range_hash(base, size), same_range, &k);
    cuc_vmm *v = n ? CUC_CONTAINER_OF(n, cuc_vmm, by_range) : NULL;

    *rc = 0;
    if (!v || v->refs == 0)
        return NULL;
    *rc = cuc__releases_add(&v->releases, release, arg);
    if (*rc)
        return NULL;
    v->refs++;
    return v;
}

cuc_vmm *cuc__vmm_adopted_find(CUdeviceptr base, size_t size, void (*release)(void *),
                               void *arg, int *rc)
{
    cuc_vmm *v;

    pthread_mutex_lock(&lock);
    v = adopted_ref_locked(base, size, release, arg, rc);
    pthread_mutex_unlock(&lock);
    return v;
}

cuc_vmm *cuc__vmm_adopted_publish(cuc_vmm *v, void (*release)(void *), void *arg, int *rc)
{
    cuc_vmm *had;

    pthread_mutex_lock(&lock);
    had = adopted_ref_locked(v->base, v->size, release, arg, rc);
    if (!had && !*rc)
        *rc = cuc__releases_add(&v->releases, release, arg);
    if (!had && !*rc) {
        v->by_range.hash = range_hash(v->base, v->size);
        *rc = cuc__htab_insert(&adopted, &v->by_range);
        if (!*rc)
            live++;
    }
    pthread_mutex_unlock(&lock);
    return had;
}

cuc_vmm *cuc__vmm_new_adopted(cuc_device *owner, size_t n)
{
    cuc_vmm *v = vmm_new(owner, NULL, 0, n, 1);

    if (v)
        v->adopted = 1;
    return v;
}

void cuc__vmm_adopted_discard(cuc_vmm *v)
{
    release_handles(v->handles, v->nchunks);
    cuc__releases_drop(v->releases); /* not run: the adopt failed */
    free(v);
}

/* Drops a reference (lock held); 1 if it was the last (the caller then
 * tears v down after unlocking). */
static int unref_locked(cuc_vmm *v)
{
    if (--v->refs)
        return 0;
    if (v->leases_from) {
        cuc__htab_remove(&imports, &v->by_lease);
        if (imports.count == 0)
            cuc__htab_free(&imports); /* nothing left for a leak checker */
    }
    if (v->adopted) {
        cuc__htab_remove(&adopted, &v->by_range);
        if (adopted.count == 0)
            cuc__htab_free(&adopted);
    }
    live--;
    return 1;
}

/* Frees without disturbing the caller's last error: this may run inside
 * another call (a lease ending in cuc_channel_recv). */
static void teardown(cuc_vmm *v)
{
    CUC__CTX_RESTORE(guard);
    struct cuc__err_saved saved;

    if (v->creator != cuc__pid()) { /* inherited through fork: inert */
        cuc__leases_unref(v->leases_from); /* no release: the parent's */
        cuc__releases_drop(v->releases);
        free(v);
        return;
    }
    cuc__err_save(&saved, 0);
    cuc__device_activate(&guard, v->owner);
    if (!v->adopted) { /* an adopted mapping is its owner's */
        CUC_DRV->cuMemUnmap(v->base, v->size);
        CUC_DRV->cuMemAddressFree(v->base, v->size);
    }
    if (v->handles)
        release_handles(v->handles, v->nchunks);
    if (v->leases_from) {
        /* after the unmap: the exporter may free once it reads this */
        cuc__leases_release(v->leases_from, &v->lease_id, 1);
        cuc__leases_unref(v->leases_from);
    }
    /* last: the owner may unmap and free its memory now */
    cuc__releases_run(v->releases);
    free(v);
    cuc__err_restore(&saved);
}

void cuc_vmm_unref(cuc_vmm *v)
{
    int last;

    if (!v)
        return;
    pthread_mutex_lock(&lock);
    last = unref_locked(v);
    pthread_mutex_unlock(&lock);
    if (last)
        teardown(v);
}

/* ---- the leases of an exporter's resource: each holds a reference, so
 * a free during the lease is deferred; each end wakes the lease waits ---- */

static void op_ref(void *obj)
{
    cuc_vmm_ref(obj);
}

static void op_unref(void *obj)
{
    cuc_vmm_unref(obj);
}

static void op_begin(void *obj)
{
    cuc_vmm *v = obj;

    pthread_mutex_lock(&lock);
    v->refs++;
    v->leases++;
    pthread_mutex_unlock(&lock);
}

static void op_end(void *obj, uint64_t id, int why)
{
    cuc_vmm *v = obj;
    int last;

    (void)id;
    (void)why;
    pthread_once(&cond_once, cond_init_once);
    pthread_mutex_lock(&lock);
    v->leases--;
    last = unref_locked(v);
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    if (last)
        teardown(v);
}

const struct cuc__lease_ops cuc__vmm_lease_ops = {op_begin, op_end, op_ref, op_unref, NULL, NULL, NULL};

int cuc_vmm_lease_count(const cuc_vmm *v, size_t *n)
{
    if (!v || !n)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_lease_count: NULL argument");
    pthread_mutex_lock(&lock);
    *n = v->leases;
    pthread_mutex_unlock(&lock);
    return 0;
}

static void vmm_describe(const void *obj, char *out, size_t len)
{
    const cuc_vmm *v = obj;

    snprintf(out, len, "the VMM resource (%zu bytes on %s)", v->size, v->owner->uuid_str);
}

struct cuc__lease_gauge *cuc__vmm_gauge(cuc_vmm *v, struct cuc__lease_gauge *g)
{
    pthread_once(&cond_once, cond_init_once);
    *g = (struct cuc__lease_gauge){&lock, &cond, &v->leases, vmm_describe, v};
    return g;
}

void *cuc_vmm_ptr(const cuc_vmm *v) { return (void *)(uintptr_t)v->base; }
size_t cuc_vmm_size(const cuc_vmm *v) { return v->size; }
cuc_device *cuc_vmm_device(const cuc_vmm *v) { return v->owner; }
size_t cuc_vmm_peer_count(const cuc_vmm *v) { return v->npeers; }
size_t cuc_vmm_chunk_count(const cuc_vmm *v) { return v->nchunks; }
int cuc_vmm_handle_type(const cuc_vmm *v) { (void)v; return CUC_VMM_HANDLE_POSIX_FD; }
int cuc_vmm_is_imported(const cuc_vmm *v) { return v->imported; }
int cuc_vmm_is_adopted(const cuc_vmm *v) { return v->adopted; }

cuc_device *cuc_vmm_peer(const cuc_vmm *v, size_t i)
{
    return i < v->npeers ? v->peers[i] : NULL;
}

size_t cuc_vmm_chunk_size(const cuc_vmm *v, size_t i)
{
    return i < v->nchunks ? v->sizes[i] : 0;
}

static unsigned weaker(unsigned a, unsigned b)
{
    if (a == CUC_VMM_ACCESS_NONE || b == CUC_VMM_ACCESS_NONE)
        return CUC_VMM_ACCESS_NONE;
    if (a == CUC_VMM_ACCESS_READ || b == CUC_VMM_ACCESS_READ)
        return CUC_VMM_ACCESS_READ;
    return CUC_VMM_ACCESS_READWRITE;
}

int cuc_vmm_access(const cuc_vmm *v, const cuc_device *dev, unsigned *flags)
{
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    unsigned acc = CUC_VMM_ACCESS_READWRITE;
    size_t i, off = 0;

    if (!v || !dev || !flags)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_access: NULL argument");
    loc.id = dev->cu;
    for (i = 0; i < v->nchunks; i++) {
        unsigned long long f = 0;
        CUresult r = CUC_DRV->cuMemGetAccess(&f, &loc, v->base + off);
        if (r != CUDA_SUCCESS)
            return cuc__cuda_err(r, "cuMemGetAccess", "device %d (%s), chunk %zu",
                                 dev->ordinal, dev->uuid_str, i);
        acc = weaker(acc, f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CUC_VMM_ACCESS_READWRITE
                          : f == CU_MEM_ACCESS_FLAGS_PROT_READ    ? CUC_VMM_ACCESS_READ
                                                                  : CUC_VMM_ACCESS_NONE);
        off += v->sizes[i];
    }
    *flags = acc;
    return 0;
}
