/* Memory another allocator owns, in one process (cucore/memory.h,
 * cuc_memory_kind and cuc_buffer_adopt; cucore/pool.h, cuc_pool_adopt;
 * cucore/vmm.h, cuc_vmm_adopt):
 *  - every kind the simulator makes is classified: cuMemAlloc (and a
 *    pointer inside it), a pool with and without POSIX fd handles (a
 *    framework's, and cucore's), VMM memory with and without them,
 *    managed, pinned host, malloc'd memory; with its device;
 *  - refused kinds: CUC_E_INVALID naming the kind, release never called;
 *  - cuMemAlloc memory: the same allocation adopted twice (and wrapped)
 *    is one object, a part a view of it; release runs once, when the last
 *    buffer, view, message and lease are gone (a lease over an
 *    in-process channel pair);
 *  - a framework's IPC pool: adopted once (the same handle, the same
 *    cuc_pool), never destroyed by cucore; its allocation adopted twice is
 *    one buffer, a part a view; the pool and buffers go into records;
 *    cucore's own buffers of the adopted pool are freed as usual; a pinned
 *    host pool's allocation from its start, not from inside;
 *  - an expandable segment: the chunks under a range found, retained, the
 *    offset given, the same range one resource; a hole, a chunk without
 *    POSIX fds, chunks of two devices refused by name; release once the
 *    resource and its lease are gone; the owner's mapping left mapped.
 * On the simulator the leaks are counted too (fds). */
#include <dlfcn.h>

#include "adopt_test.h"
#include "vmm_test.h"
#include "memory/buffer.h"

#define KiB ((size_t)1 << 10)
#define WAIT_MS 5000

static cuc_device *dev0, *dev1;

static void expect_kind(const void *p, int want, cuc_device *want_dev)
{
    cuc_device *d = (cuc_device *)0x1;
    int kind = -1;

    CHECK_OK(cuc_memory_kind(p, &kind, &d));
    if (kind != want || d != want_dev) {
        fprintf(stderr, "%p: kind %s on %p, want %s on %p\n", p, cuc_memory_kind_name(kind),
                (void *)d, cuc_memory_kind_name(want), (void *)want_dev);
        exit(1);
    }
}

/* ---- classification ---- */

