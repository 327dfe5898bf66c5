/* Simulator: primary contexts, streams, the priority range, the per-thread
 * (_ptsz) forms, events, IPC events across processes. */
#include "../sim/testdata/sim_test.h"

#include <pthread.h>
#include <time.h>

static void test_no_context(void)
{
    CUstream s;
    CUevent e;
    CUcontext c = (CUcontext)&s;

    CU_OK(D.cuCtxGetCurrent(&c));
    CHECK(c == NULL);
    CU_RC(D.cuStreamCreateWithPriority(&s, 0, 0), CUDA_ERROR_INVALID_CONTEXT);
    CU_RC(D.cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
    CU_RC(D.cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CU_RC(D.cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CU_RC(D.cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_CONTEXT);
}

static void test_contexts(void)
{
    CUcontext a, b, c1, cur;
    CUstream s;
    int x;

    CU_OK(D.cuDevicePrimaryCtxRetain(&a, 0));
    CU_OK(D.cuDevicePrimaryCtxRetain(&b, 0));
    CHECK(a == b && a != NULL);
    CU_OK(D.cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(c1 != a);
    CU_RC(D.cuDevicePrimaryCtxRetain(&c1, 4), CUDA_ERROR_INVALID_DEVICE);
    CU_RC(D.cuDevicePrimaryCtxRetain(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuCtxSetCurrent((CUcontext)&x), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(D.cuCtxSetCurrent(c1));
    CU_OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == c1);
    CU_OK(D.cuCtxSynchronize());

    /* Releasing the last reference deactivates the context: its streams
     * go with it, and it cannot be used while current. */
    CU_OK(D.cuStreamCreateWithPriority(&s, 0, 0));
    CU_OK(D.cuDevicePrimaryCtxRelease(1));
    CU_RC(D.cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
    CU_RC(D.cuStreamCreateWithPriority(&s, 0, 0),
          CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_RC(D.cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_OK(D.cuDevicePrimaryCtxRetain(&cur, 1));
    CHECK(cur == c1); /* same handle again */
    CU_RC(D.cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(D.cuDevicePrimaryCtxRelease(1));
    CU_RC(D.cuDevicePrimaryCtxRelease(7), CUDA_ERROR_INVALID_DEVICE);

    CU_OK(D.cuDevicePrimaryCtxRelease(0)); /* a and b: two retains */
    CU_OK(D.cuCtxSetCurrent(a));
    CU_OK(D.cuCtxSynchronize());
    CU_OK(D.cuCtxSetCurrent(NULL));
    CU_OK(D.cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    CU_OK(D.cuCtxSetCurrent(a));

    /* CUDA 13's cuCtxSynchronize takes the context (NULL: the current) */
    {
        void *pv = NULL;
        PFN_cuCtxSynchronize_v13000 sync2;
        CU_OK(D.gpa("cuCtxSynchronize", &pv, 13000, 0, NULL));
        memcpy(&sync2, &pv, sizeof(pv));
        CU_OK(sync2(NULL));
        CU_OK(sync2(a));
        CU_RC(sync2(c1), CUDA_ERROR_CONTEXT_IS_DESTROYED); /* released */
        CU_RC(sync2((CUcontext)&x), CUDA_ERROR_INVALID_CONTEXT);
    }
}

static void *thread_main(void *arg)
{
    CUcontext c = (CUcontext)arg;

    /* The current context is per thread. */
    CU_OK(D.cuCtxGetCurrent(&c));
    CHECK(c == NULL);
    CU_RC(D.cuStreamQuery(NULL), CUDA_ERROR_INVALID_CONTEXT);
    return NULL;
}

static void test_thread_local(void)
{
    pthread_t t;

    CHECK(pthread_create(&t, NULL, thread_main, (void *)1) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

/* Looks name up at 13000 with flags; fails the test when it is missing. */
static void *proc(const char *name, cuuint64_t flags)
{
    void *pv = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

    CU_OK(D.gpa(name, &pv, 13000, flags, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && pv != NULL);
    return pv;
}

/* Least 0, greatest -5, the range that stream priorities are clamped to
 * (sim/FACTS.md F9). */
static void test_priority_range(void)
{
    PFN_cuCtxGetStreamPriorityRange_v5050 range;
    void *pv = proc("cuCtxGetStreamPriorityRange", 0);
    CUcontext cur = NULL;
    CUstream s;
    int lo = 99, hi = 99, pr = 99;

    memcpy(&range, &pv, sizeof(pv));
    CU_OK(range(&lo, &hi));
    CHECK(lo == 0 && hi == -5);
    CU_OK(D.cuStreamCreateWithPriority(&s, 0, hi - 1));
    CU_OK(D.cuStreamGetPriority(s, &pr));
    CHECK(pr == hi);
    CU_OK(D.cuStreamDestroy(s));
    lo = 99;
    CU_OK(range(&lo, NULL)); /* NULL: not wanted */
    CHECK(lo == 0);
    hi = 99;
    CU_OK(range(NULL, &hi));
    CHECK(hi == -5);
    CU_OK(D.cuCtxGetCurrent(&cur));
    CU_OK(D.cuCtxSetCurrent(NULL));
    lo = hi = 99;
    CU_RC(range(&lo, &hi), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(lo == 99 && hi == 99);
    CU_OK(D.cuCtxSetCurrent(cur));
}

/* The _ptsz forms cuGetProcAddress gives for per-thread default streams
 * take stream 0 as the thread's stream and are otherwise the same. */
static void test_per_thread_forms(void)
{
    PFN_cuStreamQuery_v7000_ptsz query;
    PFN_cuStreamGetFlags_v7000_ptsz flags;
    PFN_cuEventRecord_v7000_ptsz record;
    void *pv;
    CUcontext cur = NULL;
    CUevent e;
    unsigned int fl = 99;
    int x;

    pv = proc("cuStreamQuery", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CHECK(pv == dlsym(D.handle, "cuStreamQuery_ptsz"));
    memcpy(&query, &pv, sizeof(pv));
    pv = proc("cuStreamGetFlags", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    memcpy(&flags, &pv, sizeof(pv));
    pv = proc("cuEventRecord", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    memcpy(&record, &pv, sizeof(pv));
    CU_OK(query(NULL));
    CU_OK(query(CU_STREAM_LEGACY));
    CU_RC(query((CUstream)&x), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(flags(NULL, &fl));
    CHECK(fl == 0);
    CU_OK(D.cuEventCreate(&e, 0));
    CU_OK(record(e, NULL));
    CU_OK(D.cuEventSynchronize(e));
    CU_OK(D.cuEventDestroy(e));
    CU_OK(D.cuCtxGetCurrent(&cur));
    CU_OK(D.cuCtxSetCurrent(NULL));
    CU_RC(query(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(D.cuCtxSetCurrent(cur));
}

static void test_streams(void)
{
    CUstream s1, s2;
    unsigned int fl = 99;
    int pr = 99, x;

    CU_OK(D.cuStreamCreateWithPriority(&s1, CU_STREAM_NON_BLOCKING, -100));
    CU_OK(D.cuStreamGetPriority(s1, &pr));
    CHECK(pr == -5); /* clamped to the greatest priority */
    CU_OK(D.cuStreamGetFlags(s1, &fl));
    CHECK(fl == CU_STREAM_NON_BLOCKING);
    CU_OK(D.cuStreamCreateWithPriority(&s2, 0, 7));
    CU_OK(D.cuStreamGetPriority(s2, &pr));
    CHECK(pr == 0);
    CU_OK(D.cuStreamGetFlags(s2, &fl));
    CHECK(fl == CU_STREAM_DEFAULT);
    CU_OK(D.cuStreamDestroy(s2));
    CU_OK(D.cuStreamCreateWithPriority(&s2, 0, -3));
    CU_OK(D.cuStreamGetPriority(s2, &pr));
    CHECK(pr == -3);
    CU_OK(D.cuStreamDestroy(s2));
    CU_RC(D.cuStreamCreateWithPriority(&s2, 0x10, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuStreamCreateWithPriority(NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);

    /* special handles */
    CU_OK(D.cuStreamSynchronize(NULL));
    CU_OK(D.cuStreamSynchronize(CU_STREAM_LEGACY));
    CU_OK(D.cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CU_OK(D.cuStreamQuery(CU_STREAM_PER_THREAD));
    CU_OK(D.cuStreamGetPriority(CU_STREAM_LEGACY, &pr));
    CHECK(pr == 0);
    CU_OK(D.cuStreamGetFlags(NULL, &fl));
    CHECK(fl == 0);
    CU_OK(D.cuStreamQuery(s1));
    CU_OK(D.cuStreamSynchronize(s1));

    /* unknown handles */
    CU_RC(D.cuStreamQuery((CUstream)&x), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuStreamDestroy((CUstream)&x), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuStreamDestroy(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuStreamDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuStreamGetPriority(s1, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuStreamDestroy(s1));
    CU_RC(D.cuStreamDestroy(s1), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuStreamSynchronize(s1), CUDA_ERROR_INVALID_HANDLE);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_events(void)
{
    CUevent a, b, nt, ipc, opened, fresh;
    CUstream s;
    CUipcEventHandle h, h2;
    float ms = -1;
    int x, fds;

    CU_OK(D.cuStreamCreateWithPriority(&s, 0, 0));
    CU_OK(D.cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU_OK(D.cuEventCreate(&b, CU_EVENT_BLOCKING_SYNC));
    CU_OK(D.cuEventCreate(&fresh, 0));
    CU_OK(D.cuEventQuery(fresh)); /* never recorded: complete */
    CU_RC(D.cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(D.cuEventRecord(a, s));
    CU_OK(D.cuEventQuery(a)); /* complete at record */
    CU_RC(D.cuEventElapsedTime(&ms, a, fresh), CUDA_ERROR_INVALID_HANDLE);
    sleep_ms(30);
    CU_OK(D.cuEventRecord(b, NULL));
    CU_OK(D.cuEventSynchronize(b));
    CU_OK(D.cuEventElapsedTime(&ms, a, b));
    CHECK(ms >= 25.0f && ms < 5000.0f);
    CU_RC(D.cuEventElapsedTime(NULL, a, b), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuStreamWaitEvent(s, b, 0));
    CU_OK(D.cuStreamWaitEvent(CU_STREAM_LEGACY, a, CU_EVENT_WAIT_DEFAULT));
    CU_RC(D.cuStreamWaitEvent(s, b, 0x40), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuStreamWaitEvent(s, (CUevent)&x, 0), CUDA_ERROR_INVALID_HANDLE);

    /* no timing */
    CU_OK(D.cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
    CU_OK(D.cuEventRecord(nt, s));
    CU_RC(D.cuEventElapsedTime(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuEventElapsedTime(&ms, nt, b), CUDA_ERROR_INVALID_HANDLE);

    /* flags */
    CU_RC(D.cuEventCreate(&ipc, CU_EVENT_INTERPROCESS),
          CUDA_ERROR_INVALID_VALUE); /* needs DISABLE_TIMING */
    CU_RC(D.cuEventCreate(&ipc, 0x80), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuEventCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcGetEventHandle(&h, a), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuIpcGetEventHandle(&h, (CUevent)&x), CUDA_ERROR_INVALID_HANDLE);

    /* The first IPC event of a device opens one fd that stays; later ones
     * open none (sim/FACTS.md F11) */
    fds = test_fd_count();
    for (int i = 0; i < 3; i++) {
        CU_OK(D.cuEventCreate(&ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        CHECK(test_fd_count() == fds + 1);
        CU_OK(D.cuIpcGetEventHandle(&h, ipc));
        CHECK(test_fd_count() == fds + 1);
        CU_OK(D.cuEventDestroy(ipc));
        CHECK(test_fd_count() == fds + 1);
    }

    /* IPC event: opening it in its own process is refused, as the driver
     * does (CUDA_ERROR_INVALID_CONTEXT); garbage is CUDA_ERROR_MAP_FAILED */
    CU_OK(D.cuEventCreate(&ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CU_OK(D.cuIpcGetEventHandle(&h, ipc));
    CU_OK(D.cuIpcGetEventHandle(&h2, ipc));
    CHECK(memcmp(&h, &h2, sizeof(h)) == 0);
    CU_RC(D.cuIpcOpenEventHandle(&opened, h), CUDA_ERROR_INVALID_CONTEXT);
    h2.reserved[0] ^= 0x55; /* bad magic */
    CU_RC(D.cuIpcOpenEventHandle(&opened, h2), CUDA_ERROR_MAP_FAILED);
    memset(&h2, 0, sizeof(h2));
    CU_RC(D.cuIpcOpenEventHandle(&opened, h2), CUDA_ERROR_MAP_FAILED);

    /* an event of context 0 on a stream of context 1 */
    {
        CUcontext c0, c1;
        CUstream s1;
        CU_OK(D.cuCtxGetCurrent(&c0));
        CU_OK(D.cuDevicePrimaryCtxRetain(&c1, 1));
        CU_OK(D.cuCtxSetCurrent(c1));
        CU_OK(D.cuStreamCreateWithPriority(&s1, 0, 0));
        CU_RC(D.cuEventRecord(a, s1), CUDA_ERROR_INVALID_HANDLE);
        CU_RC(D.cuEventRecord(a, NULL), CUDA_ERROR_INVALID_HANDLE);
        CU_OK(D.cuStreamDestroy(s1));
        CU_OK(D.cuCtxSetCurrent(c0));
        CU_OK(D.cuDevicePrimaryCtxRelease(1));
    }

    CU_OK(D.cuEventDestroy(a));
    CU_RC(D.cuEventDestroy(a), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuEventQuery(a), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuEventRecord(a, s), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(D.cuEventDestroy(b));
    CU_OK(D.cuEventDestroy(nt));
    CU_OK(D.cuEventDestroy(fresh));
    CU_OK(D.cuEventDestroy(ipc));
    CU_OK(D.cuStreamDestroy(s));
}

/* ---- IPC event in another process ---------------------------------------- */

static void hex_encode(const void *p, size_t n, char *out)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void hex_decode(const char *s, void *p, size_t n)
{
    unsigned char *b = p;
    CHECK(strlen(s) == 2 * n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        CHECK(sscanf(s + 2 * i, "%2x", &v) == 1);
        b[i] = (unsigned char)v;
    }
}

/* argv: handle-hex, "ctx" or "noctx", the ordinal whose context opens
 * it (with "ctx") */
static int child_open(int argc, char **argv)
{
    CUipcEventHandle h;
    CUevent e;
    CUresult rc;
    int n = 0;

    CHECK(argc >= 5);
    hex_decode(argv[3], &h, sizeof(h));
    if (argc >= 7 && strcmp(argv[6], "mypid") == 0) {
        /* the creator's pid as a process of another PID namespace may
         * have it: the sim's handle keeps the pid at bytes 8..11 */
        uint32_t me = (uint32_t)getpid();
        memcpy(h.reserved + 8, &me, sizeof(me));
    }
    sim_t_load();
    CU_OK(D.cuInit(0));
    CU_OK(D.cuDeviceGetCount(&n));
    if (strcmp(argv[4], "ctx") == 0) {
        CUcontext c;
        CHECK(argc >= 6 && atoi(argv[5]) < n);
        CU_OK(D.cuDevicePrimaryCtxRetain(&c, atoi(argv[5])));
        CU_OK(D.cuCtxSetCurrent(c));
    }
    rc = D.cuIpcOpenEventHandle(&e, h);
    sim_t_report("%d", (int)rc);
    if (rc == CUDA_SUCCESS) {
        CU_OK(D.cuEventQuery(e)); /* always complete */
        CU_OK(D.cuEventSynchronize(e));
        CU_OK(D.cuStreamWaitEvent(NULL, e, 0));
        CU_OK(D.cuEventRecord(e, NULL));
        {
            float ms;
            CU_RC(D.cuEventElapsedTime(&ms, e, e), CUDA_ERROR_INVALID_HANDLE);
        }
        CU_OK(D.cuEventDestroy(e));
    }
    return 0;
}

static void expect_open_as(const char *hex, const char *cvd, const char *ctx,
                           const char *ord, const char *how, CUresult want)
{
    const char *args[] = {hex, ctx, ord, how, NULL};
    char ev[128], out[64], w[16];
    const char *env[] = {ev, NULL};

    if (cvd)
        snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES=%s", cvd);
    else
        snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES");
    CHECK(sim_t_run("open", args, env, out, sizeof(out)) == 0);
    snprintf(w, sizeof(w), "%d", (int)want);
    if (strcmp(out, w) != 0) {
        fprintf(stderr, "open in child (CVD %s): %s, wanted %s\n",
                cvd ? cvd : "unset", out, w);
        exit(1);
    }
}

static void expect_open(const char *hex, const char *cvd, const char *ctx,
                        const char *ord, CUresult want)
{
    expect_open_as(hex, cvd, ctx, ord, "plain", want);
}

static void test_ipc_child(void)
{
    CUevent ipc;
    CUipcEventHandle h, bad;
    CUcontext c2, c0;
    char hex[2 * sizeof(h) + 1], badhex[2 * sizeof(h) + 1];

    /* an IPC event on device 2 */
    CU_OK(D.cuCtxGetCurrent(&c0));
    CU_OK(D.cuDevicePrimaryCtxRetain(&c2, 2));
    CU_OK(D.cuCtxSetCurrent(c2));
    CU_OK(D.cuEventCreate(&ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CU_OK(D.cuEventRecord(ipc, NULL));
    CU_OK(D.cuIpcGetEventHandle(&h, ipc));
    hex_encode(&h, sizeof(h), hex);
    bad = h;
    bad.reserved[1] ^= 0x7f;
    hex_encode(&bad, sizeof(bad), badhex);

    /* in the context of the GPU that made it, whatever its ordinal */
    expect_open(hex, NULL, "ctx", "2", CUDA_SUCCESS);
    expect_open(hex, "3,2,1,0", "ctx", "1", CUDA_SUCCESS);
    expect_open(hex, "2", "ctx", "0", CUDA_SUCCESS);
    expect_open(hex, "0,1,3", "ctx", "2", CUDA_ERROR_INVALID_DEVICE);
    /* a context of another GPU is refused (assumed: sim/README.md, "Where
     * the sim differs") */
    expect_open(hex, NULL, "ctx", "3", CUDA_ERROR_INVALID_DEVICE);
    expect_open(hex, "3,2,1,0", "ctx", "0", CUDA_ERROR_INVALID_DEVICE);
    expect_open(hex, NULL, "noctx", "0", CUDA_ERROR_INVALID_CONTEXT);
    expect_open(badhex, NULL, "ctx", "2", CUDA_ERROR_MAP_FAILED);
    /* an opener whose pid number is the creator's (another PID
     * namespace): another process all the same */
    expect_open_as(hex, NULL, "ctx", "2", "mypid", CUDA_SUCCESS);

    CU_OK(D.cuEventDestroy(ipc));
    CU_OK(D.cuCtxSetCurrent(c0));
    CU_OK(D.cuDevicePrimaryCtxRelease(2));
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    int fds0;

    if (argc >= 3 && strcmp(argv[1], "--child") == 0)
        return strcmp(argv[2], "open") == 0 ? child_open(argc, argv) : 2;
    sim_t_clean_env();
    fds0 = test_fd_count();
    sim_t_load();
    CU_OK(D.cuInit(0));
    test_no_context();
    test_contexts();
    test_thread_local();
    test_streams();
    test_priority_range();
    test_per_thread_forms();
    test_events();
    test_ipc_child();
    CU_OK(D.cuCtxGetCurrent(&ctx));
    CHECK(ctx != NULL);
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    /* the IPC events' fds stay: one a device that made one (device 2's in
     * test_ipc_child, the current device's in test_events): sim/FACTS.md
     * F11 */
    CHECK(test_fd_count() == fds0 + 2);
    return test_finish();
}
