/* Driver loading: dlopen + cuGetProcAddress at pinned ABI versions. This is
 * the only file that opens libcuda; everything else calls through the
 * table. */
#include "driver/driver.h"
#include "os/proc.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The relative path from the directory of an installed program to the
 * installed libdir ("../lib"), set at configure time: a program linked
 * with libcucore.a finds the simulator there. */
#ifndef CUC_SIM_RELDIR
#define CUC_SIM_RELDIR "../lib"
#endif
#define CUC_SIM_NAME "libcucore-sim.so"

const struct cuc__driver *cuc__drv_table;

static struct cuc__driver table;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct cuc__err_saved load_failure;
static char lib_path[PATH_MAX];
static char sim_tried[2][PATH_MAX]; /* the simulator paths looked at, for the error */
static int drv_version;
static int drv_simulated;
static pid_t drv_loader; /* the process that loaded the driver (fork: not this one) */

/* The oldest driver with every entry point at its pinned ABI version: the
 * highest version in driver_syms.h (12080: CUDA 12.8). */
static int min_driver_version(void)
{
    int v = 0;

#define CUC_DRV_MAX_(name, ver) v = (ver) > v ? (ver) : v;
    CUC_DRIVER_SYMS(CUC_DRV_MAX_)
#undef CUC_DRV_MAX_
    return v;
}

/* The directory of the file that holds this code, symlinks resolved: the
 * shared libcucore, or the program (or shared object) that linked
 * libcucore.a into itself. */
static int code_dir(char *out, size_t n)
{
    struct link_map *lm = NULL;
    char path[PATH_MAX];
    Dl_info info;
    char *slash;

    if (!dladdr1((void *)&code_dir, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return -1;
    if (lm->l_name && lm->l_name[0]) {
        if (!realpath(lm->l_name, path))
            return -1;
    } else { /* the main program's link map has no name */
        ssize_t k = readlink("/proc/self/exe", path, sizeof(path) - 1);
        if (k <= 0)
            return -1;
        path[k] = '\0';
    }
    slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) >= n)
        return -1;
    memcpy(out, path, (size_t)(slash - path));
    out[slash - path] = '\0';
    return 0;
}

/* CUCORE_DRIVER=sim: libcucore-sim.so next to the code (an installed or
 * built shared libcucore), else in the libdir relative to it (a program
 * that linked libcucore.a, in bindir or in the build tree), else the bare
 * name for the dynamic loader's search. include/cucore/driver.h. */
static const char *sim_path(void)
{
    static char found[PATH_MAX];
    char dir[PATH_MAX];
    int k, n[2];

    if (code_dir(dir, sizeof(dir)))
        return CUC_SIM_NAME;
    n[0] = snprintf(sim_tried[0], sizeof(sim_tried[0]), "%s/" CUC_SIM_NAME, dir);
    n[1] = snprintf(sim_tried[1], sizeof(sim_tried[1]),
                    "%s/" CUC_SIM_RELDIR "/" CUC_SIM_NAME, dir);
    for (k = 0; k < 2; k++) {
        if (n[k] > 0 && (size_t)n[k] < sizeof(sim_tried[k]) &&
            access(sim_tried[k], R_OK) == 0) {
            if (!realpath(sim_tried[k], found))
                snprintf(found, sizeof(found), "%s", sim_tried[k]);
            return found;
        }
    }
    return CUC_SIM_NAME;
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
    int min = min_driver_version();
    CUresult r;

#define CUC_DRV_RESOLVE_(name, ver)                                              \
    st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                                   \
    r = gpa(#name, (void **)&table.name, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st); \
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !table.name)   \
        return cuc__seterr(CUC_E_NO_DRIVER,                                      \
                           "CUDA driver %s lacks %s at ABI version %d "           \
                           "(cuGetProcAddress: result %d, status %d); cucore "   \
                           "needs a CUDA %d.%d or newer driver",                 \
                           lib_path, #name, ver, (int)r, (int)st, min / 1000,    \
                           min % 1000 / 10);
    CUC_DRIVER_SYMS(CUC_DRV_RESOLVE_)
#undef CUC_DRV_RESOLVE_
    return 0;
}

static int open_failed(const char *name, const char *why)
{
    if (drv_simulated && sim_tried[0][0])
        return cuc__seterr(CUC_E_NO_DRIVER,
                           "cannot load the simulated driver: neither %s nor %s "
                           "is there, and dlopen(\"%s\") found none: %s; install "
                           "libcucore-sim.so next to libcucore, or set "
                           "CUCORE_DRIVER to its path",
                           sim_tried[0], sim_tried[1], name, why);
    return cuc__seterr(CUC_E_NO_DRIVER,
                       "cannot load the CUDA driver %s: %s; install the NVIDIA "
                       "driver, or set CUCORE_DRIVER=sim to use the simulated "
                       "driver", name, why);
}

static int open_library(void **handle)
{
    const char *name = choose_library();
    void *h;

    snprintf(lib_path, sizeof(lib_path), "%s", name);
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return open_failed(name, why ? why : "dlopen failed");
    }
    *handle = h;
    return 0;
}

/* cuInit's status says little about a simulator's settings; the simulator
 * tells why through cucoreSimInitError() (sim/README.md). The NVIDIA
 * driver has no such function. */
static const char *init_detail(void *handle)
{
    const char *(*why)(void);
    const char *s;

    *(void **)&why = dlsym(handle, "cucoreSimInitError");
    s = why ? why() : NULL;
    return s ? s : "";
}

static int init_driver(void *handle)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    CUresult r = table.cuInit(0);
    const char *why;

    if (r == CUDA_SUCCESS)
        return 0;
    why = init_detail(handle);
    cuc__cuda_err(r, "cuInit", "driver %s, CUDA_VISIBLE_DEVICES%s%s%s%s%s", lib_path,
                  cvd ? "=\"" : " unset", cvd ? cvd : "", cvd ? "\"" : "",
                  why[0] ? ": " : "", why);
    return r == CUDA_ERROR_NO_DEVICE ? CUC_E_NO_DEVICE : CUC_E_DRIVER;
}

static int load(void)
{
    PFN_cuGetProcAddress_v12000 gpa;
    void *handle = NULL;
    int rc, min;

    rc = open_library(&handle);
    if (rc)
        return rc;
    gpa = (PFN_cuGetProcAddress_v12000)dlsym(handle, "cuGetProcAddress_v2");
    if (!gpa) {
        min = min_driver_version();
        rc = cuc__seterr(CUC_E_NO_DRIVER,
                         "CUDA driver %s has no cuGetProcAddress_v2; cucore "
                         "needs a CUDA %d.%d or newer driver", lib_path,
                         min / 1000, min % 1000 / 10);
        goto close_library;
    }
    rc = resolve_all(gpa);
    if (rc)
        goto close_library;
    if (table.cuDriverGetVersion(&drv_version) != CUDA_SUCCESS)
        drv_version = 0;
    /* The table is complete: error names can come from the driver now,
     * including cuInit's. */
    drv_loader = cuc__pid();
    cuc__drv_table = &table;
    rc = init_driver(handle);
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
    /* CUDA does not survive fork() (sim/FACTS.md F6), and the driver's
     * code does not say why. */
    if (drv_loader && drv_loader != cuc__pid())
        cuc__adderr(" (this process, pid %ld, is a fork() child of process %ld, which "
                    "had loaded the CUDA driver: CUDA cannot be used after fork; start "
                    "the child with spawn or exec instead, e.g. Python's "
                    "multiprocessing.get_context(\"spawn\"))", (long)cuc__pid(),
                    (long)drv_loader);
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