static void test_kinds(void)
{
    CUmemoryPool ipc = at_raw_pool(dev1, 0, 1), plain = at_raw_pool(dev0, 0, 0);
    CUdeviceptr a, m, pi, pp;
    struct at_segment fd_seg, none_seg;
    cuc_pool *cp = pt_new_pool(dev0, CUC_POOL_DEVICE, 0);
    cuc_buffer *cb;
    void *host, *heap = malloc(64);
    int kind;
    cuc_device *d;

    CHECK_OK(cuc_device_set_current(dev1));
    CHECK(CUC_DRV->cuMemAlloc(&a, 64 * KiB) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemAllocHost(&host, 4096) == CUDA_SUCCESS);
    pi = at_pool_alloc(dev1, ipc, 4096);
    pp = at_pool_alloc(dev0, plain, 4096);
    CHECK_OK(cuc_buffer_alloc_async(cp, 100, NULL, &cb));
    at_segment_make(dev1, 2, NULL, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, NULL, &fd_seg);
    at_segment_make(dev0, 1, NULL, CU_MEM_HANDLE_TYPE_NONE, NULL, &none_seg);
    CHECK_OK(cuc_device_set_current(dev0)); /* the answers do not depend on it */

    expect_kind((void *)(uintptr_t)a, CUC_MEMORY_LEGACY, dev1);
    expect_kind((void *)(uintptr_t)(a + 1000), CUC_MEMORY_LEGACY, dev1);
    expect_kind((void *)(uintptr_t)pi, CUC_MEMORY_POOL_IPC, dev1);
    expect_kind((void *)(uintptr_t)pp, CUC_MEMORY_POOL, dev0);
    expect_kind(cuc_buffer_ptr(cb), CUC_MEMORY_POOL, dev0);
    expect_kind((void *)(uintptr_t)(fd_seg.base + fd_seg.chunk + 5), CUC_MEMORY_VMM_FD, dev1);
    expect_kind((void *)(uintptr_t)none_seg.base, CUC_MEMORY_VMM, dev0);
    expect_kind((void *)(uintptr_t)m, CUC_MEMORY_MANAGED, dev1);
    expect_kind(host, CUC_MEMORY_HOST, dev1);
    expect_kind(heap, CUC_MEMORY_UNKNOWN, NULL);
    expect_kind(NULL, CUC_MEMORY_UNKNOWN, NULL);
    CHECK_RC(cuc_memory_kind(heap, NULL, &d), CUC_E_INVALID);
    CHECK_RC(cuc_memory_kind(heap, &kind, NULL), CUC_E_INVALID);
    CHECK(!strcmp(cuc_memory_kind_name(CUC_MEMORY_POOL_IPC), "pool-ipc"));
    CHECK(!strcmp(cuc_memory_kind_name(CUC_MEMORY_VMM_FD), "vmm-fd"));
    CHECK(!strcmp(cuc_memory_kind_name(CUC_MEMORY_IPC_OPENED), "ipc-opened"));
    CHECK(!strcmp(cuc_memory_kind_name(99), "?") && !strcmp(cuc_memory_kind_name(-1), "?"));

    CHECK_OK(cuc_buffer_unref_async(cb, NULL));
    cuc_pool_unref(cp);
    at_segment_free(dev1, &fd_seg);
    at_segment_free(dev0, &none_seg);
    at_pool_free(dev1, pi);
    at_pool_free(dev0, pp);
    CHECK(CUC_DRV->cuMemPoolDestroy(ipc) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemPoolDestroy(plain) == CUDA_SUCCESS);
    CHECK_OK(cuc_device_set_current(dev1));
    CHECK(CUC_DRV->cuMemFree(a) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemFree(m) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemFreeHost(host) == CUDA_SUCCESS);
    free(heap);
    printf("kinds: ok\n");
}

/* ---- refusals ---- */

static void refused(const void *p, const char *name, struct at_count *c)
{
    char quoted[32];
    cuc_buffer *b = (cuc_buffer *)0x1;

    snprintf(quoted, sizeof(quoted), "\"%s\"", name);
    CHECK_RC(cuc_buffer_adopt(dev0, (void *)p, 64, at_release, c, &b), CUC_E_INVALID);
    CHECK_ERRMSG(quoted);
    CHECK(b == (cuc_buffer *)0x1);
}

