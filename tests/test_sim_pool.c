/* Simulator: memory pools — properties, the allocator and its accounting
 * (USED/RESERVED_MEM_*), copies, the ExportPointer quirk, export/import in
 * this process, the fds a pool costs and the bytes of its pointer exports
 * (as the driver's: sim/FACTS.md F19-F31), and a pool crossing to exec'd
 * children over a Unix socket (SCM_RIGHTS): the child reads the parent's
 * bytes, sees the pool's GPU at its own ordinal, and is refused when that
 * GPU is hidden. */
#include "../sim/testdata/sim_test.h"

#include <pthread.h>
#include <sys/mman.h>

#define MiB ((size_t)1 << 20)

static CUmemPoolProps dev_props(int dev, CUmemAllocationHandleType ht,
                                size_t max)
{
    CUmemPoolProps p;

    memset(&p, 0, sizeof(p));
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.handleTypes = ht;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.maxSize = max;
    return p;
}

static cuuint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute a)
{
    cuuint64_t v = 0xdeadbeef;
    CU_OK(D.cuMemPoolGetAttribute(pool, a, &v));
    return v;
}

static CUdeviceptr alloc(CUmemoryPool pool, size_t n)
{
    CUdeviceptr p = 0;
    CU_OK(D.cuMemAllocFromPoolAsync(&p, n, pool, NULL));
    CHECK(p != 0 && p % 256 == 0);
    return p;
}

static void test_props(void)
{
    CUmemoryPool pool;
    CUmemPoolProps p;

    CU_RC(D.cuMemPoolCreate(&pool, NULL), CUDA_ERROR_INVALID_VALUE);
    p = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 0);
    CU_RC(D.cuMemPoolCreate(NULL, &p), CUDA_ERROR_INVALID_VALUE);
    p.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_INVALID_VALUE);
    /* fabric pools are made, their export refused (sim/FACTS.md F22) */
    p = dev_props(0, CU_MEM_HANDLE_TYPE_FABRIC, 2 * MiB);
    CU_OK(D.cuMemPoolCreate(&pool, &p));
    {
        CUmemFabricHandle fh;
        int fd;
        CU_RC(D.cuMemPoolExportToShareableHandle(&fh, pool,
                                                 CU_MEM_HANDLE_TYPE_FABRIC, 0),
              CUDA_ERROR_NOT_PERMITTED);
        CU_RC(D.cuMemPoolExportToShareableHandle(
                  &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    }
    CU_OK(D.cuMemPoolDestroy(pool));
    p = dev_props(0, CU_MEM_HANDLE_TYPE_WIN32, 0);
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_NOT_SUPPORTED);
    p = dev_props(4, CU_MEM_HANDLE_TYPE_NONE, 0);
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_INVALID_VALUE);
    p = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 0);
    p.reserved[3] = 1;
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_INVALID_VALUE);
    p = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 0);
    p.location.type = (CUmemLocationType)99;
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_INVALID_VALUE);
}

