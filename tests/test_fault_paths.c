/* Regression tests for error paths, each with the simulator failing one chosen
 * driver call (cucore_sim_fail):
 *
 *  - a deferred free whose cuStreamWaitEvent fails waits on the host
 *    (cuEventSynchronize) and frees: nothing leaks; if that fails too the
 *    memory is left allocated and cuc_pool_lease_wait says so (the free ran
 *    in a lease end, where no caller could be told);
 *  - a deferred free that cannot make its event names cuEventCreate (it
 *    said "cuEventRecord"), and falls back to waiting for the stream;
 *  - an importer whose last free fails (cuMemFreeAsync, cuStreamSynchronize)
 *    keeps the lease: no release reaches the exporter, and the error says so;
 *  - a failed cuDeviceGetAttribute while enumerating is an error naming it,
 *    not a device without pools;
 *  - a failed cuCtxGetCurrent is an error naming it, not "no context is
 *    current" (which sent a copy to device 0); in a teardown it is not
 *    an error (the free still runs), and the device's context stays;
 *  - cuc_device_current's failed cuCtxGetDevice or
 *    cuDevicePrimaryCtxGetState is an error naming it;
 *  - a failed cuKernelGetParamInfo is an error naming the kernel and the
 *    parameter, in cuc_kernel_params and cuc_launch_checked (which then
 *    launches nothing), and is not remembered: the next call asks again. */
#include "pool_test.h"
#include "ptx_kernels.h"
#include "../sim/cucore_sim.h"

#include <dlfcn.h>

#define BUF 4096

static cucore_sim_fail_fn sim_fail;
static cucore_sim_calls_fn sim_calls;

static void fail(const char *spec)
{
    char why[256] = "";

    if (sim_fail(spec, why, sizeof(why)) != 0) {
        fprintf(stderr, "spec %s refused: %s\n", spec, why);
        exit(1);
    }
}

static unsigned long long calls(const char *name)
{
    unsigned long long n = 0;

    CHECK(sim_calls(name, &n) == 0);
    return n;
}

static void sim_controls(void)
{
    void *h = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_NOLOAD);

    CHECK(h != NULL);
    sim_fail = (cucore_sim_fail_fn)dlsym(h, "cucore_sim_fail");
    sim_calls = (cucore_sim_calls_fn)dlsym(h, "cucore_sim_calls");
    CHECK(sim_fail && sim_calls);
    dlclose(h);
}

/* A buffer of pool sent on a (never imported: the lease stays until the
 * channel closes), its last reference dropped on stream s: deferred. */
static cuc_buffer *send_and_drop(cuc_pool *pool, cuc_channel *a, cuc_stream *s,
                                 CUdeviceptr *ptr, int want_rc)
{
    cuc_buffer *b;
    cuc_msg *m;

    CHECK_OK(cuc_buffer_alloc_async(pool, BUF, s, &b));
    *ptr = (CUdeviceptr)(uintptr_t)cuc_buffer_ptr(b);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, pool));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_RC(cuc_buffer_unref_async(b, s), want_rc);
    return b;
}

/* The peer goes: the lease ends inside the pool's lease wait, which runs
 * the deferred free. */
static int end_leases(cuc_pool *pool, cuc_channel *a, cuc_channel *b)
{
    cuc_channel_destroy(b);
    return cuc_pool_lease_wait(pool, a, 0, 5000);
}