static void test_refused(void)
{
    struct at_count c = {0};
    CUmemoryPool plain = at_raw_pool(dev0, 0, 0);
    CUdeviceptr pp = at_pool_alloc(dev0, plain, 4096), m, a;
    struct at_segment fd_seg, none_seg;
    cuc_pool *own = pt_new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC), *got;
    cuc_buffer *ob, *b;
    cuc_vmm *v;
    size_t off;
    void *host, *heap = malloc(64);

    CHECK_OK(cuc_device_set_current(dev0));
    CHECK(CUC_DRV->cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemAllocHost(&host, 4096) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemAlloc(&a, 4096) == CUDA_SUCCESS);
    at_segment_make(dev0, 1, NULL, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, NULL, &fd_seg);
    at_segment_make(dev0, 1, NULL, CU_MEM_HANDLE_TYPE_NONE, NULL, &none_seg);
    CHECK_OK(cuc_buffer_alloc_async(own, 256, NULL, &ob));

    refused((void *)(uintptr_t)pp, "pool", &c);
    CHECK_ERRMSG("ipc_enabled=True");
    refused((void *)(uintptr_t)fd_seg.base, "vmm-fd", &c);
    CHECK_ERRMSG("cuc_vmm_adopt");
    refused((void *)(uintptr_t)none_seg.base, "vmm", &c);
    refused((void *)(uintptr_t)m, "managed", &c);
    refused(host, "host", &c);
    refused(heap, "unknown", &c);
    /* memory of a pool cucore made: its cuc_buffer is the one to send */
    CHECK_RC(cuc_buffer_adopt(dev0, cuc_buffer_ptr(ob), 64, at_release, &c, &b),
             CUC_E_INVALID);
    CHECK_ERRMSG("cuc_buffer_alloc_async gave");
    /* another device's memory, size 0, past the end, NULL */
    if (dev1 != dev0) {
        CHECK_RC(cuc_buffer_adopt(dev1, (void *)(uintptr_t)a, 64, at_release, &c, &b),
                 CUC_E_INVALID);
        CHECK_ERRMSG("not of device");
    }
    CHECK_RC(cuc_buffer_adopt(dev0, (void *)(uintptr_t)a, 0, at_release, &c, &b), CUC_E_INVALID);
    CHECK_RC(cuc_buffer_adopt(dev0, (void *)(uintptr_t)a, 4097, at_release, &c, &b),
             CUC_E_INVALID);
    CHECK_ERRMSG("do not fit");
    CHECK_RC(cuc_buffer_adopt(dev0, NULL, 64, at_release, &c, &b), CUC_E_INVALID);
    /* a pool that is not IPC-capable, adopted as a pool */
    CHECK_RC(cuc_pool_adopt(dev0, plain, CUC_POOL_DEVICE, &got), CUC_E_INVALID);
    CHECK_ERRMSG("not IPC-capable");
    CHECK_ERRMSG("ipc_enabled=True");
    CHECK_RC(cuc_pool_adopt(dev0, plain, 7, &got), CUC_E_INVALID);
    /* cuc_vmm_adopt of what is not VMM memory with fds */
    CHECK_RC(cuc_vmm_adopt(dev0, (void *)(uintptr_t)a, 64, at_release, &c, &v, &off),
             CUC_E_INVALID);
    CHECK_ERRMSG("\"legacy\"");
    CHECK_RC(cuc_vmm_adopt(dev0, (void *)(uintptr_t)none_seg.base, 64, at_release, &c, &v,
                           &off), CUC_E_INVALID);
    CHECK_ERRMSG("\"vmm\"");
    CHECK(at_calls(&c) == 0);

    CHECK_OK(cuc_buffer_unref_async(ob, NULL));
    cuc_pool_unref(own);
    at_segment_free(dev0, &fd_seg);
    at_segment_free(dev0, &none_seg);
    at_pool_free(dev0, pp);
    CHECK(CUC_DRV->cuMemPoolDestroy(plain) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemFree(m) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemFree(a) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemFreeHost(host) == CUDA_SUCCESS);
    free(heap);
    printf("refused: ok\n");
}

/* ---- a lease over an in-process pair ---- */

/* b (and b2, when not NULL) sent from a, received (the records left
 * untaken) on c. */
static cuc_msg *send_recv(cuc_channel *a, cuc_channel *c, cuc_pool *pool, const cuc_buffer *b,
                          const cuc_buffer *b2)
{
    cuc_msg *m, *got;

    CHECK_OK(cuc_msg_create(&m));
    if (pool)
        CHECK_OK(cuc_msg_add_pool(m, pool));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    if (b2)
        CHECK_OK(cuc_msg_add_buffer(m, b2));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(c, WAIT_MS, &got));
    return got;
}

/* ---- cuMemAlloc memory ---- */

