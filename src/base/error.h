/* The thread-local last error (error.c): every failing function sets it
 * and returns its status. Nothing here touches the driver or the OS; the
 * driver layer formats CUresults (driver/driver.h: cuc__cuda_err) and the
 * OS layer errno values through these. */
#ifndef CUC_BASE_ERROR_H
#define CUC_BASE_ERROR_H

#include <stdarg.h>

#include "cucore/error.h"
#include "base/compiler.h"

/* Sets this thread's error to status and fmt's text; returns status. */
int cuc__seterr(int status, const char *fmt, ...) CUC_PRINTF(2, 3);
int cuc__vseterr(int status, const char *fmt, va_list ap);
/* Records a driver result for cuc_errcuda() with the error just set. */
void cuc__set_errcuda(int cuda);
/* A peer's bytes that do not decode: CUC_E_BADMSG with the detail. */
#define cuc__badmsg(...) cuc__seterr(CUC_E_BADMSG, __VA_ARGS__)
/* errno-based failure: appends strerror(err); returns CUC_E_IO, _NOMEM or
 * _PERMISSION. */
int cuc__errno_err(int err, const char *fmt, ...) CUC_PRINTF(2, 3);
/* Appends to this thread's message (context added on the way up). */
void cuc__adderr(const char *fmt, ...) CUC_PRINTF(1, 2);

/* A failure kept to be reported again: a one-time initialisation that
 * failed, a channel direction that broke, or the caller's error saved
 * around work that must not disturb it. status 0: nothing saved. */
struct cuc__err_saved {
    int status;
    int cuda;
    char msg[1024];
};

/* Saves this thread's error under status; returns status. */
int cuc__err_save(struct cuc__err_saved *s, int status);
/* Makes the saved error this thread's again (text and driver result);
 * returns the saved status. */
int cuc__err_restore(const struct cuc__err_saved *s);

#endif
