/* cuMemAlloc, cuMemAllocManaged, cuMemAllocHost and legacy CUDA IPC
 * (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle).
 *
 * An allocation is an anonymous mapping of its size rounded up to a page.
 * Its first cuIpcGetMemHandle turns it into a memfd (MFD_CLOEXEC) of that
 * size plus one trailing page with a header {magic, version, physical GPU,
 * uid, size, owner UUID}: the bytes are copied in and the memfd is mapped
 * over the same addresses, so the pointer does not change. The exporter
 * keeps that fd until cuMemFree (the one fd legacy IPC costs here).
 *
 * A handle is bytes only, as the driver's: {magic, version, physical GPU,
 * exporter pid, memfd number, uid, size, owner UUID}. The importer opens
 * /proc/<pid>/fd/<n> (same user, as CUDA IPC needs anyway), checks the
 * header's uid and size against the handle, maps it and closes the fd: an
 * opened handle costs no fd. A stale handle (the exporter freed the
 * allocation or exited, or the fd number now names something else) fails
 * those checks.
 *
 * Behaviour taken from cuda.h's documentation, not yet seen on a real
 * driver, is marked "(doc)"; behaviour guessed is marked "(guess)". See
 * sim/README.md for the list. */
#include "sim_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_IPC_MAGIC 0x4d43504949534d43ull /* "CMSIIPCM" */
#define SIM_IPC_VERSION 1
#define SIM_ALLOC_MAX ((size_t)1 << 44)

enum dkind { D_MEMALLOC, D_MANAGED, D_HOST, D_OPENED };

struct sim_dalloc {
    enum dkind kind;
    uintptr_t base;
    size_t size;          /* bytes asked for (the exporter's, when opened) */
    size_t map_len;       /* the mapping: size rounded up to a page */
    int dev;              /* local ordinal of its GPU, -1 for host memory */
    struct CUctx_st *ctx; /* where it was allocated or opened */
    uint64_t id;          /* BUFFER_ID */
    uint64_t uid;         /* IPC identity; 0 until exported */
    int fd;               /* memfd once exported, else -1 */
    long peer_pid;        /* opened: the exporter */
    int refs;             /* opened: opens not yet closed */
    struct sim_dalloc *next;
};

/* The memfd's trailing page, and the 64-byte handle. */
struct sim_ipc_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t phys;
    uint64_t uid;
    uint64_t size;
    CUuuid uuid;
};

struct sim_ipc_handle {
    uint64_t magic;
    uint32_t version;
    int32_t phys;
    int64_t pid;
    int32_t fd;
    uint32_t zero;
    uint64_t uid;
    uint64_t size;
    CUuuid uuid;
};
_Static_assert(sizeof(struct sim_ipc_handle) <= sizeof(CUipcMemHandle),
               "IPC handle layout fits in 64 bytes");

static struct sim_dalloc *sim_dallocs;
static uint64_t sim_buffer_ids;

uint64_t sim_next_buffer_id(void)
{
    return ++sim_buffer_ids;
}

/* The entry whose [base, base + size) holds p (any kind), or NULL. */
static struct sim_dalloc *dalloc_of(uintptr_t p)
{
    for (struct sim_dalloc *d = sim_dallocs; d; d = d->next)
        if (p >= d->base && p - d->base < d->size)
            return d;
    return NULL;
}

static struct sim_dalloc *dalloc_at(uintptr_t base, enum dkind kind)
{
    for (struct sim_dalloc *d = sim_dallocs; d; d = d->next)
        if (d->base == base && d->kind == kind)
            return d;
    return NULL;
}