static void test_legacy(void)
{
    struct at_count c1 = {0}, c2 = {0}, c3 = {0};
    cuc_buffer *whole, *again, *part, *wrapped, *got;
    cuc_channel *a, *c;
    CUdeviceptr p;
    cuc_msg *m;

    CHECK_OK(cuc_device_set_current(dev0));
    CHECK(CUC_DRV->cuMemAlloc(&p, 64 * KiB) == CUDA_SUCCESS);
    at_fill(dev0, p, 64 * KiB, 41);
    CHECK_OK(cuc_buffer_adopt(dev0, (void *)(uintptr_t)p, 64 * KiB, at_release, &c1, &whole));
    CHECK(cuc_buffer_is_wrapped(whole) && !cuc_buffer_is_view(whole));
    CHECK_OK(cuc_buffer_adopt(dev0, (void *)(uintptr_t)p, 64 * KiB, at_release, &c2, &again));
    CHECK(again == whole); /* one object */
    CHECK_OK(cuc_buffer_adopt(dev0, (void *)(uintptr_t)(p + 4 * KiB), 8 * KiB, NULL, NULL,
                              &part));
    CHECK(cuc_buffer_is_view(part) && cuc_buffer_offset(part) == 4 * KiB);
    CHECK(part->root == whole);
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)p, 64 * KiB, &wrapped));
    CHECK(wrapped == whole); /* wrap finds the adopted allocation too */
    CHECK_OK(cuc_buffer_adopt(dev0, (void *)(uintptr_t)(p + 100), 1, at_release, &c3, &got));
    CHECK(got->root == whole);
    CHECK_OK(cuc_buffer_unref_async(got, NULL));
    CHECK(at_calls(&c3) == 0); /* not per buffer: per allocation */
    CHECK(at_holds_at(dev0, cuc_buffer_ptr(part), 8 * KiB, 41, 4 * KiB));

    /* leases on the part and on the allocation: the releases wait for them */
    CHECK_OK(cuc_channel_pair(&a, &c));
    m = send_recv(a, c, NULL, part, whole);
    CHECK_OK(cuc_buffer_unref_async(whole, NULL));
    CHECK_OK(cuc_buffer_unref_async(again, NULL));
    CHECK_OK(cuc_buffer_unref_async(wrapped, NULL));
    CHECK_OK(cuc_buffer_unref_async(part, NULL));
    CHECK(at_calls(&c1) == 0 && at_calls(&c2) == 0 && at_calls(&c3) == 0);
    CHECK_OK(cuc_msg_get_buffer(m, 0, &got)); /* the receiver's import: the part */
    CHECK(cuc_buffer_ptr(got) == (void *)(uintptr_t)(p + 4 * KiB));
    CHECK_OK(cuc_buffer_unref_async(got, NULL)); /* releases the part's lease on c */
    CHECK_OK(cuc_msg_get_buffer(m, 1, &got)); /* the allocation */
    CHECK(cuc_buffer_ptr(got) == (void *)(uintptr_t)p);
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_lease_wait(a, 0, 20), CUC_E_TIMEOUT);
    CHECK(at_calls(&c1) == 0);
    CHECK_OK(cuc_buffer_unref_async(got, NULL)); /* releases the allocation's */
    CHECK(at_calls(&c1) == 0); /* its lease's end not read yet: still in use */
    CHECK_OK(cuc_channel_lease_wait(a, 0, WAIT_MS));
    CHECK(at_calls(&c1) == 1 && at_calls(&c2) == 1 && at_calls(&c3) == 1);
    cuc_channel_destroy(a);
    cuc_channel_destroy(c);
    /* gone: adopted again, a new object, its own release */
    CHECK_OK(cuc_buffer_adopt(dev0, (void *)(uintptr_t)p, 64 * KiB, at_release, &c1, &whole));
    CHECK_OK(cuc_buffer_unref_async(whole, NULL));
    CHECK(at_calls(&c1) == 2 && at_calls(&c2) == 1);
    CHECK_OK(cuc_device_set_current(dev0));
    CHECK(CUC_DRV->cuMemFree(p) == CUDA_SUCCESS);
    printf("legacy: ok\n");
}

/* ---- a framework's IPC pool ---- */

