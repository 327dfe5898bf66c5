/* Libraries, kernels, functions, their parameters (cuKernelGetParamInfo,
 * cuFuncGetParamInfo) and cuLaunchKernelEx. A library is the list of
 * kernels found in its image, each with its parameters (sim_image.c), or
 * the reason the image could not be read. cuLibraryLoadData takes any
 * bytes and cuLibraryGetKernel is where a malformed image is refused
 * (FACTS.md F12), but for a cubin whose .nv.info records are misframed,
 * refused at load (F13); the image is read at load all the same, since the
 * API gives no length and the caller may free it. PTX the JIT refuses
 * loads and gives its kernels, and fails at their first use in a context
 * (F18). The
 * sim cannot execute device code, so a launch validates its configuration
 * and then returns CUDA_ERROR_NOT_SUPPORTED. */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

#define SIM_LIB_MAGIC 0x4c494221u  /* "LIB!" */
#define SIM_KERN_MAGIC 0x4b524e4cu /* "KRNL" */
#define SIM_FUNC_MAGIC 0x46554e43u /* "FUNC" */

struct CUfunc_st {
    uint32_t magic;
    struct CUkern_st *kernel;
    struct CUctx_st *ctx;
};

struct CUkern_st {
    uint32_t magic;
    struct CUlib_st *lib;
    const struct sim_kname *info; /* its name and parameters, in lib->names */
    struct CUfunc_st *func[SIM_MAX_GPUS]; /* by context (visible ordinal) */
};

struct CUlib_st {
    uint32_t magic;
    CUresult image_rc; /* what reading the image gave: GetKernel's answer */
    struct sim_names names;
    struct CUkern_st *kernels; /* names.n of them */
    struct CUlib_st *next;
};

static struct CUlib_st *sim_libs;

static struct CUlib_st *find_lib(CUlibrary l)
{
    for (struct CUlib_st *p = sim_libs; p; p = p->next)
        if (p == l)
            return p;
    return NULL;
}

static struct CUkern_st *find_kernel(const void *k)
{
    uintptr_t a = (uintptr_t)k;

    for (struct CUlib_st *p = sim_libs; p; p = p->next) {
        uintptr_t b = (uintptr_t)p->kernels;
        if (p->names.n && a >= b &&
            a < b + p->names.n * sizeof(struct CUkern_st) &&
            (a - b) % sizeof(struct CUkern_st) == 0)
            return &p->kernels[(a - b) / sizeof(struct CUkern_st)];
    }
    return NULL;
}

static struct CUfunc_st *find_function(const void *f)
{
    for (struct CUlib_st *p = sim_libs; p; p = p->next)
        for (size_t i = 0; i < p->names.n; i++)
            for (int d = 0; d < SIM_MAX_GPUS; d++)
                if (p->kernels[i].func[d] && (const void *)p->kernels[i].func[d] == f)
                    return p->kernels[i].func[d];
    return NULL;
}

void sim_functions_ctx_gone(struct CUctx_st *ctx)
{
    for (struct CUlib_st *p = sim_libs; p; p = p->next)
        for (size_t i = 0; i < p->names.n; i++) {
            struct CUfunc_st **fp = &p->kernels[i].func[ctx->dev];
            if (*fp) {
                (*fp)->magic = 0;
                free(*fp);
                *fp = NULL;
            }
        }
}

static void lib_free(struct CUlib_st *l)
{
    for (size_t i = 0; i < l->names.n; i++) {
        for (int d = 0; d < SIM_MAX_GPUS; d++)
            free(l->kernels[i].func[d]);
        l->kernels[i].magic = 0;
    }
    free(l->kernels);
    sim_names_free(&l->names);
    l->magic = 0;
    free(l);
}

