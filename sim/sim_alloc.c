/* cuMemAlloc, cuMemAllocManaged, cuMemAllocHost and legacy CUDA IPC
 * (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle).
 *
 * Allocations are carved out of 2 MiB chunks, one list of chunks per kind
 * and context, a larger allocation getting a chunk of its own, as the
 * driver carves them (FACTS.md F33). Blocks are
 * 512-byte aligned, first fit over the chunks oldest first (the
 * alignment and the order are guesses). A chunk is an
 * anonymous mapping until a block in it is first exported with
 * cuIpcGetMemHandle: then its bytes are copied into a file
 * /dev/shm/cucore-sim-ipc-<pid>-<uid> (mode 0600) of the chunk's size plus
 * a trailing page {magic, version, physical GPU, uid, chunk size, owner
 * UUID}, mapped over the same addresses, and its fd closed: exporting
 * costs no fd (FACTS.md F35). The name goes
 * when the chunk's last block is freed, its context is released or the
 * process exits; a process killed before that leaves it, and the next
 * export of a chunk (in any process) removes the names of processes that
 * are gone.
 *
 * A handle is bytes only, as the driver's: {magic, version, physical GPU,
 * exporter pid, 0, chunk uid, offset, size, owner UUID}. It names a place,
 * not an allocation, as the driver's does (FACTS.md F35, F36). The
 * importer opens the name (same user, as CUDA IPC needs), checks the uid
 * and the extent against the chunk's page, maps the block's pages and
 * closes the fd: an opened handle costs no fd (F36). A chunk that is gone (all its
 * blocks freed, its exporter gone) opens nothing. */
#include "sim_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_IPC_MAGIC 0x4d435049u /* "IPCM" */
#define SIM_IPC_VERSION 1
#define SIM_ALLOC_MAX ((size_t)1 << 44)
#define SIM_CHUNK ((size_t)2 << 20)
#define SIM_ALLOC_ALIGN ((size_t)512)
#define SIM_SHM_DIR "/dev/shm/"
#define SIM_SHM_PREFIX "cucore-sim-ipc-"

enum dkind { D_MEMALLOC, D_MANAGED, D_HOST, D_OPENED };

struct sim_chunk {
    enum dkind kind;
    struct CUctx_st *ctx;
    uintptr_t base;
    size_t size;
    uint64_t uid; /* its shared file's, once a block was exported; else 0 */
    long owner;   /* the pid that made the file (not a forked child) */
    size_t nblocks;
    struct sim_dalloc *blocks; /* its blocks by offset (their cnext) */
    struct sim_chunk *next;
};

struct sim_dalloc {
    enum dkind kind;
    uintptr_t base;
    size_t size;             /* bytes asked for (the exporter's, opened) */
    struct sim_chunk *chunk; /* NULL when opened */
    int dev;                 /* local ordinal of its GPU (the context's) */
    struct CUctx_st *ctx;    /* where it was allocated or opened */
    uint64_t id;             /* BUFFER_ID */
    /* opened: the exporter's chunk and place, our pages, references */
    long peer_pid;
    uint64_t peer_uid;
    uint64_t peer_off;
    size_t peer_chunk_size;
    void *map;
    size_t map_len;
    int refs;
    struct sim_dalloc *cnext; /* the next block of its chunk, by offset */
    struct sim_dalloc *next;
};

struct sim_ipc_hdr { /* the shared file's trailing page */
    uint64_t magic;
    uint32_t version;
    int32_t phys;
    uint64_t uid;
    uint64_t size;
    CUuuid uuid;
};

struct sim_ipc_handle {
    uint32_t magic;
    uint16_t version;
    int16_t phys;
    int32_t pid;
    int32_t zero;
    uint64_t uid;
    uint64_t offset;
    uint64_t size;
    CUuuid uuid;
};
_Static_assert(sizeof(struct sim_ipc_handle) <= sizeof(CUipcMemHandle),
               "IPC handle layout fits in 64 bytes");

static struct sim_chunk *sim_chunks;
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

static void shm_path(char *out, size_t cap, long pid, uint64_t uid)
{
    snprintf(out, cap, SIM_SHM_DIR SIM_SHM_PREFIX "%ld-%016llx", pid,
             (unsigned long long)uid);
}

