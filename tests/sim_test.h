/* The simulator's test controls (sim/cucore_sim.h) from a test that runs
 * on it (test_on_sim()): looked up in the loaded simulator, a missing one
 * a failed check. */
#ifndef CUC_TEST_SIM_H
#define CUC_TEST_SIM_H

#include <dlfcn.h>
#include <stdint.h>

#include "../sim/cucore_sim.h"
#include "check.h"

/* The simulator's control name (NULL, a failed check, when absent). */
static inline void *sim_sym(const char *name)
{
    void *h = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_NOLOAD), *f = NULL;

    CHECK(h != NULL);
    if (h) {
        f = dlsym(h, name);
        dlclose(h);
    }
    CHECK(f != NULL);
    return f;
}

/* Calls of name counted so far (cucore_sim_calls). */
static inline unsigned long long sim_calls(const char *name)
{
    cucore_sim_calls_fn f = (cucore_sim_calls_fn)(uintptr_t)sim_sym("cucore_sim_calls");
    unsigned long long n = 0;

    CHECK(f && f(name, &n) == 0);
    return n;
}

/* Replaces the fault specs with spec (NULL: none), restarting the counts
 * (cucore_sim_fail). */
static inline void sim_fail(const char *spec)
{
    cucore_sim_fail_fn f = (cucore_sim_fail_fn)(uintptr_t)sim_sym("cucore_sim_fail");
    char why[256] = "";

    CHECK(f && f(spec, why, sizeof(why)) == 0);
}

#endif