SIM_API CUresult CUDAAPI cuLibraryLoadData(
    CUlibrary *library, const void *code, CUjit_option *jitOptions,
    void **jitOptionsValues, unsigned int numJitOptions,
    CUlibraryOption *libraryOptions, void **libraryOptionValues,
    unsigned int numLibraryOptions)
{
    struct CUlib_st *l;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuLibraryLoadData);
    (void)jitOptionsValues;
    (void)libraryOptionValues;
    if (rc)
        return rc;
    if (!library || !code)
        return CUDA_ERROR_INVALID_VALUE;
    if ((numJitOptions && !jitOptions) ||
        (numLibraryOptions && !libraryOptions))
        return CUDA_ERROR_INVALID_VALUE;
    l = calloc(1, sizeof(*l));
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* A malformed image loads; its error waits for cuLibraryGetKernel,
     * unless the driver refuses it here. Running out of memory here is the
     * sim's own failure. */
    l->image_rc = sim_image_scan(code, &l->names);
    if (l->image_rc == CUDA_ERROR_OUT_OF_MEMORY || l->names.refused_at_load) {
        rc = l->image_rc;
        free(l);
        return rc;
    }
    if (l->names.n) {
        l->kernels = calloc(l->names.n, sizeof(*l->kernels));
        if (!l->kernels) {
            sim_names_free(&l->names);
            free(l);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    l->magic = SIM_LIB_MAGIC;
    for (size_t i = 0; i < l->names.n; i++) {
        l->kernels[i].magic = SIM_KERN_MAGIC;
        l->kernels[i].lib = l;
        l->kernels[i].info = &l->names.v[i];
    }
    sim_lock();
    l->next = sim_libs;
    sim_libs = l;
    *library = l;
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
    struct CUlib_st **pp, *found = NULL;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuLibraryUnload);
    if (rc)
        return rc;
    sim_lock();
    for (pp = &sim_libs; *pp; pp = &(*pp)->next)
        if (*pp == library) {
            found = *pp;
            *pp = found->next;
            break;
        }
    sim_unlock();
    if (!found)
        return CUDA_ERROR_INVALID_HANDLE;
    lib_free(found);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel,
                                            CUlibrary library,
                                            const char *name)
{
    struct CUlib_st *l;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuLibraryGetKernel);
    if (rc)
        return rc;
    if (!pKernel || !name)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    l = find_lib(library);
    if (!l) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (l->image_rc != CUDA_SUCCESS) {
        rc = l->image_rc; /* INVALID_IMAGE, INVALID_PTX, NO_BINARY_FOR_GPU */
    } else {
        rc = CUDA_ERROR_NOT_FOUND;
        for (size_t i = 0; i < l->names.n; i++)
            if (strcmp(l->names.v[i].name, name) == 0) {
                *pKernel = &l->kernels[i];
                rc = CUDA_SUCCESS;
                break;
            }
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc,
                                             CUkernel kernel)
{
    struct CUctx_st *cur;
    struct CUkern_st *k;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuKernelGetFunction);
    if (rc)
        return rc;
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_ctx_current(&cur);
    if (rc)
        goto out;
    k = find_kernel(kernel);
    if (!k) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    /* The function is the module loaded in this context, which the JIT
     * must compile first (inferred from cuKernelGetParamInfo: FACTS.md
     * F18). */
    if (k->info->src == SIM_PARAMS_PTX_REFUSED) {
        rc = CUDA_ERROR_INVALID_IMAGE;
        goto out;
    }
    if (!k->func[cur->dev]) {
        struct CUfunc_st *f = calloc(1, sizeof(*f));
        if (!f) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        f->magic = SIM_FUNC_MAGIC;
        f->kernel = k;
        f->ctx = cur;
        k->func[cur->dev] = f;
    }
    *pFunc = k->func[cur->dev];
out:
    sim_unlock();
    return rc;
}

/* Parameter idx of k; outputs written only on success. A kernel of PTX
 * that the JIT refuses (.ptr.shared) fails here, at its first use in a
 * context: CUDA_ERROR_INVALID_IMAGE (FACTS.md F18). Locked. */
static CUresult param_info(const struct CUkern_st *k, size_t idx,
                           size_t *offset, size_t *size)
{
    const struct sim_kname *info = k->info;

    if (info->src == SIM_PARAMS_PTX_REFUSED)
        return CUDA_ERROR_INVALID_IMAGE;
    if (idx >= info->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    *offset = info->params[idx].offset;
    if (size)
        *size = info->params[idx].size;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel,
                                              size_t paramIndex,
                                              size_t *paramOffset,
                                              size_t *paramSize)
{
    struct CUctx_st *cur;
    struct CUkern_st *k;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuKernelGetParamInfo);
    if (rc)
        return rc;
    if (!kernel || !paramOffset)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    /* The driver answers for a CUkernel only in a context, before it
     * looks at the handle (FACTS.md F14). In one, a kernel of an unloaded
     * library crashes the driver (F15); the sim's own choice is
     * CUDA_ERROR_INVALID_HANDLE, as for any handle that is not a live
     * kernel. */
    rc = sim_ctx_current(&cur);
    if (rc == CUDA_SUCCESS) {
        k = find_kernel(kernel);
        rc = k ? param_info(k, paramIndex, paramOffset, paramSize)
               : CUDA_ERROR_INVALID_HANDLE;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func,
                                            size_t paramIndex,
                                            size_t *paramOffset,
                                            size_t *paramSize)
{
    struct CUfunc_st *f;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuFuncGetParamInfo);
    if (rc)
        return rc;
    if (!func || !paramOffset)
        return CUDA_ERROR_INVALID_VALUE;
    /* A CUfunction belongs to its context already: no current one needed. */
    sim_lock();
    f = find_function(func);
    rc = f ? param_info(f->kernel, paramIndex, paramOffset, paramSize)
           : CUDA_ERROR_INVALID_HANDLE;
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config,
                                          CUfunction f, void **kernelParams,
                                          void **extra)
{
    struct CUctx_st *sctx;
    CUresult rc = sim_check_init();
    uint64_t threads;

    SIM_FAULT(cuLaunchKernelEx);
    (void)kernelParams;
    (void)extra;
    if (rc)
        return rc;
    if (!config || !f)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_stream_check(config->hStream, &sctx);
    if (rc)
        goto out;
    /* f may be a CUfunction or a CUkernel cast to one (CUDA 12). */
    if (!find_function(f) && !find_kernel(f)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    threads = (uint64_t)config->blockDimX * config->blockDimY *
              config->blockDimZ;
    if (config->gridDimX == 0 || config->gridDimY == 0 ||
        config->gridDimZ == 0 || threads == 0 || threads > 1024 ||
        config->blockDimX > 1024 || config->blockDimY > 1024 ||
        config->blockDimZ > 64 || config->gridDimX > 2147483647u ||
        config->gridDimY > 65535 || config->gridDimZ > 65535 ||
        config->sharedMemBytes > 232448 ||
        (config->numAttrs && !config->attrs)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = CUDA_ERROR_NOT_SUPPORTED; /* the sim cannot run device code */
out:
    sim_unlock();
    return rc;
}
