/* Streams: created streams, the per-device default-stream singletons and
 * the process's default-stream mode. */
#include "exec/stream.h"
#include "os/proc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Two singletons per device: [2 * ordinal] legacy, [2 * ordinal + 1]
 * per-thread. Allocated once, never freed (like the devices). */
static struct cuc_stream *defaults;
static int n_devices;
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;
static struct cuc__err_saved defaults_failure;

static int mode_set; /* atomic: enum cuc_stream_mode, 0 = not set */

static void defaults_init(void)
{
    int n = 0, i, rc;

    rc = cuc_device_count(&n);
    if (!rc) {
        defaults = calloc((size_t)n * 2, sizeof(*defaults));
        if (!defaults)
            rc = cuc__seterr(CUC_E_NOMEM, "out of memory for the default streams "
                             "of %d devices", n);
    }
    for (i = 0; !rc && i < n; i++) {
        cuc_device *d;
        rc = cuc_device_get(i, &d);
        if (rc)
            break;
        defaults[2 * i] =
            (struct cuc_stream){d, CU_STREAM_LEGACY, CUC_STREAM_LEGACY_DEFAULT, 0, 0};
        defaults[2 * i + 1] =
            (struct cuc_stream){d, CU_STREAM_PER_THREAD, CUC_STREAM_PER_THREAD_DEFAULT, 0, 0};
    }
    if (rc) {
        cuc__err_save(&defaults_failure, rc);
        return;
    }
    n_devices = n;
}

static int default_stream(cuc_device *dev, int per_thread, cuc_stream **out)
{
    int ord;

    if (!dev || !out)
        return cuc__seterr(CUC_E_INVALID, "default stream: NULL argument");
    pthread_once(&defaults_once, defaults_init);
    if (defaults_failure.status)
        return cuc__err_restore(&defaults_failure);
    ord = cuc_device_ordinal(dev);
    if (ord < 0 || ord >= n_devices)
        return cuc__seterr(CUC_E_INVALID, "default stream: device ordinal %d is "
                           "not one of the %d devices", ord, n_devices);
    *out = &defaults[2 * ord + (per_thread ? 1 : 0)];
    return 0;
}

int cuc_stream_legacy(cuc_device *dev, cuc_stream **out)
{
    return default_stream(dev, 0, out);
}

int cuc_stream_per_thread(cuc_device *dev, cuc_stream **out)
{
    return default_stream(dev, 1, out);
}

int cuc__stream_or_legacy(cuc_device *dev, cuc_stream *s, cuc_stream **out)
{
    int rc;

    if (s) {
        *out = s;
        return 0;
    }
    if (!dev) {
        rc = cuc__device_implicit(&dev);
        if (rc)
            return rc;
    }
    return default_stream(dev, 0, out);
}

int cuc_stream_set_default_mode(int mode)
{
    if (mode != CUC_STREAM_MODE_LEGACY && mode != CUC_STREAM_MODE_PER_THREAD)
        return cuc__seterr(CUC_E_INVALID, "default-stream mode %d: use "
                           "CUC_STREAM_MODE_LEGACY (%d) or CUC_STREAM_MODE_PER_THREAD "
                           "(%d)", mode, CUC_STREAM_MODE_LEGACY,
                           CUC_STREAM_MODE_PER_THREAD);
    __atomic_store_n(&mode_set, mode, __ATOMIC_RELAXED);
    return 0;
}

int cuc_stream_default_mode(int *mode)
{
    int m = __atomic_load_n(&mode_set, __ATOMIC_RELAXED);
    const char *env;

    if (!mode)
        return cuc__seterr(CUC_E_INVALID, "cuc_stream_default_mode: mode is NULL");
    if (m) {
        *mode = m;
        return 0;
    }
    /* Read each time: getenv is cheap next to a driver call, and a program
     * that changes the variable before using streams gets what it set. */
    env = getenv("CUCORE_DEFAULT_STREAM");
    if (!env || !env[0] || !strcmp(env, "legacy")) {
        *mode = CUC_STREAM_MODE_LEGACY;
        return 0;
    }
    if (!strcmp(env, "per-thread")) {
        *mode = CUC_STREAM_MODE_PER_THREAD;
        return 0;
    }
    return cuc__seterr(CUC_E_INVALID, "CUCORE_DEFAULT_STREAM=\"%.64s\": use "
                       "\"legacy\" or \"per-thread\" (or call "
                       "cuc_stream_set_default_mode)", env);
}

int cuc_stream_default(cuc_device *dev, cuc_stream **out)
{
    int mode, rc;

    rc = cuc_stream_default_mode(&mode);
    if (rc)
        return rc;
    return default_stream(dev, mode == CUC_STREAM_MODE_PER_THREAD, out);
}

/* The driver would clamp a priority outside the context's range without a
 * word; asked first (dev current), it is refused naming the range. */
