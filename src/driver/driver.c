/* Driver loading: dlopen + cuGetProcAddress at pinned ABI versions. This is
 * the only file that opens libcuda; everything else calls through the
 * table. */
#include "driver/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef CUC_SIM_BUILD_PATH
#define CUC_SIM_BUILD_PATH ""
#endif
#ifndef CUC_SIM_INSTALL_PATH
#define CUC_SIM_INSTALL_PATH ""
#endif

const struct cuc__driver *cuc__drv_table;

static struct cuc__driver table;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct cuc__err_saved load_failure;
static char lib_path[1024];
static int drv_version;
static int drv_simulated;

static const char *sim_path(void)
{
    if (CUC_SIM_BUILD_PATH[0] && access(CUC_SIM_BUILD_PATH, R_OK) == 0)
        return CUC_SIM_BUILD_PATH;
    if (CUC_SIM_INSTALL_PATH[0] && access(CUC_SIM_INSTALL_PATH, R_OK) == 0)
        return CUC_SIM_INSTALL_PATH;
    return "libcucore-sim.so";
}

static const char *choose_library(void)
{
    const char *env = getenv("CUCORE_DRIVER");

    if (!env || !env[0])
        return "libcuda.so.1";
    if (strcmp(env, "sim") == 0) {
        drv_simulated = 1;
        return sim_path();
    }
    return env;
}

static int resolve_all(PFN_cuGetProcAddress_v12000 gpa)
{
    CUdriverProcAddressQueryResult st;
    CUresult r;

#define CUC_DRV_RESOLVE_(name, ver)                                              \
    st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                                   \
    r = gpa(#name, (void **)&table.name, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st); \
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !table.name)   \
        return cuc__seterr(CUC_E_NO_DRIVER,                                      \
                           "CUDA driver %s lacks %s at ABI version %d "           \
                           "(cuGetProcAddress: result %d, status %d); cucore "   \
                           "needs a CUDA 12.8 or newer driver",                  \
                           lib_path, #name, ver, (int)r, (int)st);
    CUC_DRIVER_SYMS(CUC_DRV_RESOLVE_)
#undef CUC_DRV_RESOLVE_
    return 0;
}

static int open_library(void **handle)
{
    const char *name = choose_library();
    void *h;

    snprintf(lib_path, sizeof(lib_path), "%s", name);
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return cuc__seterr(CUC_E_NO_DRIVER,
                           "cannot load the CUDA driver %s: %s; install the "
                           "NVIDIA driver, or set CUCORE_DRIVER=sim to use the "
                           "simulated driver",
                           name, why ? why : "dlopen failed");
    }
    *handle = h;
    return 0;
}

static int init_driver(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    CUresult r = table.cuInit(0);

    if (r == CUDA_SUCCESS)
        return 0;
    cuc__cuda_err(r, "cuInit", "driver %s, CUDA_VISIBLE_DEVICES%s%s%s", lib_path,
                  cvd ? "=\"" : " unset", cvd ? cvd : "", cvd ? "\"" : "");
    return r == CUDA_ERROR_NO_DEVICE ? CUC_E_NO_DEVICE : CUC_E_DRIVER;
}

static int load(void)
{
    PFN_cuGetProcAddress_v12000 gpa;
    void *handle = NULL;
    int rc;

    rc = open_library(&handle);
    if (rc)
        return rc;
    gpa = (PFN_cuGetProcAddress_v12000)dlsym(handle, "cuGetProcAddress_v2");
    if (!gpa) {
        rc = cuc__seterr(CUC_E_NO_DRIVER,
                         "CUDA driver %s has no cuGetProcAddress_v2; cucore "
                         "needs a CUDA 12 or newer driver", lib_path);
        goto close_library;
    }
    rc = resolve_all(gpa);
    if (rc)
        goto close_library;
    if (table.cuDriverGetVersion(&drv_version) != CUDA_SUCCESS)
        drv_version = 0;
    /* The table is complete: error names can come from the driver now,
     * including cuInit's. */
    cuc__drv_table = &table;
    rc = init_driver();
    if (rc)
        return rc; /* the library stays loaded: its error names are in use */
    return 0;

close_library:
    memset(&table, 0, sizeof(table));
    dlclose(handle);
    return rc;
}

static void load_once_fn(void)
{
    int rc = load();

    if (rc)
        cuc__err_save(&load_failure, rc);
}

int cuc__driver_get(const struct cuc__driver **out)
{
    pthread_once(&load_once, load_once_fn);
    if (CUC_UNLIKELY(load_failure.status))
        return cuc__err_restore(&load_failure);
    *out = &table;
    return 0;
}

int cuc_driver_load(struct cuc_driver_info *info)
{
    const struct cuc__driver *d;
    int rc = cuc__driver_get(&d);

    if (rc)
        return rc;
    if (info) {
        info->path = lib_path;
        info->version = drv_version;
        info->simulated = drv_simulated;
    }
    return 0;
}

/* ---- naming a failed driver call ---- */

static int status_for_cuda(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        return CUC_E_NOMEM;
    case CUDA_ERROR_NO_DEVICE:
        return CUC_E_NO_DEVICE;
    case CUDA_ERROR_NOT_SUPPORTED:
        return CUC_E_NOT_SUPPORTED;
    case CUDA_ERROR_NOT_FOUND:
        return CUC_E_NOT_FOUND;
    default:
        return CUC_E_DRIVER;
    }
}

int cuc__cuda_err(CUresult r, const char *call, const char *fmt, ...)
{
    int status = status_for_cuda(r);
    va_list ap;

    cuc__seterr(status, "%s failed: %s (%s)", call, cuc__cuda_name(r), cuc__cuda_text(r));
    if (fmt) {
        char detail[1024];
        va_start(ap, fmt);
        vsnprintf(detail, sizeof(detail), fmt, ap);
        va_end(ap);
        cuc__adderr(": %s", detail);
    }
    cuc__set_errcuda((int)r);
    return status;
}

const char *cuc__cuda_name(CUresult r)
{
    const char *s = NULL;

    if (cuc__drv_table && cuc__drv_table->cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "CUDA_ERROR_UNKNOWN_CODE";
}

const char *cuc__cuda_text(CUresult r)
{
    const char *s = NULL;

    if (cuc__drv_table && cuc__drv_table->cuGetErrorString(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "no description";
}
