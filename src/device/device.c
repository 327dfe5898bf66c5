/* Device enumeration, the UUID table, singletons and the current device. */
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUC_MAX_DEVICES 64

static cuc_device devices[CUC_MAX_DEVICES];
static int n_devices;
static struct cuc__htab by_uuid; /* written once, by the enumeration */

static pthread_once_t enum_once = PTHREAD_ONCE_INIT;
static struct cuc__err_saved enum_failure;

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

/* A UUID's two halves, as words: its hash and its comparison (every
 * device record a process receives looks one up). */
static void uuid_words(const cuc_uuid *u, uint64_t w[2])
{
    memcpy(w, u->bytes, 16);
}

/* The UUID's own bits: the table holds only this process's devices (at
 * most CUC_MAX_DEVICES, found by lookups only), so a peer choosing UUIDs
 * that collide can slow nothing but its own failed lookup. */
static uint64_t uuid_hash(const cuc_uuid *u)
{
    uint64_t w[2];

    uuid_words(u, w);
    return cuc__hash_u64(w[0] ^ w[1]);
}

static int same_uuid(const struct cuc__hnode *n, const void *key)
{
    uint64_t a[2], b[2];

    uuid_words(&CUC_CONTAINER_OF(n, cuc_device, by_uuid)->uuid, a);
    uuid_words(key, b);
    return ((a[0] ^ b[0]) | (a[1] ^ b[1])) == 0;
}

/* Up to this many devices a scan of the table's UUIDs is quicker than a
 * hash and a bucket (the usual machine has 1 to 8). */
#define SCAN_MAX 8

/* The device of UUID u in a table of at most SCAN_MAX, or NULL. */
static inline const cuc_device *uuid_scan(const cuc_uuid *u)
{
    uint64_t w[2], d[2];

    uuid_words(u, w);
    for (int i = 0; i < n_devices; i++) {
        uuid_words(&devices[i].uuid, d);
        if (((w[0] ^ d[0]) | (w[1] ^ d[1])) == 0)
            return &devices[i];
    }
    return NULL;
}

static const cuc_device *uuid_table_find(const cuc_uuid *u)
{
    struct cuc__hnode *n;

    if (n_devices <= SCAN_MAX)
        return uuid_scan(u);
    n = cuc__htab_find(&by_uuid, uuid_hash(u), same_uuid, u);
    return n ? CUC_CONTAINER_OF(n, cuc_device, by_uuid) : NULL;
}

/* One attribute; the first failure is kept in *r (a failed read must not
 * pass for "not supported"), except CUDA_ERROR_INVALID_VALUE: an attribute
 * newer than the driver, which then has no such feature. */
static int attr(const struct cuc__driver *drv, CUdevice cu, CUdevice_attribute a,
                CUresult *r)
{
    int v = 0;
    CUresult got;

    if (*r != CUDA_SUCCESS)
        return 0;
    got = drv->cuDeviceGetAttribute(&v, a, cu);
    if (got == CUDA_ERROR_INVALID_VALUE)
        return 0;
    if (got != CUDA_SUCCESS) {
        *r = got;
        return 0;
    }
    return v;
}

static unsigned read_caps(const struct cuc__driver *drv, CUdevice cu, CUresult *r)
{
    unsigned caps = 0;
    int pool_types = attr(drv, cu, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, r);

    if (attr(drv, cu, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, r))
        caps |= CUC_DEVICE_CAP_MEMORY_POOLS;
    if (pool_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        caps |= CUC_DEVICE_CAP_POOL_POSIX_FD;
    if (attr(drv, cu, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, r))
        caps |= CUC_DEVICE_CAP_VMM;
    if (attr(drv, cu, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, r))
        caps |= CUC_DEVICE_CAP_VMM_POSIX_FD;
    if (attr(drv, cu, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, r))
        caps |= CUC_DEVICE_CAP_IPC_EVENTS;
    if (attr(drv, cu, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, r))
        caps |= CUC_DEVICE_CAP_FABRIC;
    if (attr(drv, cu, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, r))
        caps |= CUC_DEVICE_CAP_UNIFIED_ADDRESSING;
    return caps;
}

static int describe(const struct cuc__driver *drv, int ordinal, cuc_device *d)
{
    CUuuid u;
    CUresult r;
    unsigned dom, bus, dv;

    d->ordinal = ordinal;
    r = drv->cuDeviceGet(&d->cu, ordinal);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuDeviceGet", "ordinal %d", ordinal);
    r = drv->cuDeviceGetUuid(&u, d->cu);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuDeviceGetUuid", "ordinal %d", ordinal);
    memcpy(d->uuid.bytes, u.bytes, sizeof(d->uuid.bytes));
    cuc_uuid_format(&d->uuid, d->uuid_str);
    r = drv->cuDeviceGetName(d->name, (int)sizeof(d->name), d->cu);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuDeviceGetName", "ordinal %d", ordinal);
    r = drv->cuDeviceTotalMem(&d->total_mem, d->cu);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuDeviceTotalMem", "ordinal %d", ordinal);
    dom = (unsigned)attr(drv, d->cu, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &r);
    bus = (unsigned)attr(drv, d->cu, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &r);
    dv = (unsigned)attr(drv, d->cu, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &r);
    /* nvidia-smi's form: 8-digit domain, upper-case hex. */
    snprintf(d->pci_bus_id, sizeof(d->pci_bus_id), "%08X:%02X:%02X.0", dom, bus, dv);
    d->cc_major = attr(drv, d->cu, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &r);
    d->cc_minor = attr(drv, d->cu, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &r);
    d->caps = read_caps(drv, d->cu, &r);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuDeviceGetAttribute", "ordinal %d (%s)", ordinal,
                             d->uuid_str);
    return 0;
}

