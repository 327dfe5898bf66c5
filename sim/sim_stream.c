/* Streams. Work is synchronous, so a stream only carries its context, flags
 * and priority; created streams are kept in a registry so that unknown
 * handles are refused rather than dereferenced. */
#include "sim_internal.h"

#include <stdio.h>
#include <stdlib.h>

#define SIM_STREAM_MAGIC 0x5354524du /* "STRM" */
#define SIM_PRIO_LEAST 0
#define SIM_PRIO_GREATEST (-5)

struct CUstream_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    unsigned int flags;
    int priority;
    struct CUstream_st *next;
};

static struct CUstream_st *sim_streams;

static int is_special(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

static struct CUstream_st *find_stream(CUstream s)
{
    for (struct CUstream_st *p = sim_streams; p; p = p->next)
        if (p == s)
            return p;
    return NULL;
}

CUresult sim_stream_check(CUstream s, struct CUctx_st **ctx_out)
{
    struct CUctx_st *cur;
    struct CUstream_st *st;
    CUresult rc = sim_ctx_current(&cur);

    if (rc)
        return rc;
    if (is_special(s)) {
        *ctx_out = cur;
        return CUDA_SUCCESS;
    }
    st = find_stream(s);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    *ctx_out = st->ctx;
    return CUDA_SUCCESS;
}

void sim_streams_ctx_gone(struct CUctx_st *ctx)
{
    struct CUstream_st **pp = &sim_streams;

    while (*pp) {
        struct CUstream_st *s = *pp;
        if (s->ctx == ctx) {
            *pp = s->next;
            s->magic = 0;
            free(s);
        } else {
            pp = &s->next;
        }
    }
}

/* Least 0, greatest -5; CUDA_ERROR_INVALID_CONTEXT with no current
 * context (FACTS.md F9). A NULL output is not written (cuda.h). */
SIM_API CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority,
                                                     int *greatestPriority)
{
    struct CUctx_st *cur;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuCtxGetStreamPriorityRange);
    if (rc)
        return rc;
    sim_lock();
    rc = sim_ctx_current(&cur);
    sim_unlock();
    if (rc)
        return rc;
    if (leastPriority)
        *leastPriority = SIM_PRIO_LEAST;
    if (greatestPriority)
        *greatestPriority = SIM_PRIO_GREATEST;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream,
                                                    unsigned int flags,
                                                    int priority)
{
    struct CUctx_st *cur;
    struct CUstream_st *s;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuStreamCreateWithPriority);
    if (rc)
        return rc;
    if (!phStream)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_ctx_current(&cur);
    if (rc)
        goto out;
    s = calloc(1, sizeof(*s));
    if (!s) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* Out-of-range priorities are clamped (FACTS.md F9). */
    if (priority < SIM_PRIO_GREATEST)
        priority = SIM_PRIO_GREATEST;
    if (priority > SIM_PRIO_LEAST)
        priority = SIM_PRIO_LEAST;
    s->magic = SIM_STREAM_MAGIC;
    s->ctx = cur;
    s->flags = flags;
    s->priority = priority;
    s->next = sim_streams;
    sim_streams = s;
    *phStream = s;
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    struct CUstream_st **pp;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuStreamDestroy);
    if (rc)
        return rc;
    if (is_special(hStream))
        return CUDA_ERROR_INVALID_HANDLE;
    sim_lock();
    rc = CUDA_ERROR_INVALID_HANDLE;
    for (pp = &sim_streams; *pp; pp = &(*pp)->next) {
        if (*pp == hStream) {
            struct CUstream_st *s = *pp;
            *pp = s->next;
            s->magic = 0;
            free(s);
            rc = CUDA_SUCCESS;
            break;
        }
    }
    sim_unlock();
    return rc;
}

static CUresult stream_simple(CUstream hStream)
{
    struct CUctx_st *ctx;
    CUresult rc = sim_check_init();

    if (rc)
        return rc;
    sim_lock();
    rc = sim_stream_check(hStream, &ctx);
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    struct CUctx_st *ctx;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuStreamSynchronize);
    if (rc)
        return rc;
    sim_lock();
    rc = sim_stream_check(hStream, &ctx);
    if (!rc)
        sim_pool_retire_locked();
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    SIM_FAULT(cuStreamQuery);
    return stream_simple(hStream); /* always complete */
}

SIM_API CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent,
                                           unsigned int Flags)
{
    struct CUctx_st *ctx;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuStreamWaitEvent);
    if (rc)
        return rc;
    if (Flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_stream_check(hStream, &ctx);
    if (rc == CUDA_SUCCESS)
        rc = sim_event_check(hEvent);
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority)
{
    struct CUctx_st *ctx;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuStreamGetPriority);
    if (rc)
        return rc;
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_stream_check(hStream, &ctx);
    if (rc == CUDA_SUCCESS)
        *priority = is_special(hStream) ? 0 : find_stream(hStream)->priority;
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuStreamGetFlags(CUstream hStream,
                                          unsigned int *flags)
{
    struct CUctx_st *ctx;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuStreamGetFlags);
    if (rc)
        return rc;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!is_special(hStream) && !find_stream(hStream)) { /* sim/FACTS.md F45 */
        fprintf(stderr, "sim: cuStreamGetFlags(%p): not a stream; the real driver "
                "reads through it and crashes (sim/FACTS.md F45)\n", (void *)hStream);
        abort();
    }
    rc = sim_stream_check(hStream, &ctx);
    if (rc == CUDA_SUCCESS)
        *flags = is_special(hStream) ? CU_STREAM_DEFAULT
                                     : find_stream(hStream)->flags;
    sim_unlock();
    return rc;
}
