/* Memory pools. Each pool is one memfd (MFD_CLOEXEC) of a fixed, sparse
 * capacity, mapped MAP_SHARED in full: page 0 holds a header {magic, pool
 * uid, owner GPU (physical index and UUID, or host), capacity}, the data
 * area follows. Creation only reserves the addresses (the driver opens no
 * fd then: FACTS.md F28); the memfd replaces that reservation at the first
 * allocation or export. The allocator (first fit, 256-byte aligned, F19)
 * keeps its metadata in the process, never in the memfd. Exporting hands
 * out a new fd on the memfd, without FD_CLOEXEC (F23); importing maps
 * the same memfd, so the bytes an exporter writes are the bytes an
 * importer reads. */
#include "sim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long an imported pool's destroy lets other threads in first: an
 * import of that pool meanwhile aborts, as the driver crashed (F47). */
#define SIM_DESTROY_WINDOW_US 20

#define SIM_POOL_MAGIC 0x504f4f4cu          /* "POOL", the handle */
#define SIM_POOL_HDR_MAGIC 0x4c4f4f504d495343ull /* "CSIMPOOL" */
#define SIM_POOL_HDR_VERSION 1
#define SIM_PTR_EXPORT_MAGIC 0x5054524558504f52ull /* export data */
#define SIM_POOL_ALIGN 256
/* reserved at a pool's first small allocation (FACTS.md F19) */
#define SIM_POOL_CHUNK ((size_t)32 << 20)

struct sim_pool_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t phys;          /* SIM_PHYS_HOST for a pinned host pool */
    uint64_t uid;
    uint64_t capacity;     /* data bytes */
    uint64_t data_offset;  /* SIM_PAGE */
    uint32_t loc_type;
    uint32_t handle_types;
    CUuuid uuid;           /* owner GPU */
};

/* The first 48 of the 64 bytes, the same for every export of a pointer;
 * the rest is left as the caller had it (FACTS.md F25). */
struct sim_ptr_export {
    uint64_t magic;
    uint64_t uid;
    uint64_t offset;
    uint64_t size;
    uint64_t reserved; /* 0 */
    uint64_t zero;
};
_Static_assert(sizeof(struct sim_ptr_export) == 48, "pointer export data layout");
_Static_assert(sizeof(struct sim_ptr_export) <= sizeof(CUmemPoolPtrExportData),
               "pointer export data fits");

struct sim_block { /* exporter: every block, in offset order */
    size_t off, size;
    size_t req; /* bytes asked for (USED_MEM counts these) */
    int used;
    uint64_t id; /* BUFFER_ID */
    int dev;     /* the allocating stream's device (DEVICE_ORDINAL, host pools) */
    struct sim_block *prev, *next;
};

struct sim_import { /* importer: imported pointers */
    size_t off, size; /* size: the bytes the exporter asked for */
    uint64_t id;      /* BUFFER_ID */
    int dev;          /* the importing context's device */
    struct sim_import *next;
};

struct CUmemPoolHandle_st {
    uint32_t magic;
    int destroyed; /* handle gone; freed once nothing is outstanding */
    int imported;
    int dev;       /* local ordinal of the owner GPU, -1 for host */
    int phys;      /* physical owner GPU, SIM_PHYS_HOST for host */
    CUmemLocationType loc_type;
    unsigned int handle_types;
    int fd;        /* -1 until the first allocation or export; for a pool
                      that cannot export an fd, always */
    int materialized; /* memory behind the reservation (pool_materialize) */
    unsigned char *map;
    size_t map_size;
    unsigned char *base; /* data area */
    size_t capacity;
    uint64_t uid;
    int exported; /* exported with cuMemPoolExportToShareableHandle */
    int nimports;  /* imported: the imports this handle counts (F47) */
    int destroying; /* imported: threads inside its cuMemPoolDestroy */
    int imported_again; /* its fd stays open for good once released (F47) */
    dev_t src_dev; /* imported: the exporter's memfd it maps */
    ino_t src_ino;
    struct sim_block *blocks;
    struct sim_import *imports;
    size_t nlive; /* allocations or imported pointers outstanding */
    size_t nunretired; /* imported pointers freed that no synchronize has
                        * passed since (FACTS.md F46): they keep a destroyed
                        * pool */
    unsigned char access[SIM_MAX_GPUS];
    int reuse[3];
    uint64_t release_threshold;
    uint64_t used, used_high, reserved, reserved_high;
    struct CUmemPoolHandle_st *next;
};

