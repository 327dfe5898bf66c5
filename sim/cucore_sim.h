/* Test controls exported by libcucore-sim.so beside the CUDA entry points.
 * A test reaches them with dlsym on the simulator's handle (from
 * dlopen(CUC_SIM_PATH), or dlopen(path, RTLD_NOW | RTLD_NOLOAD) once cucore
 * has loaded it); the real driver has none of them. See sim/README.md,
 * "Fault injection". */
#ifndef CUCORE_SIM_H
#define CUCORE_SIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Replaces the fault specs (those of CUCORE_SIM_FAIL too) with spec, in
 * CUCORE_SIM_FAIL's syntax, and restarts every call count and the count
 * of injected faults at 0, so that ordinals count from this call. NULL or
 * "" removes every spec. Returns 0, or -1 for a malformed spec, which
 * changes nothing and writes the reason to why (cap bytes, NUL-ended;
 * why may be NULL). Call it while no other thread is in the driver. */
int cucore_sim_fail(const char *spec, char *why, size_t cap);
typedef int (*cucore_sim_fail_fn)(const char *spec, char *why, size_t cap);

/* Calls counted since the process started (or the last cucore_sim_fail):
 * name NULL or "*" gives the ordinal of the last counted call of any name
 * (what "*:K" counts), an entry point's base name gives that name's
 * calls (what "name:K" counts). Returns 0 and writes *out, or -1 for an
 * unknown name. */
int cucore_sim_calls(const char *name, unsigned long long *out);
typedef int (*cucore_sim_calls_fn)(const char *name, unsigned long long *out);

/* Failures injected since the process started (or the last
 * cucore_sim_fail). */
unsigned long long cucore_sim_faults(void);
typedef unsigned long long (*cucore_sim_faults_fn)(void);

/* Why CUCORE_SIM_FAIL / CUCORE_SIM_TRACE were refused (cuInit then fails
 * with CUDA_ERROR_INVALID_VALUE), or NULL when they were not. */
const char *cucore_sim_env_error(void);
typedef const char *(*cucore_sim_env_error_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
