/* Simulator: cuMemAlloc / cuMemFree, managed and host allocations, legacy
 * IPC memory (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle)
 * within a process and across exec'd children (some as pid 1 of PID
 * namespaces of their own), cuMemGetAddressRange and
 * cuPointerGetAttribute(s) on every kind of memory the sim makes.
 *
 * Most of it is what the driver answers (sim/FACTS.md F33-F37; probe_ipc.c
 * keys are quoted); what was not measured is marked "(doc)", from cuda.h,
 * or "(guess)", as sim/README.md lists them. */
#include "../sim/testdata/sim_test.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>

#define MiB ((size_t)1 << 20)

/* This process's shared files of exported chunks (sim_alloc.c). */
static int shm_files(void)
{
    char prefix[64];
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = 0;

    CHECK(d != NULL);
    snprintf(prefix, sizeof(prefix), "cucore-sim-ipc-%ld-", (long)getpid());
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static CUdeviceptr dalloc(size_t n)
{
    CUdeviceptr p = 0;

    CU_OK(D.cuMemAlloc(&p, n));
    CHECK(p != 0);
    return p;
}

static CUmemoryPool make_pool(int dev, CUmemAllocationHandleType ht)
{
    CUmemPoolProps pp;
    CUmemoryPool pool;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = ht;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = dev;
    pp.maxSize = 4 * MiB;
    CU_OK(D.cuMemPoolCreate(&pool, &pp));
    return pool;
}

static void range_is(CUdeviceptr p, CUdeviceptr base, size_t size)
{
    CUdeviceptr b = 1;
    size_t s = 1;

    CU_OK(D.cuMemGetAddressRange(&b, &s, p));
    if (b != base || s != size) {
        fprintf(stderr, "range of %#llx: base %#llx size %zu, wanted %#llx %zu\n",
                (unsigned long long)p, (unsigned long long)b, s,
                (unsigned long long)base, size);
        exit(1);
    }
}

static void range_none(CUdeviceptr p)
{
    CUdeviceptr b = 7;
    size_t s = 7;

    /* NOT_FOUND, and both outputs zeroed ("range.malloc.base ...
     * base=null size=0") */
    CU_RC(D.cuMemGetAddressRange(&b, &s, p), CUDA_ERROR_NOT_FOUND);
    CHECK(b == 0 && s == 0);
}

/* An attribute read into 8 bytes of 0xa5: the value, and how many bytes
 * the call wrote (the first byte that still holds 0xa5 from the top). */
static unsigned long long attr(CUpointer_attribute a, CUdeviceptr p, int *width)
{
    unsigned char slot[8];
    unsigned long long v = 0;
    int w = 8;

    memset(slot, 0xa5, sizeof(slot));
    CU_OK(D.cuPointerGetAttribute(slot, a, p));
    while (w > 0 && slot[w - 1] == 0xa5)
        w--;
    for (int i = w - 1; i >= 0; i--)
        v = v << 8 | slot[i];
    if (width)
        *width = w;
    return v;
}

/* ---- allocations ------------------------------------------------------------ */

static void test_memalloc(void)
{
    CUdeviceptr a, b, junk = 5;
    unsigned char buf[4096], back[4096];
    int n0 = test_fd_count();
    CUcontext ctx;

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 3 + 1);
    /* (doc) size 0 is CUDA_ERROR_INVALID_VALUE */
    CU_RC(D.cuMemAlloc(&junk, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(junk == 5);
    CU_RC(D.cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    a = dalloc(sizeof(buf));
    b = dalloc(1000);
    CHECK(test_fd_count() == n0); /* no fd until exported */
    /* small blocks share a 2 MiB chunk, the next right after the first
     * ("range.memalloc.end ... base=p+1048576 size=1000") */
    CHECK(b == a + sizeof(buf));
    range_is(a + sizeof(buf), b, 1000);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, b, NULL) == a);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, b, NULL) == 2 * MiB);
    CU_OK(D.cuMemcpyHtoDAsync(a, buf, sizeof(buf), NULL));
    CU_OK(D.cuMemcpyAsync(b, a + 24, 1000, NULL));
    CU_OK(D.cuMemsetD8Async(b + 10, 0xee, 5, NULL));
    CU_OK(D.cuMemcpyDtoHAsync(back, b, 1000, NULL));
    CHECK(memcmp(back, buf + 24, 10) == 0 && back[10] == 0xee && back[14] == 0xee &&
          back[15] == buf[39]);
    /* past the end (1000 bytes asked for) */
    CU_RC(D.cuMemcpyDtoHAsync(back, b, 1001, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemsetD8Async(b + 999, 0, 2, NULL), CUDA_ERROR_INVALID_VALUE);
    range_is(a, a, sizeof(buf));
    range_is(a + 4095, a, sizeof(buf));
    range_is(b + 999, b, 1000);
    range_none(b + 1000); /* "range.memalloc-small.end" */
    {
        /* both outputs are optional ("range.memalloc.null-size") */
        CUdeviceptr base = 0;
        size_t size = 0;
        CU_OK(D.cuMemGetAddressRange(&base, NULL, b + 7));
        CU_OK(D.cuMemGetAddressRange(NULL, &size, b + 7));
        CHECK(base == b && size == 1000);
    }
    /* frees: an interior pointer, twice (guess), NULL (guess: fine) */
    CU_RC(D.cuMemFree(a + 256), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemFree(a));
    CU_RC(D.cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemFree(0));
    range_none(a);
    CU_RC(D.cuMemcpyHtoDAsync(a, buf, 16, NULL), CUDA_ERROR_INVALID_VALUE);
    /* a current context is needed */
    CU_OK(D.cuCtxGetCurrent(&ctx));
    CU_OK(D.cuCtxSetCurrent(NULL));
    CU_RC(D.cuMemAlloc(&junk, 16), CUDA_ERROR_INVALID_CONTEXT);
    CU_RC(D.cuMemFree(b), CUDA_ERROR_INVALID_CONTEXT);
    CU_RC(D.cuMemGetAddressRange(&junk, NULL, b), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(D.cuCtxSetCurrent(ctx));
    CU_OK(D.cuMemFree(b));
    CHECK(test_fd_count() == n0);
}

static void test_managed_and_host(void)
{
    CUdeviceptr m, junk = 3, d;
    void *h = NULL;
    unsigned char buf[64];

    CU_RC(D.cuMemAllocManaged(&junk, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemAllocManaged(&junk, 4096, 4), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemAllocManaged(&junk, 0, CU_MEM_ATTACH_GLOBAL),
          CUDA_ERROR_INVALID_VALUE);
    CHECK(junk == 3);
    CU_OK(D.cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    /* managed memory: the host reads it, copies take it */
    memset((void *)(uintptr_t)m, 0x11, 64);
    CU_OK(D.cuMemsetD8Async(m + 8, 0x22, 8, NULL));
    CHECK(((unsigned char *)(uintptr_t)m)[8] == 0x22);
    range_is(m + 100, m, 4096);

    CU_RC(D.cuMemAllocHost(NULL, 64), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemAllocHost(&h, 0), CUDA_ERROR_INVALID_VALUE); /* (guess) */
    CU_OK(D.cuMemAllocHost(&h, 64));
    CHECK(h != NULL);
    /* pinned host memory counts as the device side of a copy (guess) */
    d = dalloc(64);
    memset(h, 0x33, 64);
    CU_OK(D.cuMemcpyAsync(d, (CUdeviceptr)(uintptr_t)h, 64, NULL));
    CU_OK(D.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)h, "pinned", 7, NULL));
    CHECK(strcmp(h, "pinned") == 0);
    CU_OK(D.cuMemcpyDtoHAsync(buf, d, 64, NULL));
    CHECK(buf[0] == 0x33 && buf[63] == 0x33);
    range_is((CUdeviceptr)(uintptr_t)h + 3, (CUdeviceptr)(uintptr_t)h, 64);

    /* each kind is freed by its own call */
    CU_RC(D.cuMemFree((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemFreeHost((void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemFreeHost((void *)(uintptr_t)m), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemFreeHost(h));
    CU_RC(D.cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemFree(m)); /* (doc) managed memory goes with cuMemFree */
    CU_OK(D.cuMemFree(d));
}

/* ---- address ranges of pool and VMM memory -------------------------------- */

static void test_ranges_pool_vmm(void)
{
    CUmemoryPool pool = make_pool(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), imp;
    CUmemPoolPtrExportData data;
    CUdeviceptr a, b, ia, base;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp ap;
    CUmemAccessDesc ad;
    int fd;

    CU_OK(D.cuMemAllocFromPoolAsync(&a, 1000, pool, NULL));
    CU_OK(D.cuMemAllocFromPoolAsync(&b, 64, pool, NULL));
    /* a pool allocation's range is the bytes asked for ("range.pool"), on the
     * exporter and on the importer alike */
    range_is(a, a, 1000);
    range_is(a + 999, a, 1000);
    range_none(a + 1000); /* the 24 bytes to the 256-byte block's end */
    CU_RC(D.cuMemcpyHtoDAsync(a + 1000, "x", 1, NULL), CUDA_ERROR_INVALID_VALUE);
    range_is(b + 63, b, 64);
    CU_OK(D.cuMemPoolExportToShareableHandle(&fd, pool,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemPoolExportPointer(&data, a));
    CU_OK(D.cuMemPoolImportFromShareableHandle(&imp, (void *)(uintptr_t)fd,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd);
    CU_OK(D.cuMemPoolImportPointer(&ia, imp, &data));
    range_is(ia, ia, 1000);
    range_is(ia + 500, ia, 1000);
    range_none(ia + 1000);
    CU_OK(D.cuMemFreeAsync(ia, NULL));
    range_none(ia);
    CU_OK(D.cuStreamSynchronize(NULL)); /* else the pool's fd stays (FACTS.md F46) */
    CU_OK(D.cuMemPoolDestroy(imp));
    CU_OK(D.cuMemFreeAsync(a, NULL));
    range_none(a);
    CU_OK(D.cuMemFreeAsync(b, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));

    /* VMM: the mapping ("range.vmm"); the unmapped rest of the
     * reservation is no allocation ("range.vmm.reserved-unmapped") */
    memset(&ap, 0, sizeof(ap));
    ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.location.id = 0;
    ap.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CU_OK(D.cuMemCreate(&h, 2 * MiB, &ap, 0));
    CU_OK(D.cuMemAddressReserve(&base, 6 * MiB, 0, 0, 0));
    CU_OK(D.cuMemMap(base + 2 * MiB, 2 * MiB, 0, h, 0));
    memset(&ad, 0, sizeof(ad));
    ad.location = ap.location;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_OK(D.cuMemSetAccess(base + 2 * MiB, 2 * MiB, &ad, 1));
    range_is(base + 2 * MiB, base + 2 * MiB, 2 * MiB);
    range_is(base + 4 * MiB - 1, base + 2 * MiB, 2 * MiB);
    range_none(base);
    range_none(base + 4 * MiB);
    {
        int w;
        CHECK(attr(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, base + 3 * MiB, NULL) == base);
        CHECK(attr(CU_POINTER_ATTRIBUTE_RANGE_SIZE, base + 3 * MiB, NULL) == 6 * MiB);
        CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, base + 3 * MiB, NULL) ==
              base + 2 * MiB);
        CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, base + 3 * MiB, NULL) == 2 * MiB);
        CHECK(attr(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, base + 3 * MiB, &w) ==
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
              w == 8);
        CHECK(attr(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, base + 3 * MiB, NULL) == 0);
    }
    CU_OK(D.cuMemUnmap(base + 2 * MiB, 2 * MiB));
    range_none(base + 2 * MiB);
    CU_OK(D.cuMemRelease(h));
    CU_OK(D.cuMemAddressFree(base, 6 * MiB));
    range_none(0);
    {
        int on_stack;
        range_none((CUdeviceptr)(uintptr_t)&on_stack);
    }
}

/* ---- pointer attributes ------------------------------------------------------- */

static void test_attributes(void)
{
    CUmemoryPool pool = make_pool(1, CU_MEM_HANDLE_TYPE_NONE);
    CUdeviceptr a, m, pp;
    void *h;
    CUcontext ctx;
    int w, x = 0;
    unsigned long long id1, id2;

    CU_OK(D.cuCtxGetCurrent(&ctx));
    a = dalloc(3000);
    CU_OK(D.cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    CU_OK(D.cuMemAllocHost(&h, 4096));
    CU_OK(D.cuMemAllocFromPoolAsync(&pp, 512, pool, NULL));

    /* the driver's widths: 4-byte enums, ordinals and booleans, 8-byte
     * ALLOWED_HANDLE_TYPES, ids, sizes, addresses and handles; its values
     * for each kind (sim/FACTS.md F37) */
    CHECK(attr(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a, &w) == CU_MEMORYTYPE_DEVICE && w == 4);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m, NULL) == CU_MEMORYTYPE_DEVICE);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h, NULL) ==
          CU_MEMORYTYPE_HOST);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pp, NULL) == CU_MEMORYTYPE_DEVICE);
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_MANAGED, a, &w) == 0 && w == 4);
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_MANAGED, m, &w) == 1 && w == 4);
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, a + 100, &w) == 1 && w == 4);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPED, a, &w) == 1 && w == 4);
    CHECK(attr(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, a, &w) == 0 && w == 8);
    CHECK(attr(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, pp, NULL) == 0); /* a NONE pool */
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, a, &w) == 1 && w == 4);
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, m, NULL) == 0);
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, pp, NULL) == 0);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, m, NULL) == 2 * MiB);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, pp, NULL) == 4 * MiB); /* capped pool */
    CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, pp + 8, NULL) == pp);
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, m, NULL) == 0);
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, pp, NULL) == 0);
    CHECK(attr(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
               (CUdeviceptr)(uintptr_t)h, NULL) == 0);
    CHECK(attr(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 100, &w) == a && w == 8);
    CHECK(attr(CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 100, NULL) == 3000);
    CHECK(attr(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, pp + 8, NULL) == pp);
    CHECK(attr(CU_POINTER_ATTRIBUTE_RANGE_SIZE, pp + 8, NULL) == 512);
    CHECK(attr(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a, &w) == 0 && w == 4);
    CHECK(attr(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pp, NULL) == 1);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, pp, &w) == (uintptr_t)pool && w == 8);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a, NULL) == 0);
    CHECK(attr(CU_POINTER_ATTRIBUTE_CONTEXT, a, NULL) == (uintptr_t)ctx);
    CHECK(attr(CU_POINTER_ATTRIBUTE_CONTEXT, pp, NULL) == 0);
    CHECK(attr(CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(uintptr_t)h, NULL) == (uintptr_t)ctx);
    CHECK(attr(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, a + 5, NULL) == a + 5);
    CHECK(attr(CU_POINTER_ATTRIBUTE_HOST_POINTER, m + 5, NULL) == m + 5);
    CHECK(attr(CU_POINTER_ATTRIBUTE_MAPPED, pp, NULL) == 1);
    /* the pool is GPU 1's, we are on GPU 0 without access */
    CHECK(attr(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, pp, &w) ==
              CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE && w == 4);
    CHECK(attr(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, a, NULL) ==
          CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
    {
        unsigned char slot[8];
        memset(slot, 0xa5, sizeof(slot));
        /* no host address for device memory: INVALID_VALUE, and NULL
         * written ("attr.memalloc.HOST_POINTER CUDA_ERROR_INVALID_VALUE
         * null") */
        CU_RC(D.cuPointerGetAttribute(slot, CU_POINTER_ATTRIBUTE_HOST_POINTER, a),
              CUDA_ERROR_INVALID_VALUE);
        for (int i = 0; i < 8; i++)
            CHECK(slot[i] == 0);
        memset(slot, 0xa5, sizeof(slot));
        CU_RC(D.cuPointerGetAttribute(slot, CU_POINTER_ATTRIBUTE_P2P_TOKENS, a),
              CUDA_ERROR_INVALID_VALUE);
        CU_RC(D.cuPointerGetAttribute(slot, (CUpointer_attribute)999, a),
              CUDA_ERROR_INVALID_VALUE);
        /* not CUDA's memory, nothing written ("attr.malloc.*") */
        CU_RC(D.cuPointerGetAttribute(slot, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      (CUdeviceptr)(uintptr_t)&x),
              CUDA_ERROR_INVALID_VALUE);
        CU_RC(D.cuPointerGetAttribute(slot, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0),
              CUDA_ERROR_INVALID_VALUE);
        CU_RC(D.cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a),
              CUDA_ERROR_INVALID_VALUE);
        for (int i = 0; i < 8; i++)
            CHECK(slot[i] == 0xa5);
    }
    /* BUFFER_ID: one per allocation, never reused */
    id1 = attr(CU_POINTER_ATTRIBUTE_BUFFER_ID, a, NULL);
    CHECK(id1 != 0 && id1 != attr(CU_POINTER_ATTRIBUTE_BUFFER_ID, m, NULL) &&
          id1 == attr(CU_POINTER_ATTRIBUTE_BUFFER_ID, a + 2999, NULL));
    CU_OK(D.cuMemFree(a));
    a = dalloc(3000);
    id2 = attr(CU_POINTER_ATTRIBUTE_BUFFER_ID, a, NULL);
    CHECK(id2 != id1);

    /* cuPointerGetAttributes: the same values, all at once, NULL where the
     * single call fails; a pointer that is not CUDA's is no error (doc):
     * zeroes, but HOST_POINTER is the pointer, DEVICE_ORDINAL -2 and the
     * range is left alone ("attrs.malloc.*") */
    {
        CUpointer_attribute as[6] = {
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
            CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_HOST_POINTER,
            CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
        unsigned int mt = 77, managed = 77;
        int ord = 77;
        size_t rs = 77;
        void *hp = &x;
        CUmemoryPool mp = (CUmemoryPool)&x;
        void *data[6] = {&mt, &managed, &rs, &hp, &mp, &ord};

        CU_OK(D.cuPointerGetAttributes(6, as, data, pp + 1));
        CHECK(mt == CU_MEMORYTYPE_DEVICE && !managed && rs == 512 && hp == NULL &&
              mp == pool && ord == 1);
        CU_OK(D.cuPointerGetAttributes(6, as, data, m));
        CHECK(managed && rs == 4096 && hp == (void *)(uintptr_t)m && mp == NULL);
        rs = 77;
        CU_OK(D.cuPointerGetAttributes(6, as, data, (CUdeviceptr)(uintptr_t)&x));
        CHECK(mt == 0 && !managed && rs == 77 && hp == (void *)&x && mp == NULL &&
              ord == -2);
        mt = 77;
        as[1] = (CUpointer_attribute)999; /* nothing is written */
        CU_RC(D.cuPointerGetAttributes(6, as, data, pp), CUDA_ERROR_INVALID_VALUE);
        CHECK(mt == 77);
        CU_RC(D.cuPointerGetAttributes(6, NULL, data, pp), CUDA_ERROR_INVALID_VALUE);
        CU_OK(D.cuPointerGetAttributes(0, NULL, NULL, pp));
    }
    CU_OK(D.cuMemFree(a));
    CU_OK(D.cuMemFree(m));
    CU_OK(D.cuMemFreeHost(h));
    CU_OK(D.cuMemFreeAsync(pp, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
}

/* ---- legacy IPC in this process ----------------------------------------------- */

static void test_ipc_local(void)
{
    CUipcMemHandle h1, h2, h3, junk;
    CUdeviceptr a, b, op = 9, m;
    CUmemoryPool pool = make_pool(0, CU_MEM_HANDLE_TYPE_NONE);
    CUdeviceptr pp;
    void *host;
    int n0 = test_fd_count();

    a = dalloc(MiB);
    memset(&h1, 0, sizeof(h1));
    memset(&h2, 0xff, sizeof(h2));
    CHECK(shm_files() == 0);
    CU_OK(D.cuIpcGetMemHandle(&h1, a));
    /* no fd (sim/FACTS.md F35): a shared file until the chunk goes */
    CHECK(test_fd_count() == n0 && shm_files() == 1);
    CU_OK(D.cuIpcGetMemHandle(&h2, a));
    CHECK(test_fd_count() == n0 && shm_files() == 1);
    CHECK(memcmp(&h1, &h2, sizeof(h1)) == 0); /* "ipcget.memalloc.twice-vs-first same" */
    /* a pointer inside names its allocation ("interior-vs-base same") */
    CU_OK(D.cuIpcGetMemHandle(&h3, a + 4096));
    CHECK(memcmp(&h1, &h3, sizeof(h1)) == 0);
    CU_RC(D.cuIpcGetMemHandle(&h3, a + MiB), CUDA_ERROR_INVALID_VALUE); /* nothing there */
    CU_RC(D.cuIpcGetMemHandle(NULL, a), CUDA_ERROR_INVALID_VALUE);
    /* the copy into a memfd kept the bytes and the address */
    CU_OK(D.cuMemsetD8Async(a, 0x42, 16, NULL));
    CU_OK(D.cuIpcGetMemHandle(&h3, a));
    {
        unsigned char c = 0;
        CU_OK(D.cuMemcpyDtoHAsync(&c, a + 15, 1, NULL));
        CHECK(c == 0x42);
    }
    /* opening it in the process that made it ("ipcopen.same-process") */
    CU_RC(D.cuIpcOpenMemHandle(&op, h1, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
          CUDA_ERROR_INVALID_CONTEXT);
    CHECK(op == 9);
    /* zeroes, garbage and flags other than LAZY_ENABLE_PEER_ACCESS are
     * CUDA_ERROR_INVALID_VALUE ("xipc.open-zero-handle", "-garbage-handle",
     * "reopen-flags0", "open-flags2") */
    memset(&junk, 0, sizeof(junk));
    CU_RC(D.cuIpcOpenMemHandle(&op, junk, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
          CUDA_ERROR_INVALID_VALUE);
    memset(&junk, 0x5a, sizeof(junk));
    CU_RC(D.cuIpcOpenMemHandle(&op, junk, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcOpenMemHandle(&op, h1, 2), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcOpenMemHandle(&op, h1, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcOpenMemHandle(NULL, h1, 1), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcCloseMemHandle(a), CUDA_ERROR_INVALID_VALUE);
    CHECK(op == 9);

    /* not cuMemAlloc memory: CUDA_ERROR_INVALID_VALUE ("ipcget.pool",
     * ".managed", ".allochost", ".malloc", ".zero") */
    CU_OK(D.cuMemAllocFromPoolAsync(&pp, 256, pool, NULL));
    CU_OK(D.cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    CU_OK(D.cuMemAllocHost(&host, 4096));
    CU_RC(D.cuIpcGetMemHandle(&h3, pp), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcGetMemHandle(&h3, m), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcGetMemHandle(&h3, (CUdeviceptr)(uintptr_t)host), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcGetMemHandle(&h3, (CUdeviceptr)(uintptr_t)&op), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuIpcGetMemHandle(&h3, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemFreeAsync(pp, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_OK(D.cuMemFree(m));
    CU_OK(D.cuMemFreeHost(host));

    /* freed ("ipcget.freed"), and allocated again at the same place while
     * its chunk lives on: the same handle, against cuda.h's word
     * (sim/FACTS.md F35) */
    b = dalloc(1000); /* keeps the chunk */
    CU_OK(D.cuMemFree(a));
    CU_RC(D.cuIpcGetMemHandle(&h3, a), CUDA_ERROR_INVALID_VALUE);
    CHECK(shm_files() == 1);
    CU_OK(D.cuMemAlloc(&op, MiB));
    CHECK(op == a);
    CU_OK(D.cuIpcGetMemHandle(&h3, op));
    CHECK(memcmp(&h1, &h3, sizeof(h1)) == 0);
    CU_OK(D.cuMemFree(op));
    /* the chunk's last block freed: the chunk and its file go; a new one
     * is a new handle (not seen) */
    CU_OK(D.cuMemFree(b));
    CHECK(test_fd_count() == n0 && shm_files() == 0);
    b = dalloc(MiB);
    CU_OK(D.cuIpcGetMemHandle(&h3, b));
    CHECK(memcmp(&h1, &h3, sizeof(h1)) != 0);
    CU_OK(D.cuMemFree(b));
    CHECK(test_fd_count() == n0);
}

/* A released primary context takes its allocations and their files. */
static void test_ctx_release(void)
{
    CUcontext c2;
    CUdeviceptr a;
    CUipcMemHandle h;
    int n0 = test_fd_count();
    unsigned char c;

    CU_OK(D.cuDevicePrimaryCtxRetain(&c2, 2));
    CU_OK(D.cuCtxSetCurrent(c2));
    a = dalloc(4096);
    CU_OK(D.cuIpcGetMemHandle(&h, a));
    CHECK(attr(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a, NULL) == 2);
    CHECK(shm_files() == 1);
    CU_OK(D.cuDevicePrimaryCtxRelease(2));
    CHECK(test_fd_count() == n0 && shm_files() == 0);
    CU_OK(D.cuDevicePrimaryCtxRetain(&c2, 2));
    CU_OK(D.cuCtxSetCurrent(c2));
    CU_RC(D.cuMemcpyDtoHAsync(&c, a, 1, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuDevicePrimaryCtxRelease(2));
    {
        CUcontext c0;
        CU_OK(D.cuDevicePrimaryCtxRetain(&c0, 0));
        CU_OK(D.cuCtxSetCurrent(c0));
        CU_OK(D.cuDevicePrimaryCtxRelease(0)); /* the retain above */
    }
}

/* ---- across processes ------------------------------------------------------------ */

enum op { OP_OPEN = 1, OP_READ, OP_WRITE, OP_RANGE, OP_ORDINAL, OP_CLOSE,
          OP_CTX, OP_FDS, OP_QUIT };

struct cmd {
    int op;
    int slot;            /* which opened pointer */
    unsigned int flags;  /* OP_OPEN */
    int arg;             /* offset, value, device */
    CUipcMemHandle h;
};

/* Child: executes commands, one text reply each. */
static int child_ipc(void)
{
    int sock = sim_t_child_fd(), n0;
    CUdeviceptr p[8] = {0};
    int open_[8] = {0}; /* slots opened and not closed */
    struct cmd c;
    char r[256];

    CHECK(sock >= 0);
    sim_t_init_ctx(0);
    n0 = test_fd_count();
    for (;;) {
        CUresult rc = CUDA_SUCCESS;
        {
            int nofd;
            CHECK(sim_t_recv(sock, &c, sizeof(c), &nofd, 0) == 0);
        }
        CHECK(c.slot >= 0 && c.slot < 8);
        r[0] = '\0';
        switch (c.op) {
        case OP_OPEN: {
            CUdeviceptr q = 0;
            rc = D.cuIpcOpenMemHandle(&q, c.h, c.flags);
            if (rc == CUDA_SUCCESS) {
                int same = -1;
                for (int i = 0; i < 8; i++)
                    if (open_[i] && p[i] == q)
                        same = i;
                p[c.slot] = q;
                open_[c.slot] = 1;
                snprintf(r, sizeof(r), "ok same=%d", same);
            }
            break;
        }
        case OP_READ: {
            unsigned char b = 0;
            rc = D.cuMemcpyDtoHAsync(&b, p[c.slot] + (CUdeviceptr)c.arg, 1, NULL);
            if (rc == CUDA_SUCCESS)
                snprintf(r, sizeof(r), "%02x", b);
            break;
        }
        case OP_WRITE:
            rc = D.cuMemsetD8Async(p[c.slot] + 1, (unsigned char)c.arg, 1, NULL);
            if (rc == CUDA_SUCCESS)
                snprintf(r, sizeof(r), "ok");
            break;
        case OP_RANGE: {
            CUdeviceptr b = 0;
            size_t s = 0;
            rc = D.cuMemGetAddressRange(&b, &s, p[c.slot] + (CUdeviceptr)c.arg);
            if (rc == CUDA_SUCCESS)
                snprintf(r, sizeof(r), "base%+lld size=%zu",
                         (long long)(b - p[c.slot]), s);
            break;
        }
        case OP_ORDINAL: {
            int o = -9;
            rc = D.cuPointerGetAttribute(&o, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p[c.slot]);
            if (rc == CUDA_SUCCESS)
                snprintf(r, sizeof(r), "dev=%d", o);
            break;
        }
        case OP_CLOSE:
            rc = D.cuIpcCloseMemHandle(p[c.slot]);
            if (rc == CUDA_SUCCESS) {
                open_[c.slot] = 0;
                snprintf(r, sizeof(r), "ok");
            }
            break;
        case OP_CTX: {
            CUcontext x;
            CU_OK(D.cuDevicePrimaryCtxRetain(&x, c.arg));
            CU_OK(D.cuCtxSetCurrent(x));
            snprintf(r, sizeof(r), "ok");
            break;
        }
        case OP_FDS:
            snprintf(r, sizeof(r), "%+d", test_fd_count() - n0);
            break;
        case OP_QUIT:
            sim_t_write_all(sock, "bye", 4);
            return 0;
        default:
            return 2;
        }
        if (rc != CUDA_SUCCESS)
            snprintf(r, sizeof(r), "%s", sim_t_errname(rc));
        sim_t_write_all(sock, r, strlen(r) + 1);
    }
}

struct peer {
    pid_t pid;
    int sock;
};

/* An ipc child with CUDA_VISIBLE_DEVICES cvd (NULL: unset), under args
 * (NULL, or {"pidns", NULL}: in a PID namespace of its own). */
static struct peer peer_start_in(const char *cvd, const char *const *args)
{
    char ev[128];
    const char *env[] = {ev, NULL};
    int sv[2];
    struct peer pr;

    if (cvd)
        snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES=%s", cvd);
    else
        snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES");
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pr.pid = spawn_self("ipc", args, env, sv[1]);
    CHECK(pr.pid > 0);
    close(sv[1]);
    pr.sock = sv[0];
    return pr;
}

static struct peer peer_start(const char *cvd)
{
    return peer_start_in(cvd, NULL);
}

/* Sends a command, checks the reply is want. */
static void ask(struct peer *pr, int op, int slot, const CUipcMemHandle *h,
                unsigned int flags, int arg, const char *want)
{
    struct cmd c;
    char r[256];
    size_t len = 0;

    memset(&c, 0, sizeof(c));
    c.op = op;
    c.slot = slot;
    c.flags = flags;
    c.arg = arg;
    if (h)
        c.h = *h;
    sim_t_send(pr->sock, &c, sizeof(c), NULL, 0);
    for (;;) {
        ssize_t n = read(pr->sock, r + len, 1);
        CHECK(n == 1);
        if (r[len] == '\0')
            break;
        CHECK(++len < sizeof(r) - 1);
    }
    if (strcmp(r, want) != 0) {
        fprintf(stderr, "child op %d slot %d: '%s', wanted '%s'\n", op, slot, r, want);
        exit(1);
    }
}

static void peer_end(struct peer *pr)
{
    ask(pr, OP_QUIT, 0, NULL, 0, 0, "bye");
    close(pr->sock);
    CHECK(wait_child(pr->pid) == 0);
}

#define LAZY CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS

static void test_ipc_cross(void)
{
    CUcontext c1;
    CUdeviceptr a, a2;
    CUipcMemHandle h, h2;
    struct peer pr;
    unsigned char b[2];

    /* GPU 1's memory, written from GPU 1 */
    CU_OK(D.cuDevicePrimaryCtxRetain(&c1, 1));
    CU_OK(D.cuCtxSetCurrent(c1));
    a = dalloc(MiB);
    CU_OK(D.cuMemsetD8Async(a, 0x5a, MiB, NULL));
    CU_OK(D.cuMemsetD8Async(a + 4096, 0x3c, 1, NULL));
    CU_OK(D.cuIpcGetMemHandle(&h, a));

    pr = peer_start(NULL);
    ask(&pr, OP_OPEN, 0, &h, LAZY, 0, "ok same=-1");
    ask(&pr, OP_FDS, 0, NULL, 0, 0, "+0"); /* an opened handle keeps no fd */
    ask(&pr, OP_READ, 0, NULL, 0, 0, "5a");
    ask(&pr, OP_READ, 0, NULL, 0, 4096, "3c");
    ask(&pr, OP_ORDINAL, 0, NULL, 0, 0, "dev=1");
    ask(&pr, OP_RANGE, 0, NULL, 0, 4096, "base+0 size=1048576");
    ask(&pr, OP_WRITE, 0, NULL, 0, 0xee, "ok"); /* the child writes byte 1 */
    CU_OK(D.cuMemcpyDtoHAsync(b, a, 2, NULL));
    CHECK(b[0] == 0x5a && b[1] == 0xee);
    /* a second open in the same context: the same pointer, one more
     * reference (doc; "xipc.open-again ... ptr=p+0"); closing more often
     * than opened is CUDA_ERROR_INVALID_VALUE ("xipc.close-4") */
    ask(&pr, OP_OPEN, 1, &h, LAZY, 0, "ok same=0");
    ask(&pr, OP_CLOSE, 0, NULL, 0, 0, "ok");
    ask(&pr, OP_READ, 1, NULL, 0, 0, "5a"); /* still mapped */
    ask(&pr, OP_CLOSE, 1, NULL, 0, 0, "ok");
    ask(&pr, OP_READ, 1, NULL, 0, 0, "CUDA_ERROR_INVALID_VALUE");
    ask(&pr, OP_CLOSE, 1, NULL, 0, 0, "CUDA_ERROR_INVALID_VALUE");
    /* only LAZY_ENABLE_PEER_ACCESS ("xipc.reopen-flags0") */
    ask(&pr, OP_OPEN, 2, &h, 2, 0, "CUDA_ERROR_INVALID_VALUE");
    ask(&pr, OP_OPEN, 2, &h, 0, 0, "CUDA_ERROR_INVALID_VALUE");
    ask(&pr, OP_OPEN, 2, &h, LAZY, 0, "ok same=-1");
    /* (guess) the same handle from another context of the process */
    ask(&pr, OP_CTX, 0, NULL, 0, 3, "ok");
    ask(&pr, OP_OPEN, 3, &h, LAZY, 0, "CUDA_ERROR_INVALID_CONTEXT");
    ask(&pr, OP_CTX, 0, NULL, 0, 0, "ok");

    /* the exporter frees while the child maps (the block alone in its
     * chunk, which goes): the child still reads what was there (guess:
     * the driver calls it undefined); the old handle no longer opens
     * (guess), a new allocation's handle does */
    CU_OK(D.cuMemFree(a));
    ask(&pr, OP_READ, 2, NULL, 0, 4096, "3c");
    /* opened still: one more reference to the mapping there (doc) */
    ask(&pr, OP_OPEN, 4, &h, LAZY, 0, "ok same=2");
    ask(&pr, OP_CLOSE, 4, NULL, 0, 0, "ok");
    a2 = dalloc(MiB);
    CU_OK(D.cuMemsetD8Async(a2, 0xa7, 16, NULL));
    CU_OK(D.cuIpcGetMemHandle(&h2, a2));
    CHECK(memcmp(&h, &h2, sizeof(h)) != 0);
    ask(&pr, OP_OPEN, 5, &h2, LAZY, 0, "ok same=-1");
    ask(&pr, OP_READ, 5, NULL, 0, 0, "a7");
    ask(&pr, OP_READ, 2, NULL, 0, 0, "5a"); /* the old mapping is the old memory */
    ask(&pr, OP_CLOSE, 2, NULL, 0, 0, "ok");
    /* closed, its memory freed: the old handle opens nothing (guess) */
    ask(&pr, OP_OPEN, 4, &h, LAZY, 0, "CUDA_ERROR_INVALID_VALUE");
    ask(&pr, OP_CLOSE, 5, NULL, 0, 0, "ok");
    ask(&pr, OP_FDS, 0, NULL, 0, 0, "+0");

    /* freed and allocated again where a neighbour keeps the chunk: the
     * same handle, and the mapping the child kept shows the new block's
     * bytes (sim/FACTS.md F35, F36) */
    {
        CUdeviceptr big = dalloc(MiB), small = dalloc(1000), again;
        CUipcMemHandle hb, hb2;
        CU_OK(D.cuMemsetD8Async(big, 0x5a, MiB, NULL));
        CU_OK(D.cuIpcGetMemHandle(&hb, big));
        ask(&pr, OP_OPEN, 6, &hb, LAZY, 0, "ok same=-1");
        ask(&pr, OP_READ, 6, NULL, 0, 4096, "5a");
        CU_OK(D.cuMemFree(big));
        CU_OK(D.cuMemAlloc(&again, MiB));
        CHECK(again == big);
        CU_OK(D.cuMemsetD8Async(again, 0xa7, MiB, NULL));
        CU_OK(D.cuIpcGetMemHandle(&hb2, again));
        CHECK(memcmp(&hb, &hb2, sizeof(hb)) == 0);
        ask(&pr, OP_READ, 6, NULL, 0, 4096, "a7");
        ask(&pr, OP_OPEN, 7, &hb2, LAZY, 0, "ok same=6");
        ask(&pr, OP_CLOSE, 7, NULL, 0, 0, "ok");
        ask(&pr, OP_CLOSE, 6, NULL, 0, 0, "ok");
        CU_OK(D.cuMemFree(again));
        CU_OK(D.cuMemFree(small));
    }
    peer_end(&pr);

    /* another visibility: GPU 1 is ordinal 2 under "3,2,1,0", and not
     * there under "0,2,3" */
    pr = peer_start("3,2,1,0");
    ask(&pr, OP_OPEN, 0, &h2, LAZY, 0, "ok same=-1");
    ask(&pr, OP_ORDINAL, 0, NULL, 0, 0, "dev=2");
    ask(&pr, OP_READ, 0, NULL, 0, 15, "a7");
    ask(&pr, OP_CLOSE, 0, NULL, 0, 0, "ok");
    peer_end(&pr);
    pr = peer_start("0,2,3");
    ask(&pr, OP_OPEN, 0, &h2, LAZY, 0, "CUDA_ERROR_INVALID_DEVICE");
    peer_end(&pr);
    CU_OK(D.cuMemFree(a2));
    CU_OK(D.cuDevicePrimaryCtxRelease(1));
    {
        CUcontext c0;
        CU_OK(D.cuDevicePrimaryCtxRetain(&c0, 0));
        CU_OK(D.cuCtxSetCurrent(c0));
        CU_OK(D.cuDevicePrimaryCtxRelease(0)); /* the retain above */
    }
}

/* Child: exports a block, sends its handle, then exits, or (argv[3]
 * "wait") waits to be killed, or ("die") waits for the socket's end and
 * goes without its exit handlers, leaving its files as a killed one. */
static int child_export_exit(int argc, char **argv)
{
    CUdeviceptr a;
    CUipcMemHandle h;
    int fd = sim_t_child_fd();

    sim_t_init_ctx(0);
    CU_OK(D.cuMemAlloc(&a, 4096));
    CU_OK(D.cuIpcGetMemHandle(&h, a));
    sim_t_write_all(fd, &h, sizeof(h));
    if (argc > 3 && strcmp(argv[3], "wait") == 0)
        for (;;)
            pause();
    if (argc > 3 && strcmp(argv[3], "die") == 0) {
        char c;
        while (read(fd, &c, 1) > 0)
            ;
        _exit(0); /* pid 1 of its namespace: a SIGKILL of its own is ignored */
    }
    return 0;
}

static int shm_files_of(pid_t pid)
{
    char prefix[64];
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = 0;

    CHECK(d != NULL);
    snprintf(prefix, sizeof(prefix), "cucore-sim-ipc-%ld-", (long)pid);
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* A handle whose exporter is gone opens nothing (guess; the driver's
 * answer for garbage, sim/FACTS.md F36), whether it exited (its files went with it) or was
 * killed (its file stays until the next exporter clears it). */
static void test_exporter_gone(void)
{
    static const char *const wait_arg[] = {"wait", NULL};
    CUipcMemHandle h;
    struct peer pr;
    int p[2];
    pid_t pid;

    for (int killed = 0; killed < 2; killed++) {
        CHECK(pipe2(p, O_CLOEXEC) == 0);
        pid = spawn_self("export_exit", killed ? wait_arg : NULL, NULL, p[1]);
        close(p[1]);
        CHECK(read(p[0], &h, sizeof(h)) == (ssize_t)sizeof(h));
        close(p[0]);
        if (killed) {
            /* alive: the handle opens */
            pr = peer_start(NULL);
            ask(&pr, OP_OPEN, 0, &h, LAZY, 0, "ok same=-1");
            ask(&pr, OP_CLOSE, 0, NULL, 0, 0, "ok");
            peer_end(&pr);
            CHECK(kill(pid, SIGKILL) == 0);
            CHECK(wait_child(pid) == 128 + SIGKILL);
            CHECK(shm_files_of(pid) == 1);
        } else {
            CHECK(wait_child(pid) == 0);
            CHECK(shm_files_of(pid) == 0);
        }
        pr = peer_start(NULL);
        ask(&pr, OP_OPEN, 0, &h, LAZY, 0, "CUDA_ERROR_INVALID_VALUE");
        peer_end(&pr);
    }
    /* our next export clears what the killed one left */
    {
        CUdeviceptr a = dalloc(64);
        CU_OK(D.cuIpcGetMemHandle(&h, a));
        CHECK(shm_files_of(pid) == 0);
        CU_OK(D.cuMemFree(a));
    }
}

static const char *const unshare_pid[] = {"/usr/bin/unshare", "--pid", "--fork",
                                          "--mount-proc", "--kill-child", NULL};

/* A child whose last argument is "pidns": run again without it, as pid 1
 * of a PID (and mount) namespace of its own. */
static int child_in_pidns(int argc, char **argv)
{
    const char *av[40];
    int n = 0;

    for (; unshare_pid[n]; n++)
        av[n] = unshare_pid[n];
    for (int i = 0; i < argc - 1 && n < 39; i++)
        av[n++] = argv[i];
    av[n] = NULL;
    execv(av[0], (char *const *)av);
    return 127;
}

/* An exporter and an importer, each pid 1 of a PID namespace of its own:
 * the handle opens, as the driver opens it across PID namespaces
 * (sim/FACTS.md F48), though the exporter's pid number is the
 * importer's own; once the exporter is gone (its exit handlers skipped,
 * as a killed one) it opens nothing; so for an exporter in ours. */
static void test_pid_namespaces(void)
{
    static const char *const probe[] = {"/usr/bin/unshare", "--pid", "--fork", "--mount-proc",
                                        "/bin/true", NULL};
    static const char *const ns[] = {"pidns", NULL};
    static const char *const ns_die[] = {"die", "pidns", NULL};
    CUipcMemHandle h;
    CUdeviceptr a;
    struct peer pr;
    char out[64];
    int sv[2];
    pid_t pid;

    if (access(probe[0], X_OK) != 0 || run_capture(probe, NULL, out, sizeof(out)) != 0) {
        printf("PID namespaces: skipped (unshare refused here)\n");
        return;
    }
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid = spawn_self("export_exit", ns_die, NULL, sv[1]);
    close(sv[1]);
    CHECK(read(sv[0], &h, sizeof(h)) == (ssize_t)sizeof(h));
    pr = peer_start_in(NULL, ns);
    ask(&pr, OP_OPEN, 0, &h, LAZY, 0, "ok same=-1");
    ask(&pr, OP_CLOSE, 0, NULL, 0, 0, "ok");
    close(sv[0]);
    CHECK(wait_child(pid) == 0);
    ask(&pr, OP_OPEN, 0, &h, LAZY, 0, "CUDA_ERROR_INVALID_VALUE");
    a = dalloc(4096);
    CU_OK(D.cuMemsetD8Async(a, 0x3c, 4096, NULL));
    CU_OK(D.cuIpcGetMemHandle(&h, a));
    ask(&pr, OP_OPEN, 0, &h, LAZY, 0, "ok same=-1");
    ask(&pr, OP_READ, 0, NULL, 0, 7, "3c");
    ask(&pr, OP_CLOSE, 0, NULL, 0, 0, "ok");
    peer_end(&pr);
    CU_OK(D.cuMemFree(a));
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "--child") == 0 && strcmp(argv[argc - 1], "pidns") == 0)
        return child_in_pidns(argc, argv);
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "ipc") == 0)
            return child_ipc();
        if (strcmp(argv[2], "export_exit") == 0)
            return child_export_exit(argc, argv);
        return 2;
    }
    sim_t_clean_env();
    FD_BASELINE();
    sim_t_init_ctx(0);
    test_memalloc();
    test_managed_and_host();
    test_ranges_pool_vmm();
    test_attributes();
    test_ipc_local();
    test_ctx_release();
    test_ipc_cross();
    test_exporter_gone();
    test_pid_namespaces();
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    FD_CHECK_NO_LEAK();
    return test_finish();
}