static int check_priority(cuc_device *dev, int priority)
{
    int least = 0, greatest = 0;
    CUresult r = CUC_DRV->cuCtxGetStreamPriorityRange(&least, &greatest);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuCtxGetStreamPriorityRange", "device %d (%s)",
                             cuc_device_ordinal(dev), cuc_device_uuid_string(dev));
    if (priority > least || priority < greatest)
        return cuc__seterr(CUC_E_INVALID, "cuc_stream_create: priority %d is outside "
                           "device %d's range, %d (greatest) to %d (least; the default "
                           "is 0, and lower numbers are higher priority) (%s)", priority,
                           cuc_device_ordinal(dev), greatest, least,
                           cuc_device_uuid_string(dev));
    return 0;
}

int cuc_stream_create(cuc_device *dev, unsigned flags, int priority, cuc_stream **out)
{
    CUC__CTX_KEEP(guard);
    struct cuc_stream *s;
    CUresult r;
    int rc;

    if (!dev || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_stream_create: NULL argument");
    if (flags & ~CUC_STREAM_NON_BLOCKING)
        return cuc__seterr(CUC_E_INVALID, "cuc_stream_create: unknown flags 0x%x "
                           "(only CUC_STREAM_NON_BLOCKING is defined)",
                           flags & ~CUC_STREAM_NON_BLOCKING);
    rc = cuc__device_activate(&guard, dev);
    if (!rc)
        rc = check_priority(dev, priority);
    if (rc)
        return rc;
    s = malloc(sizeof(*s));
    if (!s)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a stream");
    r = CUC_DRV->cuStreamCreateWithPriority(
        &s->cu, flags & CUC_STREAM_NON_BLOCKING ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT,
        priority);
    if (r != CUDA_SUCCESS) {
        free(s);
        return cuc__cuda_err(r, "cuStreamCreateWithPriority", "device %d (%s), "
                             "priority %d", cuc_device_ordinal(dev),
                             cuc_device_uuid_string(dev), priority);
    }
    s->dev = dev;
    s->kind = CUC_STREAM_CREATED;
    s->creator = cuc__pid();
    s->foreign = 0;
    *out = s;
    return 0;
}

int cuc_stream_wrap(cuc_device *dev, void *handle, cuc_stream **out)
{
    CUC__CTX_KEEP(guard);
    struct cuc_stream *s;
    unsigned flags;
    CUresult r;
    int rc;

    if (!dev || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_stream_wrap: NULL argument");
    if (!handle || handle == (void *)CU_STREAM_LEGACY || handle == (void *)CU_STREAM_PER_THREAD)
        return default_stream(dev, handle == (void *)CU_STREAM_PER_THREAD, out);
    rc = cuc__device_activate(&guard, dev);
    if (rc)
        return rc;
    r = CUC_DRV->cuStreamGetFlags((CUstream)handle, &flags);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuStreamGetFlags", "cuc_stream_wrap of stream %p on "
                             "device %d (%s): the driver refused it", handle,
                             cuc_device_ordinal(dev), cuc_device_uuid_string(dev));
    s = malloc(sizeof(*s));
    if (!s)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a stream");
    *s = (struct cuc_stream){dev, (CUstream)handle, CUC_STREAM_CREATED, cuc__pid(), 1};
    *out = s;
    return 0;
}

void cuc_stream_destroy(cuc_stream *s)
{
    CUC__CTX_RESTORE(guard);
    if (!s || s->kind != CUC_STREAM_CREATED)
        return;
    /* The stream's context must be current for the driver to find it; if
     * that fails there is nothing better to do than free our part. */
    if (!s->foreign && s->creator == cuc__pid() && cuc__device_activate(&guard, s->dev) == 0)
        CUC_DRV->cuStreamDestroy(s->cu); /* not the parent's, after fork */
    free(s);
}

int cuc__stream_err(CUresult r, const char *call, const cuc_stream *s)
{
    static const char *const kinds[] = {"?", "legacy default", "per-thread default",
                                        "created"};

    return cuc__cuda_err(r, call, "%s stream on device %d (%s)", kinds[s->kind],
                         cuc_device_ordinal(s->dev), cuc_device_uuid_string(s->dev));
}

int cuc_stream_synchronize(cuc_stream *s)
{
    CUC__CTX_KEEP(guard);
    CUresult r;
    int rc;

    if (!s)
        return cuc__seterr(CUC_E_INVALID, "cuc_stream_synchronize: stream is NULL");
    rc = cuc__stream_activate(&guard, s);
    if (rc)
        return rc;
    r = CUC_DRV->cuStreamSynchronize(s->cu);
    if (r != CUDA_SUCCESS)
        return cuc__stream_err(r, "cuStreamSynchronize", s);
    return 0;
}

int cuc_stream_query(cuc_stream *s, int *done)
{
    CUC__CTX_KEEP(guard);
    CUresult r;
    int rc;

    if (!s || !done)
        return cuc__seterr(CUC_E_INVALID, "cuc_stream_query: NULL argument");
    rc = cuc__stream_activate(&guard, s);
    if (rc)
        return rc;
    r = CUC_DRV->cuStreamQuery(s->cu);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) {
        *done = r == CUDA_SUCCESS;
        return 0;
    }
    return cuc__stream_err(r, "cuStreamQuery", s);
}

cuc_device *cuc_stream_device(const cuc_stream *s) { return s->dev; }
int cuc_stream_kind(const cuc_stream *s) { return s->kind; }
void *cuc_stream_handle(const cuc_stream *s) { return s->cu; }
