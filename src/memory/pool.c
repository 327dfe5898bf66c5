/* Memory pools: creation (and the one export of an IPC pool), the object
 * around an imported pool, references, the table of IPC pools by id,
 * getters. */
#include "memory/pool.h"
#include "memory/settle.h"
#include "os/clock.h"
#include "os/fd.h"
#include "os/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The IPC pools of this process (created, imported or adopted here), by
 * id and by driver handle. A pool whose count has reached zero is on its
 * way out: it is skipped, never revived. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t cuc__pool_import_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuc__htab table;
static struct cuc__htab by_handle;

const char *cuc__pool_kind_name(int kind)
{
    return kind == CUC_POOL_DEVICE ? "device" : kind == CUC_POOL_PINNED_HOST ? "pinned host" : "?";
}

static uint64_t id_hash(const uint8_t id[CUC_POOL_ID_LEN])
{
    return cuc__hash_bytes(id, CUC_POOL_ID_LEN);
}

static cuc_pool *of_node(const struct cuc__hnode *n)
{
    return CUC_CONTAINER_OF(n, cuc_pool, by_id);
}

/* A reference to p, unless it is on its way out: 1 if taken. */
static int ref_if_alive(cuc_pool *p)
{
    int refs = __atomic_load_n(&p->refs, __ATOMIC_RELAXED);

    while (refs > 0)
        if (__atomic_compare_exchange_n(&p->refs, &refs, refs + 1, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return 1;
    return 0;
}

/* Takes a reference when the pool matches and is still alive. */
static int match_and_ref(const struct cuc__hnode *n, const void *key)
{
    cuc_pool *p = of_node(n);

    return memcmp(p->id, key, CUC_POOL_ID_LEN) == 0 && ref_if_alive(p);
}

static int handle_match_and_ref(const struct cuc__hnode *n, const void *key)
{
    cuc_pool *p = CUC_CONTAINER_OF(n, cuc_pool, by_cu);

    return p->cu == *(const CUmemoryPool *)key && ref_if_alive(p);
}

static uint64_t handle_hash(CUmemoryPool cu)
{
    return cuc__hash_u64((uint64_t)(uintptr_t)cu);
}

/* table_lock held. */
static cuc_pool *find_handle_locked(CUmemoryPool cu)
{
    struct cuc__hnode *n = cuc__htab_find(&by_handle, handle_hash(cu),
                                          handle_match_and_ref, &cu);

    return n ? CUC_CONTAINER_OF(n, cuc_pool, by_cu) : NULL;
}

cuc_pool *cuc__pool_find_handle(CUmemoryPool cu)
{
    cuc_pool *p;

    pthread_mutex_lock(&table_lock);
    p = find_handle_locked(cu);
    pthread_mutex_unlock(&table_lock);
    return p;
}

/* table_lock held. */
static cuc_pool *find_locked(const uint8_t id[CUC_POOL_ID_LEN])
{
    struct cuc__hnode *n = cuc__htab_find(&table, id_hash(id), match_and_ref, id);

    return n ? of_node(n) : NULL;
}

cuc_pool *cuc__pool_find(const uint8_t id[CUC_POOL_ID_LEN])
{
    cuc_pool *p;

    pthread_mutex_lock(&table_lock);
    p = find_locked(id);
    pthread_mutex_unlock(&table_lock);
    return p;
}

/* Registers p (not yet shared with other threads), unless a live pool has
 * its id or its driver handle: then that one is returned with a new
 * reference. */
static int table_add(cuc_pool *p, cuc_pool **had)
{
    int rc = 0;

    p->by_id.hash = id_hash(p->id);
    p->by_cu.hash = handle_hash(p->cu);
    pthread_mutex_lock(&table_lock);
    *had = find_locked(p->id);
    if (!*had)
        *had = find_handle_locked(p->cu);
    if (!*had)
        rc = cuc__htab_insert(&table, &p->by_id);
    if (!*had && !rc) {
        rc = cuc__htab_insert(&by_handle, &p->by_cu);
        if (rc)
            cuc__htab_remove(&table, &p->by_id);
    }
    pthread_mutex_unlock(&table_lock);
    return rc;
}

static void table_remove(cuc_pool *p)
{
    pthread_mutex_lock(&table_lock);
    cuc__htab_remove(&table, &p->by_id);
    cuc__htab_remove(&by_handle, &p->by_cu);
    if (table.count == 0) { /* nothing left for a leak checker to see */
        cuc__htab_free(&table);
        cuc__htab_free(&by_handle);
    }
    pthread_mutex_unlock(&table_lock);
}

static cuc_pool *pool_new(cuc_device *dev, int kind, unsigned flags)
{
    cuc_pool *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->refs = 1;
    p->dev = dev;
    p->kind = kind;
    p->flags = flags;
    p->fd = -1;
    p->creator = cuc__pid();
    pthread_mutex_init(&p->lock, NULL);
    cuc__cond_init(&p->cond);
    return p;
}

static void pool_free(cuc_pool *p)
{
    if (p->fd >= 0)
        close(p->fd);
    cuc__htab_free(&p->bufs);
    cuc__htab_free(&p->imports);
    cuc__htab_free(&p->views);
    cuc__htab_free(&p->bases);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

static int check_props(const cuc_device *dev, const struct cuc_pool_props *pr)
{
    unsigned caps = cuc_device_caps(dev);

    if (pr->kind != CUC_POOL_DEVICE && pr->kind != CUC_POOL_PINNED_HOST)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_create: kind %d: use "
                           "CUC_POOL_DEVICE (%d) or CUC_POOL_PINNED_HOST (%d)",
                           pr->kind, CUC_POOL_DEVICE, CUC_POOL_PINNED_HOST);
    if (pr->flags & ~CUC_POOL_IPC)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_create: unknown flags 0x%x "
                           "(only CUC_POOL_IPC is defined)", pr->flags & ~CUC_POOL_IPC);
    if (!(caps & CUC_DEVICE_CAP_MEMORY_POOLS))
        return cuc__seterr(CUC_E_NOT_SUPPORTED, "device %d (%s) has no memory "
                           "pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0)",
                           cuc_device_ordinal(dev), cuc_device_uuid_string(dev));
    if ((pr->flags & CUC_POOL_IPC) && !(caps & CUC_DEVICE_CAP_POOL_POSIX_FD))
        return cuc__seterr(CUC_E_NOT_SUPPORTED, "device %d (%s) cannot export pools "
                           "as POSIX fds (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES "
                           "lacks it): create the pool without CUC_POOL_IPC",
                           cuc_device_ordinal(dev), cuc_device_uuid_string(dev));
    return 0;
}

static void driver_props(const cuc_device *dev, const struct cuc_pool_props *pr,
                         CUmemPoolProps *dp)
{
    memset(dp, 0, sizeof(*dp));
    dp->allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    dp->handleTypes = (pr->flags & CUC_POOL_IPC) ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                                 : CU_MEM_HANDLE_TYPE_NONE;
    dp->maxSize = pr->max_size;
    if (pr->kind == CUC_POOL_DEVICE) {
        dp->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        dp->location.id = dev->cu;
    } else if (pr->flags & CUC_POOL_IPC) {
        /* The driver exports no pool of the plain host location. */
        dp->location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        dp->location.id = 0;
    } else {
        dp->location.type = CU_MEM_LOCATION_TYPE_HOST;
        dp->location.id = -1; /* ignored by the driver */
    }
}

/* A host pool is accessible from the CPU only until devices are granted
 * access (cuMemPoolCreate's documentation). */
static int grant_device(cuc_device *dev, CUmemoryPool cu, const char *what)
{
    CUmemAccessDesc d;
    CUresult r;

    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev->cu;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = CUC_DRV->cuMemPoolSetAccess(cu, &d, 1);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemPoolSetAccess", "read-write access for device "
                             "%d (%s) to %s pinned host pool", cuc_device_ordinal(dev),
                             cuc_device_uuid_string(dev), what);
    return 0;
}