static void test_deferred_wait_fails(cuc_device *d)
{
    cuc_pool *pool = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_channel *a, *b;
    cuc_stream *s;
    CUdeviceptr ptr;

    CHECK_OK(cuc_stream_create(d, 0, 0, &s));
    /* the stream cannot wait: the host waits, the memory is freed */
    CHECK_OK(cuc_channel_pair(&a, &b));
    send_and_drop(pool, a, s, &ptr, 0);
    fail("cuStreamWaitEvent:1");
    CHECK_OK(end_leases(pool, a, b));
    CHECK(calls("cuStreamWaitEvent") == 1 && calls("cuEventSynchronize") == 1);
    CHECK(calls("cuMemFreeAsync") == 1);
    fail(NULL);
    CHECK(pt_used(pool) == 0);
    cuc_channel_destroy(a);

    /* neither can the host: leaked, said by the pool's lease wait */
    CHECK_OK(cuc_channel_pair(&a, &b));
    send_and_drop(pool, a, s, &ptr, 0);
    fail("cuStreamWaitEvent:1,cuEventSynchronize:1");
    CHECK_RC(end_leases(pool, a, b), CUC_E_DRIVER);
    CHECK_ERRMSG("cuStreamWaitEvent failed");
    CHECK_ERRMSG("cuEventSynchronize failed too");
    CHECK_ERRMSG("4096 bytes stay allocated, leaked");
    CHECK(calls("cuMemFreeAsync") == 0);
    fail(NULL);
    CHECK(pt_used(pool) == BUF);
    CHECK_OK(cuc_pool_lease_wait(pool, NULL, 0, 0)); /* reported once */
    CHECK(CUC_DRV->cuMemFreeAsync(ptr, NULL) == CUDA_SUCCESS); /* the test's cleanup */
    CHECK(pt_used(pool) == 0);
    cuc_channel_destroy(a);
    cuc_stream_destroy(s);
    cuc_pool_unref(pool);
}

static void test_deferred_event_fails(cuc_device *d)
{
    cuc_pool *pool = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_channel *a, *b;
    cuc_stream *s;
    CUdeviceptr ptr;

    CHECK_OK(cuc_stream_create(d, 0, 0, &s));
    /* no event: the stream is waited for now instead */
    CHECK_OK(cuc_channel_pair(&a, &b));
    fail("cuEventCreate:1");
    send_and_drop(pool, a, s, &ptr, 0);
    CHECK(calls("cuStreamSynchronize") == 1);
    fail(NULL);
    CHECK_OK(end_leases(pool, a, b));
    CHECK(pt_used(pool) == 0);
    cuc_channel_destroy(a);

    /* and when that fails too, the error names the call that failed */
    CHECK_OK(cuc_channel_pair(&a, &b));
    fail("cuEventCreate:1,cuStreamSynchronize:1");
    send_and_drop(pool, a, s, &ptr, CUC_E_DRIVER);
    CHECK_ERRMSG("cuEventCreate failed");
    fail("cuEventRecord:1,cuStreamSynchronize:1");
    {
        cuc_buffer *x;
        CUdeviceptr p2;
        x = send_and_drop(pool, a, s, &p2, CUC_E_DRIVER);
        (void)x;
    }
    CHECK_ERRMSG("cuEventRecord failed");
    CHECK(calls("cuEventDestroy") == 1); /* the event that was not recorded */
    fail(NULL);
    CHECK_OK(end_leases(pool, a, b));
    CHECK(pt_used(pool) == 0);
    cuc_channel_destroy(a);
    cuc_stream_destroy(s);
    cuc_pool_unref(pool);
}

/* ---- the importer's last free -------------------------------------------- */

/* The child: imports the two buffers; the first one's free fails at
 * cuMemFreeAsync, the second's at cuStreamSynchronize; then says "done"
 * (a message with no record) and exits: the kept leases end with it. */
/* A child's end: an empty message says it is done; its pool and channel go. */
static int child_done(cuc_channel *ch, cuc_pool *pool)
{
    cuc_msg *done;

    CHECK_OK(cuc_msg_create(&done));
    CHECK_OK(cuc_channel_send(ch, done));
    cuc_msg_destroy(done);
    cuc_pool_unref(pool);
    cuc_channel_destroy(ch);
    return test_finish();
}

