/* Naming a failed driver call. */
#include "driver/driver.h"

#include <stdio.h>

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

    cuc__seterr_cuda(status, (int)r, "%s failed: %s (%s)", call, cuc__cuda_name(r),
                     cuc__cuda_text(r));
    if (fmt) {
        char detail[1024];
        va_start(ap, fmt);
        vsnprintf(detail, sizeof(detail), fmt, ap);
        va_end(ap);
        cuc__adderr(": %s", detail);
    }
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
