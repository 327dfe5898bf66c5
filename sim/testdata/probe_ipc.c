/* Conformance probe: legacy CUDA IPC memory (cuIpcGetMemHandle /
 * cuIpcOpenMemHandle), cuMemGetAddressRange and cuPointerGetAttribute(s)
 * on every kind of memory, pool access, and one pool pointer imported
 * twice, in the exporting process and in exec'd children. One "key value" line per observation, so that the real
 * driver's answers can be diffed against the simulator's:
 *
 *   cc -std=c11 -D_GNU_SOURCE -I/usr/local/cuda/include -Itests -Isrc \
 *      -DCUC_SIM_PATH='getenv("PROBE_LIB")' sim/testdata/probe_ipc.c \
 *      -o probe_ipc -ldl
 *   PROBE_LIB=libcuda.so.1 ./probe_ipc > real.txt
 *   PROBE_LIB=.../libcucore-sim.so CUCORE_SIM_GPUS=1 ./probe_ipc > sim.txt
 *
 * Entry points outside src/driver/driver_syms.h are looked up here through
 * cuGetProcAddress at pinned versions; one the library lacks prints
 * "missing" wherever it would have been called. Addresses are printed
 * relative to the allocation they concern ("p+0"), never absolute; keys
 * hold no address, UUID or pid. Needs device 0. Children are exec'd
 * copies of this program (no CUDA in a forked-only child); every wait is
 * bounded (poll timeouts, alarm()). Not part of the test suite. */
/* PROBE_LIB may be the real libcuda, which has no simulator controls. */
#define SIM_T_CTL_OPTIONAL 1
#include "sim_test.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <time.h>

#define MiB ((size_t)1 << 20)
#define PROBE_MISSING ((CUresult)-1)
#define FILL 0x5a      /* the exporter's bytes */
#define FILL_MID 0x3c  /* bytes [4096, 8192) of the cuMemAlloc block */
#define FILL_NEW 0xa7  /* the exporter's bytes after the free and realloc */
#define SENT 0xa5      /* what outputs hold before a call */
#define SENT_PTR ((CUdeviceptr)0xa5a5a5a5a5a5a5a5ull)
#define SENT_SIZE ((size_t)0xa5a5a5a5a5a5a5a5ull)
#define REPLY_MS 15000
#define CHILD_EXIT_MS 10000
#define ALARM_PARENT_S 50
#define ALARM_CHILD_S 30

/* ---- entry points beyond D, at pinned ABI versions ------------------------ */

#define PROBE_IPC_SYMS(X)            \
    X(cuMemAlloc, 3020)              \
    X(cuMemFree, 3020)               \
    X(cuMemGetAddressRange, 3020)    \
    X(cuMemAllocHost, 3020)          \
    X(cuMemFreeHost, 2000)           \
    X(cuMemAllocManaged, 6000)       \
    X(cuIpcGetMemHandle, 4010)       \
    X(cuIpcOpenMemHandle, 11000)     \
    X(cuIpcCloseMemHandle, 4010)     \
    X(cuPointerGetAttribute, 4000)   \
    X(cuPointerGetAttributes, 7000)  \
    X(cuMemcpyDtoH, 3020)

static struct {
#define PI_MEMBER(name, ver) PFN_##name##_v##ver name;
    PROBE_IPC_SYMS(PI_MEMBER)
#undef PI_MEMBER
} L;

/* Calls L.fn, or gives PROBE_MISSING when the library lacks it. */
#define LC(fn, ...) (L.fn ? L.fn(__VA_ARGS__) : PROBE_MISSING)

static const char *en(CUresult r)
{
    return r == PROBE_MISSING ? "missing" : sim_t_errname(r);
}

/* ---- output: stdout in the parent, the reply to the parent in a child ---- */

static int in_child;
static char reply_buf[48 * 1024];
static size_t reply_len;

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    if (!in_child) {
        vprintf(fmt, ap);
    } else {
        n = vsnprintf(reply_buf + reply_len, sizeof(reply_buf) - reply_len, fmt, ap);
        if (n > 0)
            reply_len += (size_t)n < sizeof(reply_buf) - reply_len
                             ? (size_t)n
                             : sizeof(reply_buf) - reply_len - 1;
    }
    va_end(ap);
}

/* "p+N" for an address relative to ref; "null", or "untouched" when the
 * call left the sentinel. */
static const char *rel(CUdeviceptr got, CUdeviceptr ref, char buf[40])
{
    if (got == SENT_PTR)
        return "untouched";
    if (got == 0)
        return "null";
    snprintf(buf, 40, "p%+lld", (long long)(got - ref));
    return buf;
}

static const char *size_str(size_t s, char buf[32])
{
    if (s == SENT_SIZE)
        return "untouched";
    snprintf(buf, 32, "%zu", s);
    return buf;
}

