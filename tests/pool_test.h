/* Helpers for the pool and buffer tests (test_pool*.c, test_buffer.c): a
 * reproducible byte pattern, bytes in and out of a buffer through cucore's
 * copies (so that the same code runs on a GPU), the driver's count of a
 * pool's bytes in use, /proc/self/maps lines, and the reversed
 * CUDA_VISIBLE_DEVICES a child gets. */
#ifndef CUC_TEST_POOL_H
#define CUC_TEST_POOL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "pattern.h"
#include "device/device.h"

#define pt_pattern test_pattern

static inline cuc_stream *pt_stream(const cuc_buffer *b)
{
    cuc_stream *s;

    CHECK_OK(cuc_stream_legacy(cuc_buffer_device(b), &s));
    return s;
}

/* Fills the buffer with the pattern of seed (synchronously). */
static inline void pt_fill(const cuc_buffer *b, uint64_t seed)
{
    size_t n = cuc_buffer_size(b);
    void *tmp = malloc(n);

    CHECK(tmp != NULL);
    pt_pattern(seed, tmp, n);
    CHECK_OK(cuc_memcpy(cuc_buffer_ptr(b), tmp, n, pt_stream(b)));
    free(tmp);
}

/* 1 if the buffer holds the pattern of seed (read through a copy). */
static inline int pt_holds(const cuc_buffer *b, uint64_t seed)
{
    size_t n = cuc_buffer_size(b);
    uint8_t *got = calloc(1, n);
    int same;

    CHECK(got != NULL);
    CHECK_OK(cuc_memcpy(got, cuc_buffer_ptr(b), n, pt_stream(b)));
    same = test_pattern_is(seed, got, n);
    free(got);
    return same;
}

/* A new pool of kind on d (flags: 0 or CUC_POOL_IPC). */
static inline cuc_pool *pt_new_pool(cuc_device *d, int kind, unsigned flags)
{
    struct cuc_pool_props pr;
    cuc_pool *p;

    cuc_pool_props_init(&pr);
    pr.kind = kind;
    pr.flags = flags;
    CHECK_OK(cuc_pool_create(d, &pr, &p));
    return p;
}

/* The driver's CU_MEMPOOL_ATTR_USED_MEM_CURRENT of a pool created here,
 * once the device has run what was queued (frees are stream-ordered). */
static inline uint64_t pt_used(const cuc_pool *p)
{
    cuuint64_t v = 0;

    CHECK_OK(cuc_device_set_current(cuc_pool_device(p)));
    CHECK(CUC_DRV->cuCtxSynchronize() == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemPoolGetAttribute((CUmemoryPool)cuc_pool_handle(p),
                                         CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v) == CUDA_SUCCESS);
    return (uint64_t)v;
}

/* Lines of /proc/self/maps; with files_only, only the mappings of files
 * (memfds and device files included), which threads' stacks and malloc
 * arenas never are. */
static inline int pt_maps_count_of(int files_only)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int n = 0;

    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f)) {
        if (files_only && !strchr(line, '/'))
            continue;
        n++;
    }
    fclose(f);
    return n;
}

static inline int pt_maps_count(void)
{
    return pt_maps_count_of(0);
}

/* Makes current, then creates, exports from and drops an IPC pool of each
 * kind on each device: whatever a driver sets up for the first pool, the
 * first export or the first pinned host pool (and keeps) is there before
 * a test counts fds or mappings. */
static inline void pt_warm_up(void);

/* The pool tests' prelude: every device opened (devices_test.h), a SKIP
 * unless device 0 has caps (why says which), the pools warmed up. */
static inline void pt_start(unsigned caps, const char *why)
{
    open_all();
    if ((cuc_device_caps(devs[0]) & caps) != caps)
        SKIP("device 0 %s", why);
    pt_warm_up();
}

static inline void pt_warm_up(void)
{
    static const int kinds[2] = {CUC_POOL_DEVICE, CUC_POOL_PINNED_HOST};
    int n;

    CHECK_OK(cuc_device_count(&n));
    for (int i = 0; i < n; i++) {
        cuc_device *d;
        CHECK_OK(cuc_device_get(i, &d));
        CHECK_OK(cuc_device_set_current(d));
        if (!(cuc_device_caps(d) & CUC_DEVICE_CAP_POOL_POSIX_FD))
            continue;
        for (int k = 0; k < 2; k++) {
            struct cuc_pool_props pr = {kinds[k], CUC_POOL_IPC, 0};
            CUmemPoolPtrExportData data;
            cuc_pool *p;
            cuc_buffer *b;
            CHECK_OK(cuc_pool_create(d, &pr, &p));
            CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &b));
            CHECK(CUC_DRV->cuMemPoolExportPointer(
                      &data, (CUdeviceptr)(uintptr_t)cuc_buffer_ptr(b)) == CUDA_SUCCESS);
            CHECK_OK(cuc_buffer_unref_async(b, NULL));
            CHECK(CUC_DRV->cuCtxSynchronize() == CUDA_SUCCESS);
            cuc_pool_unref(p);
        }
    }
}

/* What a child sees: the parent's devices in reverse order, as indices
 * ("3,2,1,0"), or with one device its UUID ("GPU-..."), so that the
 * child's ordinals differ from the parent's wherever they can. out gets
 * "CUDA_VISIBLE_DEVICES=...". */
static inline void pt_child_cvd(char *out, size_t outsz)
{
    int n, i;
    size_t len;
    cuc_device *d;

    CHECK_OK(cuc_device_count(&n));
    len = (size_t)snprintf(out, outsz, "CUDA_VISIBLE_DEVICES=");
    if (n == 1) {
        CHECK_OK(cuc_device_get(0, &d));
        snprintf(out + len, outsz - len, "%s", cuc_device_uuid_string(d));
        return;
    }
    for (i = n - 1; i >= 0 && len < outsz; i--)
        len += (size_t)snprintf(out + len, outsz - len, "%d%s", i, i ? "," : "");
}

/* The ordinal the device at parent ordinal `ord` has in such a child. */
static inline int pt_child_ordinal(int ord)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    return n == 1 ? 0 : n - 1 - ord;
}

#endif