static void chunk_destroy(struct sim_chunk *c)
{
    struct sim_chunk **pp;

    for (pp = &sim_chunks; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    munmap((void *)c->base, c->size);
    if (c->uid && c->owner == (long)getpid()) {
        char path[96];
        shm_path(path, sizeof(path), c->owner, c->uid);
        unlink(path);
    }
    free(c);
}

/* d into its chunk's blocks, in offset order. */
static void chunk_insert(struct sim_chunk *c, struct sim_dalloc *d)
{
    struct sim_dalloc **pp = &c->blocks;

    while (*pp && (*pp)->base < d->base)
        pp = &(*pp)->cnext;
    d->cnext = *pp;
    *pp = d;
}

static void chunk_remove(struct sim_chunk *c, struct sim_dalloc *d)
{
    for (struct sim_dalloc **pp = &c->blocks; *pp; pp = &(*pp)->cnext)
        if (*pp == d) {
            *pp = d->cnext;
            return;
        }
}

static void dalloc_unlink_free(struct sim_dalloc *d)
{
    struct sim_dalloc **pp;

    for (pp = &sim_dallocs; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    if (d->kind == D_OPENED) {
        munmap(d->map, d->map_len);
    } else {
        chunk_remove(d->chunk, d);
        if (--d->chunk->nblocks == 0)
            chunk_destroy(d->chunk); /* importers keep their mappings */
    }
    free(d);
}

void sim_allocs_ctx_gone(struct CUctx_st *ctx)
{
    struct sim_dalloc *d, *next;

    for (d = sim_dallocs; d; d = next) {
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
    if (d->chunk) {
        out->map_base = d->chunk->base;
        out->map_size = d->chunk->size;
    } else { /* the exporter's chunk, as the importer sees it */
        out->map_base = d->base - (uintptr_t)d->peer_off;
        out->map_size = d->peer_chunk_size;
    }
    out->host = d->kind == D_HOST;
    out->dev = d->dev;
    out->ctx = d->ctx;
    out->id = d->id;
    out->rdma = d->kind == D_MEMALLOC;
    /* every device reaches these: peer rules are not modelled for legacy
     * allocations */
    out->access = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    return 1;
}

/* ---- the chunk allocator ------------------------------------------------ */

static struct sim_chunk *chunk_new(enum dkind kind, struct CUctx_st *ctx,
                                   size_t size)
{
    struct sim_chunk *c = calloc(1, sizeof(*c));
    void *m;

    if (!c)
        return NULL;
    m = mmap(NULL, size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        free(c);
        return NULL;
    }
    c->kind = kind;
    c->ctx = ctx;
    c->base = (uintptr_t)m;
    c->size = size;
    /* oldest first: a freed place is found again before a newer chunk */
    {
        struct sim_chunk **pp = &sim_chunks;
        while (*pp)
            pp = &(*pp)->next;
        *pp = c;
    }
    return c;
}

/* The first offset in c where need bytes fit between its blocks, or
 * c->size: one walk of its blocks in offset order (first fit, as the
 * driver gives a freed place back; a walk of every allocation for each
 * candidate offset made thousands of allocations cubic). */
static size_t chunk_fit(const struct sim_chunk *c, size_t need)
{
    size_t at = 0;

    for (const struct sim_dalloc *d = c->blocks; d; d = d->cnext) {
        size_t off = d->base - c->base;
        if (off >= at && off - at >= need)
            return at;
        at = sim_round_up(off + d->size, SIM_ALLOC_ALIGN);
    }
    return at <= c->size && c->size - at >= need ? at : c->size;
}

/* Places size bytes in a chunk of (kind, ctx). Locked. */
static CUresult dalloc_new(enum dkind kind, size_t size, struct CUctx_st *ctx,
                           struct sim_dalloc **out)
{
    struct sim_chunk *c = NULL;
    struct sim_dalloc *d;
    size_t off = 0, need = sim_round_up(size, SIM_ALLOC_ALIGN);

    if (size > SIM_ALLOC_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d = calloc(1, sizeof(*d));
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (need <= SIM_CHUNK)
        for (c = sim_chunks; c; c = c->next)
            if (c->kind == kind && c->ctx == ctx && c->size == SIM_CHUNK &&
                (off = chunk_fit(c, need)) < c->size)
                break;
    if (!c) {
        c = chunk_new(kind, ctx, sim_round_up(need, SIM_CHUNK));
        off = 0;
    }
    if (!c) {
        free(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* not cleared: a block reusing a place holds what was there, as the
     * driver's (an importer of the old block sees the new one's bytes) */
    c->nblocks++;
    d->kind = kind;
    d->base = c->base + off;
    d->size = size;
    d->chunk = c;
    d->dev = ctx->dev; /* DEVICE_ORDINAL of host memory too (FACTS.md F37) */
    d->ctx = ctx;
    d->id = sim_next_buffer_id();
    d->next = sim_dallocs;
    sim_dallocs = d;
    chunk_insert(c, d);
    *out = d;
    return CUDA_SUCCESS;
}

/* The common head of the allocation calls: initialised, a current
 * context, a non-NULL output and a non-zero size (cuMemAlloc and
 * cuMemAllocManaged document CUDA_ERROR_INVALID_VALUE for 0; cuMemAllocHost
 * by analogy, not seen). */
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
         * or one freed already (not measured: README.md) */
        if (!d)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            dalloc_unlink_free(d);
    }
    sim_unlock();
    return rc; /* freeing NULL succeeds, as cuMemFreeAsync(0) (FACTS.md F19) */
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

/* At exit, this process's shared files go (not a forked child's: they
 * are its parent's). Locked by the exit path alone. */
static void shm_at_exit(void)
{
    for (struct sim_chunk *c = sim_chunks; c; c = c->next)
        if (c->uid && c->owner == (long)getpid()) {
            char path[96];
            shm_path(path, sizeof(path), c->owner, c->uid);
            unlink(path);
        }
}

static int pid_alive(long pid)
{
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* The names of processes that are gone (killed before their exit). */
static void shm_collect(void)
{
    DIR *d = opendir(SIM_SHM_DIR);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        char path[300];
        long pid;
        if (strncmp(e->d_name, SIM_SHM_PREFIX, strlen(SIM_SHM_PREFIX)) != 0 ||
            sscanf(e->d_name + strlen(SIM_SHM_PREFIX), "%ld-", &pid) != 1 ||
            pid <= 0 || pid_alive(pid))
            continue;
        snprintf(path, sizeof(path), SIM_SHM_DIR "%s", e->d_name);
        unlink(path);
    }
    closedir(d);
}

/* The shared file of chunk c, made at the first export of one of its
 * blocks. Locked. */
static CUresult chunk_materialize(struct sim_chunk *c)
{
    static int once;
    struct sim_ipc_hdr hdr;
    char path[96];
    int fd;

    if (c->uid)
        return CUDA_SUCCESS;
    if (!once) {
        once = 1;
        atexit(shm_at_exit);
    }
    shm_collect();
    memset(&hdr, 0, sizeof(hdr));
    hdr.magic = SIM_IPC_MAGIC;
    hdr.version = SIM_IPC_VERSION;
    hdr.phys = sim.vis[c->ctx->dev];
    hdr.uid = sim_random64();
    hdr.size = c->size;
    hdr.uuid = sim.phys[hdr.phys].uuid;
    shm_path(path, sizeof(path), (long)getpid(), hdr.uid);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)(c->size + SIM_PAGE)) != 0 ||
        pwrite(fd, &hdr, sizeof(hdr), (off_t)c->size) != (ssize_t)sizeof(hdr) ||
        pwrite(fd, (void *)c->base, c->size, 0) != (ssize_t)c->size ||
        mmap((void *)c->base, c->size, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        close(fd);
        unlink(path);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    close(fd); /* the mapping keeps it */
    c->uid = hdr.uid;
    c->owner = (long)getpid();
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
    /* cuMemAlloc memory only; a pointer inside a block names the block
     * (FACTS.md F35) */
    d = dalloc_of((uintptr_t)dptr);
    if (!d || d->kind != D_MEMALLOC) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = chunk_materialize(d->chunk);
    if (rc)
        goto out;
    memset(&h, 0, sizeof(h));
    h.magic = SIM_IPC_MAGIC;
    h.version = SIM_IPC_VERSION;
    h.phys = (int16_t)sim.vis[d->dev];
    h.pid = (int32_t)getpid();
    h.uid = d->chunk->uid;
    h.offset = d->base - d->chunk->base;
    h.size = d->size;
    h.uuid = sim.phys[sim.vis[d->dev]].uuid;
    memset(pHandle, 0, sizeof(*pHandle));
    memcpy(pHandle->reserved, &h, sizeof(h));
out:
    sim_unlock();
    return rc;
}

/* Maps the block a handle names. CUDA_ERROR_INVALID_VALUE when its chunk
 * is not there (the exporter freed every block in it, or is gone): the
 * driver's answer for zeroes and garbage (FACTS.md F36), not measured for
 * these. Not locked:
 * it only reads the exporter's file. */
static CUresult map_handle(const struct sim_ipc_handle *h, struct sim_dalloc *d)
{
    struct sim_ipc_hdr hdr;
    struct stat st;
    char path[96];
    size_t first, end;
    void *m;
    int fd;

    if (!pid_alive(h->pid)) /* killed: its name may still be there */
        return CUDA_ERROR_INVALID_VALUE;
    shm_path(path, sizeof(path), (long)h->pid, h->uid);
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= (off_t)SIM_PAGE ||
        pread(fd, &hdr, sizeof(hdr), st.st_size - (off_t)SIM_PAGE) != (ssize_t)sizeof(hdr) ||
        hdr.magic != SIM_IPC_MAGIC || hdr.version != SIM_IPC_VERSION ||
        hdr.uid != h->uid || hdr.size != (uint64_t)st.st_size - SIM_PAGE ||
        h->offset > hdr.size || h->size > hdr.size - h->offset) {
        close(fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    first = (size_t)h->offset / SIM_PAGE * SIM_PAGE;
    end = sim_round_up((size_t)(h->offset + h->size), SIM_PAGE);
    m = mmap(NULL, end - first, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)first);
    close(fd); /* the mapping keeps the memory */
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d->map = m;
    d->map_len = end - first;
    d->base = (uintptr_t)m + ((size_t)h->offset - first);
    d->peer_chunk_size = (size_t)hdr.size;
    return CUDA_SUCCESS;
}

/* The mapping of the handle's place, if this process has it open. */
static struct sim_dalloc *find_opened(const struct sim_ipc_handle *h)
{
    for (struct sim_dalloc *d = sim_dallocs; d; d = d->next)
        if (d->kind == D_OPENED && d->peer_pid == (long)h->pid &&
            d->peer_uid == h->uid && d->peer_off == h->offset &&
            d->size == h->size)
            return d;
    return NULL;
}

/* Checks a handle's bytes and resolves its GPU here; *dev gets the local
 * ordinal. Locked. */
static CUresult check_handle(const struct sim_ipc_handle *h, int *dev)
{
    /* zeroes or garbage (FACTS.md F36) */
    if (h->magic != SIM_IPC_MAGIC || h->version != SIM_IPC_VERSION ||
        h->pid <= 0 || h->zero != 0 || h->size == 0 || h->uid == 0 ||
        h->size > SIM_ALLOC_MAX || h->offset > SIM_ALLOC_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    /* in the process that made it (F36) */
    if (h->pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;
    *dev = sim_uuid_to_local(&h->uuid);
    if (*dev < 0)
        return CUDA_ERROR_INVALID_DEVICE; /* not measured (README.md) */
    return CUDA_SUCCESS;
}

/* A handle opened already by this context: one more reference, the same
 * pointer (FACTS.md F36; an interior pointer's handle, the same bytes,
 * too). By another
 * context of this process: CUDA_ERROR_INVALID_CONTEXT (guess, from the
 * documented one context per device per other process). Locked. */
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
    struct sim_dalloc *d, tmp;
    int dev = -1;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuIpcOpenMemHandle);
    if (rc)
        return rc;
    /* exactly CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (FACTS.md F36) */
    if (!pdptr || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
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
    memset(&tmp, 0, sizeof(tmp));
    rc = map_handle(&h, &tmp);
    sim_lock();
    if (rc)
        goto out;
    if ((d = find_opened(&h)) != NULL) { /* another thread was quicker */
        munmap(tmp.map, tmp.map_len);
        rc = reopen(d, ctx, pdptr);
        goto out;
    }
    d = calloc(1, sizeof(*d));
    if (!d) {
        munmap(tmp.map, tmp.map_len);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    *d = tmp;
    d->kind = D_OPENED;
    d->size = (size_t)h.size;
    d->dev = dev;
    d->ctx = ctx;
    d->id = sim_next_buffer_id();
    d->peer_pid = (long)h.pid;
    d->peer_uid = h.uid;
    d->peer_off = h.offset;
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
    /* One reference less, unmapped at the last (doc); closing more often
     * than opened is CUDA_ERROR_INVALID_VALUE ("xipc.close-4"), and so
     * (guess) is an interior or unknown pointer. */
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
