/* cucore status codes and error reporting.
 *
 * Every cucore function that can fail returns an int: 0 on success, or one
 * of the negative CUC_E_* codes below. Output parameters are written only
 * on success. After a failure, cuc_errmsg() returns a description of that
 * failure for the calling thread: it names the object involved (a device
 * UUID, a pool id, an fd count) and, where there is one, what to do about
 * it. The text is valid until the thread's next failing cucore call.
 *
 * Every function here is thread-safe and cannot fail.
 */
#ifndef CUCORE_ERROR_H
#define CUCORE_ERROR_H

#include <cucore/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, text): the one list of status codes. */
#define CUC_ERRNO_MAP(X)                                                          \
    X(OK, 0, "success")                                                           \
    X(INVALID, -1, "invalid argument")                                            \
    X(NOMEM, -2, "out of memory")                                                 \
    X(NO_DRIVER, -3, "CUDA driver not found or unusable")                         \
    X(DRIVER, -4, "CUDA driver call failed")                                      \
    X(NO_DEVICE, -5, "no CUDA device is visible")                                 \
    X(NOT_VISIBLE, -6, "device not visible in this process")                      \
    X(NOT_SERIALIZABLE, -7, "object cannot cross a process boundary")             \
    X(NEEDS_CHANNEL, -8, "object carries file descriptors: send it on a channel") \
    X(POOL_NOT_IMPORTED, -9, "memory pool not imported in this process")          \
    X(BADMSG, -10, "malformed message")                                           \
    X(VERSION, -11, "unsupported message or record version or type")              \
    X(PEER_CLOSED, -12, "peer closed the channel")                                \
    X(TIMEOUT, -13, "timed out")                                                  \
    X(PERMISSION, -14, "permission denied")                                       \
    X(IO, -15, "system call failed")                                              \
    X(NOT_SUPPORTED, -16, "not supported")                                        \
    X(LIMIT, -17, "a limit was exceeded")                                         \
    X(NOT_FOUND, -18, "not found")                                                \
    X(BUSY, -19, "resource busy")                                                 \
    X(FORKED, -20, "object inherited through fork(): inert in this process")     \
    X(FOREIGN_HOST, -21, "the bytes name a share point on another machine")     \
    X(EXPORTER_GONE, -22, "the process that shared the object is gone")

enum cuc_status {
#define CUC_ERRNO_ENUM_(name, value, text) CUC_E_##name = (value),
    CUC_ERRNO_MAP(CUC_ERRNO_ENUM_)
#undef CUC_ERRNO_ENUM_
};

/* Static text for a status code ("unknown error" for a value not listed).
 * Never NULL. */
CUC_API const char *cuc_strerror(int status);

/* The code's name, "CUC_E_NOT_VISIBLE" ("CUC_E_UNKNOWN" if not listed).
 * Never NULL. */
CUC_API const char *cuc_errname(int status);

/* Detail of the calling thread's last failure, or "" if none. Never NULL.
 * Thread-local: another thread's failure never overwrites it. The text
 * stays valid until this thread's next failing cucore call. */
CUC_API const char *cuc_errmsg(void);

/* The CUresult of the calling thread's last failing driver call made by
 * cucore (0 if the last failure did not come from the driver). */
CUC_API int cuc_errcuda(void);

#ifdef __cplusplus
}
#endif
#endif
