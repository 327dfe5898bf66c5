/* Counts the driver calls cucore makes, on whichever driver is loaded (the
 * real one too, where the simulator's counter does not exist): the bench
 * links cucore_static, so it can point cucore's driver table
 * (cuc__drv_table) at a copy whose entries for the calls below count and
 * then call the driver's own. Counting is for rounds that are not timed;
 * bench_calls_off() puts the driver's table back. Calls not listed here are
 * not counted (the legacy-IPC paths make none of them per buffer: the
 * simulator's total in tests/test_buffer_ipc.c checks that).
 *
 *   bench_calls_on()    count from now (counts at 0)
 *   bench_calls_get(c)  the counts so far, in c
 *   bench_calls_off()   stop counting
 */
#ifndef CUC_BENCH_CALLS_H
#define CUC_BENCH_CALLS_H

#include <string.h>

#include "driver/driver.h"

#define BENCH_CALLS(X)                                                                 \
    X(cuCtxGetCurrent, (CUcontext * c), (c))                                           \
    X(cuCtxSetCurrent, (CUcontext c), (c))                                             \
    X(cuIpcGetMemHandle, (CUipcMemHandle * h, CUdeviceptr p), (h, p))                  \
    X(cuIpcOpenMemHandle, (CUdeviceptr * p, CUipcMemHandle h, unsigned f), (p, h, f))   \
    X(cuIpcCloseMemHandle, (CUdeviceptr p), (p))                                       \
    X(cuMemGetAddressRange, (CUdeviceptr * b, size_t *s, CUdeviceptr p), (b, s, p))     \
    X(cuStreamSynchronize, (CUstream s), (s))                                          \
    X(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned f), (s, e, f))               \
    X(cuEventCreate, (CUevent * e, unsigned f), (e, f))                                \
    X(cuEventRecord, (CUevent e, CUstream s), (e, s))                                  \
    X(cuEventDestroy, (CUevent e), (e))

enum bench_call {
#define BENCH_CALL_ENUM_(name, params, args) BC_##name,
    BENCH_CALLS(BENCH_CALL_ENUM_)
#undef BENCH_CALL_ENUM_
    BC_cuPointerGetAttributes, /* by hand: it also counts the attributes */
    BC_COUNT
};

static const char *const bench_call_names[BC_COUNT] = {
#define BENCH_CALL_NAME_(name, params, args) #name,
    BENCH_CALLS(BENCH_CALL_NAME_)
#undef BENCH_CALL_NAME_
    "cuPointerGetAttributes",
};

/* calls of each, and the attributes cuPointerGetAttributes was asked for */
struct bench_calls {
    unsigned long long n[BC_COUNT];
    unsigned long long attrs;
};

static struct bench_calls bench_calls_now;
static struct cuc__driver bench_calls_table;
static const struct cuc__driver *bench_calls_real;

#define BENCH_CALL_WRAP_(name, params, args)                                           \
    static CUresult CUDAAPI bench_counted_##name params                                \
    {                                                                                  \
        __atomic_add_fetch(&bench_calls_now.n[BC_##name], 1, __ATOMIC_RELAXED);        \
        return bench_calls_real->name args;                                            \
    }
BENCH_CALLS(BENCH_CALL_WRAP_)
#undef BENCH_CALL_WRAP_

static CUresult CUDAAPI bench_counted_cuPointerGetAttributes(unsigned n, CUpointer_attribute *a,
                                                             void **d, CUdeviceptr p)
{
    __atomic_add_fetch(&bench_calls_now.n[BC_cuPointerGetAttributes], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&bench_calls_now.attrs, n, __ATOMIC_RELAXED);
    return bench_calls_real->cuPointerGetAttributes(n, a, d, p);
}

static inline void bench_calls_on(void)
{
    memset(&bench_calls_now, 0, sizeof(bench_calls_now));
    if (!bench_calls_real) {
        bench_calls_real = cuc__drv_table;
        bench_calls_table = *bench_calls_real;
#define BENCH_CALL_SET_(name, params, args) bench_calls_table.name = bench_counted_##name;
        BENCH_CALLS(BENCH_CALL_SET_)
#undef BENCH_CALL_SET_
        bench_calls_table.cuPointerGetAttributes = bench_counted_cuPointerGetAttributes;
    }
    cuc__drv_table = &bench_calls_table;
}

static inline void bench_calls_get(struct bench_calls *out)
{
    *out = bench_calls_now;
}

static inline void bench_calls_off(void)
{
    if (bench_calls_real)
        cuc__drv_table = bench_calls_real;
}

#endif
