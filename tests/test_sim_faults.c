/* Simulator: fault injection and call counting (CUCORE_SIM_FAIL,
 * CUCORE_SIM_TRACE, cucore_sim_fail / _calls / _faults). Every entry point
 * of src/driver/driver_syms.h can be failed; each form of the spec; the K-th call
 * fails exactly once and has no effect; the default error; malformed specs
 * in process and in the environment; counts across threads, after fork and
 * in exec'd children; and the use the tool is for: a two-process scenario
 * (pool export / import over a socket) counted once with a trace on both
 * sides, then run once per driver call of each side with that call
 * failing. */
#include "../sim/testdata/sim_test.h"

#include <pthread.h>
#include <sys/stat.h>

#define MiB ((size_t)1 << 20)

static unsigned long long calls(const char *name)
{
    unsigned long long v = ~0ull;

    CHECK(S.calls(name, &v) == 0);
    return v;
}

static void fail_ok(const char *spec)
{
    char why[256] = "";

    if (S.fail(spec, why, sizeof(why)) != 0) {
        fprintf(stderr, "cucore_sim_fail(\"%s\") refused: %s\n", spec, why);
        exit(1);
    }
}

/* ---- every entry point of driver_syms.h ---------------------------------- */

/* Each entry point is called with zeroed arguments, six of them, through
 * one pointer type: the hook returns before the function reads any
 * argument, and in the x86-64 and AArch64 calling conventions a callee
 * simply ignores registers it does not take. An entry point without the
 * hook would run on those zeroes and answer something other than the
 * injected CUDA_ERROR_ILLEGAL_STATE, which fails the test. */
typedef CUresult (*any6_fn)(uintptr_t, uintptr_t, uintptr_t, uintptr_t,
                            uintptr_t, uintptr_t);

static void inject_one(const char *name, int ver, void *fn)
{
    char spec[128];
    any6_fn f;
    CUresult r;

    (void)ver;
    snprintf(spec, sizeof(spec), "%s:1:CUDA_ERROR_ILLEGAL_STATE", name);
    fail_ok(spec);
    memcpy(&f, &fn, sizeof(f));
    r = f(0, 0, 0, 0, 0, 0);
    if (r != CUDA_ERROR_ILLEGAL_STATE || S.faults() != 1 || calls(name) != 1) {
        fprintf(stderr, "%s: result %d, %llu faults, %llu calls\n", name,
                (int)r, S.faults(), calls(name));
        exit(1);
    }
}