static void test_accounting(void)
{
    CUmemPoolProps p = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 8 * MiB);
    CUmemPoolProps p2 = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 128 * MiB);
    CUmemoryPool pool, pool2;
    CUdeviceptr a, b, c, big, dummy, x1, x2;
    cuuint64_t v;
    int reuse = -1;
    int fds_before = test_fd_count();

    CU_OK(D.cuMemPoolCreate(&pool, &p));
    CHECK(test_fd_count() == fds_before); /* creating it opens no fd */
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 0);
    CU_OK(D.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
                                  &reuse));
    CHECK(reuse == 1);

    /* USED counts the bytes asked for (1000, 5096); blocks are 256-byte
     * aligned (b - a == 1024): sim/FACTS.md F19 */
    a = alloc(pool, 1000);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 1000);
    /* nor does using it: it has no handle type (sim/FACTS.md F28) */
    CHECK(test_fd_count() == fds_before);
    b = alloc(pool, 4096);
    CHECK(b == a + 1024); /* first fit */
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 1000 + 4096);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 1000 + 4096);
    /* reserved: 32 MiB chunks, here capped at the 8 MiB capacity */
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 8 * MiB);

    CU_OK(D.cuMemFreeAsync(a, NULL));
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 4096);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 1000 + 4096);
    c = alloc(pool, 512);
    CHECK(c == a); /* the freed hole is reused */
    CU_OK(D.cuMemFreeAsync(c, NULL));

    /* high-water marks reset to the current value with 0 only */
    v = 0;
    CU_OK(D.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 4096);
    v = 5;
    CU_RC(D.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemPoolGetAttribute(pool, (CUmemPool_attribute)99, &v),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, NULL),
          CUDA_ERROR_INVALID_VALUE);

    /* capacity is maxSize: 8 MiB */
    CU_RC(D.cuMemAllocFromPoolAsync(&dummy, 9 * MiB, pool, NULL),
          CUDA_ERROR_OUT_OF_MEMORY);
    big = alloc(pool, 8 * MiB - 4096 - 1024);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 8 * MiB);
    CU_RC(D.cuMemAllocFromPoolAsync(&dummy, 2048, pool, NULL),
          CUDA_ERROR_OUT_OF_MEMORY);
    c = alloc(pool, 1024); /* exactly the hole left at the start */
    CHECK(c == a);
    CU_RC(D.cuMemAllocFromPoolAsync(&dummy, 1, pool, NULL),
          CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) ==
          8 * MiB); /* every byte asked for */
    dummy = 1;
    CU_OK(D.cuMemAllocFromPoolAsync(&dummy, 0, pool, NULL)); /* as the driver */
    CHECK(dummy == 0);
    CU_RC(D.cuMemAllocFromPoolAsync(NULL, 16, pool, NULL),
          CUDA_ERROR_INVALID_VALUE);

    /* bad frees; NULL is fine, also after a size-0 allocation
     * (sim/FACTS.md F19) */
    CU_OK(D.cuMemFreeAsync(0, NULL));
    CU_OK(D.cuMemFreeAsync(dummy, NULL));
    CU_RC(D.cuMemFreeAsync(0, (CUstream)&v), CUDA_ERROR_INVALID_HANDLE);
    CU_RC(D.cuMemFreeAsync(big + 256, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemFreeAsync((CUdeviceptr)(uintptr_t)&v, NULL),
          CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemFreeAsync(big, NULL));
    CU_RC(D.cuMemFreeAsync(big, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 8 * MiB);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 8 * MiB);

    /* with a high threshold the pool keeps its memory */
    v = UINT64_MAX;
    CU_OK(D.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == UINT64_MAX);
    big = alloc(pool, 6 * MiB);
    CU_OK(D.cuMemFreeAsync(big, NULL));
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 8 * MiB);
    CU_OK(D.cuMemFreeAsync(b, NULL));
    CU_OK(D.cuMemFreeAsync(c, NULL));
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 8 * MiB);
    v = 0;
    CU_OK(D.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v));
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 8 * MiB);

    CU_OK(D.cuMemPoolDestroy(pool));
    CU_RC(D.cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
    CHECK(test_fd_count() == fds_before);

    /* a larger pool: reserved grows and, with threshold 0, shrinks again
     * by 32 MiB chunks as blocks are freed */
    CU_OK(D.cuMemPoolCreate(&pool2, &p2));
    x1 = alloc(pool2, 1000);
    CHECK(pool_attr(pool2, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 32 * MiB);
    x2 = alloc(pool2, 40 * MiB);
    CHECK(pool_attr(pool2, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 64 * MiB);
    CU_OK(D.cuMemFreeAsync(x2, NULL));
    CHECK(pool_attr(pool2, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 32 * MiB);
    CU_OK(D.cuMemFreeAsync(x1, NULL));
    CHECK(pool_attr(pool2, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    CHECK(pool_attr(pool2, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 64 * MiB);
    CU_OK(D.cuMemPoolDestroy(pool2));
}

static void test_copies(void)
{
    CUmemPoolProps p = dev_props(1, CU_MEM_HANDLE_TYPE_NONE, 4 * MiB);
    CUmemoryPool pool;
    CUdeviceptr a, b;
    unsigned char host[4096], back[4096];
    CUstream s;
    int fds_before = test_fd_count();

    for (size_t i = 0; i < sizeof(host); i++)
        host[i] = (unsigned char)(i * 7 + 3);
    CU_OK(D.cuMemPoolCreate(&pool, &p));
    CU_OK(D.cuStreamCreateWithPriority(&s, 0, 0));
    a = alloc(pool, sizeof(host));
    b = alloc(pool, sizeof(host));
    /* The pool is GPU 1's, the stream GPU 0's: no access, so no copy
     * until GPU 0 has it (the sim's error: sim/FACTS.md F21 has no code). */
    CU_RC(D.cuMemcpyHtoDAsync(a, host, sizeof(host), s), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemsetD8Async(a, 0, 16, s), CUDA_ERROR_INVALID_VALUE);
    {
        CUmemAccessDesc d0;
        memset(&d0, 0, sizeof(d0));
        d0.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d0.location.id = 0;
        d0.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CU_OK(D.cuMemPoolSetAccess(pool, &d0, 1));
    }
    CU_OK(D.cuMemcpyHtoDAsync(a, host, sizeof(host), s));
    CU_OK(D.cuMemcpyAsync(b, a, sizeof(host), s));
    memset(back, 0, sizeof(back));
    CU_OK(D.cuMemcpyDtoHAsync(back, b, sizeof(back), s));
    CHECK(memcmp(host, back, sizeof(host)) == 0);
    CU_OK(D.cuMemsetD8Async(b + 100, 0xab, 50, CU_STREAM_PER_THREAD));
    CU_OK(D.cuMemcpyDtoHAsync(back, b, sizeof(back), NULL));
    CHECK(back[99] == host[99] && back[100] == 0xab && back[149] == 0xab &&
          back[150] == host[150]);
    /* host to host through cuMemcpyAsync (unified addressing) */
    CU_OK(D.cuMemcpyAsync((CUdeviceptr)(uintptr_t)back,
                          (CUdeviceptr)(uintptr_t)host, 16, NULL));

    /* out of bounds, freed, not device memory */
    CU_RC(D.cuMemcpyHtoDAsync(a + 4000, host, 200, s),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemcpyDtoHAsync(back, b + 1, sizeof(back), s),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemsetD8Async(a, 0, sizeof(host) + 1, s),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)back, host, 16, s),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemsetD8Async((CUdeviceptr)(uintptr_t)back, 0, 16, s),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemcpyHtoDAsync(a, NULL, 16, s), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemcpyHtoDAsync(a, host, 16, (CUstream)&s),
          CUDA_ERROR_INVALID_HANDLE);
    CU_OK(D.cuMemFreeAsync(a, s));
    CU_RC(D.cuMemcpyHtoDAsync(a, host, 16, s), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemcpyAsync(b, a, 16, s), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemcpyHtoDAsync(a, host, 0, s)); /* nothing to copy */

    /* destroying a pool with a live allocation: the memory stays until
     * it is freed */
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_RC(D.cuMemAllocFromPoolAsync(&a, 16, pool, s), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemcpyDtoHAsync(back, b, 16, s));
    CHECK(memcmp(back, host, 16) == 0);
    /* a pool without a handle type holds no fd, also with memory in use
     * (sim/FACTS.md F28) */
    CHECK(test_fd_count() == fds_before);
    CU_OK(D.cuMemFreeAsync(b, s)); /* the last one: the pool goes */
    CHECK(test_fd_count() == fds_before);
    CU_RC(D.cuMemFreeAsync(b, s), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuStreamDestroy(s));
}

static void test_access(void)
{
    CUmemPoolProps p = dev_props(2, CU_MEM_HANDLE_TYPE_NONE, 2 * MiB);
    CUmemoryPool pool;
    CUmemAccessDesc d[2];
    CUmemAccess_flags f;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};

    CU_OK(D.cuMemPoolCreate(&pool, &p));
    for (int dev = 0; dev < 4; dev++) {
        loc.id = dev;
        CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc));
        CHECK(f == (dev == 2 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                             : CU_MEM_ACCESS_FLAGS_PROT_NONE));
    }
    memset(d, 0, sizeof(d));
    d[0].location = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 0};
    d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    d[1].location = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 3};
    d[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    /* read-only is not for pools (as the driver) and nothing is applied */
    CU_RC(D.cuMemPoolSetAccess(pool, d, 2), CUDA_ERROR_NOT_SUPPORTED);
    loc.id = 0;
    CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc));
    CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    d[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_OK(D.cuMemPoolSetAccess(pool, d, 2));
    CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc));
    CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    loc.id = 3;
    CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc));
    CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    {
        CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
        CU_OK(D.cuMemPoolGetAccess(&f, pool, &host));
        CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_NONE); /* a device pool */
    }
    d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CU_OK(D.cuMemPoolSetAccess(pool, d, 1));
    loc.id = 0;
    CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc));
    CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    /* the owner keeps read-write; bad devices and flags */
    d[0].location.id = 2;
    CU_RC(D.cuMemPoolSetAccess(pool, d, 1), CUDA_ERROR_INVALID_DEVICE);
    d[0].location.id = 9;
    d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_RC(D.cuMemPoolSetAccess(pool, d, 1), CUDA_ERROR_INVALID_DEVICE);
    d[0].location.id = 1;
    d[0].flags = (CUmemAccess_flags)2;
    CU_RC(D.cuMemPoolSetAccess(pool, d, 1), CUDA_ERROR_INVALID_VALUE);
    /* sim/FACTS.md F20: asking about a device that is not there is
     * CUDA_ERROR_INVALID_VALUE; a host location or no known type on a
     * device pool CUDA_ERROR_NOT_SUPPORTED; no
     * descriptor at all is fine ("set-count0") */
    loc.id = 7;
    f = (CUmemAccess_flags)99;
    CU_RC(D.cuMemPoolGetAccess(&f, pool, &loc), CUDA_ERROR_INVALID_VALUE);
    CHECK(f == (CUmemAccess_flags)99);
    d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    d[0].location = (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST, 0};
    CU_RC(D.cuMemPoolSetAccess(pool, d, 1), CUDA_ERROR_NOT_SUPPORTED);
    d[0].location = (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
    CU_RC(D.cuMemPoolSetAccess(pool, d, 1), CUDA_ERROR_NOT_SUPPORTED);
    d[0].location = (CUmemLocation){CU_MEM_LOCATION_TYPE_INVALID, 0};
    CU_RC(D.cuMemPoolSetAccess(pool, d, 1), CUDA_ERROR_NOT_SUPPORTED);
    CU_OK(D.cuMemPoolSetAccess(pool, d, 0));
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_RC(D.cuMemPoolGetAccess(&f, pool, &loc), CUDA_ERROR_INVALID_VALUE);
}

