/* Status codes and the thread-local last-error message. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_msg[1024];
static _Thread_local int last_cuda;

const char *cuc_strerror(int status)
{
    switch (status) {
#define CUC_ERRNO_TEXT_(name, value, text) case value: return text;
        CUC_ERRNO_MAP(CUC_ERRNO_TEXT_)
#undef CUC_ERRNO_TEXT_
    }
    return "unknown error";
}

const char *cuc_errname(int status)
{
    switch (status) {
#define CUC_ERRNO_NAME_(name, value, text) case value: return "CUC_E_" #name;
        CUC_ERRNO_MAP(CUC_ERRNO_NAME_)
#undef CUC_ERRNO_NAME_
    }
    return "CUC_E_UNKNOWN";
}

const char *cuc_errmsg(void)
{
    return last_msg;
}

int cuc_errcuda(void)
{
    return last_cuda;
}

int cuc__vseterr(int status, const char *fmt, va_list ap)
{
    vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
    last_cuda = 0;
    return status;
}

int cuc__seterr(int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cuc__vseterr(status, fmt, ap);
    va_end(ap);
    return status;
}

int cuc__badmsg(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cuc__vseterr(CUC_E_BADMSG, fmt, ap);
    va_end(ap);
    return CUC_E_BADMSG;
}

int cuc__errno_err(int err, const char *fmt, ...)
{
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
    va_end(ap);
    n = strlen(last_msg);
    if (n < sizeof(last_msg))
        snprintf(last_msg + n, sizeof(last_msg) - n, ": %s", strerror(err));
    last_cuda = 0;
    if (err == ENOMEM)
        return CUC_E_NOMEM;
    if (err == EACCES || err == EPERM)
        return CUC_E_PERMISSION;
    return CUC_E_IO;
}

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
    const char *name = cuc__cuda_name(r);
    const char *text = cuc__cuda_text(r);
    va_list ap;
    int n;

    n = snprintf(last_msg, sizeof(last_msg), "%s failed: %s (%s)", call, name, text);
    if (fmt && n >= 0 && (size_t)n < sizeof(last_msg) - 2) {
        last_msg[n++] = ':';
        last_msg[n++] = ' ';
        va_start(ap, fmt);
        vsnprintf(last_msg + n, sizeof(last_msg) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    last_cuda = (int)r;
    return status_for_cuda(r);
}

/* Appends to the current message; used to add context on the way up. */
void cuc__adderr(const char *fmt, ...)
{
    size_t n = strlen(last_msg);
    va_list ap;

    if (n >= sizeof(last_msg) - 1)
        return;
    va_start(ap, fmt);
    vsnprintf(last_msg + n, sizeof(last_msg) - n, fmt, ap);
    va_end(ap);
}

int cuc__restore_err(int status, int cuda, const char *msg)
{
    snprintf(last_msg, sizeof(last_msg), "%s", msg);
    last_cuda = cuda;
    return status;
}
