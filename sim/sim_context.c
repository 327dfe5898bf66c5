/* Primary contexts (one per visible device, retain/release counted) and the
 * thread-local current context. */
#include "sim_internal.h"

#define SIM_CTX_MAGIC 0x43545821u /* "CTX!" */

static struct CUctx_st sim_ctx[SIM_MAX_GPUS];
static _Thread_local struct CUctx_st *sim_tls_ctx;

int sim_ctx_valid(CUcontext c)
{
    for (int i = 0; i < sim.nvis; i++)
        if (c == &sim_ctx[i])
            return 1;
    return 0;
}

CUresult sim_ctx_current(struct CUctx_st **out)
{
    struct CUctx_st *c = sim_tls_ctx;

    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (c->refcount <= 0)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx,
                                                  CUdevice dev)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDevicePrimaryCtxRetain);
    if (rc)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    sim_ctx[dev].magic = SIM_CTX_MAGIC;
    sim_ctx[dev].dev = dev;
    sim_ctx[dev].refcount++;
    *pctx = &sim_ctx[dev];
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDevicePrimaryCtxRelease);
    if (rc)
        return rc;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    if (sim_ctx[dev].refcount <= 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--sim_ctx[dev].refcount == 0) {
        /* The context goes inactive: its streams, events and functions
         * die with it (the driver's answers then: FACTS.md F7). */
        sim_streams_ctx_gone(&sim_ctx[dev]);
        sim_events_ctx_gone(&sim_ctx[dev]);
        sim_functions_ctx_gone(&sim_ctx[dev]);
        sim_allocs_ctx_gone(&sim_ctx[dev]);
        sim_pool_retire_locked(); /* its queued work done (FACTS.md F46) */
    }
    sim_unlock();
    return rc;
}

/* Active while anyone holds a retain (flags: the sim keeps none). */
SIM_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags,
                                                    int *active)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDevicePrimaryCtxGetState);
    if (rc)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    *flags = 0;
    *active = sim_ctx[dev].refcount > 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuCtxSetCurrent);
    if (rc)
        return rc;
    if (ctx == NULL) {
        sim_tls_ctx = NULL;
        return CUDA_SUCCESS;
    }
    sim_lock();
    if (!sim_ctx_valid(ctx) || ctx->magic != SIM_CTX_MAGIC)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        sim_tls_ctx = ctx;
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuCtxGetCurrent);
    if (rc)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = sim_tls_ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    struct CUctx_st *c;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuCtxGetDevice);
    if (rc)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_ctx_current(&c);
    if (rc == CUDA_SUCCESS)
        *device = c->dev;
    sim_unlock();
    return rc;
}

static CUresult sync_current(void)
{
    struct CUctx_st *c;
    CUresult rc = sim_check_init();

    if (rc)
        return rc;
    sim_lock();
    rc = sim_ctx_current(&c);
    if (!rc)
        sim_pool_retire_locked();
    sim_unlock();
    return rc; /* all work is synchronous */
}

SIM_API CUresult CUDAAPI cuCtxSynchronize(void)
{
    SIM_FAULT(cuCtxSynchronize);
    return sync_current();
}

SIM_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuCtxSynchronize);
    if (rc)
        return rc;
    if (!ctx)
        return sync_current();
    sim_lock();
    if (!sim_ctx_valid(ctx) || ctx->magic != SIM_CTX_MAGIC)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else if (ctx->refcount <= 0)
        rc = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    sim_unlock();
    return rc;
}
