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
 * a trailing page {magic, version, physical GPU, uid, chunk size, live id,
 * owner UUID}, mapped over the same addresses, and its fd closed: exporting
 * costs no fd (FACTS.md F35). The name goes
 * when the chunk's last block is freed, its context is released or the
 * process exits; a process killed before that leaves it, and the next
 * export of a chunk (in any process) removes the names of processes that
 * are gone.
 *
 * A process is alive while it holds the lock of its live file,
 * /dev/shm/cucore-sim-ipc-live-<live id>, made with its first chunk file,
 * gone with its last, and locked (flock) through a mapping that a forked
 * child does not inherit: no fd, and no pid, which another PID namespace
 * does not see (F48).
 *
 * A handle is bytes only, as the driver's: {magic, version, physical GPU,
 * exporter pid, 0, chunk uid, offset, size, owner UUID, live id}. It names
 * a place, not an allocation, as the driver's does (FACTS.md F35, F36). The
 * importer opens the name (same user, as CUDA IPC needs), checks the uid,
 * live id and extent against the chunk's page and that the live file is
 * locked, maps the block's pages and closes the fds: an opened handle
 * costs no fd (F36). A chunk that is gone (all its blocks freed, its
 * exporter gone) opens nothing. */
#include "sim_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_IPC_MAGIC 0x4d435049u /* "IPCM" */
#define SIM_IPC_VERSION 2
#define SIM_ALLOC_MAX ((size_t)1 << 44)
#define SIM_CHUNK ((size_t)2 << 20)
#define SIM_ALLOC_ALIGN ((size_t)512)
#define SIM_SHM_DIR "/dev/shm/"
#define SIM_SHM_PREFIX "cucore-sim-ipc-"
#define SIM_LIVE_PREFIX SIM_SHM_PREFIX "live-"

enum dkind { D_MEMALLOC, D_MANAGED, D_HOST, D_OPENED };

struct sim_chunk {
    enum dkind kind;
    struct CUctx_st *ctx;
    uintptr_t base;
    size_t size;
    uint64_t uid;  /* its shared file's, once a block was exported; else 0 */
    long owner;    /* the pid that made the file: a name only */
    uint64_t live; /* the live id of the process that made the file */
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
    uint64_t peer_live;
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
    uint64_t live; /* the maker's live file */
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
    uint64_t live;
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

static void chunk_unshare(struct sim_chunk *c);

static void chunk_destroy(struct sim_chunk *c)
{
    struct sim_chunk **pp;

    for (pp = &sim_chunks; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    munmap((void *)c->base, c->size);
    chunk_unshare(c);
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

/* This process's live id, the mapping that holds its lock, and its
 * chunks with files: none before its first export, after its last such
 * chunk went, and in a forked child (the mapping is MADV_DONTFORK: the
 * child inherits no lock). */
static uint64_t sim_live_id;
static void *sim_live_map;
static size_t sim_live_chunks;

static void live_path(char *out, size_t cap, uint64_t id)
{
    snprintf(out, cap, SIM_SHM_DIR SIM_LIVE_PREFIX "%016llx", (unsigned long long)id);
}

/* The live file goes once no chunk file of ours names it. Locked. */
static void live_release(void)
{
    char path[96];

    if (!sim_live_id || sim_live_chunks)
        return;
    live_path(path, sizeof(path), sim_live_id);
    unlink(path);
    munmap(sim_live_map, SIM_PAGE); /* and its lock */
    sim_live_id = 0;
    sim_live_map = NULL;
}

/* Chunk c's file goes, if this process made it (not a forked child's
 * parent). Locked. */
static void chunk_unshare(struct sim_chunk *c)
{
    char path[96];

    if (!c->uid || c->live != sim_live_id)
        return;
    shm_path(path, sizeof(path), c->owner, c->uid);
    unlink(path);
    sim_live_chunks--;
    live_release();
}

/* At exit, this process's shared files go. Locked by the exit path
 * alone. */
static void shm_at_exit(void)
{
    for (struct sim_chunk *c = sim_chunks; c; c = c->next)
        chunk_unshare(c);
}

static void live_atfork_child(void)
{
    sim_live_id = 0; /* the child makes its own at its first export */
    sim_live_map = NULL;
    sim_live_chunks = 0;
}

/* Makes live file id and locks it while this process has chunk files:
 * the lock is held by a mapping, not an fd (exporting costs no fd:
 * FACTS.md F35).
 * 0 on success, 1 when the name is taken or a collector removed it before
 * the lock (try another), -1 on failure. */
static int live_try(uint64_t id)
{
    char path[96];
    struct stat st;
    void *m = MAP_FAILED;
    int fd, r = -1;

    live_path(path, sizeof(path), id);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return errno == EEXIST ? 1 : -1;
    if (flock(fd, LOCK_EX) == 0 && fstat(fd, &st) == 0) {
        if (st.st_nlink == 0)
            r = 1; /* collect_live took it while it was unlocked */
        else
            m = mmap(NULL, SIM_PAGE, PROT_NONE, MAP_SHARED, fd, 0);
    }
    close(fd); /* the mapping keeps the file and its lock */
    if (m != MAP_FAILED && madvise(m, SIM_PAGE, MADV_DONTFORK) == 0) {
        sim_live_id = id;
        sim_live_map = m;
        return 0;
    }
    if (m != MAP_FAILED)
        munmap(m, SIM_PAGE);
    if (r < 0)
        unlink(path);
    return r;
}

/* This process's live id, made at its first export of a chunk while it
 * has none. Locked. */
static CUresult live_ensure(void)
{
    static int registered;
    int r = 1;

    if (sim_live_id)
        return CUDA_SUCCESS;
    if (!registered) {
        registered = 1;
        atexit(shm_at_exit);
        pthread_atfork(NULL, NULL, live_atfork_child);
    }
    for (int tries = 0; tries < 8 && r == 1; tries++)
        r = live_try(sim_random64());
    return r == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* 1 while the process of live id holds its live file's lock, 0 when it
 * is gone (the lock is free or the file missing), -1 when that cannot be
 * told. A lock, not a pid: an importer in another PID namespace does not
 * see the exporter's pid, and the driver opens there (FACTS.md F48). */
static int live_state(uint64_t id)
{
    char path[96];
    int fd, got;

    live_path(path, sizeof(path), id);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    got = flock(fd, LOCK_SH | LOCK_NB) == 0 ? 0 : errno == EWOULDBLOCK ? 1 : -1;
    close(fd); /* drops a lock it took */
    return got;
}

/* Reads and checks the header page of the chunk file open at fd. */
static int hdr_read(int fd, struct sim_ipc_hdr *hdr)
{
    struct stat st;

    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= (off_t)SIM_PAGE ||
        pread(fd, hdr, sizeof(*hdr), st.st_size - (off_t)SIM_PAGE) != (ssize_t)sizeof(*hdr))
        return -1;
    if (hdr->magic != SIM_IPC_MAGIC || hdr->version != SIM_IPC_VERSION ||
        hdr->size != (uint64_t)st.st_size - SIM_PAGE)
        return -1;
    return 0;
}

/* Removes a live file nobody holds, unlinked under our lock so that a
 * maker that locks it later sees it gone (live_try). */
static void collect_live(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd < 0)
        return;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0)
        unlink(path);
    close(fd);
}

/* Removes a chunk file whose maker is gone. One without a valid header
 * (still being made, or another version's) is left. */
static void collect_chunk(const char *path)
{
    struct sim_ipc_hdr hdr;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), ok;