static int enumerate(void)
{
    const struct cuc__driver *drv;
    int count = 0, i, rc;
    CUresult r;

    rc = cuc__driver_get(&drv);
    if (rc)
        return rc;
    r = drv->cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuDeviceGetCount", NULL);
    if (count <= 0) {
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        return cuc__seterr(CUC_E_NO_DEVICE, "the driver reports no device "
                           "(CUDA_VISIBLE_DEVICES%s%s%s)", cvd ? "=\"" : " unset",
                           cvd ? cvd : "", cvd ? "\"" : "");
    }
    if (count > CUC_MAX_DEVICES)
        count = CUC_MAX_DEVICES;
    for (i = 0; i < count; i++) {
        rc = describe(drv, i, &devices[i]);
        if (rc)
            return rc;
    }
    for (i = 0; i < count; i++) {
        devices[i].by_uuid.hash = uuid_hash(&devices[i].uuid);
        rc = cuc__htab_insert(&by_uuid, &devices[i].by_uuid);
        if (rc)
            return rc;
    }
    n_devices = count;
    return 0;
}

/* Set (release) once the enumeration succeeded: the table never changes
 * after it (a process's visible devices are fixed at cuInit, and a forked
 * child sees its parent's), so a reader that sees it needs no lock. */
static int enum_done;

static void enumerate_once(void)
{
    int rc = enumerate();

    if (rc)
        cuc__err_save(&enum_failure, rc);
    else
        __atomic_store_n(&enum_done, 1, __ATOMIC_RELEASE);
}

static int ensure_devices(void)
{
    if (CUC_LIKELY(__atomic_load_n(&enum_done, __ATOMIC_ACQUIRE)))
        return 0;
    pthread_once(&enum_once, enumerate_once);
    if (CUC_UNLIKELY(enum_failure.status))
        return cuc__err_restore(&enum_failure);
    return 0;
}

int cuc_device_count(int *count)
{
    int rc;

    if (!count)
        return cuc__seterr(CUC_E_INVALID, "cuc_device_count: count is NULL");
    rc = ensure_devices();
    if (rc)
        return rc;
    *count = n_devices;
    return 0;
}

int cuc_device_get(int ordinal, cuc_device **dev)
{
    int rc;

    if (!dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_device_get: dev is NULL");
    rc = ensure_devices();
    if (rc)
        return rc;
    if (ordinal < 0 || ordinal >= n_devices) {
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        return cuc__seterr(CUC_E_INVALID,
                           "device ordinal %d is out of range: this process "
                           "sees %d device%s (ordinals 0..%d; "
                           "CUDA_VISIBLE_DEVICES%s%s%s)", ordinal, n_devices,
                           n_devices == 1 ? "" : "s", n_devices - 1,
                           cvd ? "=\"" : " unset", cvd ? cvd : "", cvd ? "\"" : "");
    }
    *dev = &devices[ordinal];
    return 0;
}

static void list_visible(void)
{
    int i;

    for (i = 0; i < n_devices; i++)
        cuc__adderr("%s%d=%s", i ? ", " : "", i, devices[i].uuid_str);
}

int cuc__device_not_visible(const cuc_uuid *uuid)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char text[CUC_UUID_STRLEN];
    int rc;

    cuc_uuid_format(uuid, text);
    rc = ensure_devices();
    if (rc) {
        char why[1024];
        snprintf(why, sizeof(why), "%s", cuc_errmsg());
        cuc__seterr(CUC_E_NOT_VISIBLE, "device %s is not visible in this "
                    "process: no device is visible (%s)", text, why);
        return CUC_E_NOT_VISIBLE;
    }
    cuc__seterr(CUC_E_NOT_VISIBLE, "device %s is not visible in this process; "
                "visible devices: ", text);
    list_visible();
    cuc__adderr(" (CUDA_VISIBLE_DEVICES%s%s%s); start the receiver with that "
                "GPU visible", cvd ? "=\"" : " unset", cvd ? cvd : "", cvd ? "\"" : "");
    return CUC_E_NOT_VISIBLE;
}

