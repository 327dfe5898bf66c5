/* Shared by tests/test_sim_*.c: loads the simulator straight from
 * CUC_SIM_PATH (no cucore in between), resolves every entry point of
 * src/driver/driver_syms.h through its cuGetProcAddress, and helps run children
 * (fork + exec of the test binary) and pass fds over Unix sockets. */
#ifndef CUC_SIM_TEST_H
#define CUC_SIM_TEST_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"
#include "driver/driver_syms.h"
#include "../cucore_sim.h"

struct sim_drv {
    void *handle;
    PFN_cuGetProcAddress_v12000 gpa;
#define SIM_T_MEMBER(name, ver) PFN_##name##_v##ver name;
    CUC_DRIVER_SYMS(SIM_T_MEMBER)
#undef SIM_T_MEMBER
};

static struct sim_drv D;

/* The simulator's own controls (sim/cucore_sim.h), after sim_t_load. */
struct sim_ctl {
    cucore_sim_fail_fn fail;
    cucore_sim_calls_fn calls;
    cucore_sim_faults_fn faults;
    cucore_sim_env_error_fn env_error;
};
static struct sim_ctl S;

static inline const char *sim_t_errname(CUresult r)
{
    const char *s = NULL;

    if (D.cuGetErrorName && D.cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "?";
}

/* Calls, compares the CUresult, fails the test with both names. */
#define CU_RC(call, want)                                                      \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        CUresult w_ = (want);                                                  \
        if (r_ != w_) {                                                        \
            fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d (%s)\n",    \
                    __FILE__, __LINE__, #call, (int)r_, sim_t_errname(r_),     \
                    (int)w_, sim_t_errname(w_));                               \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
#define CU_OK(call) CU_RC(call, CUDA_SUCCESS)

/* The environment every test starts from: 4 GPUs, no knobs. Children get
 * their overrides on top of it (spawn_self). */
static inline void sim_t_clean_env(void)
{
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("CUCORE_SIM_UUIDS");
    unsetenv("CUCORE_SIM_HIDE");
    unsetenv("CUCORE_SIM_POOL_BYTES");
    unsetenv("CUCORE_SIM_FAIL");
    unsetenv("CUCORE_SIM_TRACE");
    unsetenv("CUCORE_SIM_NO_PEER");
    setenv("CUCORE_SIM_GPUS", "4", 1);
}

/* A program that may load the real libcuda instead of the simulator (the
 * driver probes) defines SIM_T_CTL_OPTIONAL to 1: the simulator's control
 * entry points then stay NULL where the library lacks them. */
#ifndef SIM_T_CTL_OPTIONAL
#define SIM_T_CTL_OPTIONAL 0
#endif

/* dlopen + resolve everything; does not call cuInit. */
static inline void sim_t_load(void)
{
    void *gpa;

    if (D.handle)
        return;
    D.handle = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!D.handle) {
        fprintf(stderr, "dlopen %s: %s\n", CUC_SIM_PATH, dlerror());
        exit(1);
    }
    gpa = dlsym(D.handle, "cuGetProcAddress_v2");
    CHECK(gpa != NULL);
    memcpy(&D.gpa, &gpa, sizeof(gpa));
#define SIM_T_RESOLVE(name, ver)                                               \
    do {                                                                       \
        void *p_ = NULL;                                                       \
        CUdriverProcAddressQueryResult st_ = CU_GET_PROC_ADDRESS_SUCCESS;      \
        CUresult r_ = D.gpa(#name, &p_, ver, 0, &st_);                         \
        if (r_ != CUDA_SUCCESS || st_ != CU_GET_PROC_ADDRESS_SUCCESS || !p_) { \
            fprintf(stderr, "cuGetProcAddress(%s, %d): %d status %d\n",        \
                    #name, ver, (int)r_, (int)st_);                            \
            exit(1);                                                           \
        }                                                                      \
        memcpy(&D.name, &p_, sizeof(p_));                                      \
    } while (0);
    CUC_DRIVER_SYMS(SIM_T_RESOLVE)
#undef SIM_T_RESOLVE
#define SIM_T_CTL(member, name)                                                \
    do {                                                                       \
        void *p_ = dlsym(D.handle, name);                                      \
        if (!SIM_T_CTL_OPTIONAL)                                               \
            CHECK(p_ != NULL);                                                 \
        memcpy(&S.member, &p_, sizeof(p_));                                    \
    } while (0)
    SIM_T_CTL(fail, "cucore_sim_fail");
    SIM_T_CTL(calls, "cucore_sim_calls");
    SIM_T_CTL(faults, "cucore_sim_faults");
    SIM_T_CTL(env_error, "cucore_sim_env_error");
#undef SIM_T_CTL
}

/* Load, cuInit, and make device dev's primary context current. */
static inline CUcontext sim_t_init_ctx(int dev)
{
    CUcontext ctx = NULL;

    sim_t_load();
    CU_OK(D.cuInit(0));
    CU_OK(D.cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(D.cuCtxSetCurrent(ctx));
    return ctx;
}

static inline void sim_t_uuid_str(const CUuuid *u, char out[44])
{
    const unsigned char *b = (const unsigned char *)u->bytes;

    snprintf(out, 44,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
             b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* ---- children ------------------------------------------------------------ */

/* The fd a child got from spawn_self (CUC_TEST_FD), or -1. */
static inline int sim_t_child_fd(void)
{
    const char *s = getenv("CUC_TEST_FD");
    return s ? atoi(s) : -1;
}

/* Writes all of buf to fd. */
static inline void sim_t_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;

    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        CHECK(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

/* Child side: reports a line of text to the parent. */
static inline void sim_t_report(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static inline void sim_t_report(const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    int fd = sim_t_child_fd(), n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    CHECK(fd >= 0 && n >= 0 && (size_t)n < sizeof(buf));
    sim_t_write_all(fd, buf, (size_t)n);
}

/* Runs `self --child role args...` with env overrides; collects what it
 * reports into out (NUL-terminated) and returns its exit status. */
static inline int sim_t_run(const char *role, const char *const *args,
                            const char *const *env, char *out, size_t cap)
{
    int p[2];
    size_t len = 0;
    pid_t pid;

    CHECK(pipe2(p, O_CLOEXEC) == 0);
    pid = spawn_self(role, args, env, p[1]);
    CHECK(pid > 0);
    close(p[1]);
    for (;;) {
        ssize_t r = read(p[0], out + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == cap - 1)
            break;
    }
    out[len] = '\0';
    close(p[0]);
    return wait_child(pid);
}

/* ---- fds over a Unix socket ---------------------------------------------- */

/* Sends n bytes of data with up to 4 fds attached. */
static inline void sim_t_send(int sock, const void *data, size_t n,
                              const int *fds, int nfds)
{
    char cbuf[CMSG_SPACE(4 * sizeof(int))];
    struct iovec iov = {(void *)data, n};
    struct msghdr mh;

    memset(&mh, 0, sizeof(mh));
    memset(cbuf, 0, sizeof(cbuf));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (nfds > 0) {
        struct cmsghdr *c;
        CHECK(nfds <= 4);
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    CHECK(sendmsg(sock, &mh, 0) == (ssize_t)n);
}

/* Receives exactly n bytes (one message) and its fds (CLOEXEC). Returns
 * the number of fds. */
static inline int sim_t_recv(int sock, void *data, size_t n, int *fds,
                             int maxfds)
{
    char cbuf[CMSG_SPACE(4 * sizeof(int))];
    struct iovec iov = {data, n};
    struct msghdr mh;
    struct cmsghdr *c;
    int got = 0;

    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof(cbuf);
    CHECK(recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL) == (ssize_t)n);
    for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            CHECK(k <= maxfds);
            memcpy(fds, CMSG_DATA(c), (size_t)k * sizeof(int));
            got = k;
        }
    return got;
}

static inline int sim_t_is_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFD);
    return fl >= 0 && (fl & FD_CLOEXEC);
}

#endif
