/* Conformance probe for what the simulator took from the documentation
 * for memory another allocator owns (cuc_memory_kind, cuc_buffer_adopt,
 * cuc_vmm_adopt) and for fills: cuMemRetainAllocationHandle,
 * cuMemGetAllocationPropertiesFromHandle, cuMemsetD16Async /
 * cuMemsetD32Async, the attributes cucore classifies by on the kinds
 * probe_ipc.c does not make (a pool without a handle type, VMM memory
 * without one, two chunks mapped back to back, a hole), and
 * cuMemPoolExportPointer of a pointer inside an allocation. One "key
 * value" line per observation, diffed real against simulator:
 *
 *   cc -std=c11 -D_GNU_SOURCE -I/usr/local/cuda/include -Itests -Isrc \
 *      -DCUC_SIM_PATH='getenv("PROBE_LIB")' sim/testdata/probe_adopt.c \
 *      -o probe_adopt -ldl
 *   PROBE_LIB=libcuda.so.1 ./probe_adopt > real.txt
 *   PROBE_LIB=.../libcucore-sim.so CUCORE_SIM_GPUS=1 ./probe_adopt > sim.txt
 *
 * Addresses are printed relative to the allocation they concern, handles
 * as "same"/"other" than the one expected. Needs device 0; one process,
 * no child. Not part of the test suite (sim/testdata/run_probes.sh runs
 * it). */
#define SIM_T_CTL_OPTIONAL 1
#include "sim_test.h"

#define MiB ((size_t)1 << 20)
#define SENT 0xa5

static const char *en(CUresult r)
{
    return sim_t_errname(r);
}

