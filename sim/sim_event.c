/* Events and IPC event handles. Work is synchronous, so an event completes
 * when it is recorded; timing events keep the CLOCK_MONOTONIC time of the
 * record. An IPC handle names the event by (creator, per-process id,
 * physical GPU); opening one in another process gives an always-complete
 * event (in the creating process the driver refuses, and so does the sim:
 * FACTS.md F10). The creator is a random tag of the process, not its pid:
 * pid numbers repeat across PID namespaces, where another process with the
 * creator's pid number opens the handle as any other (F48's setting). The handle also carries the GPU's UUID: opening it where
 * that GPU is not visible gives CUDA_ERROR_INVALID_DEVICE. A process's
 * first IPC event opens one fd that stays, as the driver's does (F11). */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SIM_EVENT_MAGIC 0x45564e54u /* "EVNT" */
#define SIM_IPC_EVENT_MAGIC 0x43534556u /* "CSEV" */
#define SIM_IPC_EVENT_VERSION 2

struct CUevent_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    unsigned int flags;
    int recorded;
    int opened; /* from cuIpcOpenEventHandle */
    struct timespec when;
    CUipcEventHandle ipc; /* valid when flags has CU_EVENT_INTERPROCESS */
    struct CUevent_st *next;
};

/* The 64-byte handle, little-endian host layout. */
struct sim_ipc_event {
    uint32_t magic;
    uint16_t version;
    uint16_t phys;
    uint32_t pid;
    uint32_t flags;
    uint64_t id;
    CUuuid uuid; /* the GPU, matched by UUID in the opener */
    uint64_t proc; /* the creating process's tag (proc_tag) */
    unsigned char zero[16];
};
_Static_assert(sizeof(struct sim_ipc_event) == CU_IPC_HANDLE_SIZE,
               "IPC event handle layout");

static struct CUevent_st *sim_events;
static uint64_t sim_proc_tag; /* made at the first IPC event (locked) */

/* This process's tag in the IPC event handles it makes (a forked child of
 * a process that made one is refused every call: no fork handling).
 * Locked. */
static uint64_t proc_tag(void)
{
    while (!sim_proc_tag)
        sim_proc_tag = sim_random64();
    return sim_proc_tag;
}
static uint64_t sim_event_ids;
static int sim_ipc_events_fd[SIM_MAX_GPUS] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                              -1, -1, -1, -1, -1, -1, -1, -1};
_Static_assert(SIM_MAX_GPUS == 16, "one -1 a GPU above");

/* The driver keeps one fd from a process's first IPC event on each device
 * (FACTS.md F11): the sim holds an empty memfd per physical GPU for the
 * rest of the process, so that fd counts agree. Locked. */
