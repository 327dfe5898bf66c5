/* What cuda.core and numba users reach for first, at the C level:
 *  - zero-size buffers: cuc_buffer_alloc_async(pool, 0) is a buffer of
 *    size 0 at NULL, with no driver call, and its unref makes none;
 *    copies and fills of 0 bytes are no-ops (no driver call, NULL
 *    pointers fine); such a buffer cannot be sent (nothing to share);
 *  - fills of 1-, 2- and 4-byte values (cuc_fill_async / cuc_fill):
 *    the bytes written, little-endian, nothing past the count; the
 *    refusals (width, value, alignment);
 *  - stream priorities checked against the context's range at
 *    cuc_stream_create, the message naming it;
 *  - a driver call in a fork()'s child of a process that loaded the
 *    driver: its error names the fork and says to use spawn or exec.
 * Driver calls are counted on the simulator (cucore_sim_calls). */
#include <dlfcn.h>
#include <sys/wait.h>

#include "pool_test.h"
#include "../sim/cucore_sim.h"

/* The simulator's count of every driver call so far; 0 on a real GPU. */
static unsigned long long sim_calls(void)
{
    void *h = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_NOLOAD);
    cucore_sim_calls_fn f;
    unsigned long long n = 0;

    if (!test_on_sim())
        return 0;
    CHECK(h != NULL);
    f = (cucore_sim_calls_fn)(uintptr_t)dlsym(h, "cucore_sim_calls");
    CHECK(f != NULL && f("*", &n) == 0);
    dlclose(h);
    return n;
}

static void test_zero_size(int flags)
{
    cuc_pool *p = pt_new_pool(devs[0], CUC_POOL_DEVICE, (unsigned)flags);
    cuc_stream *s;
    cuc_buffer *b;
    unsigned long long before;
    cuc_msg *m;

    CHECK_OK(cuc_stream_legacy(devs[0], &s));
    before = sim_calls();
    CHECK_OK(cuc_buffer_alloc_async(p, 0, NULL, &b));
    CHECK(cuc_buffer_size(b) == 0 && cuc_buffer_ptr(b) == NULL);
    CHECK(cuc_buffer_pool(b) == p && cuc_buffer_device(b) == devs[0]);
    CHECK_OK(cuc_memcpy_async(cuc_buffer_ptr(b), NULL, 0, s));
    CHECK_OK(cuc_memcpy(NULL, cuc_buffer_ptr(b), 0, s));
    CHECK_OK(cuc_memset_async(cuc_buffer_ptr(b), 7, 0, s));
    CHECK_OK(cuc_memset(cuc_buffer_ptr(b), 7, 0, NULL));
    CHECK_OK(cuc_fill_async(cuc_buffer_ptr(b), 0xbeef, 2, 0, s));
    CHECK_OK(cuc_fill(cuc_buffer_ptr(b), 0xdeadbeef, 4, 0, NULL));
    CHECK(sim_calls() == before); /* none of it reached the driver */
    CHECK_OK(cuc_msg_create(&m));
    if (flags & CUC_POOL_IPC) {
        CHECK_RC(cuc_msg_add_buffer(m, b), CUC_E_INVALID);
        CHECK_ERRMSG("nothing to share");
        CHECK(cuc_msg_record_count(m) == 0);
    }
    cuc_msg_destroy(m);
    before = sim_calls();
    CHECK_OK(cuc_buffer_unref_async(b, s));
    CHECK(sim_calls() == before);
    CHECK(pt_used(p) == 0);
    cuc_pool_unref(p);
    printf("zero size (%s pool): ok\n", flags ? "IPC" : "local");
}

/* count values of width bytes at offset off of n bytes set to 0x11 first:
 * the bytes are value's, little-endian, and the rest untouched. */