static CUmemAllocationProp vmm_prop(CUmemAllocationHandleType ht)
{
    CUmemAllocationProp p;

    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = ht;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

/* The attributes cucore classifies by, in one cuPointerGetAttributes. */
static void kind_attrs(const char *key, CUdeviceptr p, CUdeviceptr ref, CUmemoryPool pool)
{
    CUpointer_attribute a[8] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,     CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,  CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
        CU_POINTER_ATTRIBUTE_CONTEXT,         CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
        CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
    unsigned type = 7, managed = 7, legacy = 7;
    unsigned long long types = 77, mbase = 0, msize = 0;
    void *vpool = (void *)1, *ctx = (void *)1;
    void *data[8] = {&type, &managed, &legacy, &vpool, &types, &ctx, &mbase, &msize};
    CUresult r = D.cuPointerGetAttributes(8, a, data, p);

    printf("kind.%s %s type=%u managed=%u legacy=%u pool=%s handle_types=%llu ctx=%s "
           "mapping=%+lld/%llu\n",
           key, en(r), type, managed, legacy,
           !vpool ? "null" : vpool == (void *)pool ? "its" : "other", types,
           ctx ? "set" : "null", mbase ? (long long)(mbase - ref) : 0LL, msize);
}

/* Retain at p: the handle expected (same/other) and its properties. */
static void retain_out(const char *key, void *p, CUmemGenericAllocationHandle want)
{
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop;
    CUresult r = D.cuMemRetainAllocationHandle(&h, p), r2;

    printf("retain.%s %s %s\n", key, en(r),
           r != CUDA_SUCCESS ? "-" : h == want ? "same" : "other");
    if (r != CUDA_SUCCESS)
        return;
    memset(&prop, SENT, sizeof(prop));
    r2 = D.cuMemGetAllocationPropertiesFromHandle(&prop, h);
    printf("props.%s %s type=%d handle_types=%d loc=%d/%d\n", key, en(r2), (int)prop.type,
           (int)prop.requestedHandleTypes, (int)prop.location.type, prop.location.id);
    printf("retain.%s.release %s\n", key, en(D.cuMemRelease(h)));
}

static CUmemoryPool make_pool(CUmemLocationType t, CUmemAllocationHandleType ht)
{
    CUmemPoolProps pp;
    CUmemoryPool pool = NULL;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = ht;
    pp.location.type = t;
    pp.location.id = 0;
    printf("poolcreate.%d.%d %s\n", (int)t, (int)ht, en(D.cuMemPoolCreate(&pool, &pp)));
    return pool;
}

/* Kinds and pointers of memory that is not VMM. */
static void probe_non_vmm(void)
{
    CUmemoryPool plain = make_pool(CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_HANDLE_TYPE_NONE);
    CUmemoryPool ipc = make_pool(CU_MEM_LOCATION_TYPE_DEVICE,
                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemoryPool hostipc = make_pool(CU_MEM_LOCATION_TYPE_HOST_NUMA,
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUdeviceptr a = 0, pp = 0, pi = 0, ph = 0, range = 0;
    CUmemPoolPtrExportData d;
    size_t rsize = 0;
    void *host = NULL;
    int fd = -1, fdh = -1;

    printf("alloc.memalloc %s\n", en(D.cuMemAlloc(&a, MiB)));
    printf("alloc.allochost %s\n", en(D.cuMemAllocHost(&host, MiB)));
    printf("alloc.pool-plain %s\n", en(D.cuMemAllocFromPoolAsync(&pp, 4096, plain, NULL)));
    printf("alloc.pool-ipc %s\n", en(D.cuMemAllocFromPoolAsync(&pi, 4096, ipc, NULL)));
    printf("alloc.pool-hostipc %s\n",
           en(D.cuMemAllocFromPoolAsync(&ph, 4096, hostipc, NULL)));
    printf("sync %s\n", en(D.cuCtxSynchronize()));
    kind_attrs("pool-plain", pp, pp, plain);
    kind_attrs("pool-ipc", pi, pi, ipc);
    kind_attrs("pool-hostipc", ph, ph, hostipc);
    /* a pinned host pool's pointer has no address range on its exporter:
     * what RANGE_SIZE says inside one */
    {
        CUpointer_attribute ra[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                     CU_POINTER_ATTRIBUTE_RANGE_SIZE};
        void *rd[2] = {&range, &rsize};
        CUresult r = D.cuPointerGetAttributes(2, ra, rd, ph + 256);
        printf("range.pool-hostipc+256 %s start=%s size=%zu\n", en(r),
               range ? "set" : "null", rsize);
    }
    /* every retain of memory that is not VMM */
    retain_out("memalloc", (void *)(uintptr_t)a, 0);
    retain_out("allochost", host, 0);
    retain_out("pool-plain", (void *)(uintptr_t)pp, 0);
    retain_out("pool-ipc", (void *)(uintptr_t)pi, 0);
    retain_out("malloc", &fd, 0);
    retain_out("null", NULL, 0);
    /* export of a pool pointer: at its start, inside it */
    printf("poolexport.ipc %s\n", en(D.cuMemPoolExportToShareableHandle(
                                      &fd, ipc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)));
    printf("poolexport.hostipc %s\n",
           en(D.cuMemPoolExportToShareableHandle(&fdh, hostipc,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)));
    printf("poolexport.plain %s\n",
           en(D.cuMemPoolExportToShareableHandle(&fd, plain,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)));
    printf("exportptr.ipc+0 %s\n", en(D.cuMemPoolExportPointer(&d, pi)));
    printf("exportptr.ipc+256 %s\n", en(D.cuMemPoolExportPointer(&d, pi + 256)));
    printf("exportptr.hostipc+0 %s\n", en(D.cuMemPoolExportPointer(&d, ph)));
    printf("exportptr.hostipc+256 %s\n", en(D.cuMemPoolExportPointer(&d, ph + 256)));
    D.cuMemFreeAsync(pp, NULL);
    D.cuMemFreeAsync(pi, NULL);
    D.cuMemFreeAsync(ph, NULL);
    D.cuCtxSynchronize();
    D.cuMemPoolDestroy(plain);
    D.cuMemPoolDestroy(ipc);
    D.cuMemPoolDestroy(hostipc);
    if (fd >= 0)
        close(fd);
    if (fdh >= 0)
        close(fdh);
    D.cuMemFree(a);
    D.cuMemFreeHost(host);
}

/* Two chunks back to back (with and without POSIX fds), a hole after
 * them, retains and their counts. */
static void probe_vmm(void)
{
    CUmemAllocationProp pf = vmm_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemAllocationProp pn = vmm_prop(CU_MEM_HANDLE_TYPE_NONE);
    CUmemGenericAllocationHandle hf = 0, hn = 0, hi = 0, r = 0;
    CUmemAccessDesc acc;
    CUdeviceptr base = 0;
    int fd = -1;

    printf("create.fd %s\n", en(D.cuMemCreate(&hf, 2 * MiB, &pf, 0)));
    printf("create.none %s\n", en(D.cuMemCreate(&hn, 2 * MiB, &pn, 0)));
    printf("reserve %s\n", en(D.cuMemAddressReserve(&base, 8 * MiB, 0, 0, 0)));
    printf("map.fd %s\n", en(D.cuMemMap(base, 2 * MiB, 0, hf, 0)));
    printf("map.none %s\n", en(D.cuMemMap(base + 2 * MiB, 2 * MiB, 0, hn, 0)));
    memset(&acc, 0, sizeof(acc));
    acc.location = pf.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    printf("access %s\n", en(D.cuMemSetAccess(base, 4 * MiB, &acc, 1)));
    kind_attrs("vmm-fd", base, base, NULL);
    kind_attrs("vmm-fd+4096", base + 4096, base, NULL);
    kind_attrs("vmm-none", base + 2 * MiB, base, NULL);
    kind_attrs("vmm-hole", base + 4 * MiB, base, NULL);
    retain_out("vmm-fd+0", (void *)(uintptr_t)base, hf);
    retain_out("vmm-fd+12345", (void *)(uintptr_t)(base + 12345), hf);
    retain_out("vmm-fd-last", (void *)(uintptr_t)(base + 2 * MiB - 1), hf);
    retain_out("vmm-none", (void *)(uintptr_t)(base + 2 * MiB), hn);
    retain_out("vmm-hole", (void *)(uintptr_t)(base + 4 * MiB), 0);
    retain_out("vmm-past-reservation", (void *)(uintptr_t)(base + 8 * MiB), 0);
    /* counted: the creator's release, then the retain's keeps the handle */
    printf("count.retain %s\n", en(D.cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)base)));
    printf("count.release-creator %s\n", en(D.cuMemRelease(hf)));
    printf("count.export-after %s\n",
           en(D.cuMemExportToShareableHandle(&fd, r, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                             0)));
    printf("count.release-retain %s\n", en(D.cuMemRelease(r)));
    printf("count.props-after-all %s\n", en(D.cuMemGetAllocationPropertiesFromHandle(&pf, r)));
    retain_out("vmm-fd-released-mapped", (void *)(uintptr_t)base, hf);
    /* an allocation imported from its own fd, in this process */
    if (fd >= 0) {
        printf("import.self %s\n", en(D.cuMemImportFromShareableHandle(
                                       &hi, (void *)(intptr_t)fd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)));
        if (hi) {
            CUmemAllocationProp p;
            CUresult rp;
            memset(&p, SENT, sizeof(p));
            rp = D.cuMemGetAllocationPropertiesFromHandle(&p, hi);
            printf("props.imported %s handle_types=%d loc=%d/%d\n", en(rp),
                   (int)p.requestedHandleTypes, (int)p.location.type, p.location.id);
            D.cuMemRelease(hi);
        }
        close(fd);
    }
    printf("props.null %s\n", en(D.cuMemGetAllocationPropertiesFromHandle(NULL, hn)));
    printf("unmap %s\n", en(D.cuMemUnmap(base, 4 * MiB)));
    retain_out("vmm-after-unmap", (void *)(uintptr_t)base, 0);
    D.cuMemRelease(hn);
    printf("addressfree %s\n", en(D.cuMemAddressFree(base, 8 * MiB)));
}

/* cuMemsetD16Async / D32Async: bytes, alignment, count 0. */
static void probe_memsets(void)
{
    unsigned char got[32];
    CUdeviceptr a = 0;

    if (D.cuMemAlloc(&a, 4096) != CUDA_SUCCESS)
        return;
    D.cuMemsetD8Async(a, 0x11, 64, NULL);
    printf("memset16 %s\n", en(D.cuMemsetD16Async(a + 2, 0xbeef, 3, NULL)));
    printf("memset32 %s\n", en(D.cuMemsetD32Async(a + 16, 0xdeadbeef, 2, NULL)));
    printf("memset16.misaligned %s\n", en(D.cuMemsetD16Async(a + 1, 1, 1, NULL)));
    printf("memset32.misaligned %s\n", en(D.cuMemsetD32Async(a + 2, 1, 1, NULL)));
    printf("memset32.count0-null %s\n", en(D.cuMemsetD32Async(0, 1, 0, NULL)));
    printf("memset16.count0 %s\n", en(D.cuMemsetD16Async(a + 1, 1, 0, NULL)));
    printf("memset.sync %s\n", en(D.cuCtxSynchronize()));
    memset(got, 0, sizeof(got));
    printf("memset.read %s", en(D.cuMemcpyDtoHAsync(got, a, sizeof(got), NULL)));
    D.cuCtxSynchronize();
    for (size_t i = 0; i < sizeof(got); i++)
        printf(" %02x", got[i]);
    printf("\n");
    D.cuMemFree(a);
}

int main(void)
{
    int least = 99, greatest = 99;
    CUresult r;

    sim_t_load();
    printf("init %s\n", en(D.cuInit(0)));
    /* without a context (the sim says INVALID_CONTEXT: not checked) */
    printf("priority-range.noctx %s\n",
           en(D.cuCtxGetStreamPriorityRange(&least, &greatest)));
    sim_t_init_ctx(0);
    r = D.cuCtxGetStreamPriorityRange(&least, &greatest);
    printf("priority-range %s %d %d\n", en(r), least, greatest);
    probe_non_vmm();
    probe_vmm();
    probe_memsets();
    return 0;
}
