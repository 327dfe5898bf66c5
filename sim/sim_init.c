/* cuInit, cuDriverGetVersion, the global lock and the initialised state. */
#include "sim_internal.h"
#include "cucore_sim.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct sim_state sim;

static pthread_mutex_t sim_mutex = PTHREAD_MUTEX_INITIALIZER;
static int sim_init_done;      /* guarded by sim_mutex */
static CUresult sim_init_rc;   /* sticky result of the first cuInit */
static int sim_ready;          /* atomic: 1 once cuInit succeeded */
static char init_why[256];     /* why the first cuInit failed, "" if unknown */

void sim_lock(void)
{
    pthread_mutex_lock(&sim_mutex);
}

void sim_unlock(void)
{
    pthread_mutex_unlock(&sim_mutex);
}

CUresult sim_check_init(void)
{
    return __atomic_load_n(&sim_ready, __ATOMIC_ACQUIRE)
               ? CUDA_SUCCESS
               : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult sim_init_why(CUresult rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(init_why, sizeof(init_why), fmt, ap);
    va_end(ap);
    return rc;
}

int sim_phys_to_local(int phys)
{
    for (int i = 0; i < sim.nvis; i++)
        if (sim.vis[i] == phys)
            return i;
    return -1;
}

int sim_uuid_to_local(const CUuuid *uuid)
{
    for (int i = 0; i < sim.nvis; i++)
        if (memcmp(&sim.phys[sim.vis[i]].uuid, uuid, sizeof(*uuid)) == 0)
            return i;
    return -1;
}

int sim_dev_valid(CUdevice dev)
{
    return dev >= 0 && dev < sim.nvis;
}

uint64_t sim_random64(void)
{
    uint64_t v = 0;

    while (v == 0) {
        ssize_t n = getrandom(&v, sizeof(v), 0);
        if (n != (ssize_t)sizeof(v)) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            v ^= ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                 ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&v;
            v *= 0x9E3779B97F4A7C15ull;
        }
    }
    return v;
}

/* Parses "123", "64M", "1G" (binary units); 0 when malformed. */
static size_t parse_bytes(const char *s)
{
    char *end = NULL;
    unsigned long long v;

    if (!s || !*s)
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s)
        return 0;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end)
        return 0;
    return (size_t)v;
}

static CUresult sim_do_init(void)
{
    CUresult rc;
    const char *pb;

    if (cucore_sim_env_error()) /* a malformed CUCORE_SIM_FAIL / _TRACE */
        return sim_init_why(CUDA_ERROR_INVALID_VALUE, "%s", cucore_sim_env_error());
    rc = sim_devices_setup();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (sim.nphys == 0)
        return sim_init_why(CUDA_ERROR_NO_DEVICE,
                            "CUCORE_SIM_GPUS=0: the simulator has no GPU");
    rc = sim_peers_setup();
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = sim_parse_visible(getenv("CUDA_VISIBLE_DEVICES"), sim.phys,
                           sim.nphys, sim.vis, &sim.nvis);
    if (rc != CUDA_SUCCESS) {
        sim.nvis = 0;
        return rc;
    }
    sim.pool_bytes = (size_t)1 << 30;
    pb = getenv("CUCORE_SIM_POOL_BYTES");
    if (pb) {
        size_t v = parse_bytes(pb);
        if (v >= SIM_PAGE && v <= ((size_t)1 << 44))
            sim.pool_bytes = sim_round_up(v, SIM_PAGE);
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuInit(unsigned int flags)
{
    CUresult rc;

    SIM_FAULT(cuInit);
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim_init_done) {
        sim_init_rc = sim_do_init();
        sim_init_done = 1;
        if (sim_init_rc == CUDA_SUCCESS)
            __atomic_store_n(&sim_ready, 1, __ATOMIC_RELEASE);
    }
    rc = sim_init_rc;
    sim_unlock();
    return rc;
}

/* Not a CUDA entry point: why the first cuInit failed when the reason is
 * one of the simulator's settings (which variable, what is wrong with it),
 * NULL otherwise. cuInit's status alone cannot say it; libcucore asks for
 * this function by name and the NVIDIA driver does not have it. */
SIM_API const char *cucoreSimInitError(void)
{
    const char *why;

    sim_lock();
    why = sim_init_done && sim_init_rc != CUDA_SUCCESS && init_why[0] ? init_why : NULL;
    sim_unlock();
    return why;
}

SIM_API CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    SIM_FAULT(cuDriverGetVersion);
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}