static void check_fill(cuc_device *d, int kind)
{
    enum { N = 4096 };
    static const unsigned widths[3] = {1, 2, 4};
    static const uint32_t values[3] = {0xa5, 0xbeef, 0xdeadbeefu};
    cuc_pool *p = pt_new_pool(d, kind, 0);
    uint8_t host[N];
    cuc_stream *s;
    cuc_buffer *b;

    CHECK_OK(cuc_stream_create(d, CUC_STREAM_NON_BLOCKING, 0, &s));
    CHECK_OK(cuc_buffer_alloc_async(p, N, s, &b));
    for (int w = 0; w < 3; w++) {
        const size_t off = 64, count = 1000 / widths[w] + 1;
        uint8_t *at = (uint8_t *)cuc_buffer_ptr(b) + off;
        CHECK_OK(cuc_memset(cuc_buffer_ptr(b), 0x11, N, s));
        CHECK_OK(cuc_fill_async(at, values[w], widths[w], count, s));
        CHECK_OK(cuc_memcpy(host, cuc_buffer_ptr(b), N, s));
        for (size_t i = 0; i < N; i++) {
            size_t k = i - off;
            uint8_t want = i < off || k >= count * widths[w]
                               ? 0x11
                               : (uint8_t)(values[w] >> (8 * (k % widths[w])));
            if (host[i] != want) {
                fprintf(stderr, "width %u: byte %zu is 0x%02x, want 0x%02x\n", widths[w],
                        i, host[i], want);
                exit(1);
            }
        }
        /* the waiting form, on the legacy stream */
        CHECK_OK(cuc_fill(at, 0, widths[w], count, NULL));
        CHECK_OK(cuc_memcpy(host, at, count * widths[w], s));
        for (size_t i = 0; i < count * widths[w]; i++)
            CHECK(host[i] == 0);
    }
    /* refusals: the width, a value too wide for it, a misaligned pointer */
    CHECK_RC(cuc_fill_async(cuc_buffer_ptr(b), 1, 3, 4, s), CUC_E_INVALID);
    CHECK_ERRMSG("width 3");
    CHECK_RC(cuc_fill_async(cuc_buffer_ptr(b), 0x100, 1, 4, s), CUC_E_INVALID);
    CHECK_ERRMSG("does not fit");
    CHECK_RC(cuc_fill_async(cuc_buffer_ptr(b), 0x10000, 2, 4, s), CUC_E_INVALID);
    CHECK_RC(cuc_fill_async((uint8_t *)cuc_buffer_ptr(b) + 1, 1, 2, 4, s), CUC_E_INVALID);
    CHECK_ERRMSG("aligned");
    CHECK_RC(cuc_fill_async((uint8_t *)cuc_buffer_ptr(b) + 2, 1, 4, 4, s), CUC_E_INVALID);
    CHECK_RC(cuc_fill_async(NULL, 1, 4, 4, s), CUC_E_INVALID);
    /* past the allocation: the simulator's refusal, named (a GPU does not
     * check) */
    if (test_on_sim()) {
        CHECK_RC(cuc_fill_async(cuc_buffer_ptr(b), 1, 4, N / 4 + 1, s), CUC_E_DRIVER);
        CHECK_ERRMSG("cuMemsetD32Async");
    }
    CHECK_OK(cuc_buffer_unref_async(b, s));
    CHECK_OK(cuc_stream_synchronize(s));
    cuc_stream_destroy(s);
    cuc_pool_unref(p);
    printf("fills (%s pool): ok\n", kind == CUC_POOL_DEVICE ? "device" : "pinned host");
}

static void test_priority(void)
{
    int least = 99, greatest = 99, prio = 99;
    char range[64];
    cuc_stream *s = NULL;

    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK(CUC_DRV->cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS);
    CHECK(greatest <= least);
    for (int p = greatest; p <= least; p++) {
        CHECK_OK(cuc_stream_create(devs[0], 0, p, &s));
        CHECK(CUC_DRV->cuStreamGetPriority((CUstream)cuc_stream_handle(s), &prio) ==
              CUDA_SUCCESS);
        CHECK(prio == p);
        cuc_stream_destroy(s);
    }
    snprintf(range, sizeof(range), "%d (greatest) to %d (least", greatest, least);
    s = NULL;
    CHECK_RC(cuc_stream_create(devs[0], 0, least + 1, &s), CUC_E_INVALID);
    CHECK_ERRMSG(range);
    CHECK_RC(cuc_stream_create(devs[0], CUC_STREAM_NON_BLOCKING, greatest - 1, &s),
             CUC_E_INVALID);
    CHECK_ERRMSG(range);
    CHECK(s == NULL);
    printf("priority range [%d, %d]: ok\n", greatest, least);
}

/* A fork()'s child that calls the driver: the error names the fork. */
static void test_fork_child_error(void)
{
    cuc_stream *s;
    int status;
    pid_t pid;

    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &s)); /* the driver is loaded */
    cuc_stream_destroy(s);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int rc = cuc_stream_create(devs[0], 0, 0, &s);
        if (rc == 0 || !strstr(cuc_errmsg(), "fork() child of process") ||
            !strstr(cuc_errmsg(), "spawn or exec")) {
            fprintf(stderr, "forked child: rc %d, message \"%s\"\n", rc, cuc_errmsg());
            _exit(1);
        }
        _exit(0);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("fork child error: ok\n");
}

/* A driver error in the parent names no fork (a fill of pageable host
 * memory, which the driver refuses). */
static void test_parent_error_plain(void)
{
    uint32_t *host = malloc(64);

    CHECK(host != NULL);
    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK_RC(cuc_fill(host, 1, 4, 16, NULL), CUC_E_DRIVER);
    CHECK(strstr(cuc_errmsg(), "fork") == NULL);
    free(host);
}

int main(void)
{
    pt_start(CUC_DEVICE_CAP_MEMORY_POOLS, "has no memory pools");
    test_zero_size(0);
    if (cuc_device_caps(devs[0]) & CUC_DEVICE_CAP_POOL_POSIX_FD)
        test_zero_size(CUC_POOL_IPC);
    check_fill(devs[0], CUC_POOL_DEVICE);
    check_fill(devs[n_dev - 1], CUC_POOL_PINNED_HOST);
    test_priority();
    test_parent_error_plain();
    test_fork_child_error();
    return test_finish();
}