static CUresult ipc_events_fd_open(const struct CUctx_st *ctx)
{
    int *fd = &sim_ipc_events_fd[sim.vis[ctx->dev]];

    if (*fd >= 0)
        return CUDA_SUCCESS;
    *fd = memfd_create("cucore-sim-ipc-events", MFD_CLOEXEC);
    return *fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static struct CUevent_st *find_event(CUevent e)
{
    for (struct CUevent_st *p = sim_events; p; p = p->next)
        if (p == e)
            return p;
    return NULL;
}

CUresult sim_event_check(CUevent e)
{
    return find_event(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void sim_events_ctx_gone(struct CUctx_st *ctx)
{
    struct CUevent_st **pp = &sim_events;

    while (*pp) {
        struct CUevent_st *e = *pp;
        if (e->ctx == ctx) {
            *pp = e->next;
            e->magic = 0;
            free(e);
        } else {
            pp = &e->next;
        }
    }
}

static struct CUevent_st *new_event(struct CUctx_st *ctx, unsigned int flags)
{
    struct CUevent_st *e = calloc(1, sizeof(*e));

    if (!e)
        return NULL;
    e->magic = SIM_EVENT_MAGIC;
    e->ctx = ctx;
    e->flags = flags;
    e->next = sim_events;
    sim_events = e;
    return e;
}

SIM_API CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    const unsigned int known = CU_EVENT_BLOCKING_SYNC |
                               CU_EVENT_DISABLE_TIMING |
                               CU_EVENT_INTERPROCESS;
    struct CUctx_st *cur;
    struct CUevent_st *e;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuEventCreate);
    if (rc)
        return rc;
    if (!phEvent || (Flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_ctx_current(&cur);
    if (!rc && (Flags & CU_EVENT_INTERPROCESS))
        rc = ipc_events_fd_open(cur);
    if (rc)
        goto out;
    e = new_event(cur, Flags);
    if (!e) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (Flags & CU_EVENT_INTERPROCESS) {
        struct sim_ipc_event h;
        memset(&h, 0, sizeof(h));
        h.magic = SIM_IPC_EVENT_MAGIC;
        h.version = SIM_IPC_EVENT_VERSION;
        h.phys = (uint16_t)sim.vis[cur->dev];
        h.pid = (uint32_t)getpid();
        h.proc = proc_tag();
        h.flags = Flags;
        h.id = ++sim_event_ids;
        h.uuid = sim.phys[sim.vis[cur->dev]].uuid;
        memcpy(&e->ipc, &h, sizeof(h));
    }
    *phEvent = e;
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    struct CUctx_st *sctx;
    struct CUevent_st *e;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuEventRecord);
    if (rc)
        return rc;
    sim_lock();
    rc = sim_stream_check(hStream, &sctx);
    if (rc)
        goto out;
    e = find_event(hEvent);
    if (!e) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (e->ctx != sctx) { /* event and stream of different contexts */
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    e->recorded = 1;
    clock_gettime(CLOCK_MONOTONIC, &e->when);
out:
    sim_unlock();
    return rc;
}

static CUresult event_simple(CUevent hEvent)
{
    CUresult rc = sim_check_init();

    if (rc)
        return rc;
    sim_lock();
    rc = sim_event_check(hEvent);
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    SIM_FAULT(cuEventSynchronize);
    return event_simple(hEvent);
}

SIM_API CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    SIM_FAULT(cuEventQuery);
    return event_simple(hEvent); /* complete at record, or never recorded */
}

SIM_API CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds,
                                            CUevent hStart, CUevent hEnd)
{
    struct CUevent_st *a, *b;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuEventElapsedTime);
    if (rc)
        return rc;
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    a = find_event(hStart);
    b = find_event(hEnd);
    if (!a || !b || !a->recorded || !b->recorded ||
        (a->flags & CU_EVENT_DISABLE_TIMING) ||
        (b->flags & CU_EVENT_DISABLE_TIMING)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        double ms = (double)(b->when.tv_sec - a->when.tv_sec) * 1e3 +
                    (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6;
        *pMilliseconds = (float)ms;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    struct CUevent_st **pp;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuEventDestroy);
    if (rc)
        return rc;
    sim_lock();
    rc = CUDA_ERROR_INVALID_HANDLE;
    for (pp = &sim_events; *pp; pp = &(*pp)->next) {
        if (*pp == hEvent) {
            struct CUevent_st *e = *pp;
            *pp = e->next;
            e->magic = 0;
            free(e);
            rc = CUDA_SUCCESS;
            break;
        }
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle,
                                             CUevent event)
{
    struct CUevent_st *e;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuIpcGetEventHandle);
    if (rc)
        return rc;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    e = find_event(event);
    if (!e)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!(e->flags & CU_EVENT_INTERPROCESS) || e->opened)
        rc = CUDA_ERROR_INVALID_HANDLE; /* FACTS.md F10 */
    else
        *pHandle = e->ipc;
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent,
                                              CUipcEventHandle handle)
{
    struct sim_ipc_event h;
    struct CUctx_st *cur;
    struct CUevent_st *e;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuIpcOpenEventHandle);
    if (rc)
        return rc;
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&h, &handle, sizeof(h));
    sim_lock();
    rc = sim_ctx_current(&cur);
    if (rc)
        goto out;
    /* garbage, and the process that created the event (FACTS.md F10) */
    if (h.magic != SIM_IPC_EVENT_MAGIC || h.version != SIM_IPC_EVENT_VERSION ||
        h.id == 0 || h.proc == 0 || !(h.flags & CU_EVENT_INTERPROCESS)) {
        rc = CUDA_ERROR_MAP_FAILED;
        goto out;
    }
    if (h.proc == sim_proc_tag) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    /* Assumed, not measured (README.md, "Where the sim differs"): a handle
     * opened in a context of another GPU than the one that made the event
     * is refused, as when that GPU is not visible. */
    if (sim_uuid_to_local(&h.uuid) != cur->dev) {
        rc = CUDA_ERROR_INVALID_DEVICE;
        goto out;
    }
    e = new_event(cur, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
    if (!e) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    e->ipc = handle;
    e->opened = 1;
    *phEvent = e;
out:
    sim_unlock();
    return rc;
}