static int export_fd(cuc_pool *p)
{
    char what[96];
    int rc;
    CUresult r = CUC_DRV->cuMemPoolExportToShareableHandle(
        &p->fd, p->cu, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);

    if (r != CUDA_SUCCESS) {
        p->fd = -1;
        return cuc__cuda_err(r, "cuMemPoolExportToShareableHandle", "IPC %s pool of "
                             "device %d (%s)", cuc__pool_kind_name(p->kind),
                             cuc_device_ordinal(p->dev), cuc_device_uuid_string(p->dev));
    }
    /* exported pool fds are not close-on-exec (sim/FACTS.md F23): every
     * child this process execs would inherit the pool otherwise */
    snprintf(what, sizeof(what), "the exported fd of an IPC pool of %s", p->dev->uuid_str);
    rc = cuc__set_cloexec_or_close(p->fd, what);
    if (rc)
        p->fd = -1;
    return rc;
}

int cuc_pool_create(cuc_device *dev, const struct cuc_pool_props *props, cuc_pool **out)
{
    CUC__CTX_KEEP(guard);
    CUmemPoolProps dp;
    cuc_pool *p;
    CUresult r;
    int rc;

    if (!dev || !props || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_create: NULL argument");
    rc = check_props(dev, props);
    if (!rc)
        rc = cuc__device_activate(&guard, dev);
    if (rc)
        return rc;
    p = pool_new(dev, props->kind, props->flags);
    if (!p)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a pool");
    rc = cuc__random_bytes(p->id, CUC_POOL_ID_LEN, "a pool id");
    if (rc)
        goto free_pool;
    driver_props(dev, props, &dp);
    r = CUC_DRV->cuMemPoolCreate(&p->cu, &dp);
    if (r != CUDA_SUCCESS) {
        rc = cuc__cuda_err(r, "cuMemPoolCreate", "%s%s pool for device %d (%s), "
                           "max size %zu", props->flags & CUC_POOL_IPC ? "IPC " : "",
                           cuc__pool_kind_name(props->kind), cuc_device_ordinal(dev),
                           cuc_device_uuid_string(dev), props->max_size);
        goto free_pool;
    }
    if (props->kind == CUC_POOL_PINNED_HOST) {
        rc = grant_device(dev, p->cu, "its");
        if (rc)
            goto destroy_driver_pool;
    }
    if (props->flags & CUC_POOL_IPC) {
        cuc_pool *had = NULL;
        rc = export_fd(p);
        if (!rc)
            rc = table_add(p, &had);
        if (had) /* 128 random bits: not expected */
            rc = cuc__seterr(CUC_E_BUSY, "pool id %s is in use already",
                             cuc__pool_id_hex(p->id).s);
        cuc_pool_unref(had);
        if (rc)
            goto destroy_driver_pool;
    }
    *out = p;
    return 0;
destroy_driver_pool:
    CUC_DRV->cuMemPoolDestroy(p->cu);
free_pool:
    pool_free(p);
    return rc;
}

/* export_fd's refusal of a pool that is not IPC-capable, said so. */
static int not_ipc_capable(cuc_pool *p)
{
    int cuda = cuc_errcuda();
    char why[256];

    snprintf(why, sizeof(why), "%s", cuc_errmsg());
    cuc__seterr(CUC_E_INVALID, "cuc_pool_adopt: pool %p of device %d (%s) is not "
                "IPC-capable (%s): the driver exports a pool only when it was created "
                "with handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (cuda.core: "
                "DeviceMemoryResourceOptions(ipc_enabled=True); cucore: CUC_POOL_IPC)",
                (void *)p->cu, p->dev->ordinal, p->dev->uuid_str, why);
    cuc__set_errcuda(cuda);
    return CUC_E_INVALID;
}

/* A new adopted pool over cu, exported, not yet in the table. */
static int adopt_new(cuc_device *dev, CUmemoryPool cu, int kind, cuc_pool **out)
{
    cuc_pool *p = pool_new(dev, kind, CUC_POOL_IPC);
    int rc;

    if (!p)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an adopted pool");
    p->cu = cu;
    p->adopted = 1;
    rc = cuc__random_bytes(p->id, CUC_POOL_ID_LEN, "a pool id");
    if (!rc) {
        rc = export_fd(p);
        if (rc == CUC_E_DRIVER && cuc_errcuda() == CUDA_ERROR_INVALID_VALUE)
            rc = not_ipc_capable(p);
    }
    if (rc) {
        pool_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int cuc_pool_adopt(cuc_device *dev, void *handle, int kind, cuc_pool **out)
{
    CUC__CTX_KEEP(guard);
    cuc_pool *p, *had = NULL;
    int rc;

    if (!dev || !handle || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_adopt: NULL argument");
    if (kind != CUC_POOL_DEVICE && kind != CUC_POOL_PINNED_HOST)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_adopt: kind %d: use "
                           "CUC_POOL_DEVICE (%d) or CUC_POOL_PINNED_HOST (%d)", kind,
                           CUC_POOL_DEVICE, CUC_POOL_PINNED_HOST);
    p = cuc__pool_find_handle((CUmemoryPool)handle);
    if (p) {
        *out = p;
        return 0;
    }
    rc = cuc__device_activate(&guard, dev);
    if (!rc)
        rc = adopt_new(dev, (CUmemoryPool)handle, kind, &p);
    if (!rc)
        rc = table_add(p, &had);
    if (rc || had) {
        if (p)
            pool_free(p); /* closes its fd; the driver's pool is the creator's */
        if (rc)
            return rc;
        p = had; /* another thread adopted it meanwhile */
    }
    *out = p;
    return 0;
}

int cuc__pool_wrap_import(cuc_device *dev, CUmemoryPool cu, int kind, int fd,
                          const uint8_t id[CUC_POOL_ID_LEN], cuc_pool **out)
{
    cuc_pool *p = pool_new(dev, kind, CUC_POOL_IPC), *had = NULL;
    int rc;

    if (!p) {
        CUC_DRV->cuMemPoolDestroy(cu);
        close(fd);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an imported pool");
    }
    p->cu = cu;
    p->imported = 1;
    p->fd = fd;
    memcpy(p->id, id, CUC_POOL_ID_LEN);
    rc = kind == CUC_POOL_PINNED_HOST ? grant_device(dev, cu, "an imported") : 0;
    if (!rc)
        rc = table_add(p, &had);
    if (rc || had) {
        CUC_DRV->cuMemPoolDestroy(cu); /* this import's count (F47) */
        pool_free(p); /* closes fd */
        if (rc)
            return rc;
        p = had;
    }
    *out = p;
    return 0;
}

/* One a device ordinal; the table's reference keeps each for the
 * process (it has no driver object to free). */
#define LEGACY_MAX_DEVICES 64
static pthread_mutex_t legacy_lock = PTHREAD_MUTEX_INITIALIZER;
static cuc_pool *legacy_pools[LEGACY_MAX_DEVICES];

int cuc__pool_legacy(cuc_device *dev, cuc_pool **out)
{
    int ord = cuc_device_ordinal(dev);
    cuc_pool *p;

    if (ord < 0 || ord >= LEGACY_MAX_DEVICES)
        return cuc__seterr(CUC_E_LIMIT, "device %d (%s): legacy IPC sharing supports "
                           "devices 0..%d", ord, cuc_device_uuid_string(dev),
                           LEGACY_MAX_DEVICES - 1);
    pthread_mutex_lock(&legacy_lock);
    p = legacy_pools[ord];
    if (!p && (p = pool_new(dev, CUC_POOL_DEVICE, 0)) != NULL) {
        p->legacy = 1;
        legacy_pools[ord] = p;
    }
    if (p)
        cuc_pool_ref(p);
    pthread_mutex_unlock(&legacy_lock);
    if (!p)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for device %d's legacy IPC pool",
                           ord);
    *out = p;
    return 0;
}

cuc_pool *cuc_pool_ref(cuc_pool *p)
{
    if (p)
        __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

/* Drops a reference unless it is the last one: 1 if dropped. */
static int unref_unless_last(cuc_pool *p)
{
    int refs = __atomic_load_n(&p->refs, __ATOMIC_RELAXED);

    while (refs > 1)
        if (__atomic_compare_exchange_n(&p->refs, &refs, refs - 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return 1;
    return 0;
}

void cuc_pool_unref(cuc_pool *p)
{
    CUC__CTX_RESTORE(guard);
    int locked = 0;

    if (!p)
        return;
    /* An import's end and its destroy under the import lock: an import of
     * that pool between the two would be a second one, which crashed the
     * driver or kept an fd of it for good (sim/FACTS.md F47). */
    if (p->imported && p->creator == cuc__pid()) {
        if (unref_unless_last(p))
            return;
        pthread_mutex_lock(&cuc__pool_import_lock);
        locked = 1;
    }
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        if (p->flags & CUC_POOL_IPC)
            table_remove(p);
        /* Buffers hold references, so none is left; the driver keeps an
         * exported pool's memory while other processes still map it.
         * Inherited through fork: the driver's pool is the parent's; an
         * adopted one its creator's. */
        if (p->creator == cuc__pid() && !p->adopted && cuc__device_activate(&guard, p->dev) == 0) {
            if (p->imported) /* its frees synchronized, else its fd stays (settle.h) */
                (void)cuc__settle_wait(p->dev);
            CUC_DRV->cuMemPoolDestroy(p->cu);
        }
        if (locked)
            pthread_mutex_unlock(&cuc__pool_import_lock);
        pool_free(p);
    } else if (locked) {
        pthread_mutex_unlock(&cuc__pool_import_lock);
    }
}

void cuc_pool_id(const cuc_pool *p, uint8_t id[CUC_POOL_ID_LEN])
{
    memcpy(id, p->id, CUC_POOL_ID_LEN);
}

cuc_device *cuc_pool_device(const cuc_pool *p) { return p->dev; }
int cuc_pool_kind(const cuc_pool *p) { return p->kind; }
int cuc_pool_is_ipc(const cuc_pool *p) { return (p->flags & CUC_POOL_IPC) != 0; }
int cuc_pool_is_imported(const cuc_pool *p) { return p->imported; }
int cuc_pool_is_adopted(const cuc_pool *p) { return p->adopted; }
void *cuc_pool_handle(const cuc_pool *p) { return p->cu; }

int cuc_pool_get_by_id(const uint8_t id[CUC_POOL_ID_LEN], cuc_pool **out)
{
    cuc_pool *p;

    if (!id || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_get_by_id: NULL argument");
    p = cuc__pool_find(id);
    if (!p)
        return cuc__seterr(CUC_E_POOL_NOT_IMPORTED, "no pool with id %s in this "
                           "process: import it first (cuc_msg_get_pool on its record)",
                           cuc__pool_id_hex(id).s);
    *out = p;
    return 0;
}

int cuc_pool_lease_count(const cuc_pool *cp, size_t *n)
{
    cuc_pool *p = (cuc_pool *)cp;

    if (!p || !n)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_lease_count: NULL argument");
    pthread_mutex_lock(&p->lock);
    *n = p->leases;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int cuc__pool_take_lost(cuc_pool *p)
{
    size_t n, bytes;
    int rc = 0;

    pthread_mutex_lock(&p->lock);
    n = p->lost;
    bytes = p->lost_bytes;
    if (n)
        rc = cuc__seterr(CUC_E_DRIVER, "%zu deferred free%s of pool %s failed where no "
                         "caller could be told (%zu bytes stay allocated, leaked); "
                         "the first: %s", n, n == 1 ? "" : "s",
                         cuc__pool_id_hex(p->id).s, bytes, p->lost_msg);
    p->lost = p->lost_bytes = 0;
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static void pool_describe(const void *obj, char *out, size_t len)
{
    const cuc_pool *p = obj;

    snprintf(out, len, "the buffers of pool %s", cuc__pool_id_hex(p->id).s);
}

struct cuc__lease_gauge *cuc__pool_gauge(cuc_pool *p, struct cuc__lease_gauge *g)
{
    *g = (struct cuc__lease_gauge){&p->lock, &p->cond, &p->leases, pool_describe, p};
    return g;
}

void cuc_pool_props_init(struct cuc_pool_props *props)
{
    if (!props)
        return;
    memset(props, 0, sizeof(*props));
    props->kind = CUC_POOL_DEVICE;
}