static void test_pool(void)
{
    struct at_count c1 = {0}, c2 = {0};
    CUmemoryPool cu = at_raw_pool(dev1, 0, 1);
    CUdeviceptr p = at_pool_alloc(dev1, cu, 64 * KiB), p2;
    cuc_pool *pool, *same, *got_pool;
    cuc_buffer *whole, *again, *part, *own, *got;
    cuuint64_t used = 0;
    cuc_channel *a, *c;
    cuc_msg *m;

    CHECK_OK(cuc_pool_adopt(dev1, cu, CUC_POOL_DEVICE, &pool));
    CHECK(cuc_pool_is_adopted(pool) && cuc_pool_is_ipc(pool) && !cuc_pool_is_imported(pool));
    CHECK(cuc_pool_handle(pool) == cu && cuc_pool_device(pool) == dev1);
    CHECK_OK(cuc_pool_adopt(dev1, cu, CUC_POOL_DEVICE, &same));
    CHECK(same == pool);
    cuc_pool_unref(same);
    at_fill(dev1, p, 64 * KiB, 42);
    CHECK_OK(cuc_buffer_adopt(dev1, (void *)(uintptr_t)p, 64 * KiB, at_release, &c1, &whole));
    CHECK(cuc_buffer_pool(whole) == pool && !cuc_buffer_is_view(whole));
    CHECK(!cuc_buffer_is_wrapped(whole));
    CHECK_OK(cuc_buffer_adopt(dev1, (void *)(uintptr_t)(p + 256), 1000, at_release, &c2,
                              &part));
    CHECK(cuc_buffer_is_view(part) && part->root == whole && cuc_buffer_offset(part) == 256);
    CHECK_OK(cuc_buffer_adopt(dev1, (void *)(uintptr_t)p, 64 * KiB, NULL, NULL, &again));
    CHECK(again == whole);
    CHECK_OK(cuc_buffer_unref_async(again, NULL));
    /* cucore's own buffer of the adopted pool: allocated and freed here */
    CHECK_OK(cuc_buffer_alloc_async(pool, 4096, NULL, &own));
    CHECK_OK(cuc_buffer_unref_async(own, NULL));
    CHECK_OK(cuc_device_set_current(dev1));
    CHECK(CUC_DRV->cuCtxSynchronize() == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemPoolGetAttribute(cu, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) ==
          CUDA_SUCCESS);
    CHECK(used == 64 * KiB);

    /* the view leased over a pair: records of the adopted pool */
    CHECK_OK(cuc_channel_pair(&a, &c));
    m = send_recv(a, c, pool, part, whole);
    CHECK_OK(cuc_buffer_unref_async(part, NULL));
    CHECK_OK(cuc_buffer_unref_async(whole, NULL));
    CHECK(at_calls(&c1) == 0 && at_calls(&c2) == 0);
    CHECK_OK(cuc_msg_get_pool(m, 0, &got_pool));
    CHECK(got_pool == pool); /* known here */
    CHECK_OK(cuc_msg_get_buffer(m, 1, &got));
    CHECK(cuc_buffer_ptr(got) == (void *)(uintptr_t)(p + 256));
    CHECK(at_holds_at(dev1, cuc_buffer_ptr(got), 1000, 42, 256));
    CHECK_OK(cuc_buffer_unref_async(got, NULL));
    CHECK_OK(cuc_msg_get_buffer(m, 2, &got));
    CHECK(got == whole); /* the allocation, revived */
    cuc_msg_destroy(m);
    CHECK_RC(cuc_pool_lease_wait(pool, a, 0, 20), CUC_E_TIMEOUT);
    CHECK(at_calls(&c1) == 0 && at_calls(&c2) == 0);
    CHECK_OK(cuc_buffer_unref_async(got, NULL));
    CHECK(at_calls(&c1) == 0); /* its lease's end not read yet: still in use */
    cuc_pool_unref(got_pool);
    CHECK_OK(cuc_pool_lease_wait(pool, a, 0, WAIT_MS));
    CHECK(at_calls(&c1) == 1 && at_calls(&c2) == 1);
    cuc_channel_destroy(a);
    cuc_channel_destroy(c);
    cuc_pool_unref(pool);
    /* the driver's pool is its creator's still: it allocates */
    p2 = at_pool_alloc(dev1, cu, 4096);
    at_pool_free(dev1, p2);
    at_pool_free(dev1, p);
    CHECK(CUC_DRV->cuMemPoolDestroy(cu) == CUDA_SUCCESS);
    printf("pool: ok\n");
}

/* A pinned host pool's allocation: from its start (the driver gives no
 * base for a pointer inside one), not from inside. */