static void load_extra(int print)
{
#define PI_RESOLVE(name, ver)                                                  \
    do {                                                                       \
        void *p_ = NULL;                                                       \
        CUdriverProcAddressQueryResult st_ = CU_GET_PROC_ADDRESS_SUCCESS;      \
        if (D.gpa(#name, &p_, ver, 0, &st_) != CUDA_SUCCESS ||                 \
            st_ != CU_GET_PROC_ADDRESS_SUCCESS)                                \
            p_ = NULL;                                                         \
        memcpy(&L.name, &p_, sizeof(p_));                                      \
        if (print)                                                             \
            out("sym.%s@%d %s\n", #name, ver, p_ ? "found" : "missing");       \
    } while (0);
    PROBE_IPC_SYMS(PI_RESOLVE)
#undef PI_RESOLVE
}

static int nfds_open(void)
{
    int n = 0;

    for (int fd = 0; fd < 4096; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/* ---- the memory of each kind ----------------------------------------------- */

enum mem_kind {
    M_MEMALLOC,       /* cuMemAlloc, 1 MiB */
    M_MEMALLOC_SMALL, /* cuMemAlloc, 1000 bytes */
    M_POOL,           /* an IPC device pool, 1000 bytes */
    M_POOL_SMALL,     /* the same pool, 64 bytes */
    M_VMM,            /* cuMemCreate 2 MiB mapped at the start of 4 MiB */
    M_MANAGED,        /* cuMemAllocManaged, 1 MiB */
    M_ALLOCHOST,      /* cuMemAllocHost, 1 MiB */
    M_MALLOC,         /* malloc, 64 KiB */
    M_HOSTPOOL,       /* an IPC pinned host pool (HOST_NUMA 0), 64 bytes */
    M_COUNT
};

struct mem {
    const char *name;
    size_t size;
    CUdeviceptr p;
    CUmemoryPool pool;
    CUresult rc;
};

static struct mem mem[M_COUNT] = {
    [M_MEMALLOC] = {"memalloc", MiB, 0, NULL, PROBE_MISSING},
    [M_MEMALLOC_SMALL] = {"memalloc-small", 1000, 0, NULL, PROBE_MISSING},
    [M_POOL] = {"pool", 1000, 0, NULL, PROBE_MISSING},
    [M_POOL_SMALL] = {"pool-small", 64, 0, NULL, PROBE_MISSING},
    [M_VMM] = {"vmm", 2 * MiB, 0, NULL, PROBE_MISSING},
    [M_MANAGED] = {"managed", MiB, 0, NULL, PROBE_MISSING},
    [M_ALLOCHOST] = {"allochost", MiB, 0, NULL, PROBE_MISSING},
    [M_MALLOC] = {"malloc", 65536, 0, NULL, PROBE_MISSING},
    [M_HOSTPOOL] = {"hostpool", 64, 0, NULL, PROBE_MISSING},
};

static CUcontext ctx0;
static CUmemoryPool devpool, hostpool;
static int devpool_fd = -1, hostpool_fd = -1;
static CUmemGenericAllocationHandle vmm_handle;
static CUdeviceptr vmm_base;

/* An IPC pool (POSIX fd) at loc, exported so that its pointers can be. */
static CUresult make_ipc_pool(CUmemLocationType t, const char *key, CUmemoryPool *pool,
                              int *fd)
{
    CUmemPoolProps pp;
    CUresult r;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pp.location.type = t;
    pp.location.id = 0;
    r = D.cuMemPoolCreate(pool, &pp);
    out("poolcreate.%s %s\n", key, en(r));
    if (r != CUDA_SUCCESS)
        return r;
    r = D.cuMemPoolExportToShareableHandle(fd, *pool,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    out("poolexport.%s %s\n", key, en(r));
    return r;
}

static void alloc_from(enum mem_kind k, CUmemoryPool pool)
{
    mem[k].rc = D.cuMemAllocFromPoolAsync(&mem[k].p, mem[k].size, pool, NULL);
    mem[k].pool = pool;
}

/* 2 MiB of VMM memory mapped at the start of a 4 MiB reservation. */
static CUresult make_vmm(CUdeviceptr *p)
{
    CUmemAllocationProp ap;
    CUmemAccessDesc d;
    CUresult r;

    memset(&ap, 0, sizeof(ap));
    ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.location.id = 0;
    ap.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if ((r = D.cuMemCreate(&vmm_handle, 2 * MiB, &ap, 0)) != CUDA_SUCCESS)
        return r;
    if ((r = D.cuMemAddressReserve(&vmm_base, 4 * MiB, 0, 0, 0)) != CUDA_SUCCESS)
        return r;
    if ((r = D.cuMemMap(vmm_base, 2 * MiB, 0, vmm_handle, 0)) != CUDA_SUCCESS)
        return r;
    memset(&d, 0, sizeof(d));
    d.location = ap.location;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = D.cuMemSetAccess(vmm_base, 2 * MiB, &d, 1)) != CUDA_SUCCESS)
        return r;
    *p = vmm_base;
    return CUDA_SUCCESS;
}

static void setup_memory(void)
{
    void *hp = NULL;

    mem[M_MEMALLOC].rc = LC(cuMemAlloc, &mem[M_MEMALLOC].p, mem[M_MEMALLOC].size);
    mem[M_MEMALLOC_SMALL].rc =
        LC(cuMemAlloc, &mem[M_MEMALLOC_SMALL].p, mem[M_MEMALLOC_SMALL].size);
    if (make_ipc_pool(CU_MEM_LOCATION_TYPE_DEVICE, "device", &devpool, &devpool_fd) == 0) {
        alloc_from(M_POOL, devpool);
        alloc_from(M_POOL_SMALL, devpool);
    }
    mem[M_VMM].rc = make_vmm(&mem[M_VMM].p);
    mem[M_MANAGED].rc =
        LC(cuMemAllocManaged, &mem[M_MANAGED].p, mem[M_MANAGED].size, CU_MEM_ATTACH_GLOBAL);
    mem[M_ALLOCHOST].rc = LC(cuMemAllocHost, &hp, mem[M_ALLOCHOST].size);
    mem[M_ALLOCHOST].p = (CUdeviceptr)(uintptr_t)hp;
    hp = malloc(mem[M_MALLOC].size);
    mem[M_MALLOC].rc = hp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    mem[M_MALLOC].p = (CUdeviceptr)(uintptr_t)hp;
    if (make_ipc_pool(CU_MEM_LOCATION_TYPE_HOST_NUMA, "hostnuma0", &hostpool,
                      &hostpool_fd) == 0)
        alloc_from(M_HOSTPOOL, hostpool);
    for (int k = 0; k < M_COUNT; k++) {
        if (mem[k].rc != CUDA_SUCCESS)
            mem[k].p = 0;
        out("alloc.%s %s\n", mem[k].name, en(mem[k].rc));
    }
    if (mem[M_MEMALLOC].p) {
        D.cuMemsetD8Async(mem[M_MEMALLOC].p, FILL, mem[M_MEMALLOC].size, NULL);
        D.cuMemsetD8Async(mem[M_MEMALLOC].p + 4096, FILL_MID, 4096, NULL);
    }
    if (mem[M_POOL_SMALL].p)
        D.cuMemsetD8Async(mem[M_POOL_SMALL].p, FILL, 64, NULL);
    if (mem[M_HOSTPOOL].p)
        D.cuMemsetD8Async(mem[M_HOSTPOOL].p, FILL, 64, NULL);
    out("setup.sync %s\n", en(D.cuCtxSynchronize()));
}

/* ---- cuMemGetAddressRange -------------------------------------------------- */

static void range_out(const char *key, CUdeviceptr p, CUdeviceptr ref)
{
    CUdeviceptr b = SENT_PTR;
    size_t s = SENT_SIZE;
    char bb[40], sb[32];
    CUresult r = LC(cuMemGetAddressRange, &b, &s, p);

    out("%s %s base=%s size=%s\n", key, en(r), rel(b, ref, bb), size_str(s, sb));
}

static void probe_ranges(void)
{
    char key[96];
    CUdeviceptr fr = 0, b = SENT_PTR;
    size_t s = SENT_SIZE;
    char bb[40], sb[32];

    for (int k = 0; k < M_COUNT; k++) {
        const struct mem *m = &mem[k];
        if (!m->p) {
            out("range.%s n/a\n", m->name);
            continue;
        }
        snprintf(key, sizeof(key), "range.%s.base", m->name);
        range_out(key, m->p, m->p);
        snprintf(key, sizeof(key), "range.%s.interior", m->name);
        range_out(key, m->p + m->size / 2, m->p);
        snprintf(key, sizeof(key), "range.%s.end", m->name);
        range_out(key, m->p + m->size, m->p);
    }
    if (mem[M_POOL].p) /* past the request, inside a 256-byte block */
        range_out("range.pool.size+24", mem[M_POOL].p + 1024 - 1, mem[M_POOL].p);
    if (mem[M_VMM].p)
        range_out("range.vmm.reserved-unmapped", mem[M_VMM].p + 3 * MiB, mem[M_VMM].p);
    if (mem[M_MEMALLOC].p) {
        CUdeviceptr p = mem[M_MEMALLOC].p;
        CUresult r = LC(cuMemGetAddressRange, &b, NULL, p + 4096);
        out("range.memalloc.null-size %s base=%s\n", en(r), rel(b, p, bb));
        r = LC(cuMemGetAddressRange, NULL, &s, p + 4096);
        out("range.memalloc.null-base %s size=%s\n", en(r), size_str(s, sb));
    }
    range_out("range.zero", 0, 0);
    if (LC(cuMemAlloc, &fr, 65536) == CUDA_SUCCESS) {
        out("range.freed.free %s\n", en(LC(cuMemFree, fr)));
        range_out("range.freed", fr, fr);
    }
}

/* ---- cuIpcGetMemHandle ----------------------------------------------------- */

static int nonzero(const CUipcMemHandle *h)
{
    int n = 0;

    for (size_t i = 0; i < sizeof(h->reserved); i++)
        n += h->reserved[i] != 0;
    return n;
}

static void bytes_out(const char *key, const CUipcMemHandle *h)
{
    const unsigned char *b = (const unsigned char *)h->reserved;

    out("%s", key);
    for (size_t i = 0; i < sizeof(h->reserved); i++)
        out("%s%02x", i % 8 ? "" : " ", b[i]);
    out("\n");
}

/* The byte indices where a and b differ. */
static void diff_out(const char *key, const CUipcMemHandle *a, const CUipcMemHandle *b)
{
    int any = 0;

    out("%s", key);
    for (size_t i = 0; i < sizeof(a->reserved); i++)
        if (a->reserved[i] != b->reserved[i]) {
            out("%s%zu", any ? "," : " diff=", i);
            any = 1;
        }
    out("%s\n", any ? "" : " same");
}

static CUipcMemHandle h_base, h_interior;

static void probe_ipcget_kinds(void)
{
    CUipcMemHandle h;
    char key[96];

    for (int k = 0; k < M_COUNT; k++) {
        snprintf(key, sizeof(key), "ipcget.%s", mem[k].name);
        if (!mem[k].p) {
            out("%s n/a\n", key);
            continue;
        }
        memset(&h, SENT, sizeof(h));
        out("%s %s\n", key, en(LC(cuIpcGetMemHandle, &h, mem[k].p)));
    }
    memset(&h, SENT, sizeof(h));
    out("ipcget.zero %s\n", en(LC(cuIpcGetMemHandle, &h, 0)));
}

static void probe_ipcget(void)
{
    CUdeviceptr p = mem[M_MEMALLOC].p, fr = 0, op = 0;
    CUipcMemHandle h2, hs;
    CUresult r;
    int f0 = nfds_open();

    probe_ipcget_kinds();
    if (!p)
        return;
    memset(&h_base, 0, sizeof(h_base));
    r = LC(cuIpcGetMemHandle, &h_base, p);
    out("ipcget.memalloc.fds %+d\n", nfds_open() - f0);
    out("ipcget.memalloc.nonzero %d\n", nonzero(&h_base));
    bytes_out("ipcget.memalloc.bytes", &h_base);
    memset(&h2, 0, sizeof(h2));
    out("ipcget.memalloc.twice %s\n", en(LC(cuIpcGetMemHandle, &h2, p)));
    diff_out("ipcget.memalloc.twice-vs-first", &h_base, &h2);
    memset(&h_interior, 0, sizeof(h_interior));
    out("ipcget.memalloc.interior+4096 %s\n",
        en(LC(cuIpcGetMemHandle, &h_interior, p + 4096)));
    diff_out("ipcget.memalloc.interior-vs-base", &h_base, &h_interior);
    out("ipcget.memalloc.end %s\n", en(LC(cuIpcGetMemHandle, &h2, p + mem[M_MEMALLOC].size)));
    if (mem[M_MEMALLOC_SMALL].p) {
        memset(&hs, 0, sizeof(hs));
        LC(cuIpcGetMemHandle, &hs, mem[M_MEMALLOC_SMALL].p);
        diff_out("ipcget.memalloc-small-vs-memalloc", &h_base, &hs);
        bytes_out("ipcget.memalloc-small.bytes", &hs);
    }
    if (LC(cuMemAlloc, &fr, 65536) == CUDA_SUCCESS) {
        LC(cuMemFree, fr);
        out("ipcget.freed %s\n", en(LC(cuIpcGetMemHandle, &h2, fr)));
    }
    r = LC(cuIpcOpenMemHandle, &op, h_base, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    out("ipcopen.same-process %s\n", en(r));
    if (r == CUDA_SUCCESS)
        out("ipcopen.same-process.close %s same-ptr=%d\n",
            en(LC(cuIpcCloseMemHandle, op)), op == p);
}

/* ---- cuPointerGetAttribute(s) ---------------------------------------------- */

enum attr_how { A_VAL, A_ADDR, A_POOL, A_CTX, A_ID };

static const struct attr {
    CUpointer_attribute a;
    const char *name;
    enum attr_how how;
} attrs[] = {
    {CU_POINTER_ATTRIBUTE_CONTEXT, "CONTEXT", A_CTX},
    {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "MEMORY_TYPE", A_VAL},
    {CU_POINTER_ATTRIBUTE_DEVICE_POINTER, "DEVICE_POINTER", A_ADDR},
    {CU_POINTER_ATTRIBUTE_HOST_POINTER, "HOST_POINTER", A_ADDR},
    {CU_POINTER_ATTRIBUTE_BUFFER_ID, "BUFFER_ID", A_ID},
    {CU_POINTER_ATTRIBUTE_IS_MANAGED, "IS_MANAGED", A_VAL},
    {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "DEVICE_ORDINAL", A_VAL},
    {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, "IS_LEGACY_CUDA_IPC_CAPABLE", A_VAL},
    {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "RANGE_START_ADDR", A_ADDR},
    {CU_POINTER_ATTRIBUTE_RANGE_SIZE, "RANGE_SIZE", A_VAL},
    {CU_POINTER_ATTRIBUTE_MAPPED, "MAPPED", A_VAL},
    {CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, "ALLOWED_HANDLE_TYPES", A_VAL},
    {CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, "IS_GPU_DIRECT_RDMA_CAPABLE", A_VAL},
    {CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, "ACCESS_FLAGS", A_VAL},
    {CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, "MEMPOOL_HANDLE", A_POOL},
    {CU_POINTER_ATTRIBUTE_MAPPING_SIZE, "MAPPING_SIZE", A_VAL},
    {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, "MAPPING_BASE_ADDR", A_ADDR},
    {CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, "MEMORY_BLOCK_ID", A_ID},
};
#define NATTRS (sizeof(attrs) / sizeof(attrs[0]))

/* An 8-byte output slot that started as SENT bytes: "untouched", or the
 * value and how many bytes the call wrote ("1:w4"), or for addresses and
 * handles what they are relative to the pointer, pool and context. */
static const char *slot_str(const unsigned char slot[8], const struct attr *a, CUdeviceptr p,
                            CUmemoryPool pool, char buf[48])
{
    unsigned long long v = 0;
    int w = 8;

    while (w > 0 && slot[w - 1] == SENT)
        w--;
    if (w == 0)
        return "untouched";
    for (int i = w - 1; i >= 0; i--)
        v = v << 8 | slot[i];
    if (a->how == A_VAL) {
        snprintf(buf, 48, "%llu:w%d", v, w);
        return buf;
    }
    if (w < 8) { /* a pointer, a handle or an id is 8 bytes */
        snprintf(buf, 48, "partial:w%d", w);
        return buf;
    }
    memcpy(&v, slot, 8);
    if (v == 0)
        return "null";
    if (a->how == A_ADDR)
        return rel((CUdeviceptr)v, p, buf);
    if (a->how == A_POOL)
        return v == (unsigned long long)(uintptr_t)pool ? "pool" : "other";
    if (a->how == A_CTX)
        return v == (unsigned long long)(uintptr_t)ctx0 ? "current" : "other";
    return "set";
}

/* Every attribute one at a time, then all in one cuPointerGetAttributes. */
static void attrs_out(const char *kind, CUdeviceptr p, CUmemoryPool pool)
{
    unsigned char slots[NATTRS][8];
    CUpointer_attribute as[NATTRS];
    void *data[NATTRS];
    char buf[48];
    CUresult r;

    for (size_t i = 0; i < NATTRS; i++) {
        memset(slots[i], SENT, 8);
        r = LC(cuPointerGetAttribute, slots[i], attrs[i].a, p);
        out("attr.%s.%s %s %s\n", kind, attrs[i].name, en(r),
            slot_str(slots[i], &attrs[i], p, pool, buf));
    }
    for (size_t i = 0; i < NATTRS; i++) {
        memset(slots[i], SENT, 8);
        as[i] = attrs[i].a;
        data[i] = slots[i];
    }
    r = LC(cuPointerGetAttributes, (unsigned)NATTRS, as, data, p);
    out("attrs.%s %s\n", kind, en(r));
    for (size_t i = 0; i < NATTRS && r == CUDA_SUCCESS; i++)
        out("attrs.%s.%s %s\n", kind, attrs[i].name,
            slot_str(slots[i], &attrs[i], p, pool, buf));
}

static void probe_attrs(void)
{
    char kind[64];

    for (int k = 0; k < M_COUNT; k++) {
        if (!mem[k].p) {
            out("attr.%s n/a\n", mem[k].name);
            continue;
        }
        attrs_out(mem[k].name, mem[k].p, mem[k].pool);
        if (k == M_MEMALLOC || k == M_POOL || k == M_VMM) {
            snprintf(kind, sizeof(kind), "%s+interior", mem[k].name);
            attrs_out(kind, mem[k].p + 512, mem[k].pool);
        }
    }
}

/* ---- pool access ----------------------------------------------------------- */

/* Reads the access of location (t, id) to pool; key is pre.what. */
static void access_get(const char *pre, const char *what, CUmemoryPool pool,
                       CUmemLocationType t, int id)
{
    CUmemAccess_flags f = (CUmemAccess_flags)99;
    CUmemLocation loc;
    CUresult r;

    memset(&loc, 0, sizeof(loc));
    loc.type = t;
    loc.id = id;
    r = D.cuMemPoolGetAccess(&f, pool, &loc);
    out("%s.%s %s %d\n", pre, what, en(r), (int)f);
}

static void access_set(const char *pre, const char *what, CUmemoryPool pool,
                       CUmemLocationType t, int id, CUmemAccess_flags fl)
{
    CUmemAccessDesc d;

    memset(&d, 0, sizeof(d));
    d.location.type = t;
    d.location.id = id;
    d.flags = fl;
    out("%s.%s %s\n", pre, what, en(D.cuMemPoolSetAccess(pool, &d, 1)));
}

#define DEV CU_MEM_LOCATION_TYPE_DEVICE
#define HOST CU_MEM_LOCATION_TYPE_HOST
#define HOST_NUMA CU_MEM_LOCATION_TYPE_HOST_NUMA
#define RW CU_MEM_ACCESS_FLAGS_PROT_READWRITE
#define RO CU_MEM_ACCESS_FLAGS_PROT_READ
#define NONE CU_MEM_ACCESS_FLAGS_PROT_NONE

/* What a process may set on a pool for device 0, read back after each
 * step; the last step leaves read-write. */
static void access_dev0_steps(const char *pre, CUmemoryPool pool)
{
    access_get(pre, "get-dev0", pool, DEV, 0);
    access_set(pre, "set-dev0-rw", pool, DEV, 0, RW);
    access_get(pre, "get-dev0-after-rw", pool, DEV, 0);
    access_set(pre, "set-dev0-read", pool, DEV, 0, RO);
    access_get(pre, "get-dev0-after-read", pool, DEV, 0);
    access_set(pre, "set-dev0-none", pool, DEV, 0, NONE);
    access_get(pre, "get-dev0-after-none", pool, DEV, 0);
    access_set(pre, "set-dev0-rw-again", pool, DEV, 0, RW);
}

/* Locations that are not device 0: a device that does not exist, a bad
 * type, the host. */
static void access_other_locations(const char *pre, CUmemoryPool pool)
{
    CUmemAccessDesc d;

    access_set(pre, "set-dev5-rw", pool, DEV, 5, RW);
    access_get(pre, "get-dev5", pool, DEV, 5);
    access_set(pre, "set-dev-1-rw", pool, DEV, -1, RW);
    access_set(pre, "set-invalid-type-rw", pool, CU_MEM_LOCATION_TYPE_INVALID, 0, RW);
    access_get(pre, "get-host", pool, HOST, 0);
    access_get(pre, "get-hostnuma0", pool, HOST_NUMA, 0);
    access_set(pre, "set-host-rw", pool, HOST, 0, RW);
    access_set(pre, "set-hostnuma0-rw", pool, HOST_NUMA, 0, RW);
    memset(&d, 0, sizeof(d));
    d.location.type = DEV;
    d.flags = RW;
    out("%s.set-count0 %s\n", pre, en(D.cuMemPoolSetAccess(pool, &d, 0)));
}

static void probe_access(void)
{
    int v = -1;
    CUresult r = D.cuDeviceCanAccessPeer(&v, 0, 0);

    out("canaccesspeer.0-0 %s %d\n", en(r), v);
    if (devpool) {
        access_dev0_steps("access.devpool", devpool);
        access_other_locations("access.devpool", devpool);
    }
    if (hostpool) {
        access_dev0_steps("access.hostpool", hostpool);
        access_other_locations("access.hostpool", hostpool);
    }
}

/* ---- a dialog with an exec'd child ------------------------------------------ */

enum op { OP_OPEN = 1, OP_READ, OP_REALLOC, OP_POOLS };

/* What the parent sends a child at each step (op says which step). */
struct cmd {
    int op;
    CUipcMemHandle h[2];
    CUmemPoolPtrExportData d[3];
    unsigned long long size[3];
};

struct peer {
    pid_t pid;
    int sock;
    int alive;
};

static void peer_start(struct peer *pr, const char *role)
{
    int sv[2];

    pr->alive = 0;
    pr->pid = -1;
    pr->sock = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return;
    pr->pid = spawn_self(role, NULL, NULL, sv[1]);
    close(sv[1]);
    pr->sock = sv[0];
    pr->alive = pr->pid > 0;
}

/* Sends c with up to 4 fds; 0 on success. Never raises SIGPIPE. */
static int peer_send(struct peer *pr, const struct cmd *c, const int *fds, int nfds)
{
    char cbuf[CMSG_SPACE(4 * sizeof(int))];
    struct iovec iov = {(void *)c, sizeof(*c)};
    struct msghdr mh;
    struct cmsghdr *cm;

    memset(&mh, 0, sizeof(mh));
    memset(cbuf, 0, sizeof(cbuf));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (nfds > 0 && nfds <= 4) {
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
    }
    return sendmsg(pr->sock, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(*c) ? 0 : -1;
}

/* Prints the child's reply (text up to a NUL). A timeout or an end of
 * file marks the child dead and is reported under key. */
static void peer_reply(struct peer *pr, const char *key)
{
    static char buf[64 * 1024];
    size_t len = 0;
    const char *why = NULL;

    while (!why) {
        struct pollfd pf = {pr->sock, POLLIN, 0};
        ssize_t r;
        int k = poll(&pf, 1, REPLY_MS);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            why = "timeout";
            break;
        }
        r = read(pr->sock, buf + len, sizeof(buf) - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            why = "eof";
            break;
        }
        len += (size_t)r;
        if (buf[len - 1] == '\0') {
            fputs(buf, stdout);
            return;
        }
        if (len == sizeof(buf) - 1)
            why = "too-long";
    }
    buf[len] = '\0';
    fputs(buf, stdout);
    printf("%s.reply %s\n", key, why);
    pr->alive = 0;
}

static void peer_ask(struct peer *pr, const char *key, const struct cmd *c, const int *fds,
                     int nfds)
{
    if (!pr->alive) {
        printf("%s no-child\n", key);
        return;
    }
    if (peer_send(pr, c, fds, nfds) != 0) {
        printf("%s.send failed\n", key);
        pr->alive = 0;
        return;
    }
    peer_reply(pr, key);
}

/* Waits up to CHILD_EXIT_MS for the child, then kills it; prints how it
 * ended (128+signal for a signal). */
static void peer_end(struct peer *pr, const char *key)
{
    struct timespec ts = {0, 10 * 1000 * 1000};
    int st = 0;
    pid_t w = 0;

    if (pr->sock >= 0)
        close(pr->sock);
    if (pr->pid <= 0) {
        printf("%s.exit not-started\n", key);
        return;
    }
    for (int i = 0; i < CHILD_EXIT_MS / 10 && w == 0; i++) {
        w = waitpid(pr->pid, &st, WNOHANG);
        if (w == 0)
            nanosleep(&ts, NULL);
    }
    if (w == 0) {
        kill(pr->pid, SIGKILL);
        waitpid(pr->pid, &st, 0);
        printf("%s.exit killed-after-timeout\n", key);
        return;
    }
    printf("%s.exit %d\n", key,
           WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1);
}

/* ---- children ----------------------------------------------------------------- */

static int child_sock = -1;

static void child_begin(void)
{
    struct timeval tv = {REPLY_MS / 1000, 0};

    alarm(ALARM_CHILD_S);
    in_child = 1;
    child_sock = sim_t_child_fd();
    CHECK(child_sock >= 0);
    setsockopt(child_sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ctx0 = sim_t_init_ctx(0);
    load_extra(0);
}

/* The parent's next command, which must be step op, and its fds (their
 * number). A parent that went quiet for REPLY_MS ends this child (CHECK in
 * sim_t_recv), and so does a step out of order. */
static int child_next(struct cmd *c, int op, int *fds, int maxfds)
{
    int n = sim_t_recv(child_sock, c, sizeof(*c), fds, maxfds);

    if (c->op != op) {
        fprintf(stderr, "probe_ipc child: step %d, expected %d\n", c->op, op);
        exit(1);
    }
    return n;
}

static void child_reply(void)
{
    reply_buf[reply_len] = '\0';
    sim_t_write_all(child_sock, reply_buf, reply_len + 1);
    reply_len = 0;
}

/* Byte 0 and byte 4096 of p (FILL and FILL_MID in the exporter's block). */
static void read_bytes(const char *key, CUdeviceptr p, int with_mid)
{
    unsigned char b[2] = {0xee, 0xee};
    CUresult r1, r2 = CUDA_SUCCESS, rs;

    if (!p) {
        out("%s n/a\n", key);
        return;
    }
    r1 = D.cuMemcpyDtoHAsync(&b[0], p, 1, NULL);
    if (with_mid)
        r2 = D.cuMemcpyDtoHAsync(&b[1], p + 4096, 1, NULL);
    rs = D.cuCtxSynchronize();
    if (with_mid)
        out("%s %s %s sync=%s byte0=%02x byte4096=%02x\n", key, en(r1), en(r2), en(rs), b[0],
            b[1]);
    else
        out("%s %s sync=%s byte0=%02x\n", key, en(r1), en(rs), b[0]);
}

/* Opens h; prints the pointer relative to ref (an earlier mapping), or
 * only whether it was set when there is none. The pointer, or 0. */
static CUdeviceptr ipc_open(const char *key, CUipcMemHandle h, unsigned flags,
                            CUdeviceptr ref)
{
    CUdeviceptr p = SENT_PTR;
    char bb[40];
    CUresult r = LC(cuIpcOpenMemHandle, &p, h, flags);
    const char *where = rel(p, ref, bb);

    if (!ref && p != SENT_PTR && p != 0)
        where = "set";
    out("%s %s ptr=%s\n", key, en(r), where);
    return r == CUDA_SUCCESS ? p : 0;
}

static void child_inspect_opened(CUdeviceptr p, const CUipcMemHandle *sent)
{
    CUipcMemHandle hx;
    CUresult r;

    read_bytes("xipc.open-bytes", p, 1);
    range_out("xipc.range.base", p, p);
    range_out("xipc.range.interior+4096", p + 4096, p);
    range_out("xipc.range.end", p + MiB, p);
    attrs_out("ipc-opened", p, NULL);
    memset(&hx, 0, sizeof(hx));
    r = LC(cuIpcGetMemHandle, &hx, p);
    out("xipc.reexport %s\n", en(r));
    diff_out("xipc.reexport-vs-exporter", sent, &hx);
}

/* Opens, opens again, closes more often than opened, reopens with each
 * flag, tries bad handles and flags; returns a mapping left open (or 0). */
static CUdeviceptr child_open_close(const struct cmd *c, int f0)
{
    CUdeviceptr p1, p2, p3, p4, q;
    CUipcMemHandle junk;

    p1 = ipc_open("xipc.open-lazy", c->h[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, 0);
    out("xipc.open-fds %+d\n", nfds_open() - f0);
    if (p1)
        child_inspect_opened(p1, &c->h[0]);
    p2 = ipc_open("xipc.open-again", c->h[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, p1);
    out("xipc.open-again-fds %+d\n", nfds_open() - f0);
    p3 = ipc_open("xipc.open-interior-handle", c->h[1], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
                  p1);
    read_bytes("xipc.open-interior-handle-bytes", p3, 1);
    for (int i = 1; i <= 4; i++)
        out("xipc.close-%d %s\n", i, en(LC(cuIpcCloseMemHandle, p1)));
    if (p3 && p3 != p1)
        out("xipc.close-interior %s\n", en(LC(cuIpcCloseMemHandle, p3)));
    if (p2 && p2 != p1)
        out("xipc.close-again-ptr %s\n", en(LC(cuIpcCloseMemHandle, p2)));
    out("xipc.fds-after-closes %+d\n", nfds_open() - f0);
    p4 = ipc_open("xipc.reopen-flags0", c->h[0], 0, p1);
    read_bytes("xipc.reopen-bytes", p4, 1);
    if (p4)
        out("xipc.reopen-close %s\n", en(LC(cuIpcCloseMemHandle, p4)));
    q = ipc_open("xipc.open-flags2", c->h[0], 2, p1);
    if (q)
        out("xipc.open-flags2-close %s\n", en(LC(cuIpcCloseMemHandle, q)));
    memset(&junk, 0, sizeof(junk));
    if ((q = ipc_open("xipc.open-zero-handle", junk, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, 0)))
        LC(cuIpcCloseMemHandle, q);
    memset(&junk, FILL, sizeof(junk));
    if ((q = ipc_open("xipc.open-garbage-handle", junk, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, 0)))
        LC(cuIpcCloseMemHandle, q);
    out("xipc.fds-after-bad-opens %+d\n", nfds_open() - f0);
    return ipc_open("xipc.hold-open", c->h[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, 0);
}

/* The exporter freed its block, allocated again and sent the new block's
 * handle: what the old mapping reads, and whether the new handle opens. */
static void child_after_realloc(const struct cmd *c, CUdeviceptr held)
{
    CUdeviceptr pn;

    read_bytes("xipc.read-after-exporter-realloc", held, 1);
    pn = ipc_open("xipc.open-new-handle", c->h[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, held);
    read_bytes("xipc.new-handle-bytes", pn, 1);
    if (pn)
        out("xipc.new-handle-close %s\n", en(LC(cuIpcCloseMemHandle, pn)));
}

static int child_ipcmem(void)
{
    struct cmd c;
    CUdeviceptr held;
    int f0;

    child_begin();
    child_next(&c, OP_OPEN, NULL, 0);
    f0 = nfds_open();
    held = child_open_close(&c, f0);
    child_reply();
    child_next(&c, OP_READ, NULL, 0);
    read_bytes("xipc.read-after-exporter-free", held, 1);
    child_reply();
    child_next(&c, OP_REALLOC, NULL, 0);
    child_after_realloc(&c, held);
    if (held)
        out("xipc.close-held %s\n", en(LC(cuIpcCloseMemHandle, held)));
    out("xipc.fds-end %+d\n", nfds_open() - f0);
    child_reply();
    return 0;
}

/* Imports pointer i of the command from pool and looks at it. */
static CUdeviceptr child_import_ptr(const char *name, CUmemoryPool pool,
                                    const CUmemPoolPtrExportData *d, unsigned long long size)
{
    CUdeviceptr p = 0;
    char key[96];
    CUresult r = D.cuMemPoolImportPointer(&p, pool, (CUmemPoolPtrExportData *)d);

    out("xpool.importptr.%s %s exporter-size=%llu\n", name, en(r), size);
    if (r != CUDA_SUCCESS)
        return 0;
    snprintf(key, sizeof(key), "xpool.range.%s.base", name);
    range_out(key, p, p);
    snprintf(key, sizeof(key), "xpool.range.%s.interior+32", name);
    range_out(key, p + 32, p);
    snprintf(key, sizeof(key), "xpool.range.%s.end", name);
    range_out(key, p + size, p);
    snprintf(key, sizeof(key), "%s-imported", name);
    attrs_out(key, p, pool);
    return p;
}

static CUmemoryPool child_import_pool(const char *name, int fd)
{
    CUmemoryPool pool = NULL;
    CUresult r = D.cuMemPoolImportFromShareableHandle(
        &pool, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);

    out("xpool.import.%s %s\n", name, en(r));
    return r == CUDA_SUCCESS ? pool : NULL;
}

static void child_free(const char *name, const CUdeviceptr *p, int n)
{
    for (int i = 0; i < n; i++)
        if (p[i])
            out("xpool.free.%s-%d %s\n", name, i, en(D.cuMemFreeAsync(p[i], NULL)));
    out("xpool.sync.%s %s\n", name, en(D.cuCtxSynchronize()));
}

static void child_destroy(const char *name, CUmemoryPool pool)
{
    out("xpool.destroy.%s %s\n", name, en(D.cuMemPoolDestroy(pool)));
}

/* One pointer of pool imported twice (d as the exporter wrote it; with
 * tail, the second import's byte 60, one the driver leaves unwritten,
 * changed): whether the two pointers are equal, then the first freed and
 * the second read (status, and whether byte 0 is FILL, the exporter's)
 * and freed. Run after every other import of that pointer was freed. */
static void child_import_twice(const char *name, CUmemoryPool pool,
                               const CUmemPoolPtrExportData *d, int tail)
{
    CUmemPoolPtrExportData d1 = *d, d2 = *d;
    CUdeviceptr p1 = SENT_PTR, p2 = SENT_PTR;
    const char *how = tail ? "tail60" : "same";
    unsigned char b = 0xee;
    CUresult r1, r2, r;

    if (tail)
        d2.reserved[60] ^= 0x5a;
    r1 = D.cuMemPoolImportPointer(&p1, pool, &d1);
    r2 = D.cuMemPoolImportPointer(&p2, pool, &d2);
    out("xpool.twice.%s.%s import1=%s import2=%s same-ptr=%d\n", name, how, en(r1), en(r2),
        r1 == CUDA_SUCCESS && r2 == CUDA_SUCCESS && p1 == p2);
    if (r1 == CUDA_SUCCESS) {
        r = D.cuMemFreeAsync(p1, NULL);
        out("xpool.twice.%s.%s.free1 %s sync=%s\n", name, how, en(r), en(D.cuCtxSynchronize()));
    }
    if (r2 != CUDA_SUCCESS)
        return;
    r = LC(cuMemcpyDtoH, &b, p2, 1);
    out("xpool.twice.%s.%s.read2 %s exporter-bytes=%d\n", name, how, en(r),
        r == CUDA_SUCCESS && b == FILL);
    r = D.cuMemFreeAsync(p2, NULL);
    out("xpool.twice.%s.%s.free2 %s sync=%s\n", name, how, en(r), en(D.cuCtxSynchronize()));
}

/* One pool's fd imported twice: whether the two handles are equal; then
 * the first destroyed, and a pointer (d) imported through the second. A
 * second destroy only where that import worked or the handles differ (one
 * handle destroyed twice may crash the driver). Each step's fd count. */
static void child_pool_twice(const char *name, int fd, const CUmemPoolPtrExportData *d)
{
    CUmemoryPool p1 = NULL, p2 = NULL;
    CUmemPoolPtrExportData d1 = *d;
    CUdeviceptr a = 0;
    int fds0 = nfds_open();
    CUresult r1 = D.cuMemPoolImportFromShareableHandle(
                 &p1, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             r2 = D.cuMemPoolImportFromShareableHandle(
                 &p2, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             r;

    out("xpool.pool-twice.%s import1=%s import2=%s same-handle=%d fds+%d\n", name, en(r1),
        en(r2), r1 == CUDA_SUCCESS && r2 == CUDA_SUCCESS && p1 == p2, nfds_open() - fds0);
    if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS)
        return;
    out("xpool.pool-twice.%s.destroy1 %s fds+%d\n", name, en(D.cuMemPoolDestroy(p1)),
        nfds_open() - fds0);
    r = D.cuMemPoolImportPointer(&a, p2, &d1);
    out("xpool.pool-twice.%s.import-ptr-after-destroy1 %s\n", name, en(r));
    if (r == CUDA_SUCCESS)
        out("xpool.pool-twice.%s.free %s sync=%s\n", name, en(D.cuMemFreeAsync(a, NULL)),
            en(D.cuCtxSynchronize()));
    if (r == CUDA_SUCCESS || p1 != p2)
        out("xpool.pool-twice.%s.destroy2 %s fds+%d\n", name, en(D.cuMemPoolDestroy(p2)),
            nfds_open() - fds0);
}

static int child_pools(void)
{
    struct cmd c;
    int fds[2] = {-1, -1}, n;
    CUmemoryPool dp, hp;
    CUdeviceptr a[2] = {0, 0}, h = 0;
    CUipcMemHandle ih;

    child_begin();
    n = child_next(&c, OP_POOLS, fds, 2);
    out("xpool.fds-received %d\n", n);
    if (n >= 1 && (dp = child_import_pool("device", fds[0]))) {
        access_dev0_steps("xaccess.devpool", dp);
        access_other_locations("xaccess.devpool", dp);
        a[0] = child_import_ptr("pool", dp, &c.d[0], c.size[0]);
        a[1] = child_import_ptr("pool-small", dp, &c.d[1], c.size[1]);
        read_bytes("xpool.pool-small.bytes", a[1], 0);
        if (a[1])
            out("xpool.ipcget-imported %s\n", en(LC(cuIpcGetMemHandle, &ih, a[1])));
        child_free("device", a, 2);
        child_import_twice("device", dp, &c.d[1], 0);
        child_import_twice("device", dp, &c.d[1], 1);
        child_destroy("device", dp);
        child_pool_twice("device", fds[0], &c.d[1]);
    }
    if (n >= 2 && (hp = child_import_pool("hostnuma0", fds[1]))) {
        access_dev0_steps("xaccess.hostpool", hp);
        access_other_locations("xaccess.hostpool", hp);
        h = child_import_ptr("hostpool", hp, &c.d[2], c.size[2]);
        read_bytes("xpool.hostpool.bytes", h, 0);
        child_free("hostnuma0", &h, 1);
        child_import_twice("hostnuma0", hp, &c.d[2], 0);
        child_import_twice("hostnuma0", hp, &c.d[2], 1);
        child_destroy("hostnuma0", hp);
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    child_reply();
    return 0;
}

/* ---- the parent's side of the dialogs ----------------------------------------- */

static void export_ptr(enum mem_kind k, CUmemPoolPtrExportData *d, unsigned long long *size)
{
    CUresult r = PROBE_MISSING;

    memset(d, 0, sizeof(*d));
    if (mem[k].p)
        r = D.cuMemPoolExportPointer(d, mem[k].p);
    out("poolexportptr.%s %s\n", mem[k].name, en(r));
    *size = mem[k].size;
}

static void probe_pool_child(void)
{
    struct peer pr;
    struct cmd c;
    int fds[2], n = 0;

    if (devpool_fd < 0) {
        out("xpool skipped (no exported device pool)\n");
        return;
    }
    memset(&c, 0, sizeof(c));
    c.op = OP_POOLS;
    export_ptr(M_POOL, &c.d[0], &c.size[0]);
    export_ptr(M_POOL_SMALL, &c.d[1], &c.size[1]);
    fds[n++] = devpool_fd;
    if (hostpool_fd >= 0) {
        export_ptr(M_HOSTPOOL, &c.d[2], &c.size[2]);
        fds[n++] = hostpool_fd;
    }
    peer_start(&pr, "pools");
    peer_ask(&pr, "xpool", &c, fds, n);
    peer_end(&pr, "xpool.child");
}

/* The exporter frees its block while the child maps it, allocates the
 * same size again (same address?) and fills it with FILL_NEW. */
static void parent_free_realloc(struct cmd *c)
{
    CUdeviceptr old = mem[M_MEMALLOC].p, nb = 0;
    CUresult r;

    out("ipc.free-while-child-maps %s\n", en(LC(cuMemFree, old)));
    out("ipc.free-sync %s\n", en(D.cuCtxSynchronize()));
    mem[M_MEMALLOC].p = 0;
    r = LC(cuMemAlloc, &nb, MiB);
    out("ipc.realloc %s same-address=%d\n", en(r), r == CUDA_SUCCESS && nb == old);
    memset(&c->h[0], 0, sizeof(c->h[0]));
    if (r != CUDA_SUCCESS)
        return;
    mem[M_MEMALLOC].p = nb;
    D.cuMemsetD8Async(nb, FILL_NEW, MiB, NULL);
    out("ipc.realloc-fill-sync %s\n", en(D.cuCtxSynchronize()));
    r = LC(cuIpcGetMemHandle, &c->h[0], nb);
    out("ipc.realloc-ipcget %s\n", en(r));
    diff_out("ipc.realloc-handle-vs-old", &h_base, &c->h[0]);
}

static void probe_ipc_child(void)
{
    struct peer pr;
    struct cmd c;

    if (!mem[M_MEMALLOC].p) {
        out("xipc skipped (no cuMemAlloc block)\n");
        return;
    }
    memset(&c, 0, sizeof(c));
    c.op = OP_OPEN;
    c.h[0] = h_base;
    c.h[1] = h_interior;
    peer_start(&pr, "ipcmem");
    peer_ask(&pr, "xipc.open", &c, NULL, 0);
    parent_free_realloc(&c);
    c.op = OP_READ;
    peer_ask(&pr, "xipc.read", &c, NULL, 0);
    c.op = OP_REALLOC;
    peer_ask(&pr, "xipc.realloc", &c, NULL, 0);
    peer_end(&pr, "xipc.child");
}

static void cleanup(void)
{
    for (int k = M_POOL; k <= M_POOL_SMALL; k++)
        if (mem[k].p)
            D.cuMemFreeAsync(mem[k].p, NULL);
    if (mem[M_HOSTPOOL].p)
        D.cuMemFreeAsync(mem[M_HOSTPOOL].p, NULL);
    D.cuCtxSynchronize();
    if (mem[M_MEMALLOC].p)
        LC(cuMemFree, mem[M_MEMALLOC].p);
    if (mem[M_MEMALLOC_SMALL].p)
        LC(cuMemFree, mem[M_MEMALLOC_SMALL].p);
    if (mem[M_MANAGED].p)
        LC(cuMemFree, mem[M_MANAGED].p);
    if (mem[M_ALLOCHOST].p)
        LC(cuMemFreeHost, (void *)(uintptr_t)mem[M_ALLOCHOST].p);
    free((void *)(uintptr_t)mem[M_MALLOC].p);
    if (mem[M_VMM].p) {
        D.cuMemUnmap(vmm_base, 2 * MiB);
        D.cuMemAddressFree(vmm_base, 4 * MiB);
        D.cuMemRelease(vmm_handle);
    }
    if (devpool)
        out("cleanup.devpool-destroy %s\n", en(D.cuMemPoolDestroy(devpool)));
    if (hostpool)
        out("cleanup.hostpool-destroy %s\n", en(D.cuMemPoolDestroy(hostpool)));
    if (devpool_fd >= 0)
        close(devpool_fd);
    if (hostpool_fd >= 0)
        close(hostpool_fd);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 3 && strcmp(argv[1], "--child") == 0)
        return strcmp(argv[2], "ipcmem") == 0 ? child_ipcmem()
               : strcmp(argv[2], "pools") == 0 ? child_pools()
                                               : 2;
    if (!getenv("PROBE_LIB")) {
        fprintf(stderr, "usage: PROBE_LIB=libcuda.so.1 %s\n", argv[0]);
        return 2;
    }
    alarm(ALARM_PARENT_S);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ctx0 = sim_t_init_ctx(0);
    load_extra(1);
    setup_memory();
    probe_ranges();
    probe_ipcget();
    probe_attrs();
    probe_access();
    probe_pool_child();
    probe_ipc_child();
    cleanup();
    printf("done\n");
    return 0;
}
