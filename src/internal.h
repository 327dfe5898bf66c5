/* Internal declarations shared by the library's source files. Nothing here
 * is public; every non-static symbol uses the cuc__ prefix. */
#ifndef CUC_INTERNAL_H
#define CUC_INTERNAL_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "cucore.h"
#include "driver_syms.h"

#if defined(__GNUC__)
#define CUC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define CUC_LIKELY(x) __builtin_expect(!!(x), 1)
#define CUC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define CUC_PRINTF(a, b)
#define CUC_LIKELY(x) (x)
#define CUC_UNLIKELY(x) (x)
#endif

#define CUC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- error.c ---- */
int cuc__seterr(int status, const char *fmt, ...) CUC_PRINTF(2, 3);
int cuc__vseterr(int status, const char *fmt, va_list ap);
/* A peer's bytes that do not decode: CUC_E_BADMSG with fmt's detail. */
int cuc__badmsg(const char *fmt, ...) CUC_PRINTF(1, 2);
/* Closes every fd of fds[0..n) that is not -1 and sets it to -1: for the
 * error paths that must close what they received. */
void cuc__close_fds(int *fds, size_t n);
/* errno-based failure: appends strerror(err); returns CUC_E_IO, _NOMEM or
 * _PERMISSION. */
int cuc__errno_err(int err, const char *fmt, ...) CUC_PRINTF(2, 3);
/* Driver failure: "call failed: CUDA_ERROR_X (text): detail". Returns the
 * mapped status (CUC_E_DRIVER for most results). fmt may be NULL. */
int cuc__cuda_err(CUresult r, const char *call, const char *fmt, ...) CUC_PRINTF(3, 4);
void cuc__adderr(const char *fmt, ...) CUC_PRINTF(1, 2);
/* Reinstates a saved failure (status, CUresult, text) as this thread's. */
int cuc__restore_err(int status, int cuda, const char *msg);

/* ---- driver.c: the only code that touches libcuda ---- */
struct cuc__driver {
#define CUC_DRV_FIELD_(name, ver) PFN_##name##_v##ver name;
    CUC_DRIVER_SYMS(CUC_DRV_FIELD_)
#undef CUC_DRV_FIELD_
};

/* The loaded driver table, or NULL before a successful cuc__driver_get(). */
extern const struct cuc__driver *cuc__drv_table;

/* Loads the driver (once per process) and calls cuInit. On failure the
 * same status and message are reported to every caller. */
int cuc__driver_get(const struct cuc__driver **out);

/* The driver table, loading it first if needed; for call sites that have
 * already checked it loaded (devices exist only after a load). */
#define CUC_DRV (cuc__drv_table)

const char *cuc__cuda_name(CUresult r);
const char *cuc__cuda_text(CUresult r);

/* ---- device.c ---- */
struct cuc_device {
    int ordinal;
    CUdevice cu;
    cuc_uuid uuid;
    char uuid_str[CUC_UUID_STRLEN];
    char name[128];
    char pci_bus_id[32];
    int cc_major, cc_minor;
    size_t total_mem;
    unsigned caps;
    CUcontext ctx; /* primary context, retained once, never released */
};

/* Makes d's primary context current on this thread (a no-op when it
 * already is). */
int cuc__device_activate(const cuc_device *d);

/* Fills the not-visible error for uuid: names it and lists what this
 * process sees. Returns CUC_E_NOT_VISIBLE (or the enumeration failure). */
int cuc__device_not_visible(const cuc_uuid *uuid);

/* The device for a driver-visible CUdevice number (the ordinal). */
const cuc_device *cuc__device_by_cu(CUdevice cu);

#endif