static int child_importer(void)
{
    cuc_channel *ch;
    cuc_msg *m;
    cuc_pool *pool;
    cuc_buffer *b[2];
    const char *want[2] = {"cuMemFreeAsync failed", "cuStreamSynchronize failed"};
    const char *spec[2] = {"cuMemFreeAsync:1", "cuStreamSynchronize:1"};

    CHECK_OK(cuc_channel_from_fd(atoi(getenv("CUC_TEST_FD")), &ch));
    CHECK_OK(cuc_channel_recv(ch, 10000, &m));
    CHECK_OK(cuc_msg_get_pool(m, 0, &pool));
    CHECK_OK(cuc_msg_get_buffer(m, 1, &b[0]));
    CHECK_OK(cuc_msg_get_buffer(m, 2, &b[1]));
    cuc_msg_destroy(m);
    sim_controls(); /* the driver is loaded now */
    for (int i = 0; i < 2; i++) {
        fail(spec[i]);
        CHECK_RC(cuc_buffer_unref_async(b[i], NULL), CUC_E_DRIVER);
        CHECK_ERRMSG(want[i]);
        CHECK_ERRMSG("its leases are kept, not released");
    }
    fail(NULL);
    return child_done(ch, pool);
}

/* A child in role, and a message of pool and n new buffers of it (bufs)
 * sent to it on *a. */
static pid_t send_to_child(const char *role, cuc_pool *pool, cuc_buffer **bufs, int n,
                           cuc_channel **a)
{
    cuc_channel *b;
    cuc_msg *m;
    pid_t pid;

    CHECK_OK(cuc_channel_pair(a, &b));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, pool));
    for (int i = 0; i < n; i++) {
        CHECK_OK(cuc_buffer_alloc_async(pool, BUF, NULL, &bufs[i]));
        CHECK_OK(cuc_msg_add_buffer(m, bufs[i]));
    }
    pid = spawn_self(role, NULL, NULL, cuc_channel_fd(b));
    CHECK(pid > 0);
    cuc_channel_destroy(b);
    CHECK_OK(cuc_channel_send(*a, m));
    cuc_msg_destroy(m);
    return pid;
}

static void test_importer_free_fails(cuc_device *d)
{
    cuc_pool *pool = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_channel *a;
    cuc_buffer *buf[2];
    cuc_msg *m;
    size_t n = 9;
    pid_t pid;

    pid = send_to_child("importer", pool, buf, 2, &a);
    /* releases the child sent would be taken before its "done" */
    CHECK_OK(cuc_channel_recv(a, 10000, &m));
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_msg_destroy(m);
    CHECK_OK(cuc_pool_lease_count(pool, &n));
    CHECK(n == 2); /* no release for memory that may still be in use */
    for (int i = 0; i < 2; i++)
        CHECK_OK(cuc_buffer_unref_async(buf[i], NULL)); /* deferred */
    /* lingers while the child holds the leases; its death ends them, in
     * the destroy if it came first, else in the wait */
    cuc_channel_destroy(a);
    CHECK(wait_child(pid) == 0);
    CHECK_OK(cuc_pool_lease_wait(pool, NULL, 0, 10000));
    CHECK_OK(cuc_pool_lease_count(pool, &n));
    CHECK(n == 0);
    CHECK(pt_used(pool) == 0);
    cuc_pool_unref(pool);
}

/* ---- a batch import that fails part-way ---- */

#define BATCH_N 100

/* The 70th import of the range fails (in the second run of 64): nothing
 * is left taken, the 69 imported are dropped again (their leases end),
 * and the records after them were never imported. */
static int child_batch(void)
{
    cuc_buffer *b[BATCH_N] = {NULL};
    cuc_channel *ch;
    cuc_pool *pool;
    cuc_msg *m;

    CHECK_OK(cuc_channel_from_fd(atoi(getenv("CUC_TEST_FD")), &ch));
    CHECK_OK(cuc_channel_recv(ch, 10000, &m));
    CHECK_OK(cuc_msg_get_pool(m, 0, &pool));
    sim_controls();
    fail("cuMemPoolImportPointer:70"); /* counts from here (the spec resets them) */
    CHECK_RC(cuc_msg_get_buffers(m, 1, BATCH_N, b), CUC_E_DRIVER);
    CHECK_ERRMSG("cuMemPoolImportPointer failed");
    CHECK(calls("cuMemPoolImportPointer") == 70); /* none after the failure */
    CHECK(calls("cuMemFreeAsync") == 69);         /* the 69 dropped again */
    fail(NULL);
    for (int i = 0; i < BATCH_N; i++)
        CHECK(b[i] == NULL); /* not written */
    cuc_msg_destroy(m);
    return child_done(ch, pool);
}