static struct CUmemPoolHandle_st *sim_pools;

static struct CUmemPoolHandle_st *find_pool(CUmemoryPool h)
{
    for (struct CUmemPoolHandle_st *p = sim_pools; p; p = p->next)
        if (p == h && !p->destroyed)
            return p;
    return NULL;
}

/* Pool (live or waiting to be freed) whose data area holds address a. */
static struct CUmemPoolHandle_st *pool_of(uintptr_t a)
{
    for (struct CUmemPoolHandle_st *p = sim_pools; p; p = p->next)
        if (a >= (uintptr_t)p->base && a - (uintptr_t)p->base < p->capacity)
            return p;
    return NULL;
}

static void pool_release(struct CUmemPoolHandle_st *p)
{
    struct CUmemPoolHandle_st **pp;

    for (pp = &sim_pools; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    while (p->blocks) {
        struct sim_block *b = p->blocks;
        p->blocks = b->next;
        free(b);
    }
    while (p->imports) {
        struct sim_import *i = p->imports;
        p->imports = i->next;
        free(i);
    }
    if (p->map)
        munmap(p->map, p->map_size);
    if (p->fd >= 0 && !p->imported_again) /* F47: the driver keeps it */
        close(p->fd);
    p->magic = 0;
    free(p);
}

/* A destroyed pool goes once nothing keeps it: no allocation or import
 * outstanding, no freed import waiting for a synchronize (FACTS.md F46).
 * Under the lock. */
static void release_if_done_locked(struct CUmemPoolHandle_st *p)
{
    if (p->destroyed && p->nlive == 0 && p->nunretired == 0)
        pool_release(p);
}

void sim_pool_retire_locked(void)
{
    struct CUmemPoolHandle_st *p = sim_pools, *next;

    for (; p; p = next) {
        next = p->next;
        p->nunretired = 0;
        release_if_done_locked(p);
    }
}

static void link_pool(struct CUmemPoolHandle_st *p)
{
    p->next = sim_pools;
    sim_pools = p;
}

/* ---- accounting ---------------------------------------------------------- */

static size_t live_extent(const struct CUmemPoolHandle_st *p)
{
    size_t end = 0;

    for (const struct sim_block *b = p->blocks; b; b = b->next)
        if (b->used && b->off + b->size > end)
            end = b->off + b->size;
    end = sim_round_up(end, SIM_POOL_CHUNK);
    return end < p->capacity ? end : p->capacity;
}

/* Reserved memory grows by 32 MiB chunks to cover the live blocks, and is
 * given back (down to the release threshold) when blocks are freed: work
 * is synchronous, so every free is also the next synchronisation point. */
static void update_reserved(struct CUmemPoolHandle_st *p, int after_free)
{
    uint64_t need = live_extent(p), keep = need, old = p->reserved;

    if (!after_free) {
        if (need > p->reserved)
            p->reserved = need;
    } else {
        uint64_t floor = p->release_threshold >= old
                             ? old
                             : p->release_threshold / SIM_POOL_CHUNK *
                                   SIM_POOL_CHUNK;
        if (floor > keep)
            keep = floor;
        /* Counted as given back, but the bytes stay: an importer still
         * mapping a freed block reads what was there (FACTS.md F30). */
        if (keep < old)
            p->reserved = keep;
    }
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    if (p->used > p->used_high)
        p->used_high = p->used;
}

/* ---- allocator ----------------------------------------------------------- */

static int block_alloc(struct CUmemPoolHandle_st *p, size_t size, int dev,
                       size_t *off_out)
{
    size_t need;

    if (size > p->capacity)
        return -1;
    need = sim_round_up(size, SIM_POOL_ALIGN);
    for (struct sim_block *b = p->blocks; b; b = b->next) {
        if (b->used || b->size < need)
            continue;
        if (b->size > need) {
            struct sim_block *rest = calloc(1, sizeof(*rest));
            if (!rest)
                return -2;
            rest->off = b->off + need;
            rest->size = b->size - need;
            rest->prev = b;
            rest->next = b->next;
            if (b->next)
                b->next->prev = rest;
            b->next = rest;
            b->size = need;
        }
        b->used = 1;
        b->req = size;
        b->id = sim_next_buffer_id();
        b->dev = dev;
        *off_out = b->off;
        p->used += size;
        p->nlive++;
        return 0;
    }
    return -1;
}

static struct sim_block *block_at(struct CUmemPoolHandle_st *p, size_t off)
{
    for (struct sim_block *b = p->blocks; b; b = b->next)
        if (b->off == off && b->used)
            return b;
    return NULL;
}

static void block_free(struct CUmemPoolHandle_st *p, struct sim_block *b)
{
    b->used = 0;
    p->used -= b->req;
    p->nlive--;
    if (b->next && !b->next->used) {
        struct sim_block *n = b->next;
        b->size += n->size;
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
        free(n);
    }
    if (b->prev && !b->prev->used) {
        struct sim_block *q = b->prev;
        q->size += b->size;
        q->next = b->next;
        if (b->next)
            b->next->prev = q;
        free(b);
    }
}

/* ---- range check for copies, pointer queries ------------------------------ */

/* The allocation of p holding a (the bytes asked for: what the pool's
 * USED_MEM counts and what cuMemGetAddressRange reports, guess), as
 * [*start, *start + *len) offsets, and its id. 0 when a is in none. */
struct pool_alloc {
    size_t start, len; /* offsets in the data area */
    uint64_t id;
    int dev;
};

static int alloc_at(const struct CUmemPoolHandle_st *p, uintptr_t a,
                    struct pool_alloc *out)
{
    size_t off = (size_t)(a - (uintptr_t)p->base);

    if (!p->imported) {
        for (const struct sim_block *b = p->blocks; b; b = b->next)
            if (b->used && off >= b->off && off - b->off < b->req) {
                out->start = b->off;
                out->len = b->req;
                out->id = b->id;
                out->dev = b->dev;
                return 1;
            }
        return 0;
    }
    for (const struct sim_import *i = p->imports; i; i = i->next)
        if (off >= i->off && off - i->off < i->size) {
            out->start = i->off;
            out->len = i->size;
            out->id = i->id;
            out->dev = i->dev;
            return 1;
        }
    return 0;
}

/* Whether local device dev may touch p's memory: the owner always, a
 * peer with read-write access set (cuMemPoolSetAccess, by this process
 * for an imported pool). Pinned host pools: any device (not modelled). */
static int device_may_use(const struct CUmemPoolHandle_st *p, int dev)
{
    return p->dev < 0 || dev < 0 || dev == p->dev ||
           p->access[dev] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

enum sim_range sim_pool_range(uintptr_t a, size_t n, int dev, int dev_side)
{
    struct CUmemPoolHandle_st *p = pool_of(a);
    struct pool_alloc al;

    if (!p)
        return SIM_RANGE_UNKNOWN;
    if (!alloc_at(p, a, &al) ||
        n > al.start + al.len - (size_t)(a - (uintptr_t)p->base))
        return SIM_RANGE_BAD;
    /* An imported pinned host pool's pointer as the device side of a copy
     * (FACTS.md F31 for DtoH; HtoD by analogy, not measured) */
    if (dev_side && p->imported && p->dev < 0)
        return SIM_RANGE_BAD;
    /* Used from a device without access: CUDA_ERROR_INVALID_VALUE for the
     * copy (a choice: F21 does not say which error). */
    return device_may_use(p, dev) ? SIM_RANGE_OK : SIM_RANGE_BAD;
}

/* What the driver says of pool pointers (FACTS.md F34, F37). */
int sim_pool_info(uintptr_t a, int dev, struct sim_ptr_info *out)
{
    struct CUmemPoolHandle_st *p = pool_of(a);
    struct pool_alloc al;
    size_t chunk;

    if (!p || !alloc_at(p, a, &al))
        return 0;
    memset(out, 0, sizeof(*out));
    out->kind = SIM_PTR_POOL;
    out->base = (uintptr_t)p->base + al.start;
    out->size = out->range_size = al.len;
    out->host = p->dev < 0;
    /* a pinned host pool's: no address range on the exporter (its
     * importer has one), RANGE_START_ADDR 0 on both, no device pointer on
     * the exporter */
    out->no_range = out->host && !p->imported;
    out->range_base = out->host ? 0 : out->base;
    out->no_devptr = out->host && !p->imported;
    /* the 32 MiB the pool reserves at a time */
    chunk = al.start / SIM_POOL_CHUNK * SIM_POOL_CHUNK;
    out->map_base = (uintptr_t)p->base + chunk;
    out->map_size = p->capacity - chunk < SIM_POOL_CHUNK ? p->capacity - chunk
                                                         : SIM_POOL_CHUNK;
    out->dev = p->dev >= 0 ? p->dev : al.dev;
    out->ctx = NULL;
    out->pool = p;
    out->id = al.id;
    out->handle_types = p->imported ? 0 : p->handle_types;
    out->access = device_may_use(p, dev) ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                                         : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
    return 1;
}

/* ---- entry points ---------------------------------------------------------- */

static int is_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static struct CUmemPoolHandle_st *pool_new(void)
{
    struct CUmemPoolHandle_st *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->magic = SIM_POOL_MAGIC;
    p->fd = -1;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    return p;
}

/* Memory where a pool's addresses were reserved: a pool that can export
 * a POSIX fd gets a memfd, another only its reservation made writable.
 * Its fds as the driver's (FACTS.md F28), but for an IPC pool that
 * allocates before its export: the sim's memfd holds the pool's bytes from
 * the first allocation, so there it is +1 at the allocation (+2 once
 * exported, as the driver). Locked. */
static CUresult pool_materialize(struct CUmemPoolHandle_st *p)
{
    struct sim_pool_hdr hdr;
    int fd = -1;

    if (p->materialized)
        return CUDA_SUCCESS;
    if (!(p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        if (mprotect(p->map, p->map_size, PROT_READ | PROT_WRITE) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
    } else if ((fd = memfd_create("cucore-sim-pool", MFD_CLOEXEC)) < 0) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    } else if (ftruncate(fd, (off_t)p->map_size) != 0 ||
               mmap(p->map, p->map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                    fd, 0) == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(&hdr, 0, sizeof(hdr));
    hdr.magic = SIM_POOL_HDR_MAGIC;
    hdr.version = SIM_POOL_HDR_VERSION;
    hdr.phys = p->phys;
    hdr.uid = p->uid;
    hdr.capacity = p->capacity;
    hdr.data_offset = SIM_PAGE;
    hdr.loc_type = (uint32_t)p->loc_type;
    hdr.handle_types = p->handle_types;
    if (p->phys != SIM_PHYS_HOST)
        hdr.uuid = sim.phys[p->phys].uuid;
    memcpy(p->map, &hdr, sizeof(hdr));
    p->fd = fd;
    p->materialized = 1;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool,
                                         const CUmemPoolProps *poolProps)
{
    struct CUmemPoolHandle_st *p;
    int dev = -1, phys = SIM_PHYS_HOST;
    size_t cap;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolCreate);
    if (rc)
        return rc;
    if (!pool || !poolProps)
        return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return poolProps->allocType == CU_MEM_ALLOCATION_TYPE_INVALID ||
                       poolProps->allocType >= CU_MEM_ALLOCATION_TYPE_MAX
                   ? CUDA_ERROR_INVALID_VALUE
                   : CUDA_ERROR_NOT_SUPPORTED;
    if (poolProps->win32SecurityAttributes ||
        !is_zero(poolProps->reserved, sizeof(poolProps->reserved)))
        return CUDA_ERROR_INVALID_VALUE;
    /* fabric pools are created, their export refused (FACTS.md F22) */
    if ((unsigned)poolProps->handleTypes &
        ~(unsigned)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
                    CU_MEM_HANDLE_TYPE_FABRIC))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (poolProps->usage)
        return CUDA_ERROR_NOT_SUPPORTED;
    switch (poolProps->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!sim_dev_valid(poolProps->location.id))
            return CUDA_ERROR_INVALID_VALUE; /* FACTS.md F19 */
        dev = poolProps->location.id;
        phys = sim.vis[dev];
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
        /* cuMemPoolCreate's documentation: not IPC capable */
        if (poolProps->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
            return CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return CUDA_ERROR_INVALID_VALUE; /* documented so for pools */
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (poolProps->location.id < 0 || poolProps->location.id > 1)
            return CUDA_ERROR_INVALID_VALUE;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    cap = poolProps->maxSize ? sim_round_up(poolProps->maxSize, SIM_PAGE)
                             : sim.pool_bytes;
    if (poolProps->maxSize > ((size_t)1 << 44))
        return CUDA_ERROR_OUT_OF_MEMORY;

    p = pool_new();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->dev = dev;
    p->phys = phys;
    p->loc_type = poolProps->location.type;
    p->handle_types = (unsigned)poolProps->handleTypes;
    p->capacity = cap;
    p->map_size = SIM_PAGE + cap;
    p->uid = sim_random64();
    if (dev >= 0)
        p->access[dev] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    p->blocks = calloc(1, sizeof(*p->blocks));
    if (!p->blocks)
        goto fail;
    /* Addresses only: pool_materialize maps the memfd over them. */
    p->map = mmap(NULL, p->map_size, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p->map == MAP_FAILED) {
        p->map = NULL;
        goto fail;
    }
    p->base = p->map + SIM_PAGE;
    p->blocks->off = 0;
    p->blocks->size = cap;

    sim_lock();
    link_pool(p);
    *pool = p;
    sim_unlock();
    return CUDA_SUCCESS;
fail:
    pool_release(p); /* not linked: only frees */
    return CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
    struct CUmemPoolHandle_st *p;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolDestroy);
    if (rc)
        return rc;
    sim_lock();
    p = find_pool(pool);
    if (p && p->imported) { /* a window for an import to race it (F47) */
        p->destroying++;
        sim_unlock();
        usleep(SIM_DESTROY_WINDOW_US);
        sim_lock();
        p->destroying--;
    }
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (p->imported && --p->nimports > 0) {
        /* another import of it still counts (FACTS.md F47) */
    } else {
        /* Outstanding allocations keep the memory until they are freed,
         * as the driver documents. */
        p->destroyed = 1;
        release_if_done_locked(p);
    }
    sim_unlock();
    return rc;
}

/* Access as the driver answers it (FACTS.md F20): a host location on a
 * device pool, or a location of no known type, is CUDA_ERROR_NOT_SUPPORTED;
 * on a pinned host pool a host location is taken (and changes nothing
 * here: the host's access to its own memory) and an unknown type is
 * CUDA_ERROR_INVALID_VALUE. */
static int host_location(CUmemLocationType t)
{
    return t == CU_MEM_LOCATION_TYPE_HOST || t == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
           t == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

static CUresult check_access_desc(const struct CUmemPoolHandle_st *p,
                                  const CUmemAccessDesc *d)
{
    if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
        if (p->dev >= 0)
            return CUDA_ERROR_NOT_SUPPORTED;
        if (!host_location(d->location.type))
            return CUDA_ERROR_INVALID_VALUE;
        /* read-only or none for the host on host memory: not seen */
        return d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CUDA_SUCCESS
                                                              : CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!sim_dev_valid(d->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    /* read-only is not supported for pools, and the owner cannot drop its
     * access (FACTS.md F20) */
    if (d->flags == CU_MEM_ACCESS_FLAGS_PROT_READ)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    if (d->location.id == p->dev &&
        d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_DEVICE;
    /* a device that cannot reach the owner (CUCORE_SIM_NO_PEER): guess */
    if (p->dev >= 0 && d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
        !sim_peer_ok(d->location.id, p->dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool,
                                            const CUmemAccessDesc *map,
                                            size_t count)
{
    struct CUmemPoolHandle_st *p;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolSetAccess);
    if (rc)
        return rc;
    if (count && !map)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    p = find_pool(pool);
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = 0; i < count && rc == CUDA_SUCCESS; i++)
        rc = check_access_desc(p, &map[i]);
    if (rc == CUDA_SUCCESS)
        for (size_t i = 0; i < count; i++)
            if (map[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE)
                p->access[map[i].location.id] = (unsigned char)map[i].flags;
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags,
                                            CUmemoryPool memPool,
                                            CUmemLocation *location)
{
    struct CUmemPoolHandle_st *p;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolGetAccess);
    if (rc)
        return rc;
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    p = find_pool(memPool);
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (!sim_dev_valid(location->id))
            rc = CUDA_ERROR_INVALID_VALUE; /* FACTS.md F20 */
        else
            *flags = (CUmemAccess_flags)p->access[location->id];
    } else if (location->type == CU_MEM_LOCATION_TYPE_HOST ||
               location->type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
        /* the host: read-write on a host pool, none on a device pool */
        *flags = p->dev < 0 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                            : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool,
                                               CUmemPool_attribute attr,
                                               void *value)
{
    struct CUmemPoolHandle_st *p;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolSetAttribute);
    if (rc)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    p = find_pool(pool);
    if (!p || p->imported) { /* imported: as cuMemPoolGetAttribute */
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] =
            *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->release_threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p->reserved_high = p->reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p->used_high = p->used;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE; /* read-only or unknown */
        break;
    }
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool,
                                               CUmemPool_attribute attr,
                                               void *value)
{
    struct CUmemPoolHandle_st *p;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolGetAttribute);
    if (rc)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    p = find_pool(pool);
    /* An imported pool has no attributes (FACTS.md F27). */
    if (!p || p->imported) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value =
            p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = p->release_threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *(cuuint64_t *)value = p->reserved;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = p->reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = p->used;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = p->used_high;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemPoolExportToShareableHandle(
    void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType,
    unsigned long long flags)
{
    struct CUmemPoolHandle_st *p;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolExportToShareableHandle);
    if (rc)
        return rc;
    if (!handle_out || flags != 0 ||
        (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
         handleType != CU_MEM_HANDLE_TYPE_FABRIC))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    p = find_pool(pool);
    if (!p || p->imported || !(p->handle_types & (unsigned)handleType)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (handleType == CU_MEM_HANDLE_TYPE_FABRIC) {
        rc = CUDA_ERROR_NOT_PERMITTED; /* no IMEX channel (FACTS.md F22) */
    } else if ((rc = pool_materialize(p)) == CUDA_SUCCESS) {
        /* The caller owns it. Not close-on-exec (FACTS.md F23). */
        int fd = fcntl(p->fd, F_DUPFD, 0);
        if (fd < 0) {
            rc = CUDA_ERROR_OPERATING_SYSTEM;
        } else {
            *(int *)handle_out = fd;
            p->exported = 1;
        }
    }
    sim_unlock();
    return rc;
}

/* A pool this process imported already from the memfd st describes: its
 * handle again, the import counted (FACTS.md F47). 1 if so (sim lock). */
static int import_again_locked(const struct stat *st, CUmemoryPool *out)
{
    for (struct CUmemPoolHandle_st *p = sim_pools; p; p = p->next)
        if (p->imported && !p->destroyed && p->src_dev == st->st_dev &&
            p->src_ino == st->st_ino) {
            if (p->destroying) {
                fprintf(stderr, "sim: cuMemPoolImportFromShareableHandle of a pool "
                        "another thread is destroying; the real driver crashes "
                        "(sim/FACTS.md F47)\n");
                abort();
            }
            p->nimports++;
            p->imported_again = 1;
            *out = p;
            return 1;
        }
    return 0;
}

SIM_API CUresult CUDAAPI cuMemPoolImportFromShareableHandle(
    CUmemoryPool *pool_out, void *handle, CUmemAllocationHandleType handleType,
    unsigned long long flags)
{
    struct CUmemPoolHandle_st *p;
    struct sim_pool_hdr hdr;
    struct stat st;
    int fd = (int)(intptr_t)handle, dev = -1;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolImportFromShareableHandle);
    if (rc)
        return rc;
    if (!pool_out || flags != 0 ||
        handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* The fd stays the caller's: it is read, then dup'ed. */
    /* An fd that is not a pool's: CUDA_ERROR_UNKNOWN (FACTS.md F23). */
    if (fstat(fd, &st) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)SIM_PAGE ||
        pread(fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
        return CUDA_ERROR_UNKNOWN;
    if (hdr.magic != SIM_POOL_HDR_MAGIC ||
        hdr.version != SIM_POOL_HDR_VERSION || hdr.data_offset != SIM_PAGE ||
        hdr.capacity == 0 ||
        hdr.capacity != (uint64_t)st.st_size - SIM_PAGE)
        return CUDA_ERROR_UNKNOWN;
    sim_lock();
    if (hdr.phys != SIM_PHYS_HOST) {
        dev = sim_uuid_to_local(&hdr.uuid);
        if (dev < 0) {
            sim_unlock();
            return CUDA_ERROR_INVALID_DEVICE; /* owner GPU not visible */
        }
    }
    if (import_again_locked(&st, pool_out)) {
        sim_unlock();
        return CUDA_SUCCESS;
    }
    sim_unlock();

    p = pool_new();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->imported = 1;
    p->nimports = 1;
    p->src_dev = st.st_dev;
    p->src_ino = st.st_ino;
    p->dev = dev;
    p->loc_type = dev >= 0 ? CU_MEM_LOCATION_TYPE_DEVICE
                           : (CUmemLocationType)hdr.loc_type;
    p->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p->capacity = (size_t)hdr.capacity;
    p->map_size = (size_t)st.st_size;
    p->uid = hdr.uid;
    if (dev >= 0)
        p->access[dev] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    p->materialized = 1; /* the exporter's memfd, mapped below */
    p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (p->fd < 0) {
        pool_release(p);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    p->map = mmap(NULL, p->map_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                  p->fd, 0);
    if (p->map == MAP_FAILED) {
        p->map = NULL;
        pool_release(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->base = p->map + SIM_PAGE;
    sim_lock();
    if (import_again_locked(&st, pool_out)) { /* another thread's, meanwhile */
        sim_unlock();
        pool_release(p);
        return CUDA_SUCCESS;
    }
    link_pool(p);
    *pool_out = p;
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemPoolExportPointer(
    CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    struct CUmemPoolHandle_st *p;
    struct sim_block *b;
    struct sim_ptr_export d;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolExportPointer);
    if (rc)
        return rc;
    if (!shareData_out)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    p = pool_of((uintptr_t)ptr);
    b = p && !p->imported && !p->destroyed
            ? block_at(p, (size_t)((uintptr_t)ptr - (uintptr_t)p->base))
            : NULL;
    /* refused until the pool itself has been exported (FACTS.md F24) */
    if (!b || !p->exported) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        memset(&d, 0, sizeof(d));
        d.magic = SIM_PTR_EXPORT_MAGIC;
        d.uid = p->uid;
        d.offset = b->off;
        d.size = b->req;
        memcpy(shareData_out, &d, sizeof(d)); /* 48 bytes (FACTS.md F25) */
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemPoolImportPointer(
    CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData)
{
    struct CUmemPoolHandle_st *p;
    struct sim_ptr_export d;
    struct sim_import *imp;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemPoolImportPointer);
    if (rc)
        return rc;
    if (!ptr_out || !shareData)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&d, shareData, sizeof(d)); /* what export wrote; serial ignored */
    sim_lock();
    p = find_pool(pool);
    if (!p || !p->imported || d.magic != SIM_PTR_EXPORT_MAGIC ||
        d.uid != p->uid || d.size == 0 || d.offset % SIM_POOL_ALIGN != 0 ||
        d.offset >= p->capacity || d.size > p->capacity - d.offset) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    /* cuda.core's account of the driver (its IPC pointer cache, written for
     * NVIDIA bug 5570902): a second import of a pinned host allocation is
     * CUDA_ERROR_ALREADY_MAPPED; one of device memory gives the same
     * pointer again, and the first free unmaps it for both. */
    for (imp = p->imports; imp; imp = imp->next)
        if (imp->off == d.offset)
            break;
    if (imp && p->dev < 0) {
        rc = CUDA_ERROR_ALREADY_MAPPED;
        goto out;
    }
    imp = calloc(1, sizeof(*imp));
    if (!imp) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    imp->off = (size_t)d.offset;
    imp->size = (size_t)d.size;
    imp->id = sim_next_buffer_id();
    {
        struct CUctx_st *cur;
        imp->dev = sim_ctx_current(&cur) == CUDA_SUCCESS ? cur->dev : 0;
    }
    imp->next = p->imports;
    p->imports = imp;
    p->nlive++;
    *ptr_out = (CUdeviceptr)(uintptr_t)(p->base + imp->off);
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr,
                                                 size_t bytesize,
                                                 CUmemoryPool pool,
                                                 CUstream hStream)
{
    struct CUmemPoolHandle_st *p;
    struct CUctx_st *ctx;
    size_t off;
    int r;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemAllocFromPoolAsync);
    if (rc)
        return rc;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    rc = sim_stream_check(hStream, &ctx);
    if (rc)
        goto out;
    p = find_pool(pool);
    if (!p || p->imported) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (bytesize == 0) { /* the driver accepts it: a NULL pointer here */
        *dptr = 0;
        goto out;
    }
    rc = pool_materialize(p);
    if (rc)
        goto out;
    r = block_alloc(p, bytesize, ctx->dev, &off);
    if (r != 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    update_reserved(p, 0);
    *dptr = (CUdeviceptr)(uintptr_t)(p->base + off);
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    struct CUmemPoolHandle_st *p;
    struct CUctx_st *ctx;
    size_t off;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemFreeAsync);
    if (rc)
        return rc;
    sim_lock();
    rc = sim_stream_check(hStream, &ctx);
    if (rc || dptr == 0) /* freeing NULL succeeds (FACTS.md F19) */
        goto out;
    p = pool_of((uintptr_t)dptr);
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    off = (size_t)((uintptr_t)dptr - (uintptr_t)p->base);
    if (!p->imported) {
        struct sim_block *b = block_at(p, off);
        if (!b) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        block_free(p, b);
        update_reserved(p, 1);
    } else {
        struct sim_import **ip = &p->imports;
        int found = 0;
        /* every import of that pointer goes (see cuMemPoolImportPointer) */
        while (*ip) {
            struct sim_import *imp = *ip;
            if (imp->off != off) {
                ip = &imp->next;
                continue;
            }
            *ip = imp->next;
            free(imp);
            p->nlive--;
            p->nunretired++;
            found = 1;
        }
        if (!found) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    }
    release_if_done_locked(p);
out:
    sim_unlock();
    return rc;
}