static void dalloc_unlink_free(struct sim_dalloc *d)
{
    struct sim_dalloc **pp;

    for (pp = &sim_dallocs; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    munmap((void *)d->base, d->map_len);
    if (d->fd >= 0)
        close(d->fd);
    free(d);
}

void sim_allocs_ctx_gone(struct CUctx_st *ctx)
{
    struct sim_dalloc *d = sim_dallocs, *next;

    for (; d; d = next) {
        next = d->next;
        if (d->ctx == ctx)
            dalloc_unlink_free(d);
    }
}

enum sim_range sim_alloc_range(uintptr_t p, size_t n)
{
    struct sim_dalloc *d = dalloc_of(p);

    if (!d)
        return SIM_RANGE_UNKNOWN;
    return n <= d->size - (p - d->base) ? SIM_RANGE_OK : SIM_RANGE_BAD;
}

int sim_alloc_info(uintptr_t p, int dev, struct sim_ptr_info *out)
{
    struct sim_dalloc *d = dalloc_of(p);

    (void)dev;
    if (!d)
        return 0;
    memset(out, 0, sizeof(*out));
    out->kind = d->kind == D_MEMALLOC  ? SIM_PTR_MEMALLOC
                : d->kind == D_MANAGED ? SIM_PTR_MANAGED
                : d->kind == D_HOST    ? SIM_PTR_HOST
                                       : SIM_PTR_OPENED;
    out->base = out->range_base = d->base;
    out->size = out->range_size = d->size;
    out->host = d->kind == D_HOST;
    out->dev = d->dev;
    out->ctx = d->ctx;
    out->id = d->id;
    /* every device reaches these (guess: peer rules are not modelled for
     * legacy allocations) */
    out->access = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    return 1;
}

/* Maps size bytes of fresh, zeroed memory and records it. Locked. */
static CUresult dalloc_new(enum dkind kind, size_t size, struct CUctx_st *ctx,
                           struct sim_dalloc **out)
{
    struct sim_dalloc *d;
    void *m;

    if (size > SIM_ALLOC_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d = calloc(1, sizeof(*d));
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d->map_len = sim_round_up(size, SIM_PAGE);
    m = mmap(NULL, d->map_len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        free(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->kind = kind;
    d->base = (uintptr_t)m;
    d->size = size;
    d->dev = ctx->dev; /* DEVICE_ORDINAL of host memory too (guess) */
    d->ctx = ctx;
    d->id = sim_next_buffer_id();
    d->fd = -1;
    d->next = sim_dallocs;
    sim_dallocs = d;
    *out = d;
    return CUDA_SUCCESS;
}

/* The common head of the allocation calls: initialised, a current
 * context (as the driver's memory calls need), a non-NULL output and a
 * non-zero size (cuMemAlloc and cuMemAllocManaged document
 * CUDA_ERROR_INVALID_VALUE for 0; cuMemAllocHost by analogy, guess). */
static CUresult alloc_common(enum dkind kind, const void *out, size_t size)
{
    struct CUctx_st *ctx;
    struct sim_dalloc *d;
    CUresult rc = sim_check_init();

    if (rc)
        return rc;
    sim_lock();
    rc = sim_ctx_current(&ctx);
    if (rc == CUDA_SUCCESS && (!out || size == 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = dalloc_new(kind, size, ctx, &d);
    if (rc == CUDA_SUCCESS) {
        if (kind == D_HOST)
            *(void **)out = (void *)d->base;
        else
            *(CUdeviceptr *)out = (CUdeviceptr)d->base;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    SIM_FAULT(cuMemAlloc);
    return alloc_common(D_MEMALLOC, dptr, bytesize);
}

SIM_API CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                                           unsigned int flags)
{
    SIM_FAULT(cuMemAllocManaged);
    /* (doc) one of CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST */
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
        CUresult rc = sim_check_init();
        return rc ? rc : CUDA_ERROR_INVALID_VALUE;
    }
    return alloc_common(D_MANAGED, dptr, bytesize);
}

SIM_API CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize)
{
    SIM_FAULT(cuMemAllocHost);
    return alloc_common(D_HOST, pp, bytesize);
}

/* Frees the allocation at exactly p: a host one (cuMemFreeHost), or one
 * from cuMemAlloc / cuMemAllocManaged (cuMemFree). */
static CUresult free_common(uintptr_t p, int host)
{
    struct CUctx_st *ctx;
    struct sim_dalloc *d = NULL;
    CUresult rc = sim_check_init();

    if (rc)
        return rc;
    sim_lock();
    rc = sim_ctx_current(&ctx);
    if (rc == CUDA_SUCCESS && p != 0) {
        if (host)
            d = dalloc_at(p, D_HOST);
        else if (!(d = dalloc_at(p, D_MEMALLOC)))
            d = dalloc_at(p, D_MANAGED);
        /* an interior pointer, a pool, VMM, IPC-opened or unknown pointer,
         * or one freed already (guess: the driver's answer for those was
         * not measured) */
        if (!d)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            dalloc_unlink_free(d); /* importers keep their mappings */
    }
    sim_unlock();
    return rc; /* freeing NULL succeeds (guess, as cuMemFreeAsync(0)) */
}

SIM_API CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
    SIM_FAULT(cuMemFree);
    return free_common((uintptr_t)dptr, 0);
}

SIM_API CUresult CUDAAPI cuMemFreeHost(void *p)
{
    SIM_FAULT(cuMemFreeHost);
    return free_common((uintptr_t)p, 1);
}

/* ---- legacy IPC ------------------------------------------------------------ */

/* The memfd of d, made at its first export. Locked. */
static CUresult dalloc_materialize(struct sim_dalloc *d)
{
    struct sim_ipc_hdr hdr;
    int fd;

    if (d->fd >= 0)
        return CUDA_SUCCESS;
    fd = memfd_create("cucore-sim-ipcmem", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&hdr, 0, sizeof(hdr));
    hdr.magic = SIM_IPC_MAGIC;
    hdr.version = SIM_IPC_VERSION;
    hdr.phys = sim.vis[d->dev];
    hdr.uid = sim_random64();
    hdr.size = d->size;
    hdr.uuid = sim.phys[hdr.phys].uuid;
    if (ftruncate(fd, (off_t)(d->map_len + SIM_PAGE)) != 0 ||
        pwrite(fd, &hdr, sizeof(hdr), (off_t)d->map_len) != (ssize_t)sizeof(hdr) ||
        pwrite(fd, (void *)d->base, d->map_len, 0) != (ssize_t)d->map_len ||
        mmap((void *)d->base, d->map_len, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->fd = fd;
    d->uid = hdr.uid;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle,
                                           CUdeviceptr dptr)
{
    struct CUctx_st *ctx;
    struct sim_dalloc *d;
    struct sim_ipc_handle h;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuIpcGetMemHandle);
    if (rc)
        return rc;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_ctx_current(&ctx);
    if (rc)
        goto out;
    /* (doc) memory from cuMemAlloc only: pool, VMM, managed, host, opened
     * or unknown pointers are CUDA_ERROR_INVALID_VALUE (guess). A pointer
     * inside an allocation names the allocation (guess), so its handle is
     * the base's. */
    d = dalloc_of((uintptr_t)dptr);
    if (!d || d->kind != D_MEMALLOC) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = dalloc_materialize(d);
    if (rc)
        goto out;
    memset(&h, 0, sizeof(h));
    h.magic = SIM_IPC_MAGIC;
    h.version = SIM_IPC_VERSION;
    h.phys = sim.vis[d->dev];
    h.pid = (int64_t)getpid();
    h.fd = d->fd;
    h.uid = d->uid;
    h.size = d->size;
    h.uuid = sim.phys[h.phys].uuid;
    memset(pHandle, 0, sizeof(*pHandle));
    memcpy(pHandle->reserved, &h, sizeof(h));
out:
    sim_unlock();
    return rc;
}

/* Maps the memory a handle names; CUDA_ERROR_MAP_FAILED when it names
 * nothing that is there (guess, as a garbage IPC event handle on the
 * H200). Not locked: it only reads the exporter's memfd. */
static CUresult map_handle(const struct sim_ipc_handle *h, void **out,
                           size_t *map_len)
{
    struct sim_ipc_hdr hdr;
    struct stat st;
    char path[64];
    size_t len = sim_round_up((size_t)h->size, SIM_PAGE);
    void *m;
    int fd;

    snprintf(path, sizeof(path), "/proc/%lld/fd/%d", (long long)h->pid, h->fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_MAP_FAILED;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size != (off_t)(len + SIM_PAGE) ||
        pread(fd, &hdr, sizeof(hdr), (off_t)len) != (ssize_t)sizeof(hdr) ||
        hdr.magic != SIM_IPC_MAGIC || hdr.version != SIM_IPC_VERSION ||
        hdr.uid != h->uid || hdr.size != h->size) {
        close(fd);
        return CUDA_ERROR_MAP_FAILED;
    }
    m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd); /* the mapping keeps the memory */
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = m;
    *map_len = len;
    return CUDA_SUCCESS;
}

static struct sim_dalloc *find_opened(const struct sim_ipc_handle *h)
{
    for (struct sim_dalloc *d = sim_dallocs; d; d = d->next)
        if (d->kind == D_OPENED && d->peer_pid == (long)h->pid &&
            d->uid == h->uid)
            return d;
    return NULL;
}

/* Checks a handle's bytes and resolves its GPU here; *dev gets the local
 * ordinal. Locked. */
static CUresult check_handle(const struct sim_ipc_handle *h, int *dev)
{
    if (h->magic != SIM_IPC_MAGIC || h->version != SIM_IPC_VERSION ||
        h->pid <= 0 || h->fd < 0 || h->zero != 0 || h->size == 0 ||
        h->size > SIM_ALLOC_MAX || h->uid == 0)
        return CUDA_ERROR_MAP_FAILED; /* zeroes, garbage (guess) */
    /* in the process that made it: as an IPC event handle there on the
     * H200 (guess for memory) */
    if (h->pid == (int64_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;
    *dev = sim_uuid_to_local(&h->uuid);
    if (*dev < 0)
        return CUDA_ERROR_INVALID_DEVICE; /* its GPU is not visible here */
    return CUDA_SUCCESS;
}

/* (doc) A handle opened already by this context: one more reference,
 * the same pointer. (guess) By another context of this process:
 * CUDA_ERROR_INVALID_CONTEXT, the documented rule being one context per
 * device per other process. Locked. */
static CUresult reopen(struct sim_dalloc *d, struct CUctx_st *ctx,
                       CUdeviceptr *pdptr)
{
    if (d->ctx != ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    d->refs++;
    *pdptr = (CUdeviceptr)d->base;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr,
                                            CUipcMemHandle handle,
                                            unsigned int Flags)
{
    struct sim_ipc_handle h;
    struct CUctx_st *ctx;
    struct sim_dalloc *d;
    size_t map_len = 0;
    void *m = NULL;
    int dev = -1;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuIpcOpenMemHandle);
    if (rc)
        return rc;
    /* (doc) Flags must be CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS; 0 is taken
     * too (guess), peer access being always there in the sim */
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&h, handle.reserved, sizeof(h));
    sim_lock();
    rc = sim_ctx_current(&ctx);
    if (rc == CUDA_SUCCESS)
        rc = check_handle(&h, &dev);
    if (rc)
        goto out;
    d = find_opened(&h);
    if (d) {
        rc = reopen(d, ctx, pdptr);
        goto out;
    }
    sim_unlock();
    rc = map_handle(&h, &m, &map_len);
    sim_lock();
    if (rc)
        goto out;
    if ((d = find_opened(&h)) != NULL) { /* another thread was quicker */
        munmap(m, map_len);
        rc = reopen(d, ctx, pdptr);
        goto out;
    }
    d = calloc(1, sizeof(*d));
    if (!d) {
        munmap(m, map_len);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    d->kind = D_OPENED;
    d->base = (uintptr_t)m;
    d->size = (size_t)h.size;
    d->map_len = map_len;
    d->dev = dev;
    d->ctx = ctx;
    d->id = sim_next_buffer_id();
    d->uid = h.uid;
    d->fd = -1;
    d->peer_pid = (long)h.pid;
    d->refs = 1;
    d->next = sim_dallocs;
    sim_dallocs = d;
    *pdptr = (CUdeviceptr)d->base;
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    struct CUctx_st *ctx;
    struct sim_dalloc *d;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuIpcCloseMemHandle);
    if (rc)
        return rc;
    sim_lock();
    rc = sim_ctx_current(&ctx);
    if (rc)
        goto out;
    /* (doc) one reference less, unmapped at the last. Anything but a
     * pointer cuIpcOpenMemHandle returned and not yet closed as often as
     * opened is CUDA_ERROR_INVALID_VALUE (guess). */
    d = dalloc_at((uintptr_t)dptr, D_OPENED);
    if (!d) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (--d->refs == 0)
        dalloc_unlink_free(d);
out:
    sim_unlock();
    return rc;
}