static void test_batch_import_fails(cuc_device *d)
{
    cuc_pool *pool = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *buf[BATCH_N];
    cuc_channel *a;
    cuc_msg *m;
    size_t n = 0;
    pid_t pid;

    pid = send_to_child("batch", pool, buf, BATCH_N, &a);
    for (int i = 0; i < BATCH_N; i++)
        CHECK_OK(cuc_buffer_unref_async(buf[i], NULL)); /* deferred */
    CHECK_OK(cuc_channel_recv(a, 10000, &m)); /* "done": the releases came first */
    cuc_msg_destroy(m);
    CHECK_OK(cuc_pool_lease_count(pool, &n));
    CHECK(n == BATCH_N - 69); /* the 69 released; the rest never imported */
    cuc_channel_destroy(a);
    CHECK(wait_child(pid) == 0);
    CHECK_OK(cuc_pool_lease_wait(pool, NULL, 0, 10000)); /* its end ends the rest */
    CHECK(pt_used(pool) == 0);
    cuc_pool_unref(pool);
}

/* ---- failed queries are not answers --------------------------------------- */

/* argv[3]: "fails" or "unknown" (the attribute is newer than the driver:
 * CUDA_ERROR_INVALID_VALUE, read as a feature it lacks). */
static int child_enumerate(int argc, char **argv)
{
    int n = -1;

    CHECK(argc >= 4);
    if (strcmp(argv[3], "fails") == 0) {
        CHECK_RC(cuc_device_count(&n), CUC_E_DRIVER);
        CHECK_ERRMSG("cuDeviceGetAttribute failed");
    } else {
        CHECK_OK(cuc_device_count(&n));
        CHECK(n == 4);
    }
    return test_finish();
}

static void test_attribute_fails(void)
{
    const char *fails[] = {"CUCORE_SIM_FAIL=cuDeviceGetAttribute:3", NULL};
    const char *unknown[] = {"CUCORE_SIM_FAIL=cuDeviceGetAttribute:3:CUDA_ERROR_INVALID_VALUE",
                             NULL};
    const char *a1[] = {"fails", NULL}, *a2[] = {"unknown", NULL};
    char out[256];

    CHECK(spawn_self_capture("enumerate", a1, fails, out, sizeof(out)) == 0);
    CHECK(spawn_self_capture("enumerate", a2, unknown, out, sizeof(out)) == 0);
}

static void test_current_fails(void)
{
    char src[16] = "abc", dst[16] = "";

    fail("cuCtxGetCurrent:1");
    CHECK_RC(cuc_memcpy(dst, src, sizeof(src), NULL), CUC_E_DRIVER);
    CHECK_ERRMSG("cuCtxGetCurrent failed");
    fail(NULL);
    CHECK_OK(cuc_memcpy(dst, src, sizeof(src), NULL));
    CHECK(strcmp(dst, "abc") == 0);
}

/* A teardown whose cuCtxGetCurrent fails still frees; with nothing known to
 * put back, its device's context stays current (device.h). With it
 * answering, the other device's context comes back. */