static void test_host_pool(void)
{
    struct at_count c = {0};
    CUmemoryPool cu = at_raw_pool(dev0, 1, 1);
    CUdeviceptr p = at_pool_alloc(dev0, cu, 8 * KiB);
    cuc_buffer *b, *part;

    expect_kind((void *)(uintptr_t)p, CUC_MEMORY_POOL_IPC, dev0);
    CHECK_RC(cuc_buffer_adopt(dev0, (void *)(uintptr_t)(p + 256), 64, at_release, &c, &b),
             CUC_E_DRIVER);
    CHECK_ERRMSG("start of its allocation");
    CHECK_OK(cuc_buffer_adopt(dev0, (void *)(uintptr_t)p, 4 * KiB, at_release, &c, &part));
    CHECK(cuc_buffer_is_view(part));
    b = part->root;
    CHECK(cuc_buffer_size(b) == 8 * KiB);
    CHECK(cuc_pool_kind(cuc_buffer_pool(part)) == CUC_POOL_PINNED_HOST);
    CHECK_RC(cuc_buffer_adopt(dev0, (void *)(uintptr_t)p, 8 * KiB + 1, at_release, &c, &b),
             CUC_E_INVALID);
    CHECK_OK(cuc_buffer_unref_async(part, NULL));
    CHECK(at_calls(&c) == 1);
    at_pool_free(dev0, p);
    CHECK(CUC_DRV->cuMemPoolDestroy(cu) == CUDA_SUCCESS);
    printf("pinned host pool: ok\n");
}

/* ---- an expandable segment ---- */

