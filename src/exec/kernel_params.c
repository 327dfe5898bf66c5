/* A kernel's parameters (cuKernelGetParamInfo), asked of the driver once
 * per kernel: the driver has no count, so the list ends at the first index
 * it refuses with CUDA_ERROR_INVALID_VALUE. */
#include "device/device.h"
#include "exec/kernel.h"
#include "os/proc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Serializes first queries only; later calls read params_known. */
static pthread_mutex_t params_lock = PTHREAD_MUTEX_INITIALIZER;

static int params_nomem(const cuc_kernel *k, size_t n)
{
    return cuc__seterr(CUC_E_NOMEM, "out of memory for the %zu parameters of kernel "
                       "\"%.256s\"", n, k->name);
}

/* Asks the driver for every parameter of k; params_lock held. */
static int params_query(cuc_kernel *k)
{
    cuc_kernel_param *v = NULL, *grown;
    size_t n = 0, cap = 0, off, size;
    CUresult r;

    for (;;) {
        off = size = 0;
        r = CUC_DRV->cuKernelGetParamInfo(k->cu, n, &off, &size);
        if (r == CUDA_ERROR_INVALID_VALUE)
            break; /* n is past the last parameter */
        if (r != CUDA_SUCCESS || n == CUC_KERNEL_PARAMS_MAX) {
            free(v);
            if (r == CUDA_SUCCESS)
                return cuc__seterr(CUC_E_DRIVER, "kernel \"%.256s\": the driver reports "
                                   "more than %d parameters", k->name, CUC_KERNEL_PARAMS_MAX);
            return cuc__cuda_err(r, "cuKernelGetParamInfo", "kernel \"%.256s\", parameter "
                                 "%zu", k->name, n);
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            grown = realloc(v, cap * sizeof(*v));
            if (!grown) {
                free(v);
                return params_nomem(k, n + 1);
            }
            v = grown;
        }
        v[n].offset = off;
        v[n++].size = size;
    }
    k->params = v;
    k->nparams = n;
    __atomic_store_n(&k->params_known, 1, __ATOMIC_RELEASE);
    return 0;
}

/* cuKernelGetParamInfo answers only in a context (sim/FACTS.md F14),
 * though the layout is the same on every device. The thread's
 * current context serves when there is one, the application's own
 * included; else the implicit device's (device 0) is made current for
 * the query and put back after it. */
static int params_context(struct cuc__ctx_guard *g)
{
    void *cur;
    cuc_device *d;
    int rc = cuc_device_context_save(&cur);

    if (rc || cur)
        return rc;
    rc = cuc__device_implicit(&d);
    return rc ? rc : cuc__device_activate(g, d);
}

/* The kernel's parameter list, asked for at the first call. The fields
 * are a cache of what the driver says, not the caller's state: written
 * once, under params_lock, into a kernel that was allocated writable. */
static int params_get(const cuc_kernel *kc, const cuc_kernel_param **params, size_t *n)
{
    cuc_kernel *k = (cuc_kernel *)kc;
    int rc = 0;

    if (!__atomic_load_n(&k->params_known, __ATOMIC_ACQUIRE)) {
        CUC__CTX_RESTORE(guard);
        rc = cuc__check_owner(cuc__kernel_creator(k), "cuc_kernel_params", "kernel");
        if (!rc)
            rc = params_context(&guard);
        pthread_mutex_lock(&params_lock);
        if (!rc && !k->params_known)
            rc = params_query(k);
        pthread_mutex_unlock(&params_lock);
        if (rc)
            return rc;
    }
    *params = k->params;
    *n = k->nparams;
    return 0;
}

int cuc_kernel_params(const cuc_kernel *k, cuc_kernel_param *params, size_t cap,
                      size_t *count)
{
    const cuc_kernel_param *v;
    size_t n;
    int rc;

    if (!k || !count || (cap && !params))
        return cuc__seterr(CUC_E_INVALID, "cuc_kernel_params: NULL argument");
    rc = params_get(k, &v, &n);
    if (rc)
        return rc;
    if (cap && n) /* v is NULL for a kernel of no parameters */
        memcpy(params, v, (cap < n ? cap : n) * sizeof(*v));
    *count = n;
    return 0;
}

int cuc__kernel_args_check(const cuc_kernel *k, const size_t *sizes, size_t nargs)
{
    const cuc_kernel_param *v;
    size_t n, i;
    int rc;

    rc = params_get(k, &v, &n);
    if (rc)
        return rc;
    if (nargs != n)
        return cuc__seterr(CUC_E_INVALID, "kernel \"%.256s\" takes %zu parameter%s, %zu "
                           "argument%s given", k->name, n, n == 1 ? "" : "s", nargs,
                           nargs == 1 ? "" : "s");
    for (i = 0; i < n; i++)
        if (sizes[i] != v[i].size)
            return cuc__seterr(CUC_E_INVALID, "kernel \"%.256s\": parameter %zu takes %zu "
                               "byte%s, argument %zu has %zu", k->name, i, v[i].size,
                               v[i].size == 1 ? "" : "s", i, sizes[i]);
    return 0;
}