    if (fd < 0)
        return;
    ok = hdr_read(fd, &hdr) == 0;
    close(fd);
    if (ok && live_state(hdr.live) == 0)
        unlink(path);
}

/* The files of processes that are gone (killed before their exit). */
static void shm_collect(void)
{
    DIR *d = opendir(SIM_SHM_DIR);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        char path[300];
        if (strncmp(e->d_name, SIM_SHM_PREFIX, strlen(SIM_SHM_PREFIX)) != 0)
            continue;
        snprintf(path, sizeof(path), SIM_SHM_DIR "%s", e->d_name);
        if (strncmp(e->d_name, SIM_LIVE_PREFIX, strlen(SIM_LIVE_PREFIX)) == 0)
            collect_live(path);
        else
            collect_chunk(path);
    }
    closedir(d);
}

/* The shared file of chunk c, made at the first export of one of its
 * blocks. Locked. */
static CUresult chunk_materialize(struct sim_chunk *c)
{
    struct sim_ipc_hdr hdr;
    char path[96];
    CUresult rc;
    int fd;

    if (c->uid)
        return CUDA_SUCCESS;
    shm_collect();
    rc = live_ensure();
    if (rc)
        return rc;
    memset(&hdr, 0, sizeof(hdr));
    hdr.magic = SIM_IPC_MAGIC;
    hdr.version = SIM_IPC_VERSION;
    hdr.phys = sim.vis[c->ctx->dev];
    hdr.uid = sim_random64();
    hdr.size = c->size;
    hdr.live = sim_live_id;
    hdr.uuid = sim.phys[hdr.phys].uuid;
    shm_path(path, sizeof(path), (long)getpid(), hdr.uid);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        live_release();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (ftruncate(fd, (off_t)(c->size + SIM_PAGE)) != 0 ||
        pwrite(fd, &hdr, sizeof(hdr), (off_t)c->size) != (ssize_t)sizeof(hdr) ||
        pwrite(fd, (void *)c->base, c->size, 0) != (ssize_t)c->size ||
        mmap((void *)c->base, c->size, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        close(fd);
        unlink(path);
        live_release();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    close(fd); /* the mapping keeps it */
    c->uid = hdr.uid;
    c->owner = (long)getpid();
    c->live = hdr.live;
    sim_live_chunks++;
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
    h.pid = (int32_t)d->chunk->owner; /* a name only: the file's */
    h.uid = d->chunk->uid;
    h.live = d->chunk->live;
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
 * it only reads the exporter's files. */
static CUresult map_handle(const struct sim_ipc_handle *h, struct sim_dalloc *d)
{
    struct sim_ipc_hdr hdr;
    char path[96];
    size_t first, end;
    void *m;
    int fd;

    shm_path(path, sizeof(path), (long)h->pid, h->uid);
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* a killed exporter's file may still be there: its lock is not (F48) */
    if (hdr_read(fd, &hdr) != 0 || hdr.uid != h->uid || hdr.live != h->live ||
        h->offset > hdr.size || h->size > hdr.size - h->offset || live_state(hdr.live) != 1) {
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
        if (d->kind == D_OPENED && d->peer_live == h->live &&
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
        h->pid <= 0 || h->zero != 0 || h->size == 0 || h->uid == 0 || h->live == 0 ||
        h->size > SIM_ALLOC_MAX || h->offset > SIM_ALLOC_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    /* in the process that made it (F36), known by its live id: another
     * PID namespace may give an importer the exporter's pid number */
    if (h->live == sim_live_id)
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
    d->peer_live = h.live;
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