static void test_every_entry_point(void)
{
    int n = 0;

#define INJECT_ONE(name, ver)                                                  \
    do {                                                                       \
        void *p_;                                                              \
        memcpy(&p_, &D.name, sizeof(p_));                                      \
        inject_one(#name, ver, p_);                                            \
        n++;                                                                   \
    } while (0);
    CUC_DRIVER_SYMS(INJECT_ONE)
#undef INJECT_ONE
    /* the 32-bit and per-thread forms count as their base name */
    {
        void *p = NULL;
        CUdriverProcAddressQueryResult st;
        CU_OK(D.gpa("cuMemcpyHtoDAsync", &p, 2000, 0, &st));
        inject_one("cuMemcpyHtoDAsync", 2000, p);
        CU_OK(D.gpa("cuStreamQuery", &p, 7000,
                    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
        inject_one("cuStreamQuery", 7000, p);
        CU_OK(D.gpa("cuCtxSynchronize", &p, 13000, 0, &st));
        inject_one("cuCtxSynchronize", 13000, p);
        CU_OK(D.gpa("cuCtxGetStreamPriorityRange", &p, 5050, 0, &st));
        inject_one("cuCtxGetStreamPriorityRange", 5050, p);
    }
    printf("every entry point: %d of driver_syms.h injectable\n", n);
    fail_ok(NULL);
}

/* ---- forms of the spec ----------------------------------------------------- */

static void test_by_name(void)
{
    int n = -7;

    fail_ok("cuDeviceGetCount:3");
    CU_OK(D.cuDeviceGetCount(&n));
    CU_OK(D.cuDeviceGetCount(&n));
    CHECK(n == 4);
    n = -7;
    /* the default error; no effect: the output is not written */
    CU_RC(D.cuDeviceGetCount(&n), CUDA_ERROR_UNKNOWN);
    CHECK(n == -7);
    CU_OK(D.cuDeviceGetCount(&n)); /* exactly once */
    CU_OK(D.cuDeviceGetCount(&n));
    CHECK(S.faults() == 1);
    CHECK(calls("cuDeviceGetCount") == 5 && calls("*") == 5);
    CHECK(calls("cuDeviceGet") == 0);
}

static void test_any_name(void)
{
    CUdevice dev;
    int n;
    const char *s;

    /* the 5th counted call, whatever its name; error names do not count */
    fail_ok("*:5:CUDA_ERROR_OUT_OF_MEMORY");
    CU_OK(D.cuDeviceGetCount(&n));          /* 1 */
    CU_OK(D.cuGetErrorName(CUDA_ERROR_UNKNOWN, &s));
    CU_OK(D.cuDeviceGet(&dev, 1));          /* 2 */
    CU_OK(D.cuGetErrorString(CUDA_ERROR_UNKNOWN, &s));
    CU_OK(D.cuDeviceGetCount(&n));          /* 3 */
    CU_OK(D.cuDeviceGet(&dev, 0));          /* 4 */
    CU_OK(D.cuGetErrorName(CUDA_ERROR_UNKNOWN, &s));
    dev = 77;
    CU_RC(D.cuDeviceGet(&dev, 2), CUDA_ERROR_OUT_OF_MEMORY); /* 5 */
    CHECK(dev == 77);
    CU_OK(D.cuDeviceGet(&dev, 2));          /* 6 */
    CHECK(dev == 2);
    CHECK(calls("*") == 6 && calls(NULL) == 6);
    CHECK(calls("cuDeviceGet") == 4 && calls("cuDeviceGetCount") == 2);
    CHECK(calls("cuGetErrorName") == 2 && calls("cuGetErrorString") == 1);
    CHECK(S.faults() == 1);

    /* an error name or a bare number; error names fail when named */
    fail_ok("cuGetErrorName:2:CUDA_ERROR_INVALID_VALUE, cuDeviceGet:1:201");
    CU_OK(D.cuGetErrorName(CUDA_ERROR_UNKNOWN, &s));
    s = "kept";
    CU_RC(D.cuGetErrorName(CUDA_ERROR_UNKNOWN, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(strcmp(s, "kept") == 0);
    CU_RC(D.cuDeviceGet(&dev, 0), CUDA_ERROR_INVALID_CONTEXT); /* 201 */
    CHECK(S.faults() == 2 && calls("*") == 1);
}

static void test_persistent_and_several(void)
{
    int n;
    CUdevice dev;

    fail_ok("cuDeviceGetCount:2+");
    CU_OK(D.cuDeviceGetCount(&n));
    for (int i = 0; i < 5; i++)
        CU_RC(D.cuDeviceGetCount(&n), CUDA_ERROR_UNKNOWN);
    CU_OK(D.cuDeviceGet(&dev, 0)); /* other names are not touched */
    CHECK(S.faults() == 5);

    /* several specs: the first that matches gives the error */
    fail_ok("cuDeviceGet:2:CUDA_ERROR_INVALID_DEVICE,*:2:CUDA_ERROR_NOT_READY,"
            "*:4+:CUDA_ERROR_OUT_OF_MEMORY");
    CU_OK(D.cuDeviceGet(&dev, 0));                            /* *1, name 1 */
    CU_RC(D.cuDeviceGet(&dev, 0), CUDA_ERROR_INVALID_DEVICE); /* *2, name 2 */
    CU_OK(D.cuDeviceGetCount(&n));                            /* *3 */
    CU_RC(D.cuDeviceGetCount(&n), CUDA_ERROR_OUT_OF_MEMORY);  /* *4 */
    CU_RC(D.cuDeviceGet(&dev, 0), CUDA_ERROR_OUT_OF_MEMORY);  /* *5 */
    CHECK(S.faults() == 3);

    /* cucore_sim_fail(NULL) and "" remove every spec */
    fail_ok("");
    CU_OK(D.cuDeviceGetCount(&n));
    fail_ok(NULL);
    CU_OK(D.cuDeviceGetCount(&n));
    CHECK(S.faults() == 0 && calls("*") == 1);
}

/* A failed allocation leaves the pool as it was. */
static void test_no_effect(void)
{
    CUmemPoolProps p;
    CUmemoryPool pool;
    CUdeviceptr a = 12345;
    cuuint64_t used = 1;

    memset(&p, 0, sizeof(p));
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.maxSize = 2 * MiB;
    fail_ok("cuMemPoolCreate:1");
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_UNKNOWN);
    CU_OK(D.cuMemPoolCreate(&pool, &p));
    fail_ok("cuMemAllocFromPoolAsync:1:CUDA_ERROR_OUT_OF_MEMORY");
    CU_RC(D.cuMemAllocFromPoolAsync(&a, 4096, pool, NULL),
          CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(a == 12345);
    CU_OK(D.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK(used == 0);
    CU_OK(D.cuMemAllocFromPoolAsync(&a, 4096, pool, NULL));
    fail_ok("cuMemFreeAsync:1");
    CU_RC(D.cuMemFreeAsync(a, NULL), CUDA_ERROR_UNKNOWN);
    CU_OK(D.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK(used == 4096); /* still allocated: the free did not happen */
    CU_OK(D.cuMemFreeAsync(a, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
    fail_ok(NULL);
}

static void test_malformed(void)
{
    static const char *const bad[] = {
        "cuDeviceGetCount",          /* no ordinal */
        "cuDeviceGetCount:",         /* empty ordinal */
        "cuDeviceGetCount:0",        /* ordinals start at 1 */
        "cuDeviceGetCount:-1",
        "cuDeviceGetCount:3x",
        "cuDeviceGetCount:99999999999999999999",
        "cuDeviceGetCount:1:CUDA_ERROR_NOPE",
        "cuDeviceGetCount:1:CUDA_SUCCESS",
        "cuDeviceGetCount:1:0",
        "cuDeviceGetCount:1:",
        "cuNoSuchThing:1",
        "cuMemAlloc_v2:1",           /* base names only */
        "cuGetProcAddress:1",        /* not hooked */
        ":1",
        "*:1,",
        ",*:1",
        "*:1,,*:2",
        "*:+",
        "*:1++",
    };
    char why[256];
    int n;

    fail_ok("cuDeviceGetCount:2");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        if (S.fail(bad[i], why, sizeof(why)) != -1 || why[0] == '\0') {
            fprintf(stderr, "spec '%s' was taken (why '%s')\n", bad[i], why);
            exit(1);
        }
    }
    CHECK(S.fail("cuDeviceGetCount:1:CUDA_ERROR_NOPE", NULL, 0) == -1);
    CHECK(S.fail("cuNoSuchThing:1", why, sizeof(why)) == -1);
    CHECK(strstr(why, "cuNoSuchThing") != NULL);
    /* a refused spec changed nothing: the old one still holds, and its
     * count was not restarted */
    CU_OK(D.cuDeviceGetCount(&n));
    CU_RC(D.cuDeviceGetCount(&n), CUDA_ERROR_UNKNOWN);
    {
        /* 64 specs are taken, 65 are not */
        char big[65 * 24] = "";
        for (int i = 0; i < 64; i++)
            snprintf(big + strlen(big), sizeof(big) - strlen(big), "%s*:%d",
                     i ? "," : "", 1000 + i);
        fail_ok(big);
        strcat(big, ",*:9999");
        CHECK(S.fail(big, why, sizeof(why)) == -1 && strstr(why, "64"));
    }
    CHECK(S.calls("cuNoSuchThing", &(unsigned long long){0}) == -1);
    fail_ok(NULL);
}

/* ---- threads and fork ---------------------------------------------------- */

struct thr {
    int fails;
};

static void *count_thread(void *arg)
{
    struct thr *t = arg;
    int n;

    for (int i = 0; i < 2000; i++) {
        CUresult r = D.cuDeviceGetCount(&n);
        CHECK(r == CUDA_SUCCESS || r == CUDA_ERROR_UNKNOWN);
        t->fails += r != CUDA_SUCCESS;
    }
    return NULL;
}

static void test_threads(void)
{
    struct thr t[4];
    pthread_t th[4];
    int total = 0;

    fail_ok("*:4321,cuDeviceGetCount:7777");
    for (int i = 0; i < 4; i++) {
        t[i].fails = 0;
        CHECK(pthread_create(&th[i], NULL, count_thread, &t[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        total += t[i].fails;
    }
    CHECK(total == 2); /* each ordinal is one call's, in one thread */
    CHECK(S.faults() == 2 && calls("*") == 8000);
    fail_ok(NULL);
}

/* A forked child is a process of its own: its counts start again. */
static void test_fork(void)
{
    int n;
    pid_t pid;

    fail_ok("cuDeviceGetCount:1");
    CU_RC(D.cuDeviceGetCount(&n), CUDA_ERROR_UNKNOWN);
    CHECK(calls("*") == 1);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        unsigned long long v = 9;
        /* no CUDA here (forked only): the counts are asked, nothing else */
        _exit(S.calls("*", &v) == 0 && v == 0 && S.faults() == 0 ? 0 : 1);
    }
    CHECK(wait_child(pid) == 0);
    CHECK(calls("*") == 1 && S.faults() == 1);
    fail_ok(NULL);

    /* A forked child of a process that initialised the driver is refused
     * every call (sim/FACTS.md F6), with CUDA_ERROR_NOT_INITIALIZED; error
     * names and the driver version still answer. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int v = 0, ok;
        const char *nm = NULL;
        CUcontext c = NULL;
        ok = D.cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED &&
             D.cuInit(0) == CUDA_ERROR_NOT_INITIALIZED &&
             D.cuCtxGetCurrent(&c) == CUDA_ERROR_NOT_INITIALIZED &&
             D.cuMemFreeAsync(0, NULL) == CUDA_ERROR_NOT_INITIALIZED &&
             D.cuDriverGetVersion(&v) == CUDA_SUCCESS && v == 13000 &&
             D.cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &nm) == CUDA_SUCCESS &&
             strcmp(nm, "CUDA_ERROR_NOT_INITIALIZED") == 0;
        _exit(ok ? 0 : 1);
    }
    CHECK(wait_child(pid) == 0);
    CU_OK(D.cuDeviceGetCount(&n)); /* the parent is unaffected */
}

/* ---- the environment, in exec'd children --------------------------------- */

static int child_env(int argc, char **argv)
{
    const char *mode = argc > 3 ? argv[3] : "";
    int n = -1;
    CUresult r1, r2;
    const char *why;

    sim_t_load();
    if (strcmp(mode, "init") == 0) {
        /* "cuInit:1": the first cuInit fails, the next one works */
        r1 = D.cuInit(0);
        r2 = D.cuInit(0);
        sim_t_report("%d %d", (int)r1, (int)r2);
        return 0;
    }
    if (strcmp(mode, "bad") == 0) {
        why = S.env_error();
        r1 = D.cuInit(0);
        r2 = D.cuDeviceGetCount(&n);
        sim_t_report("%d %d %s", (int)r1, (int)r2, why ? why : "(none)");
        return 0;
    }
    /* "count": the env spec counts from this process's first call */
    CU_OK(D.cuInit(0));
    r1 = D.cuDeviceGetCount(&n);
    r2 = D.cuDeviceGetCount(&n);
    sim_t_report("%d %d faults=%llu", (int)r1, (int)r2, S.faults());
    return 0;
}

static void expect_child(const char *mode, const char *envvar,
                         const char *want_prefix)
{
    const char *args[] = {mode, NULL};
    const char *env[] = {envvar, NULL};
    char out[1024];

    CHECK(sim_t_run("env", args, env, out, sizeof(out)) == 0);
    if (strncmp(out, want_prefix, strlen(want_prefix)) != 0) {
        fprintf(stderr, "child %s with %s said '%s', wanted '%s...'\n", mode,
                envvar, out, want_prefix);
        exit(1);
    }
}

static void test_env(void)
{
    char want[256], dir[64] = "/tmp/cucore-sim-faults-XXXXXX", ev[128];

    snprintf(want, sizeof(want), "%d 0", (int)CUDA_ERROR_UNKNOWN);
    expect_child("init", "CUCORE_SIM_FAIL=cuInit:1", want);
    expect_child("init", "CUCORE_SIM_FAIL=*:1", want);
    snprintf(want, sizeof(want), "0 %d faults=1", (int)CUDA_ERROR_OUT_OF_MEMORY);
    expect_child("count", "CUCORE_SIM_FAIL=cuDeviceGetCount:2:CUDA_ERROR_OUT_OF_MEMORY",
                 want);
    /* cuInit is call 1: "*:3" is the second cuDeviceGetCount */
    snprintf(want, sizeof(want), "0 %d faults=1", (int)CUDA_ERROR_UNKNOWN);
    expect_child("count", "CUCORE_SIM_FAIL=*:3", want);
    expect_child("count", "CUCORE_SIM_FAIL=", "0 0 faults=0");

    /* malformed: cuInit fails with CUDA_ERROR_INVALID_VALUE, the reason
     * names the variable and the item */
    snprintf(want, sizeof(want), "%d %d CUCORE_SIM_FAIL=\"cuInit:x\": ",
             (int)CUDA_ERROR_INVALID_VALUE, (int)CUDA_ERROR_NOT_INITIALIZED);
    expect_child("bad", "CUCORE_SIM_FAIL=cuInit:x", want);
    snprintf(want, sizeof(want), "%d %d CUCORE_SIM_FAIL=\"cuMemAlloc_v2:1\": "
             "'cuMemAlloc_v2' is not an entry point",
             (int)CUDA_ERROR_INVALID_VALUE, (int)CUDA_ERROR_NOT_INITIALIZED);
    expect_child("bad", "CUCORE_SIM_FAIL=cuMemAlloc_v2:1", want);
    CHECK(mkdtemp(dir) != NULL);
    snprintf(ev, sizeof(ev), "CUCORE_SIM_TRACE=%s", dir); /* a directory */
    snprintf(want, sizeof(want), "%d %d CUCORE_SIM_TRACE=\"%s\": cannot open",
             (int)CUDA_ERROR_INVALID_VALUE, (int)CUDA_ERROR_NOT_INITIALIZED,
             dir);
    expect_child("bad", ev, want);
    CHECK(rmdir(dir) == 0);
    snprintf(want, sizeof(want), "0 0 (none)");
    expect_child("bad", "CUCORE_SIM_FAIL= ", want);
}

/* ---- counting a two-process scenario, then failing each call ------------- */

struct xfer {
    CUmemPoolPtrExportData data;
    uint32_t size;
};

/* What a child saw: its first failure (call NULL if none), and whether
 * its peer went away. */
struct outcome {
    const char *call;
    CUresult rc;
    int peer_gone;
};

static void note(struct outcome *o, const char *call, CUresult rc)
{
    if (!o->call) {
        o->call = call;
        o->rc = rc;
    }
}

#define STEP(o, fn, ...)                                                       \
    do {                                                                       \
        CUresult r_ = D.fn(__VA_ARGS__);                                       \
        if (r_ != CUDA_SUCCESS) {                                              \
            note(o, #fn, r_);                                                  \
            goto release;                                                      \
        }                                                                      \
    } while (0)

/* Releases: retried once, since an injected fault fails one call only. */
#define UNDO(o, cond, fn, ...)                                                 \
    for (int t_ = 0; (cond) && t_ < 2; t_++) {                                 \
        CUresult r_ = D.fn(__VA_ARGS__);                                       \
        if (r_ == CUDA_SUCCESS)                                                \
            break;                                                             \
        note(o, #fn, r_);                                                      \
    }

static void print_outcome(const struct outcome *o)
{
    if (o->call)
        printf("fail %s %s\n", o->call, sim_t_errname(o->rc));
    else if (o->peer_gone)
        printf("peer-gone\n");
    else
        printf("ok\n");
    fflush(stdout);
}

static int recv_some(int sock, void *buf, size_t n, int *fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {buf, n};
    struct msghdr mh;
    struct cmsghdr *c;
    ssize_t got;

    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof(cbuf);
    got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (fd && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(c), sizeof(int));
    return got == (ssize_t)n ? 0 : -1;
}

/* One message with one fd; -1 when the peer is gone (no SIGPIPE). */
static int send_fd(int sock, const void *data, size_t n, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {(void *)data, n};
    struct msghdr mh;
    struct cmsghdr *c;

    memset(&mh, 0, sizeof(mh));
    memset(cbuf, 0, sizeof(cbuf));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof(cbuf);
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static int child_exporter(void)
{
    int sock = sim_t_child_fd(), fd = -1, ctx_held = 0;
    struct outcome o = {NULL, CUDA_SUCCESS, 0};
    CUmemoryPool pool = NULL;
    CUdeviceptr ptr = 0;
    CUmemPoolProps p;
    CUcontext ctx;
    struct xfer x;
    unsigned char bytes[4096], ack;

    FD_BASELINE();
    for (size_t i = 0; i < sizeof(bytes); i++)
        bytes[i] = (unsigned char)(i * 13 + 1);
    memset(&p, 0, sizeof(p));
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.maxSize = 4 * MiB;
    memset(&x, 0, sizeof(x));
    sim_t_load();
    STEP(&o, cuInit, 0);
    STEP(&o, cuDevicePrimaryCtxRetain, &ctx, 0);
    ctx_held = 1;
    STEP(&o, cuCtxSetCurrent, ctx);
    STEP(&o, cuMemPoolCreate, &pool, &p);
    STEP(&o, cuMemPoolExportToShareableHandle, &fd, pool,
         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    STEP(&o, cuMemAllocFromPoolAsync, &ptr, sizeof(bytes), pool, NULL);
    STEP(&o, cuMemcpyHtoDAsync, ptr, bytes, sizeof(bytes), NULL);
    STEP(&o, cuMemPoolExportPointer, &x.data, ptr);
    x.size = sizeof(bytes);
    /* the importer's acknowledgement, or its end */
    if (send_fd(sock, &x, sizeof(x), fd) != 0 ||
        recv_some(sock, &ack, 1, NULL) != 0 || ack != 'A') {
        o.peer_gone = 1;
    } else {
        STEP(&o, cuMemcpyDtoHAsync, bytes, ptr, 8, NULL);
        if (bytes[0] != 0xee) {
            printf("reply missing\n");
            return 1;
        }
    }
release:
    shutdown(sock, SHUT_RDWR); /* the importer is told */
    UNDO(&o, ptr, cuMemFreeAsync, ptr, NULL);
    UNDO(&o, pool, cuMemPoolDestroy, pool);
    UNDO(&o, ctx_held, cuDevicePrimaryCtxRelease, 0);
    if (fd >= 0)
        close(fd);
    FD_CHECK_NO_LEAK(); /* the socket was there at the start */
    close(sock);
    print_outcome(&o);
    return 0;
}

static int child_importer(void)
{
    int sock = sim_t_child_fd(), fd = -1, ctx_held = 0;
    struct outcome o = {NULL, CUDA_SUCCESS, 0};
    CUmemoryPool pool = NULL;
    CUdeviceptr ptr = 0;
    CUcontext ctx;
    struct xfer x;
    unsigned char bytes[4096];

    FD_BASELINE();
    sim_t_load();
    STEP(&o, cuInit, 0);
    STEP(&o, cuDevicePrimaryCtxRetain, &ctx, 0);
    ctx_held = 1;
    STEP(&o, cuCtxSetCurrent, ctx);
    if (recv_some(sock, &x, sizeof(x), &fd) != 0 || fd < 0) {
        o.peer_gone = 1;
        goto release;
    }
    STEP(&o, cuMemPoolImportFromShareableHandle, &pool, (void *)(uintptr_t)fd,
         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    STEP(&o, cuMemPoolImportPointer, &ptr, pool, &x.data);
    STEP(&o, cuMemcpyDtoHAsync, bytes, ptr, x.size, NULL);
    for (size_t i = 0; i < sizeof(bytes); i++)
        if (bytes[i] != (unsigned char)(i * 13 + 1)) {
            printf("bytes differ at %zu\n", i);
            return 1;
        }
    STEP(&o, cuMemsetD8Async, ptr, 0xee, 1, NULL);
    STEP(&o, cuStreamSynchronize, NULL);
    if (send(sock, "A", 1, MSG_NOSIGNAL) != 1)
        o.peer_gone = 1;
release:
    UNDO(&o, ptr, cuMemFreeAsync, ptr, NULL);
    UNDO(&o, pool, cuMemPoolDestroy, pool);
    UNDO(&o, ctx_held, cuDevicePrimaryCtxRelease, 0);
    if (fd >= 0)
        close(fd);
    FD_CHECK_NO_LEAK(); /* the socket was there at the start */
    close(sock);
    print_outcome(&o);
    return 0;
}

/* Starts `self --child role` with the socket as CUC_TEST_FD and its stdout
 * into a pipe; *out_fd gets the pipe's read end. */
static pid_t spawn_side(const char *role, const char *fail, const char *trace,
                        int sock, int *out_fd)
{
    char fe[64], te[256];
    const char *env[3];
    int p[2], saved;
    pid_t pid;

    snprintf(fe, sizeof(fe), "CUCORE_SIM_FAIL=%s", fail);
    snprintf(te, sizeof(te), "CUCORE_SIM_TRACE=%s", trace);
    env[0] = fe;
    env[1] = te;
    env[2] = NULL;
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    fflush(stdout);
    saved = dup(1);
    CHECK(saved >= 0 && dup2(p[1], 1) == 1); /* the child's stdout */
    pid = spawn_self(role, NULL, env, sock);
    CHECK(dup2(saved, 1) == 1);
    close(saved);
    close(p[1]);
    CHECK(pid > 0);
    *out_fd = p[0];
    return pid;
}

static void read_all(int fd, char *out, size_t cap)
{
    size_t len = 0;

    for (;;) {
        ssize_t r = read(fd, out + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || (len += (size_t)r) == cap - 1)
            break;
    }
    out[len] = '\0';
    close(fd);
    if (len && out[len - 1] == '\n')
        out[len - 1] = '\0';
}

/* The trace of one process: how many calls, and the failed line. */
struct trace {
    unsigned long long n, fail_k, nfail;
    char fail_name[64], fail_err[64];
};

static void read_trace(const char *path, struct trace *t)
{
    FILE *f = fopen(path, "r");
    char line[256];
    long pid0 = -1;

    memset(t, 0, sizeof(*t));
    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f)) {
        long pid;
        unsigned long long k, kn;
        char name[64], word[8] = "", err[64] = "";
        int got = sscanf(line, "%ld %llu %63s %llu %7s %63s", &pid, &k, name,
                         &kn, word, err);
        CHECK(got == 4 || (got == 6 && strcmp(word, "fail") == 0));
        if (pid0 < 0)
            pid0 = pid;
        CHECK(pid == pid0);       /* one process */
        CHECK(k == t->n + 1);     /* ordinals 1, 2, ... */
        CHECK(kn >= 1 && kn <= k);
        t->n = k;
        if (got == 6) {
            t->nfail++;
            t->fail_k = k;
            snprintf(t->fail_name, sizeof(t->fail_name), "%s", name);
            snprintf(t->fail_err, sizeof(t->fail_err), "%s", err);
        }
    }
    fclose(f);
    unlink(path);
}

/* Runs the scenario once; fail_e / fail_i are the sides' specs ("" for
 * none). Writes both outputs and traces. */
static void run_pair(const char *fail_e, const char *fail_i, char *out_e,
                     char *out_i, size_t cap, struct trace *te,
                     struct trace *ti)
{
    char pe[64], pi[64];
    int sv[2], oe, oi;
    pid_t e, i;

    snprintf(pe, sizeof(pe), "/tmp/cucore-sim-trace-%ld-e", (long)getpid());
    snprintf(pi, sizeof(pi), "/tmp/cucore-sim-trace-%ld-i", (long)getpid());
    unlink(pe);
    unlink(pi);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    e = spawn_side("exporter", fail_e, pe, sv[0], &oe);
    i = spawn_side("importer", fail_i, pi, sv[1], &oi);
    close(sv[0]);
    close(sv[1]);
    read_all(oe, out_e, cap);
    read_all(oi, out_i, cap);
    CHECK(wait_child(e) == 0);
    CHECK(wait_child(i) == 0);
    read_trace(pe, te);
    read_trace(pi, ti);
}

static void test_enumerate_scenario(void)
{
    char oe[256], oi[256], spec[32], want[160];
    struct trace te, ti, t0e, t0i;
    unsigned long long runs = 0;

    /* counting run: both sides succeed, each trace has its calls */
    run_pair("", "", oe, oi, sizeof(oe), &t0e, &t0i);
    CHECK(strcmp(oe, "ok") == 0 && strcmp(oi, "ok") == 0);
    CHECK(t0e.nfail == 0 && t0i.nfail == 0 && t0e.n >= 10 && t0i.n >= 8);

    for (int side = 0; side < 2; side++) {
        unsigned long long n = side == 0 ? t0e.n : t0i.n;
        for (unsigned long long k = 1; k <= n; k++) {
            const char *mine, *other;
            struct trace *tm;

            snprintf(spec, sizeof(spec), "*:%llu", k);
            run_pair(side == 0 ? spec : "", side == 0 ? "" : spec, oe, oi,
                     sizeof(oe), &te, &ti);
            mine = side == 0 ? oe : oi;
            other = side == 0 ? oi : oe;
            tm = side == 0 ? &te : &ti;
            /* exactly the k-th call failed, once, and the side names it */
            CHECK(tm->nfail == 1 && tm->fail_k == k);
            CHECK(strcmp(tm->fail_err, "CUDA_ERROR_UNKNOWN") == 0);
            snprintf(want, sizeof(want), "fail %s CUDA_ERROR_UNKNOWN",
                     tm->fail_name);
            if (strcmp(mine, want) != 0) {
                fprintf(stderr, "side %d k=%llu said '%s', wanted '%s'\n",
                        side, k, mine, want);
                exit(1);
            }
            /* the other side finished, or was told its peer is gone */
            CHECK((side == 0 ? ti.nfail : te.nfail) == 0);
            if (strcmp(other, "ok") != 0 && strcmp(other, "peer-gone") != 0) {
                fprintf(stderr, "side %d k=%llu: the other said '%s'\n", side,
                        k, other);
                exit(1);
            }
            runs++;
        }
    }
    printf("scenario pool export/import: exporter %llu calls, importer %llu "
           "calls, %llu runs each failing one call\n",
           t0e.n, t0i.n, runs);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "env") == 0)
            return child_env(argc, argv);
        if (strcmp(argv[2], "exporter") == 0)
            return child_exporter();
        if (strcmp(argv[2], "importer") == 0)
            return child_importer();
        return 2;
    }
    sim_t_clean_env();
    FD_BASELINE();
    sim_t_init_ctx(0);
    CHECK(S.env_error() == NULL);
    test_every_entry_point();
    test_by_name();
    test_any_name();
    test_persistent_and_several();
    test_no_effect();
    test_malformed();
    test_threads();
    test_fork();
    test_env();
    test_enumerate_scenario();
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    FD_CHECK_NO_LEAK();
    return test_finish();
}
