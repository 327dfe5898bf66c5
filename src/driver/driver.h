/* The CUDA driver (driver.c): the one place that touches libcuda. Every
 * other file calls the driver through this table, and names a failed call
 * with cuc__cuda_err. */
#ifndef CUC_DRIVER_DRIVER_H
#define CUC_DRIVER_DRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "cucore/driver.h"
#include "base/error.h"
#include "driver/driver_syms.h"

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

/* The driver table, for call sites that have already checked it loaded
 * (devices exist only after a load). */
#define CUC_DRV (cuc__drv_table)

/* CUDA_ERROR_X and its text, from the driver when it is loaded. */
const char *cuc__cuda_name(CUresult r);
const char *cuc__cuda_text(CUresult r);

/* A failed driver call: "call failed: CUDA_ERROR_X (text): detail", the
 * CUresult kept for cuc_errcuda(). Returns the status for r (CUC_E_NOMEM,
 * _NO_DEVICE, _NOT_SUPPORTED, _NOT_FOUND, else CUC_E_DRIVER). fmt may be
 * NULL. */
int cuc__cuda_err(CUresult r, const char *call, const char *fmt, ...) CUC_PRINTF(3, 4);

#endif