/* cuc_device_get_by_uuid for what the scan below does not answer: a NULL
 * argument, a table not built yet or larger than a scan, a UUID not
 * visible. */
static CUC_COLD int get_by_uuid_checked(const cuc_uuid *uuid, cuc_device **dev)
{
    const cuc_device *d;

    if (!uuid || !dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_device_get_by_uuid: NULL argument");
    if (ensure_devices())
        return cuc__device_not_visible(uuid);
    d = uuid_table_find(uuid);
    if (!d)
        return cuc__device_not_visible(uuid);
    *dev = (cuc_device *)d;
    return 0;
}

int cuc_device_get_by_uuid(const cuc_uuid *uuid, cuc_device **dev)
{
    /* Every device record received ends here: the built table of a usual
     * machine is scanned with no frame and no call. */
    if (CUC_LIKELY(uuid && dev && __atomic_load_n(&enum_done, __ATOMIC_ACQUIRE) &&
                   n_devices <= SCAN_MAX)) {
        const cuc_device *d = uuid_scan(uuid);

        if (CUC_LIKELY(d != NULL)) {
            *dev = (cuc_device *)d;
            return 0;
        }
    }
    return get_by_uuid_checked(uuid, dev);
}

static int retain_primary(cuc_device *d, CUcontext *ctx)
{
    CUcontext c;
    CUresult r;

    pthread_mutex_lock(&ctx_lock);
    c = __atomic_load_n(&d->ctx, __ATOMIC_ACQUIRE);
    if (!c) {
        r = CUC_DRV->cuDevicePrimaryCtxRetain(&c, d->cu);
        if (r != CUDA_SUCCESS) {
            pthread_mutex_unlock(&ctx_lock);
            return cuc__cuda_err(r, "cuDevicePrimaryCtxRetain", "device %d (%s)",
                                 d->ordinal, d->uuid_str);
        }
        __atomic_store_n(&d->ctx, c, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ctx_lock);
    *ctx = c;
    return 0;
}

/* The only switch of context that outlives the call: the caller asked. */
static int make_current(const cuc_device *d, CUcontext ctx)
{
    CUresult r = CUC_DRV->cuCtxSetCurrent(ctx);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuCtxSetCurrent", "device %d (%s)", d->ordinal,
                             d->uuid_str);
    return 0;
}

static int primary_of(cuc_device *d, CUcontext *ctx)
{
    CUcontext c = __atomic_load_n(&d->ctx, __ATOMIC_ACQUIRE);

    if (c) {
        *ctx = c;
        return 0;
    }
    return retain_primary(d, ctx);
}

int cuc__device_activate(struct cuc__ctx_guard *g, const cuc_device *cd)
{
    cuc_device *d = (cuc_device *)cd;
    CUcontext ctx, cur = NULL;
    int rc;

    if (g->dev == d)
        return 0;
    rc = primary_of(d, &ctx);
    if (rc)
        return rc;
    /* Ask the driver at a guard's first activation: the application may
     * have made another context current behind our back. When it cannot
     * say, d's context is made current all the same (a teardown still
     * frees) and stays: nothing is known to put back. */
    if (CUC_DRV->cuCtxGetCurrent(&cur) != CUDA_SUCCESS) {
        rc = make_current(d, ctx);
    } else if (cur != ctx) {
        rc = make_current(d, ctx);
        if (rc == 0 && !g->switched) {
            g->saved = cur;
            g->switched = 1;
        }
    }
    if (rc)
        return rc;
    g->dev = d;
    return 0;
}

void cuc__ctx_guard_end(struct cuc__ctx_guard *g)
{
    /* Nothing to report to: the call's own result is what it returns, and
     * a context that can no longer be made current has been destroyed. */
    if (g->switched)
        (void)CUC_DRV->cuCtxSetCurrent(g->saved);
}

int cuc_device_set_current(cuc_device *dev)
{
    CUcontext ctx;
    int rc;

    if (!dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_device_set_current: dev is NULL");
    rc = primary_of(dev, &ctx);
    return rc ? rc : make_current(dev, ctx);
}

/* The calling thread's current context (NULL: none), the driver loaded
 * first; a failed query is an error naming it. */
static int current_context(CUcontext *cur)
{
    CUcontext c = NULL;
    CUresult r;
    int rc = ensure_devices();

    if (rc)
        return rc;
    r = CUC_DRV->cuCtxGetCurrent(&c);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuCtxGetCurrent", "the thread's current context");
    *cur = c;
    return 0;
}

int cuc_device_context_save(void **saved)
{
    CUcontext cur = NULL;
    int rc;

    if (!saved)
        return cuc__seterr(CUC_E_INVALID, "cuc_device_context_save: saved is NULL");
    rc = current_context(&cur);
    if (!rc)
        *saved = cur;
    return rc;
}

int cuc_device_context_restore(void *saved)
{
    CUresult r;
    int rc = ensure_devices();

    if (rc)
        return rc;
    r = CUC_DRV->cuCtxSetCurrent((CUcontext)saved);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuCtxSetCurrent", "the saved context %p (destroyed "
                             "since it was saved?)", saved);
    return 0;
}

/* The device of the current context cur when cur is its primary context
 * but cucore has not retained it (PyTorch's runtime made it current, say):
 * retained now, as cucore keeps every primary context it uses, but only
 * when the driver says it is active already; a context of the
 * application's own (cuCtxCreate) must not bring a primary one into being
 * on its GPU. *found: the device, or NULL for the application's own. */
static int primary_found(CUcontext cur, cuc_device **found)
{
    unsigned flags;
    int active = 0, rc;
    CUcontext ctx;
    CUdevice cu;
    CUresult r = CUC_DRV->cuCtxGetDevice(&cu);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuCtxGetDevice", "the current context's device");
    for (int i = 0; i < n_devices; i++) {
        if (devices[i].cu != cu)
            continue;
        r = CUC_DRV->cuDevicePrimaryCtxGetState(cu, &flags, &active);
        if (r != CUDA_SUCCESS)
            return cuc__cuda_err(r, "cuDevicePrimaryCtxGetState", "device %d (%s)",
                                 devices[i].ordinal, devices[i].uuid_str);
        rc = active ? retain_primary(&devices[i], &ctx) : 0;
        if (rc)
            return rc;
        *found = active && ctx == cur ? &devices[i] : NULL;
        return 0;
    }
    *found = NULL;
    return 0;
}

int cuc_device_current(cuc_device **dev)
{
    cuc_device *found = NULL;
    CUcontext cur = NULL;
    int i, rc;

    if (!dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_device_current: dev is NULL");
    rc = current_context(&cur);
    if (rc)
        return rc;
    if (!cur)
        return cuc__seterr(CUC_E_NOT_FOUND, "no context is current on this thread");
    for (i = 0; i < n_devices && !found; i++)
        if (__atomic_load_n(&devices[i].ctx, __ATOMIC_ACQUIRE) == cur)
            found = &devices[i];
    if (!found && (rc = primary_found(cur, &found)) != 0)
        return rc;
    if (!found)
        return cuc__seterr(CUC_E_NOT_FOUND, "the current context is not a device's "
                           "primary context (the application's own)");
    *dev = found;
    return 0;
}

int cuc__device_implicit(cuc_device **out)
{
    int rc = cuc_device_current(out);

    /* only "nothing current" falls back: a failed query is not that */
    if (rc != CUC_E_NOT_FOUND)
        return rc;
    return cuc_device_get(0, out);
}

int cuc_device_ordinal(const cuc_device *dev) { return dev->ordinal; }
const cuc_uuid *cuc_device_uuid(const cuc_device *dev) { return &dev->uuid; }
const char *cuc_device_uuid_string(const cuc_device *dev) { return dev->uuid_str; }
const char *cuc_device_name(const cuc_device *dev) { return dev->name; }
const char *cuc_device_pci_bus_id(const cuc_device *dev) { return dev->pci_bus_id; }
size_t cuc_device_total_memory(const cuc_device *dev) { return dev->total_mem; }
unsigned cuc_device_caps(const cuc_device *dev) { return dev->caps; }

void cuc_device_compute_capability(const cuc_device *dev, int *major, int *minor)
{
    if (major)
        *major = dev->cc_major;
    if (minor)
        *minor = dev->cc_minor;
}
