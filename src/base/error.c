/* Status codes (the X-macro of cucore/error.h) and the thread-local last
 * error. */
#include "base/error.h"

#include <errno.h>
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

void cuc__set_errcuda(int cuda)
{
    last_cuda = cuda;
}

int cuc__errno_err(int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cuc__vseterr(CUC_E_IO, fmt, ap);
    va_end(ap);
    cuc__adderr(": %s", strerror(err));
    if (err == ENOMEM)
        return CUC_E_NOMEM;
    if (err == EACCES || err == EPERM)
        return CUC_E_PERMISSION;
    return CUC_E_IO;
}

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

/* A message copied as the bytes it has: a deferred free saves and
 * restores the caller's message around its work, once a buffer, where
 * snprintf's "%s" cost ~570 instructions a copy (bench_legacy under
 * callgrind). Both arrays are sizeof(last_msg). */
static void msg_copy(char *dst, const char *src)
{
    size_t n = strnlen(src, sizeof(last_msg) - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

int cuc__err_save(struct cuc__err_saved *s, int status)
{
    _Static_assert(sizeof(s->msg) == sizeof(last_msg), "saved messages are whole");
    s->status = status;
    s->cuda = last_cuda;
    msg_copy(s->msg, last_msg);
    return status;
}

int cuc__err_restore(const struct cuc__err_saved *s)
{
    msg_copy(last_msg, s->msg);
    last_cuda = s->cuda;
    return s->status;
}