static void test_export_local(void)
{
    CUmemPoolProps p = dev_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                 4 * MiB);
    CUmemPoolProps np = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 2 * MiB);
    CUmemoryPool pool, npool, imp;
    CUmemPoolPtrExportData data, bad;
    CUdeviceptr a, ia, ia2, na;
    int fd1 = -1, fd2 = -1, nfd = -1;
    char msg[] = "bytes written by the exporter";
    char got[sizeof(msg)];
    CUmemAccess_flags f;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};

    CU_OK(D.cuMemPoolCreate(&pool, &p));
    CU_OK(D.cuMemPoolCreate(&npool, &np));
    a = alloc(pool, 4096);
    na = alloc(npool, 64);

    /* The quirk: no pointer export before the pool has been exported. */
    CU_RC(D.cuMemPoolExportPointer(&data, a), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemPoolExportToShareableHandle(
              &nfd, npool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemPoolExportPointer(&data, na), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemPoolExportToShareableHandle(&fd1, pool,
                                             CU_MEM_HANDLE_TYPE_FABRIC, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemPoolExportToShareableHandle(
        &fd1, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemPoolExportToShareableHandle(
        &fd2, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(fd1 >= 0 && fd2 >= 0 && fd1 != fd2); /* a new fd each time */
    /* not close-on-exec, as the driver's (sim/FACTS.md F23) */
    CHECK(!sim_t_is_cloexec(fd1) && !sim_t_is_cloexec(fd2));
    CU_OK(D.cuMemPoolExportPointer(&data, a));
    CU_RC(D.cuMemPoolExportPointer(&data, a + 256), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemPoolExportPointer(NULL, a), CUDA_ERROR_INVALID_VALUE);
    close(fd2);

    /* Import here: the fd stays ours. */
    CU_OK(D.cuMemPoolImportFromShareableHandle(
        &imp, (void *)(uintptr_t)fd1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        0));
    CHECK(fcntl(fd1, F_GETFD) >= 0);
    close(fd1);
    CU_RC(D.cuMemAllocFromPoolAsync(&ia, 64, imp, NULL),
          CUDA_ERROR_INVALID_VALUE); /* imported pools cannot allocate */
    CU_RC(D.cuMemPoolExportToShareableHandle(
              &fd2, imp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemPoolGetAccess(&f, imp, &loc));
    CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE); /* on its GPU, 0 */
    loc.id = 1;
    CU_OK(D.cuMemPoolGetAccess(&f, imp, &loc));
    CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    /* no attributes on an imported pool, and the output stays as it was
     * (sim/FACTS.md F27) */
    {
        static const CUmemPool_attribute attrs[] = {
            CU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_HIGH};
        cuuint64_t v = 12345;
        int reuse = 7;
        for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
            CU_RC(D.cuMemPoolGetAttribute(imp, attrs[i], &v), CUDA_ERROR_INVALID_VALUE);
            CHECK(v == 12345);
        }
        CU_RC(D.cuMemPoolGetAttribute(imp, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
                                      &reuse),
              CUDA_ERROR_INVALID_VALUE);
        CHECK(reuse == 7);
        v = 0;
        CU_RC(D.cuMemPoolSetAttribute(imp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v),
              CUDA_ERROR_INVALID_VALUE);
        CU_OK(D.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
        CHECK(v == 4096); /* the exporter's pool answers */
    }

    CU_OK(D.cuMemcpyHtoDAsync(a, msg, sizeof(msg), NULL));
    CU_OK(D.cuMemPoolImportPointer(&ia, imp, &data));
    CHECK(ia != a); /* a second mapping of the same memory */
    CU_OK(D.cuMemcpyDtoHAsync(got, ia, sizeof(got), NULL));
    CHECK(memcmp(got, msg, sizeof(msg)) == 0);
    CU_OK(D.cuMemsetD8Async(ia, 'B', 5, NULL));
    CU_OK(D.cuMemcpyDtoHAsync(got, a, sizeof(got), NULL));
    CHECK(memcmp(got, "BBBBB", 5) == 0);
    CU_RC(D.cuMemcpyDtoHAsync(got, ia + 4090, 16, NULL),
          CUDA_ERROR_INVALID_VALUE);

    /* export data checks */
    CU_RC(D.cuMemPoolImportPointer(&ia2, pool, &data),
          CUDA_ERROR_INVALID_VALUE); /* not an imported pool */
    bad = data;
    bad.reserved[0] ^= 1; /* magic */
    CU_RC(D.cuMemPoolImportPointer(&ia2, imp, &bad), CUDA_ERROR_INVALID_VALUE);
    bad = data;
    bad.reserved[8] ^= 1; /* pool uid */
    CU_RC(D.cuMemPoolImportPointer(&ia2, imp, &bad), CUDA_ERROR_INVALID_VALUE);
    bad = data;
    memset(bad.reserved + 16, 0xff, 8); /* offset */
    CU_RC(D.cuMemPoolImportPointer(&ia2, imp, &bad), CUDA_ERROR_INVALID_VALUE);
    bad = data;
    memset(bad.reserved + 24, 0x7f, 8); /* size */
    CU_RC(D.cuMemPoolImportPointer(&ia2, imp, &bad), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemPoolImportPointer(NULL, imp, &data), CUDA_ERROR_INVALID_VALUE);

    /* freeing an imported pointer forgets it */
    CU_OK(D.cuMemFreeAsync(ia, NULL));
    CU_RC(D.cuMemFreeAsync(ia, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemcpyDtoHAsync(got, ia, 4, NULL), CUDA_ERROR_INVALID_VALUE);

    /* not pool fds */
    {
        int pfd[2], mfd = memfd_create("junk", MFD_CLOEXEC);
        char junk[8192];
        CHECK(mfd >= 0 && pipe2(pfd, O_CLOEXEC) == 0);
        memset(junk, 0x5a, sizeof(junk));
        CHECK(write(mfd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
        /* not a pool's fd: CUDA_ERROR_UNKNOWN, as the driver says */
        CU_RC(D.cuMemPoolImportFromShareableHandle(
                  &imp, (void *)(uintptr_t)mfd,
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_UNKNOWN);
        CU_RC(D.cuMemPoolImportFromShareableHandle(
                  &imp, (void *)(uintptr_t)pfd[0],
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_UNKNOWN);
        CU_RC(D.cuMemPoolImportFromShareableHandle(
                  &imp, (void *)(intptr_t)-1,
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
        close(mfd);
        close(pfd[0]);
        close(pfd[1]);
    }

    CU_OK(D.cuMemPoolDestroy(imp));
    CU_OK(D.cuMemFreeAsync(a, NULL));
    CU_OK(D.cuMemFreeAsync(na, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_OK(D.cuMemPoolDestroy(npool));
}

/* What an IPC pool costs in fds and what its pointer exports hold
 * (sim/FACTS.md F28, F25): 48 bytes written, the last 16 as the caller
 * left them, the same 48 for two exports of one pointer; an imported
 * pool destroyed after its pointer's free keeps its fd until a
 * synchronize (F46). */
static void test_fds_and_export_bytes(void)
{
    CUmemPoolProps p = dev_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 4 * MiB);
    CUmemPoolPtrExportData d1, d2;
    CUmemoryPool pool, imp;
    CUdeviceptr a, i1, i2;
    int fd, n0;
    static const unsigned char fill1[16] = {0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5,
                                            0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5};

    CU_OK(D.cuStreamSynchronize(NULL)); /* earlier tests' imported pools go (F46) */
    n0 = test_fd_count();
    for (int round = 0; round < 2; round++) {
        CU_OK(D.cuMemPoolCreate(&pool, &p));
        CHECK(test_fd_count() == n0);
        CU_OK(D.cuMemPoolExportToShareableHandle(
            &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CHECK(test_fd_count() == n0 + 2);
        a = alloc(pool, 1 << 20);
        CHECK(test_fd_count() == n0 + 2);
        memset(&d1, 0xa5, sizeof(d1));
        memset(&d2, 0xa5, sizeof(d2));
        CU_OK(D.cuMemPoolExportPointer(&d1, a));
        CU_OK(D.cuMemPoolExportPointer(&d2, a));
        CHECK(memcmp(d1.reserved + 48, fill1, 16) == 0); /* not written */
        CHECK(memcmp(d2.reserved + 48, fill1, 16) == 0);
        CHECK(memcmp(d1.reserved, d2.reserved, 48) == 0);
        CU_OK(D.cuMemcpyHtoDAsync(a, "either", 7, NULL));
        CU_OK(D.cuMemPoolImportFromShareableHandle(
            &imp, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CU_OK(D.cuMemPoolImportPointer(&i1, imp, &d1));
        CU_OK(D.cuMemPoolImportPointer(&i2, imp, &d2)); /* either export names it */
        CHECK(i1 == i2);
        {
            char got[7];
            CU_OK(D.cuMemcpyDtoHAsync(got, i2, sizeof(got), NULL));
            CHECK(memcmp(got, "either", 7) == 0);
        }
        CU_OK(D.cuMemFreeAsync(i1, NULL));
        CU_OK(D.cuMemPoolDestroy(imp));
        /* the imported pool's fd stays until a synchronize passed its
         * pointer's free (FACTS.md F46) */
        CHECK(test_fd_count() == n0 + 3);
        CU_OK(D.cuStreamSynchronize(NULL));
        CHECK(test_fd_count() == n0 + 2);
        CU_OK(D.cuMemFreeAsync(a, NULL));
        close(fd);
        CU_OK(D.cuMemPoolDestroy(pool));
        CHECK(test_fd_count() == n0);
    }
}

static void test_host_pool(void)
{
    CUmemPoolProps p;
    CUmemoryPool pool;
    CUdeviceptr a;
    CUmemAccess_flags f;
    CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    char buf[32] = "pinned host pool";

    memset(&p, 0, sizeof(p));
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_HOST;
    p.maxSize = 2 * MiB;
    CU_OK(D.cuMemPoolCreate(&pool, &p));
    a = alloc(pool, sizeof(buf));
    CU_OK(D.cuMemcpyHtoDAsync(a, buf, sizeof(buf), NULL));
    CHECK(memcmp((void *)(uintptr_t)a, buf, sizeof(buf)) == 0);
    CU_OK(D.cuMemPoolGetAccess(&f, pool, &host));
    CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    {
        /* sim/FACTS.md F20: the host is taken, no known type is
         * CUDA_ERROR_INVALID_VALUE; a device starts with none and may be
         * given and refused read-write */
        CUmemAccessDesc d;
        CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
        memset(&d, 0, sizeof(d));
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        d.location = host;
        CU_OK(D.cuMemPoolSetAccess(pool, &d, 1));
        d.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
        CU_OK(D.cuMemPoolSetAccess(pool, &d, 1));
        d.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_INVALID, 0};
        CU_RC(D.cuMemPoolSetAccess(pool, &d, 1), CUDA_ERROR_INVALID_VALUE);
        CU_OK(D.cuMemPoolGetAccess(&f, pool, &dev0));
        CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_NONE);
        d.location = dev0;
        CU_OK(D.cuMemPoolSetAccess(pool, &d, 1));
        CU_OK(D.cuMemPoolGetAccess(&f, pool, &dev0));
        CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        CU_OK(D.cuMemPoolSetAccess(pool, &d, 1));
        CU_OK(D.cuMemPoolGetAccess(&f, pool, &dev0));
        CHECK(f == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    }
    CU_OK(D.cuMemFreeAsync(a, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
    p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    p.location.id = 5;
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_INVALID_VALUE);
    /* as cuMemPoolCreate documents: the plain host location is not IPC
     * capable, and HOST_NUMA_CURRENT is not a pool location */
    p.location.type = CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = 0;
    p.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_INVALID_VALUE);
    p.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
    CU_RC(D.cuMemPoolCreate(&pool, &p), CUDA_ERROR_INVALID_VALUE);
}

/* An importer still mapping a block its exporter freed reads what was
 * there (sim/FACTS.md F30): the pool's reserve is counted as given back,
 * its bytes stay. */
static void test_freed_bytes_stay(void)
{
    CUmemPoolProps p = dev_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 64 * MiB);
    CUmemPoolPtrExportData data;
    CUmemoryPool pool, imp;
    CUdeviceptr a, keep, ia;
    unsigned char got[4] = {0};
    int fd;

    CU_OK(D.cuMemPoolCreate(&pool, &p));
    CU_OK(D.cuMemPoolExportToShareableHandle(&fd, pool,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    keep = alloc(pool, 256);
    a = alloc(pool, 40 * MiB); /* a second 32 MiB chunk of reserve */
    CU_OK(D.cuMemsetD8Async(a + 33 * MiB, 0x5a, 4, NULL));
    CU_OK(D.cuMemPoolExportPointer(&data, a));
    CU_OK(D.cuMemPoolImportFromShareableHandle(&imp, (void *)(uintptr_t)fd,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemPoolImportPointer(&ia, imp, &data));
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 64 * MiB);
    CU_OK(D.cuMemFreeAsync(a, NULL));
    CHECK(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 32 * MiB);
    CU_OK(D.cuMemcpyDtoHAsync(got, ia + 33 * MiB, 4, NULL));
    CHECK(got[0] == 0x5a && got[3] == 0x5a);
    CU_OK(D.cuMemFreeAsync(ia, NULL));
    CU_OK(D.cuMemPoolDestroy(imp));
    CU_OK(D.cuMemFreeAsync(keep, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
    close(fd);
}

/* One pointer imported twice (cuda.core's account of the driver, NVIDIA
 * bug 5570902): device memory gives the same pointer and the first free
 * unmaps both; pinned host memory is CUDA_ERROR_ALREADY_MAPPED. */
static void test_duplicate_imports(void)
{
    CUmemPoolProps p = dev_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 2 * MiB);
    CUmemPoolPtrExportData data;
    CUmemoryPool pool, imp;
    CUdeviceptr a, i1, i2;
    char got[4];
    int fd;

    for (int host = 0; host < 2; host++) {
        if (host) {
            p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
            p.location.id = 0;
        }
        CU_OK(D.cuMemPoolCreate(&pool, &p));
        CU_OK(D.cuMemPoolExportToShareableHandle(
            &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        a = alloc(pool, 4096);
        CU_OK(D.cuMemPoolExportPointer(&data, a));
        CU_OK(D.cuMemPoolImportFromShareableHandle(
            &imp, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CU_OK(D.cuMemPoolImportPointer(&i1, imp, &data));
        if (host) {
            CU_RC(D.cuMemPoolImportPointer(&i2, imp, &data), CUDA_ERROR_ALREADY_MAPPED);
        } else {
            CU_OK(D.cuMemPoolImportPointer(&i2, imp, &data));
            CHECK(i2 == i1);
        }
        CU_OK(D.cuMemFreeAsync(i1, NULL));
        CU_RC(D.cuMemcpyDtoHAsync(got, i1, sizeof(got), NULL), CUDA_ERROR_INVALID_VALUE);
        CU_RC(D.cuMemFreeAsync(i1, NULL), CUDA_ERROR_INVALID_VALUE);
        CU_OK(D.cuMemPoolDestroy(imp));
        CU_OK(D.cuMemFreeAsync(a, NULL));
        CU_OK(D.cuMemPoolDestroy(pool));
        close(fd);
    }
}

struct thr {
    CUmemoryPool pool;
    CUcontext ctx;
    int id;
};

static void *alloc_thread(void *arg)
{
    struct thr *t = arg;
    CUdeviceptr p[16];
    unsigned char v;

    CU_OK(D.cuCtxSetCurrent(t->ctx));
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 16; i++) {
            size_t n = (size_t)(1 + (round * 31 + i * 17 + t->id) % 5000);
            CU_OK(D.cuMemAllocFromPoolAsync(&p[i], n, t->pool, NULL));
            CU_OK(D.cuMemsetD8Async(p[i], (unsigned char)t->id, 1, NULL));
        }
        for (int i = 0; i < 16; i++) {
            CU_OK(D.cuMemcpyDtoHAsync(&v, p[i], 1, NULL));
            CHECK(v == (unsigned char)t->id); /* nobody else's block */
            CU_OK(D.cuMemFreeAsync(p[i], NULL));
        }
    }
    return NULL;
}

static void test_threads(void)
{
    CUmemPoolProps p = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 32 * MiB);
    struct thr t[4];
    pthread_t th[4];
    CUcontext ctx;

    CU_OK(D.cuCtxGetCurrent(&ctx));
    CU_OK(D.cuMemPoolCreate(&t[0].pool, &p));
    for (int i = 0; i < 4; i++) {
        t[i].pool = t[0].pool;
        t[i].ctx = ctx;
        t[i].id = i + 1;
        CHECK(pthread_create(&th[i], NULL, alloc_thread, &t[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        CHECK(pthread_join(th[i], NULL) == 0);
    CHECK(pool_attr(t[0].pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CHECK(pool_attr(t[0].pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) > 16 * 256);
    CU_OK(D.cuMemPoolDestroy(t[0].pool));
}

/* ---- across processes ------------------------------------------------------ */

struct xfer {
    CUmemPoolPtrExportData data;
    uint32_t size;
    uint32_t seed;
};

static unsigned char pattern(uint32_t seed, size_t i)
{
    return (unsigned char)((i * 131u + seed) ^ (i >> 8));
}

/* Child: receives a pool fd + export data, checks the bytes, reports the
 * pool's device(s) with read-write access, writes a reply at offset 1. */
static int child_import(void)
{
    int sock = sim_t_child_fd(), fd = -1, n = 0, devs = 0, gave_access = 0;
    struct xfer x;
    CUmemoryPool pool;
    CUdeviceptr ptr;
    CUresult rc;
    unsigned char *buf;

    CHECK(sock >= 0);
    FD_BASELINE();
    sim_t_init_ctx(0);
    CHECK(sim_t_recv(sock, &x, sizeof(x), &fd, 1) == 1);
    CHECK(sim_t_is_cloexec(fd));
    rc = D.cuMemPoolImportFromShareableHandle(
        &pool, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        0);
    close(fd); /* the driver did not take it */
    if (rc != CUDA_SUCCESS) {
        sim_t_report("import %d", (int)rc);
        return 0;
    }
    CU_OK(D.cuMemPoolImportPointer(&ptr, pool, &x.data));
    buf = malloc(x.size);
    CHECK(buf);
    {
        /* GPU 0 here may not be the owner: it needs access, which the
         * importer grants itself (sim/FACTS.md F21; the sim's error for
         * the copy without it) */
        CUmemAccess_flags f, fh;
        CUmemLocation loc0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
        CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
        CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc0));
        CU_OK(D.cuMemPoolGetAccess(&fh, pool, &host));
        /* (a pinned host pool is not checked) */
        if (f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
            fh != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
            CUmemAccessDesc d0;
            CU_RC(D.cuMemcpyDtoHAsync(buf, ptr, x.size, NULL),
                  CUDA_ERROR_INVALID_VALUE);
            memset(&d0, 0, sizeof(d0));
            d0.location = loc0;
            d0.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            CU_OK(D.cuMemPoolSetAccess(pool, &d0, 1));
            gave_access = 1;
        }
        if (fh == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
            /* an imported pinned host pool's pointer is no device pointer
             * to cuMemcpyDtoHAsync; cuMemcpyAsync takes it (sim/FACTS.md
             * F31) */
            CU_RC(D.cuMemcpyDtoHAsync(buf, ptr, x.size, NULL),
                  CUDA_ERROR_INVALID_VALUE);
            CU_OK(D.cuMemcpyAsync((CUdeviceptr)(uintptr_t)buf, ptr, x.size, NULL));
        } else {
            CU_OK(D.cuMemcpyDtoHAsync(buf, ptr, x.size, NULL));
        }
    }
    for (size_t i = 0; i < x.size; i++)
        if (buf[i] != pattern(x.seed, i)) {
            sim_t_report("bytes differ at %zu", i);
            return 1;
        }
    free(buf);
    CU_OK(D.cuDeviceGetCount(&n));
    sim_t_report("ok dev=");
    for (int d = 0; d < n; d++) {
        CUmemAccess_flags f;
        CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, d};
        CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc));
        if (f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE && !(d == 0 && gave_access)) {
            sim_t_report("%s%d", devs ? "," : "", d);
            devs++;
        }
    }
    CU_OK(D.cuMemsetD8Async(ptr + 1, 0xee, 3, NULL)); /* a reply */
    CU_OK(D.cuMemFreeAsync(ptr, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    FD_CHECK_NO_LEAK();
    return 0;
}

static void cross(CUmemoryPool pool, int pool_fd, CUdeviceptr ptr, size_t n,
                  const char *cvd, const char *want)
{
    int sv[2];
    char ev[128], out[256];
    const char *env[] = {ev, NULL};
    struct xfer x;
    unsigned char *host = malloc(n);
    pid_t pid;
    ssize_t len;

    (void)pool;
    CHECK(host);
    memset(&x, 0, sizeof(x));
    x.size = (uint32_t)n;
    x.seed = (uint32_t)(n ^ (uintptr_t)cvd);
    for (size_t i = 0; i < n; i++)
        host[i] = pattern(x.seed, i);
    CU_OK(D.cuMemcpyHtoDAsync(ptr, host, n, NULL));
    CU_OK(D.cuMemPoolExportPointer(&x.data, ptr));
    if (cvd)
        snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES=%s", cvd);
    else
        snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES");

    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid = spawn_self("import", NULL, env, sv[1]);
    CHECK(pid > 0);
    close(sv[1]);
    sim_t_send(sv[0], &x, sizeof(x), &pool_fd, 1);
    len = 0;
    for (;;) {
        ssize_t r = read(sv[0], out + len, sizeof(out) - 1 - (size_t)len);
        if (r <= 0)
            break;
        len += r;
    }
    out[len] = '\0';
    close(sv[0]);
    CHECK(wait_child(pid) == 0);
    if (strcmp(out, want) != 0) {
        fprintf(stderr, "child (CVD %s) said '%s', wanted '%s'\n",
                cvd ? cvd : "unset", out, want);
        exit(1);
    }
    if (strncmp(want, "ok", 2) == 0) {
        /* the child's reply, through the same memory */
        CU_OK(D.cuMemcpyDtoHAsync(host, ptr, 8, NULL));
        CHECK(host[0] == pattern(x.seed, 0) && host[1] == 0xee &&
              host[3] == 0xee && host[4] == pattern(x.seed, 4));
    }
    free(host);
}

static void test_cross_process(void)
{
    CUmemPoolProps p = dev_props(1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                 16 * MiB);
    CUmemoryPool pool, hpool;
    CUdeviceptr a, b, h;
    int fd = -1, hfd = -1;
    char want[64];

    CU_OK(D.cuMemPoolCreate(&pool, &p));
    {
        /* we write from GPU 0; the children's access is their own */
        CUmemAccessDesc d0;
        memset(&d0, 0, sizeof(d0));
        d0.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d0.location.id = 0;
        d0.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CU_OK(D.cuMemPoolSetAccess(pool, &d0, 1));
    }
    CU_OK(D.cuMemPoolExportToShareableHandle(
        &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    a = alloc(pool, 100000);
    b = alloc(pool, 3 * MiB + 17);

    /* physical GPU 1 is local 1 here, 2 under "3,2,1,0", 0 under "1" */
    cross(pool, fd, a, 100000, NULL, "ok dev=1");
    cross(pool, fd, b, 3 * MiB + 17, "3,2,1,0", "ok dev=2");
    cross(pool, fd, a, 5000, "1", "ok dev=0");
    snprintf(want, sizeof(want), "import %d", (int)CUDA_ERROR_INVALID_DEVICE);
    cross(pool, fd, a, 64, "0,2,3", want);

    /* a pinned host pool crosses whatever the child sees (an IPC one is
     * of a host NUMA node: the plain host location is not IPC capable) */
    memset(&p, 0, sizeof(p));
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    p.location.id = 0;
    p.maxSize = 2 * MiB;
    CU_OK(D.cuMemPoolCreate(&hpool, &p));
    CU_OK(D.cuMemPoolExportToShareableHandle(
        &hfd, hpool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    h = alloc(hpool, 4096);
    cross(hpool, hfd, h, 4096, "2", "ok dev=");

    CU_OK(D.cuMemFreeAsync(a, NULL));
    CU_OK(D.cuMemFreeAsync(b, NULL));
    CU_OK(D.cuMemFreeAsync(h, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_OK(D.cuMemPoolDestroy(hpool));
    close(fd);
    close(hfd);
}

/* Child: default pool capacity from CUCORE_SIM_POOL_BYTES. */
static int child_pool_bytes(void)
{
    CUmemPoolProps p = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 0);
    CUmemoryPool pool;
    CUdeviceptr a, b;

    sim_t_init_ctx(0);
    CU_OK(D.cuMemPoolCreate(&pool, &p));
    CU_OK(D.cuMemAllocFromPoolAsync(&a, 3 * MiB, pool, NULL));
    CU_RC(D.cuMemAllocFromPoolAsync(&b, 1 * MiB + 1, pool, NULL),
          CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(D.cuMemAllocFromPoolAsync(&b, 1 * MiB, pool, NULL));
    sim_t_report("ok");
    return 0;
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    char out[16];
    static const char *const pb[] = {"CUCORE_SIM_POOL_BYTES=4M", NULL};

    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "import") == 0)
            return child_import();
        if (strcmp(argv[2], "pool_bytes") == 0)
            return child_pool_bytes();
        return 2;
    }
    sim_t_clean_env();
    FD_BASELINE();
    sim_t_load();
    CU_OK(D.cuInit(0));
    test_props();
    {
        /* allocation needs a context (the stream's) */
        CUmemPoolProps p = dev_props(0, CU_MEM_HANDLE_TYPE_NONE, 2 * MiB);
        CUmemoryPool pool;
        CUdeviceptr a;
        CU_OK(D.cuMemPoolCreate(&pool, &p));
        CU_RC(D.cuMemAllocFromPoolAsync(&a, 16, pool, NULL),
              CUDA_ERROR_INVALID_CONTEXT);
        CU_OK(D.cuMemPoolDestroy(pool));
    }
    ctx = sim_t_init_ctx(0);
    (void)ctx;
    test_accounting();
    test_copies();
    test_access();
    test_export_local();
    test_fds_and_export_bytes();
    test_host_pool();
    test_duplicate_imports();
    test_freed_bytes_stay();
    test_threads();
    test_cross_process();
    CHECK(sim_t_run("pool_bytes", NULL, pb, out, sizeof(out)) == 0);
    CHECK(strcmp(out, "ok") == 0);
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    FD_CHECK_NO_LEAK();
    return test_finish();
}
