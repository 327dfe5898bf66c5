/* Memory pools: creation (and the one export of an IPC pool), the object
 * around an imported pool, references, getters. */
#include "memory_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

void cuc__pool_id_hex(const uint8_t id[CUC_POOL_ID_LEN], char out[2 * CUC_POOL_ID_LEN + 1])
{
    cuc__hex(id, CUC_POOL_ID_LEN, out);
}

const char *cuc__pool_kind_name(int kind)
{
    return kind == CUC_POOL_DEVICE ? "device" : kind == CUC_POOL_PINNED_HOST ? "pinned host" : "?";
}

static int random_id(uint8_t id[CUC_POOL_ID_LEN])
{
    size_t got = 0;

    while (got < CUC_POOL_ID_LEN) {
        ssize_t n = getrandom(id + got, CUC_POOL_ID_LEN - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cuc__errno_err(errno, "getrandom for a pool id");
        got += (size_t)n;
    }
    return 0;
}

static cuc_pool *pool_new(cuc_device *dev, int kind, unsigned flags)
{
    cuc_pool *p = calloc(1, sizeof(*p));
    pthread_condattr_t ca;

    if (!p)
        return NULL;
    p->refs = 1;
    p->dev = dev;
    p->kind = kind;
    p->flags = flags;
    p->fd = -1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cond, &ca);
    pthread_condattr_destroy(&ca);
    return p;
}

static void pool_free(cuc_pool *p)
{
    if (p->fd >= 0)
        close(p->fd);
    cuc__htab_free(&p->bufs);
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
    CUresult r = CUC_DRV->cuMemPoolExportToShareableHandle(
        &p->fd, p->cu, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);

    if (r != CUDA_SUCCESS) {
        p->fd = -1;
        return cuc__cuda_err(r, "cuMemPoolExportToShareableHandle", "IPC %s pool of "
                             "device %d (%s)", cuc__pool_kind_name(p->kind),
                             cuc_device_ordinal(p->dev), cuc_device_uuid_string(p->dev));
    }
    /* The H200's driver hands the fd out without FD_CLOEXEC (probe:
     * "poolexport-cloexec 0"): every child this process execs would
     * inherit the pool otherwise. */
    if (fcntl(p->fd, F_SETFD, FD_CLOEXEC) < 0) {
        int err = errno;
        close(p->fd);
        p->fd = -1;
        return cuc__errno_err(err, "F_SETFD on the exported fd of an IPC pool of %s",
                              cuc_device_uuid_string(p->dev));
    }
    return 0;
}

int cuc_pool_create(cuc_device *dev, const struct cuc_pool_props *props, cuc_pool **out)
{
    CUmemPoolProps dp;
    cuc_pool *p;
    CUresult r;
    int rc;

    if (!dev || !props || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_create: NULL argument");
    rc = check_props(dev, props);
    if (!rc)
        rc = cuc__device_activate(dev);
    if (rc)
        return rc;
    p = pool_new(dev, props->kind, props->flags);
    if (!p)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a pool");
    rc = random_id(p->id);
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
        rc = export_fd(p);
        if (!rc)
            rc = cuc__pool_registry_add(p);
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

int cuc__pool_wrap_import(cuc_device *dev, CUmemoryPool cu, int kind, int fd,
                          const uint8_t id[CUC_POOL_ID_LEN], cuc_pool **out)
{
    cuc_pool *p = pool_new(dev, kind, CUC_POOL_IPC);
    int rc;

    if (!p) {
        close(fd);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an imported pool");
    }
    p->cu = cu;
    p->imported = 1;
    p->fd = fd;
    memcpy(p->id, id, CUC_POOL_ID_LEN);
    rc = kind == CUC_POOL_PINNED_HOST ? grant_device(dev, cu, "an imported") : 0;
    if (!rc)
        rc = cuc__pool_registry_add(p);
    if (rc) {
        pool_free(p); /* closes fd; the caller destroys cu */
        return rc;
    }
    *out = p;
    return 0;
}

cuc_pool *cuc_pool_ref(cuc_pool *p)
{
    if (p)
        __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

void cuc_pool_unref(cuc_pool *p)
{
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (p->flags & CUC_POOL_IPC)
        cuc__pool_registry_remove(p);
    /* Buffers hold references, so none is left; the driver keeps an
     * exported pool's memory while other processes still map it. */
    if (cuc__device_activate(p->dev) == 0)
        CUC_DRV->cuMemPoolDestroy(p->cu);
    pool_free(p);
}

void cuc_pool_id(const cuc_pool *p, uint8_t id[CUC_POOL_ID_LEN])
{
    memcpy(id, p->id, CUC_POOL_ID_LEN);
}

cuc_device *cuc_pool_device(const cuc_pool *p) { return p->dev; }
int cuc_pool_kind(const cuc_pool *p) { return p->kind; }
int cuc_pool_is_ipc(const cuc_pool *p) { return (p->flags & CUC_POOL_IPC) != 0; }
int cuc_pool_is_imported(const cuc_pool *p) { return p->imported; }
void *cuc_pool_handle(const cuc_pool *p) { return p->cu; }

int cuc_pool_find(const uint8_t id[CUC_POOL_ID_LEN], cuc_pool **out)
{
    char hex[2 * CUC_POOL_ID_LEN + 1];
    cuc_pool *p;

    if (!id || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_find: NULL argument");
    p = cuc__pool_registry_find(id);
    if (!p) {
        cuc__pool_id_hex(id, hex);
        return cuc__seterr(CUC_E_POOL_NOT_IMPORTED, "no pool with id %s in this "
                           "process: import it first (cuc_msg_get_pool on its record)",
                           hex);
    }
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

int cuc_pool_lease_wait(cuc_pool *p, cuc_channel *ch, size_t max_left, int timeout_ms)
{
    char hex[2 * CUC_POOL_ID_LEN + 1], what[96];

    if (!p || timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_lease_wait: %s",
                           p ? "timeout below -1" : "pool is NULL");
    cuc__pool_id_hex(p->id, hex);
    snprintf(what, sizeof(what), "the buffers of pool %s", hex);
    return cuc__lease_wait(p, &p->leases, ch, max_left, timeout_ms, what);
}
