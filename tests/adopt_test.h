/* Helpers of the tests of memory another allocator owns (test_adopt*.c):
 * memory made with the raw driver as a framework makes it (a pool of its
 * own, an expandable segment of VMM chunks mapped back to back), bytes in
 * and out of raw pointers through cucore's copies, and release callbacks
 * that count their calls. */
#ifndef CUC_TEST_ADOPT_H
#define CUC_TEST_ADOPT_H

#include "pool_test.h"

/* A release callback's count (at_release). */
struct at_count {
    int calls; /* atomic */
};

static inline void at_release(void *arg)
{
    __atomic_add_fetch(&((struct at_count *)arg)->calls, 1, __ATOMIC_SEQ_CST);
}

static inline int at_calls(struct at_count *c)
{
    return __atomic_load_n(&c->calls, __ATOMIC_SEQ_CST);
}

/* A pool of d made with the driver (a framework's): device or pinned
 * host (HOST_NUMA 0, as an IPC host pool must be), with POSIX fd handles
 * when ipc. */
static inline CUmemoryPool at_raw_pool(cuc_device *d, int host, int ipc)
{
    CUmemPoolProps pp;
    CUmemoryPool cu = NULL;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = ipc ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    pp.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = host ? 0 : cuc_device_ordinal(d);
    CHECK_OK(cuc_device_set_current(d));
    CHECK(CUC_DRV->cuMemPoolCreate(&cu, &pp) == CUDA_SUCCESS);
    if (host) {
        CUmemAccessDesc a;
        memset(&a, 0, sizeof(a));
        a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.location.id = cuc_device_ordinal(d);
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CHECK(CUC_DRV->cuMemPoolSetAccess(cu, &a, 1) == CUDA_SUCCESS);
    }
    return cu;
}

/* n bytes from a raw pool, on d's legacy stream, complete. */
static inline CUdeviceptr at_pool_alloc(cuc_device *d, CUmemoryPool cu, size_t n)
{
    CUdeviceptr p = 0;

    CHECK_OK(cuc_device_set_current(d));
    CHECK(CUC_DRV->cuMemAllocFromPoolAsync(&p, n, cu, CU_STREAM_LEGACY) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuStreamSynchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS);
    return p;
}

static inline void at_pool_free(cuc_device *d, CUdeviceptr p)
{
    CHECK_OK(cuc_device_set_current(d));
    CHECK(CUC_DRV->cuMemFreeAsync(p, CU_STREAM_LEGACY) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuStreamSynchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS);
}

/* An expandable segment as PyTorch makes one: a reservation of max
 * chunks of the granularity, chunk i mapped at i * chunk where mapped[i]
 * (each cuMemCreate'd with the given handle types, of device devs_of[i]
 * or d when NULL), read-write for its device. */
#define AT_MAX_CHUNKS 8
struct at_segment {
    CUdeviceptr base;
    size_t chunk, n;
    CUmemGenericAllocationHandle h[AT_MAX_CHUNKS];
    int mapped[AT_MAX_CHUNKS];
};

static inline void at_segment_make(cuc_device *d, size_t n, const int *mapped,
                                   CUmemAllocationHandleType types, cuc_device *const *devs_of,
                                   struct at_segment *s)
{
    CHECK(n <= AT_MAX_CHUNKS);
    memset(s, 0, sizeof(*s));
    s->n = n;
    CHECK_OK(cuc_vmm_granularity(d, &s->chunk));
    CHECK_OK(cuc_device_set_current(d));
    CHECK(CUC_DRV->cuMemAddressReserve(&s->base, n * s->chunk, 0, 0, 0) == CUDA_SUCCESS);
    for (size_t i = 0; i < n; i++) {
        cuc_device *owner = devs_of ? devs_of[i] : d;
        CUmemAllocationProp p;
        CUmemAccessDesc a;
        s->mapped[i] = !mapped || mapped[i];
        if (!s->mapped[i])
            continue;
        memset(&p, 0, sizeof(p));
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.requestedHandleTypes = types;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = cuc_device_ordinal(owner);
        CHECK(CUC_DRV->cuMemCreate(&s->h[i], s->chunk, &p, 0) == CUDA_SUCCESS);
        CHECK(CUC_DRV->cuMemMap(s->base + i * s->chunk, s->chunk, 0, s->h[i], 0) ==
              CUDA_SUCCESS);
        memset(&a, 0, sizeof(a));
        a.location = p.location;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CHECK(CUC_DRV->cuMemSetAccess(s->base + i * s->chunk, s->chunk, &a, 1) ==
              CUDA_SUCCESS);
    }
}

/* The owner's teardown: unmap, release its handles, free the range. */
static inline void at_segment_free(cuc_device *d, struct at_segment *s)
{
    CHECK_OK(cuc_device_set_current(d));
    for (size_t i = 0; i < s->n; i++) {
        if (!s->mapped[i])
            continue;
        CHECK(CUC_DRV->cuMemUnmap(s->base + i * s->chunk, s->chunk) == CUDA_SUCCESS);
        CHECK(CUC_DRV->cuMemRelease(s->h[i]) == CUDA_SUCCESS);
    }
    CHECK(CUC_DRV->cuMemAddressFree(s->base, s->n * s->chunk) == CUDA_SUCCESS);
}

/* The pattern of seed written to n bytes at p (device memory of d). */
static inline void at_fill(cuc_device *d, CUdeviceptr p, size_t n, uint64_t seed)
{
    uint8_t *tmp = malloc(n);
    cuc_stream *s;

    CHECK(tmp != NULL);
    test_pattern(seed, tmp, n);
    CHECK_OK(cuc_stream_legacy(d, &s));
    CHECK_OK(cuc_memcpy((void *)(uintptr_t)p, tmp, n, s));
    free(tmp);
}

/* 1 if the n bytes at p hold the pattern of seed. */
static inline int at_holds(cuc_device *d, const void *p, size_t n, uint64_t seed)
{
    uint8_t *got = malloc(n);
    cuc_stream *s;
    int same;

    CHECK(got != NULL);
    CHECK_OK(cuc_stream_legacy(d, &s));
    CHECK_OK(cuc_memcpy(got, p, n, s));
    same = test_pattern_is(seed, got, n);
    free(got);
    return same;
}

/* 1 if the n bytes at p are bytes [off, off + n) of the pattern of seed
 * (a part of memory filled whole by at_fill). */
static inline int at_holds_at(cuc_device *d, const void *p, size_t n, uint64_t seed,
                              size_t off)
{
    uint8_t *want = malloc(off + n), *got = malloc(n);
    cuc_stream *s;
    int same;

    CHECK(want != NULL && got != NULL);
    test_pattern(seed, want, off + n);
    CHECK_OK(cuc_stream_legacy(d, &s));
    CHECK_OK(cuc_memcpy(got, p, n, s));
    same = memcmp(want + off, got, n) == 0;
    free(want);
    free(got);
    return same;
}

#endif