static void test_vmm(void)
{
    static const int hole[4] = {1, 1, 0, 1};
    struct at_count c1 = {0}, c2 = {0};
    struct at_segment seg, gap, mixed, devs2;
    cuc_device *two[2] = {dev0, dev1};
    cuc_vmm *v, *again;
    cuc_channel *a, *c;
    size_t off = 99, off2 = 0, chunk;
    unsigned flags = 0;
    cuc_msg *m;

    at_segment_make(dev0, 4, NULL, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, NULL, &seg);
    chunk = seg.chunk;
    at_fill(dev0, seg.base, 4 * chunk, 43);
    /* from inside chunk 1 to inside chunk 2: chunks 1 and 2 */
    CHECK_OK(cuc_vmm_adopt(dev0, (void *)(uintptr_t)(seg.base + chunk + 100), chunk, at_release,
                           &c1, &v, &off));
    CHECK(off == 100 && cuc_vmm_is_adopted(v) && !cuc_vmm_is_imported(v));
    CHECK(cuc_vmm_ptr(v) == (void *)(uintptr_t)(seg.base + chunk));
    CHECK(cuc_vmm_size(v) == 2 * chunk && cuc_vmm_chunk_count(v) == 2);
    CHECK(cuc_vmm_device(v) == dev0 && cuc_vmm_peer_count(v) == 0);
    CHECK_OK(cuc_vmm_access(v, dev0, &flags));
    CHECK(flags == CUC_VMM_ACCESS_READWRITE);
    CHECK_OK(cuc_vmm_adopt(dev0, (void *)(uintptr_t)(seg.base + 2 * chunk - 1), 2, at_release,
                           &c2, &again, &off2));
    CHECK(again == v && off2 == chunk - 1); /* the same chunks: one resource */
    cuc_vmm_unref(again);

    /* sent over a pair: the lease keeps it */
    CHECK_OK(cuc_channel_pair(&a, &c));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_vmm(m, v));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    cuc_vmm_unref(v);
    CHECK(at_calls(&c1) == 0 && at_calls(&c2) == 0);
    CHECK_OK(cuc_channel_recv(c, WAIT_MS, &m));
    CHECK_OK(cuc_msg_get_vmm(m, 0, &again)); /* mapped again, as by another process */
    CHECK(cuc_vmm_is_imported(again) && cuc_vmm_size(again) == 2 * chunk);
    CHECK(at_holds_at(dev0, cuc_vmm_ptr(again), 2 * chunk, 43, chunk));
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_lease_wait(a, 0, 20), CUC_E_TIMEOUT);
    CHECK(at_calls(&c1) == 0); /* mapped here still */
    cuc_vmm_unref(again); /* the importer's release */
    CHECK_OK(cuc_channel_lease_wait(a, 0, WAIT_MS));
    cuc_channel_destroy(c);
    CHECK(at_calls(&c1) == 1 && at_calls(&c2) == 1);
    cuc_channel_destroy(a);
    /* the owner's mapping is untouched: its bytes are there */
    CHECK(at_holds(dev0, (void *)(uintptr_t)seg.base, 4 * chunk, 43));
    at_segment_free(dev0, &seg);

    /* a hole; a chunk without POSIX fds; chunks of two devices */
    at_segment_make(dev0, 4, hole, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, NULL, &gap);
    CHECK_RC(cuc_vmm_adopt(dev0, (void *)(uintptr_t)gap.base, 4 * chunk, at_release, &c1, &v,
                           &off), CUC_E_INVALID);
    CHECK_ERRMSG("a hole at");
    CHECK_OK(cuc_vmm_adopt(dev0, (void *)(uintptr_t)gap.base, 2 * chunk, NULL, NULL, &v, &off));
    cuc_vmm_unref(v);
    at_segment_make(dev0, 2, NULL, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, NULL, &mixed);
    {
        /* chunk 1 made again without fds */
        CUmemAllocationProp p;
        CUmemAccessDesc acc;
        CHECK(CUC_DRV->cuMemUnmap(mixed.base + chunk, chunk) == CUDA_SUCCESS);
        CHECK(CUC_DRV->cuMemRelease(mixed.h[1]) == CUDA_SUCCESS);
        memset(&p, 0, sizeof(p));
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = cuc_device_ordinal(dev0);
        CHECK(CUC_DRV->cuMemCreate(&mixed.h[1], chunk, &p, 0) == CUDA_SUCCESS);
        CHECK(CUC_DRV->cuMemMap(mixed.base + chunk, chunk, 0, mixed.h[1], 0) == CUDA_SUCCESS);
        memset(&acc, 0, sizeof(acc));
        acc.location = p.location;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CHECK(CUC_DRV->cuMemSetAccess(mixed.base + chunk, chunk, &acc, 1) == CUDA_SUCCESS);
    }
    CHECK_RC(cuc_vmm_adopt(dev0, (void *)(uintptr_t)mixed.base, 2 * chunk, at_release, &c1,
                           &v, &off), CUC_E_INVALID);
    CHECK_ERRMSG("chunk 1");
    CHECK_ERRMSG("without the POSIX fd handle type");
    if (dev1 != dev0) {
        at_segment_make(dev0, 2, NULL, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, two, &devs2);
        CHECK_RC(cuc_vmm_adopt(dev0, (void *)(uintptr_t)devs2.base, 2 * chunk, at_release,
                               &c1, &v, &off), CUC_E_INVALID);
        CHECK_ERRMSG("chunk 1");
        CHECK_ERRMSG("not of device");
        at_segment_free(dev0, &devs2);
    }
    CHECK(at_calls(&c1) == 1); /* no release on failure */
    at_segment_free(dev0, &gap);
    at_segment_free(dev0, &mixed);
    CHECK(cuc__vmm_live() == 0);
    printf("vmm: ok\n");
}

int main(void)
{
    int fds0;

    pt_start(CUC_DEVICE_CAP_MEMORY_POOLS | CUC_DEVICE_CAP_POOL_POSIX_FD | CUC_DEVICE_CAP_VMM |
                 CUC_DEVICE_CAP_VMM_POSIX_FD, "lacks IPC pools or VMM");
    dev0 = devs[0];
    dev1 = devs[n_dev - 1];
    fds0 = test_fd_count();
    test_kinds();
    test_refused();
    test_legacy();
    test_pool();
    test_host_pool();
    test_vmm();
    if (test_on_sim())
        EXPECT(test_fd_count() == fds0);
    return test_finish();
}