static void test_teardown_current_fails(void)
{
    cuc_pool *pool = pt_new_pool(devs[0], CUC_POOL_DEVICE, 0);
    cuc_buffer *b[2];
    cuc_device *cur;

    for (int i = 0; i < 2; i++)
        CHECK_OK(cuc_buffer_alloc_async(pool, BUF, NULL, &b[i]));
    CHECK(pt_used(pool) == 2 * BUF);
    CHECK_OK(cuc_device_set_current(devs[1]));
    fail("cuCtxGetCurrent:1");
    CHECK_OK(cuc_buffer_unref_async(b[0], NULL));
    fail(NULL);
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[0]);
    CHECK(pt_used(pool) == BUF);
    CHECK_OK(cuc_device_set_current(devs[1]));
    CHECK_OK(cuc_buffer_unref_async(b[1], NULL));
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[1]);
    CHECK(pt_used(pool) == 0);
    cuc_pool_unref(pool);
}

/* cuc_device_current with a primary context that the raw driver retained
 * and made current (as PyTorch's runtime does): the driver failing to say
 * its device or its state is an error naming the call, not "the
 * application's own context". */
static int child_foreign(void)
{
    cuc_device *d = test_foreign_primary_current(), *cur = NULL;

    sim_controls(); /* the simulator is loaded now */
    fail("cuCtxGetDevice:1");
    CHECK_RC(cuc_device_current(&cur), CUC_E_DRIVER);
    CHECK_ERRMSG("cuCtxGetDevice failed");
    fail("cuDevicePrimaryCtxGetState:1");
    CHECK_RC(cuc_device_current(&cur), CUC_E_DRIVER);
    CHECK_ERRMSG("cuDevicePrimaryCtxGetState failed");
    fail(NULL);
    CHECK(cur == NULL);
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == d);
    return test_finish();
}

static void test_foreign_current_fails(void)
{
    CHECK(wait_child(spawn_self("foreign", NULL, NULL, -1)) == 0);
}

static void test_params_query_fails(void)
{
    unsigned long long launches;
    cuc_launch_config cfg;
    cuc_kernel_param p[2];
    size_t n = 99, sizes[2] = {8, 4};
    uint64_t out = 0;
    uint32_t count = 0;
    void *args[2] = {&out, &count};
    cuc_kernel *k;

    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &k));
    fail("cuKernelGetParamInfo:2");
    CHECK_RC(cuc_kernel_params(k, p, 2, &n), CUC_E_DRIVER);
    CHECK(n == 99);
    CHECK(strstr(cuc_errmsg(), "cuKernelGetParamInfo") != NULL);
    CHECK(strstr(cuc_errmsg(), "kernel \"twice\", parameter 1") != NULL);
    fail("cuKernelGetParamInfo:1");
    cuc_launch_config_init(&cfg);
    CHECK_RC(cuc_launch_checked(NULL, &cfg, k, args, sizes, 2), CUC_E_DRIVER);
    CHECK(calls("cuLaunchKernelEx") == 0);
    fail("");
    CHECK_OK(cuc_kernel_params(k, p, 2, &n));
    CHECK(n == 2 && p[1].offset == 8 && p[1].size == 4);
    launches = calls("cuLaunchKernelEx");
    CHECK_RC(cuc_launch_checked(NULL, &cfg, k, args, sizes, 2), CUC_E_NOT_SUPPORTED);
    CHECK(calls("cuLaunchKernelEx") == launches + 1);
    cuc_kernel_destroy(k);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "importer") == 0)
            return child_importer();
        if (strcmp(argv[2], "batch") == 0)
            return child_batch();
        if (strcmp(argv[2], "enumerate") == 0)
            return child_enumerate(argc, argv);
        if (strcmp(argv[2], "foreign") == 0)
            return child_foreign();
        return 2;
    }
    if (!test_on_sim())
        SKIP("needs the simulator's fault injection");
    FD_BASELINE();
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "has no IPC pools");
    sim_controls();
    test_deferred_wait_fails(devs[0]);
    test_deferred_event_fails(devs[0]);
    test_importer_free_fails(devs[0]);
    test_batch_import_fails(devs[0]);
    test_attribute_fails();
    test_current_fails();
    test_teardown_current_fails();
    test_foreign_current_fails();
    test_params_query_fails();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
