/* Virtual memory management. A physical allocation (cuMemCreate) is a
 * memfd of its size plus one trailing page that holds a header {magic,
 * size, owner GPU}, so an importer learns the owner and the size from the
 * fd alone. A reservation is a PROT_NONE anonymous mapping; cuMemMap
 * replaces part of it with a MAP_SHARED mapping of the memfd (PROT_NONE
 * until cuMemSetAccess), cuMemUnmap puts the anonymous PROT_NONE mapping
 * back. A released allocation lives on while it is mapped.
 *
 * The driver maps past the end of a reservation (FACTS.md F40), which is
 * not explained: here such a mapping counts at its whole size for the
 * driver's answers, but only its part inside the reservation is host
 * memory (the addresses past it are not the sim's); a later cuMemMap over
 * that spill, from another reservation, is CUDA_ERROR_INVALID_VALUE
 * (inferred: README.md). */
#include "sim_internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_VMM_HDR_MAGIC 0x43494d4d564d4953ull /* "SIMVMMIC" */
#define SIM_VMM_HDR_VERSION 1
#define SIM_HANDLE_TAG 0x5C1D000000000000ull
#define SIM_HOST_SLOT SIM_MAX_GPUS /* access slot of the host */

struct sim_vmm_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t phys; /* SIM_PHYS_HOST for host memory */
    uint64_t size;
    uint64_t uid;
    CUuuid uuid;
};

struct sim_alloc {
    CUmemGenericAllocationHandle id;
    int fd;
    size_t size;
    int dev; /* local ordinal of the owner, -1 for host */
    CUmemLocation loc; /* as the properties gave it */
    unsigned int handle_types;
    /* references to the handle: cuMemCreate's or the import's, and one
     * per cuMemRetainAllocationHandle; the handle is valid while any is
     * held, the memory while it is held or mapped */
    int refs;
    int nmaps;
    struct sim_alloc *next;
};

struct sim_mapping {
    uintptr_t addr;
    size_t size; /* the allocation's */
    size_t len;  /* of it inside the reservation: what the host maps */
    struct sim_alloc *alloc;
    unsigned char access[SIM_MAX_GPUS + 1];
    int prot;
    uint64_t id; /* BUFFER_ID */
    struct sim_mapping *next; /* address order */
};

struct sim_resv {
    uintptr_t base;
    size_t size;
    struct sim_mapping *maps;
    struct sim_resv *next;
};

static struct sim_alloc *sim_allocs;
static struct sim_resv *sim_resvs;
static uint64_t sim_alloc_ids;

static struct sim_alloc *find_alloc(CUmemGenericAllocationHandle h)
{
    for (struct sim_alloc *a = sim_allocs; a; a = a->next)
        if (a->id == h && a->refs > 0)
            return a;
    return NULL;
}

/* The allocation of h while its memory lives: a handle whose references
 * were all released still names a mapped allocation to the properties
 * query (FACTS.md F42). */
static struct sim_alloc *find_alloc_mapped(CUmemGenericAllocationHandle h)
{
    for (struct sim_alloc *a = sim_allocs; a; a = a->next)
        if (a->id == h && (a->refs > 0 || a->nmaps > 0))
            return a;
    return NULL;
}

static void alloc_maybe_free(struct sim_alloc *a)
{
    struct sim_alloc **pp;

    if (a->refs > 0 || a->nmaps > 0)
        return;
    for (pp = &sim_allocs; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    close(a->fd);
    free(a);
}

static struct sim_resv *resv_of(uintptr_t p)
{
    for (struct sim_resv *r = sim_resvs; r; r = r->next)
        if (p >= r->base && p - r->base < r->size)
            return r;
    return NULL;
}

/* The mappings that exactly tile [p, p+n) in r: the first is returned,
 * *last gets the last. NULL if the range is not tiled by whole mappings. */
static struct sim_mapping *tiling(struct sim_resv *r, uintptr_t p, size_t n,
                                  struct sim_mapping **last)
{
    struct sim_mapping *m, *first = NULL;
    uintptr_t at = p, end;

    if (n == 0 || __builtin_add_overflow(p, n, &end))
        return NULL;
    for (m = r->maps; m; m = m->next) {
        if (!first) {
            if (m->addr == p)
                first = m;
            else
                continue;
        } else if (m->addr != at) {
            return NULL;
        }
        at = m->addr + m->size;
        if (at == end) {
            *last = m;
            return first;
        }
        if (at > end)
            return NULL;
    }
    return NULL;
}

/* Whether [p, end) meets the part of a mapping past its reservation's
 * end: device memory to the driver, nothing the sim may touch. */
static int meets_spill(uintptr_t p, uintptr_t end)
{
    for (const struct sim_resv *r = sim_resvs; r; r = r->next)
        for (const struct sim_mapping *m = r->maps; m; m = m->next)
            if (m->len < m->size && m->addr + m->len < end &&
                m->addr + m->size > p)
                return 1;
    return 0;
}

enum sim_range sim_vmm_range(uintptr_t p, size_t n, int write)
{
    struct sim_resv *r = resv_of(p);
    uintptr_t at = p, end;

    if (__builtin_add_overflow(p, n, &end))
        return r ? SIM_RANGE_BAD : SIM_RANGE_UNKNOWN;
    if (!r)
        return meets_spill(p, end) ? SIM_RANGE_BAD : SIM_RANGE_UNKNOWN;
    for (struct sim_mapping *m = r->maps; m && at < end; m = m->next) {
        if (m->addr + m->len <= at)
            continue;
        if (m->addr > at)
            return SIM_RANGE_BAD; /* a hole */
        if (!(m->prot & (write ? PROT_WRITE : PROT_READ)))
            return SIM_RANGE_BAD;
        at = m->addr + m->len; /* a spill past the reservation: not here */
    }
    return at >= end ? SIM_RANGE_OK : SIM_RANGE_BAD;
}

int sim_vmm_info(uintptr_t p, int dev, struct sim_ptr_info *out)
{
    struct sim_resv *r = resv_of(p);
    int slot = dev >= 0 ? dev : SIM_HOST_SLOT;

    if (!r)
        return 0;
    for (struct sim_mapping *m = r->maps; m; m = m->next) {
        if (p < m->addr || p - m->addr >= m->size)
            continue;
        memset(out, 0, sizeof(*out));
        out->kind = SIM_PTR_VMM;
        out->base = m->addr; /* the mapping (FACTS.md F34) */
        out->size = m->size;
        out->range_base = r->base; /* the reservation (doc, and F37) */
        out->range_size = r->size;
        out->map_base = m->addr;
        out->map_size = m->size;
        out->host = m->alloc->dev < 0;
        out->dev = m->alloc->dev >= 0 ? m->alloc->dev : CU_DEVICE_CPU;
        out->ctx = NULL;
        out->id = m->id;
        out->handle_types = m->alloc->handle_types;
        out->access = m->access[slot] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                          ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                      : m->access[slot] == CU_MEM_ACCESS_FLAGS_PROT_READ
                          ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ
                          : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
        return 1;
    }
    return 0; /* reserved, not mapped: no allocation ("vmm.reserved-unmapped") */
}

/* Location -> access slot, or -1 (with *rc set). */
static int location_slot(const CUmemLocation *loc, CUresult *rc)
{
    switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!sim_dev_valid(loc->id)) {
            *rc = CUDA_ERROR_INVALID_DEVICE;
            return -1;
        }
        return loc->id;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return SIM_HOST_SLOT;
    default:
        *rc = CUDA_ERROR_INVALID_VALUE;
        return -1;
    }
}

/* Checks prop; *dev gets the owner (-1 for host). */
static CUresult check_prop(const CUmemAllocationProp *prop, int *dev)
{
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!sim_dev_valid(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        *dev = prop->location.id;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        *dev = -1;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult CUDAAPI cuMemGetAllocationGranularity(
    size_t *granularity, const CUmemAllocationProp *prop,
    CUmemAllocationGranularity_flags option)
{
    int dev;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemGetAllocationGranularity);
    if (rc)
        return rc;
    if (!granularity || !prop ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    rc = check_prop(prop, &dev);
    if (rc)
        return rc;
    *granularity = SIM_GRANULARITY;
    return CUDA_SUCCESS;
}

static struct sim_alloc *alloc_link(int fd, size_t size, int dev,
                                    const CUmemLocation *loc, unsigned int types)
{
    struct sim_alloc *a = calloc(1, sizeof(*a));

    if (!a)
        return NULL;
    a->fd = fd;
    a->size = size;
    a->dev = dev;
    a->loc = *loc;
    a->handle_types = types;
    a->refs = 1;
    a->id = SIM_HANDLE_TAG | ++sim_alloc_ids;
    a->next = sim_allocs;
    sim_allocs = a;
    return a;
}

SIM_API CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle,
                                     size_t size,
                                     const CUmemAllocationProp *prop,
                                     unsigned long long flags)
{
    struct sim_vmm_hdr hdr;
    struct sim_alloc *a;
    unsigned int types;
    int dev = -1, fd;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemCreate);
    if (rc)
        return rc;
    if (!handle || !prop || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    rc = check_prop(prop, &dev);
    if (rc)
        return rc;
    types = (unsigned)prop->requestedHandleTypes;
    if (types & CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_PERMITTED; /* no IMEX channel (FACTS.md F22) */
    if (types & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (size == 0 || size % SIM_GRANULARITY != 0 || size > ((size_t)1 << 44))
        return CUDA_ERROR_INVALID_VALUE;

    fd = memfd_create("cucore-sim-vmm", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&hdr, 0, sizeof(hdr));
    hdr.magic = SIM_VMM_HDR_MAGIC;
    hdr.version = SIM_VMM_HDR_VERSION;
    hdr.size = size;
    hdr.uid = sim_random64();
    hdr.phys = dev >= 0 ? sim.vis[dev] : SIM_PHYS_HOST;
    if (dev >= 0)
        hdr.uuid = sim.phys[sim.vis[dev]].uuid;
    if (ftruncate(fd, (off_t)(size + SIM_PAGE)) != 0 ||
        pwrite(fd, &hdr, sizeof(hdr), (off_t)size) != (ssize_t)sizeof(hdr)) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_lock();
    a = alloc_link(fd, size, dev, &prop->location, types);
    if (a)
        *handle = a->id;
    sim_unlock();
    if (!a) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct sim_alloc *a;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemRelease);
    if (rc)
        return rc;
    sim_lock();
    a = find_alloc(handle);
    if (!a) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        a->refs--; /* the memory stays while mapped */
        alloc_maybe_free(a);
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemExportToShareableHandle(
    void *shareableHandle, CUmemGenericAllocationHandle handle,
    CUmemAllocationHandleType handleType, unsigned long long flags)
{
    struct sim_alloc *a;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemExportToShareableHandle);
    if (rc)
        return rc;
    if (!shareableHandle || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    a = find_alloc(handle);
    if (!a || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        !(a->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* The caller owns it; close-on-exec, unlike a pool's export
         * (FACTS.md F41, F23). */
        int fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            rc = CUDA_ERROR_OPERATING_SYSTEM;
        else
            *(int *)shareableHandle = fd;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemImportFromShareableHandle(
    CUmemGenericAllocationHandle *handle, void *osHandle,
    CUmemAllocationHandleType shHandleType)
{
    struct sim_vmm_hdr hdr;
    struct sim_alloc *a;
    struct stat st;
    int fd = (int)(intptr_t)osHandle, dev = -1, mine;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemImportFromShareableHandle);
    if (rc)
        return rc;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType == CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_PERMITTED;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* The fd stays the caller's: it is read, then dup'ed. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size < (off_t)(SIM_PAGE + SIM_GRANULARITY) ||
        pread(fd, &hdr, sizeof(hdr), st.st_size - (off_t)SIM_PAGE) !=
            (ssize_t)sizeof(hdr))
        return CUDA_ERROR_INVALID_VALUE;
    if (hdr.magic != SIM_VMM_HDR_MAGIC || hdr.version != SIM_VMM_HDR_VERSION ||
        hdr.size != (uint64_t)st.st_size - SIM_PAGE ||
        hdr.size % SIM_GRANULARITY != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (hdr.phys != SIM_PHYS_HOST) {
        dev = sim_uuid_to_local(&hdr.uuid);
        if (dev < 0) {
            sim_unlock();
            return CUDA_ERROR_INVALID_DEVICE; /* owner GPU not visible */
        }
    }
    mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mine < 0) {
        sim_unlock();
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    {
        /* the host's memory is HOST_NUMA 0 to the importer (a guess) */
        CUmemLocation loc = {dev >= 0 ? CU_MEM_LOCATION_TYPE_DEVICE
                                      : CU_MEM_LOCATION_TYPE_HOST_NUMA,
                             dev >= 0 ? dev : 0};
        /* an imported allocation requests no handle type (FACTS.md F43) */
        a = alloc_link(mine, (size_t)hdr.size, dev, &loc, 0);
    }
    if (a)
        *handle = a->id;
    sim_unlock();
    if (!a) {
        close(mine);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
                                             size_t alignment,
                                             CUdeviceptr addr,
                                             unsigned long long flags)
{
    struct sim_resv *r;
    void *m = MAP_FAILED;
    size_t align;
    const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemAddressReserve);
    if (rc)
        return rc;
    /* the driver wants whole granules (64 KiB was refused) */
    if (!ptr || flags != 0 || size == 0 || size % SIM_GRANULARITY != 0 ||
        addr % SIM_PAGE != 0 || (alignment & (alignment - 1)) != 0 ||
        size > ((size_t)1 << 46))
        return CUDA_ERROR_INVALID_VALUE;
    align = alignment > SIM_GRANULARITY ? alignment : SIM_GRANULARITY;
    r = calloc(1, sizeof(*r));
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (addr && addr % align == 0) { /* a hint: used when free */
        m = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                 mflags | MAP_FIXED_NOREPLACE, -1, 0);
        if (m != MAP_FAILED && m != (void *)(uintptr_t)addr) {
            munmap(m, size);
            m = MAP_FAILED;
        }
    }
    if (m == MAP_FAILED) {
        uintptr_t raw, base;
        size_t total;
        if (sim_add_overflow(size, align, &total)) {
            free(r);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        m = mmap(NULL, total, PROT_NONE, mflags, -1, 0);
        if (m == MAP_FAILED) {
            free(r);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        raw = (uintptr_t)m;
        base = (raw + align - 1) & ~(uintptr_t)(align - 1);
        if (base > raw)
            munmap((void *)raw, base - raw);
        if (raw + total > base + size)
            munmap((void *)(base + size), raw + total - (base + size));
        m = (void *)base;
    }
    r->base = (uintptr_t)m;
    r->size = size;
    sim_lock();
    r->next = sim_resvs;
    sim_resvs = r;
    *ptr = (CUdeviceptr)r->base;
    sim_unlock();
    return CUDA_SUCCESS;
}

/* Whether [p, end) meets a mapping of a reservation other than self: only
 * a mapping that runs past its reservation's end can. */
static int meets_other_mapping(const struct sim_resv *self, uintptr_t p,
                               uintptr_t end)
{
    for (const struct sim_resv *r = sim_resvs; r; r = r->next)
        if (r != self)
            for (const struct sim_mapping *m = r->maps; m; m = m->next)
                if (m->addr < end && m->addr + m->size > p)
                    return 1;
    return 0;
}

SIM_API CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct sim_resv **pp, *r = NULL;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemAddressFree);
    if (rc)
        return rc;
    sim_lock();
    for (pp = &sim_resvs; *pp; pp = &(*pp)->next)
        if ((*pp)->base == (uintptr_t)ptr && (*pp)->size == size) {
            r = *pp;
            break;
        }
    /* Unknown, still mapped, or reaching into another reservation's
     * mapping that runs past its end (FACTS.md F39, F40). */
    if (!r || r->maps ||
        meets_other_mapping(r, (uintptr_t)ptr, (uintptr_t)ptr + size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        *pp = r->next;
        munmap((void *)r->base, r->size);
        free(r);
    }
    sim_unlock();
    return rc;
}


SIM_API CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle handle,
                                  unsigned long long flags)
{
    struct sim_resv *r;
    struct sim_alloc *a;
    struct sim_mapping *m, **pp;
    uintptr_t p = (uintptr_t)ptr, end;
    void *got;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemMap);
    if (rc)
        return rc;
    if (flags != 0 || size == 0 || size % SIM_GRANULARITY != 0 ||
        p % SIM_GRANULARITY != 0 || __builtin_add_overflow(p, size, &end))
        return CUDA_ERROR_INVALID_VALUE;
    /* As the driver answers: an offset, a size other than the whole
     * allocation, or an overlap are CUDA_ERROR_NOT_SUPPORTED. */
    if (offset != 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    sim_lock();
    a = find_alloc(handle);
    r = resv_of(p); /* where it starts; the end may lie past it */
    if (!a || !r) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (size != a->size) {
        rc = CUDA_ERROR_NOT_SUPPORTED;
        goto out;
    }
    for (pp = &r->maps; *pp && (*pp)->addr < end; pp = &(*pp)->next)
        if ((*pp)->addr + (*pp)->size > p) {
            rc = CUDA_ERROR_NOT_SUPPORTED; /* overlaps a mapping */
            goto out;
        }
    if (meets_other_mapping(r, p, end)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    /* pp: first mapping at or after end; find the insertion point. */
    for (pp = &r->maps; *pp && (*pp)->addr < p; pp = &(*pp)->next)
        ;
    m = calloc(1, sizeof(*m));
    if (!m) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->len = end - r->base > r->size ? r->base + r->size - p : size;
    got = mmap((void *)p, m->len, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0);
    if (got == MAP_FAILED) {
        free(m);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->addr = p;
    m->size = size;
    m->id = sim_next_buffer_id();
    m->alloc = a;
    m->prot = PROT_NONE;
    m->next = *pp;
    *pp = m;
    a->nmaps++;
out:
    sim_unlock();
    return rc;
}

/* End of r's addresses for cuMemUnmap: the reservation's, or further where
 * a mapping runs past it. */
static uintptr_t unmap_limit(const struct sim_resv *r)
{
    uintptr_t lim = r->base + r->size;

    for (const struct sim_mapping *m = r->maps; m; m = m->next)
        if (m->addr + m->size > lim)
            lim = m->addr + m->size;
    return lim;
}

/* The driver's cuMemUnmap: every mapping the range touches must lie
 * wholly inside it (else CUDA_ERROR_INVALID_VALUE); those are removed, and
 * a range with none in it is fine. A range out to the end of a mapping
 * past the reservation's end is taken (not measured). */
SIM_API CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct sim_resv *r;
    struct sim_mapping **pp;
    uintptr_t p = (uintptr_t)ptr, end;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemUnmap);
    if (rc)
        return rc;
    if (size == 0 || __builtin_add_overflow(p, size, &end))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    r = resv_of(p);
    if (!r || end > unmap_limit(r)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (struct sim_mapping *m = r->maps; m; m = m->next)
        if (m->addr < end && m->addr + m->size > p &&
            (m->addr < p || m->addr + m->size > end)) {
            rc = CUDA_ERROR_INVALID_VALUE; /* would cut a mapping */
            goto out;
        }
    pp = &r->maps;
    while (*pp) {
        struct sim_mapping *m = *pp;
        if (m->addr >= p && m->addr + m->size <= end) {
            /* Back to a PROT_NONE reservation. */
            mmap((void *)m->addr, m->len, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                 0);
            *pp = m->next;
            m->alloc->nmaps--;
            alloc_maybe_free(m->alloc);
            free(m);
        } else {
            pp = &m->next;
        }
    }
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                        const CUmemAccessDesc *desc,
                                        size_t count)
{
    struct sim_resv *r;
    struct sim_mapping *first, *last = NULL;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemSetAccess);
    if (rc)
        return rc;
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (location_slot(&desc[i].location, &rc) < 0)
            return rc;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    sim_lock();
    r = resv_of((uintptr_t)ptr);
    first = r ? tiling(r, (uintptr_t)ptr, size, &last) : NULL;
    if (!first) {
        rc = CUDA_ERROR_INVALID_VALUE; /* not a fully mapped range */
        goto out;
    }
    for (struct sim_mapping *m = first;; m = m->next) {
        int prot = PROT_NONE;
        for (size_t i = 0; i < count; i++)
            m->access[location_slot(&desc[i].location, &rc)] =
                (unsigned char)desc[i].flags;
        for (int s = 0; s <= SIM_MAX_GPUS; s++) {
            if (m->access[s] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                prot = PROT_READ | PROT_WRITE;
            else if (m->access[s] == CU_MEM_ACCESS_FLAGS_PROT_READ &&
                     prot == PROT_NONE)
                prot = PROT_READ;
        }
        if (mprotect((void *)m->addr, m->len, prot) == 0)
            m->prot = prot;
        if (m == last)
            break;
    }
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags,
                                        const CUmemLocation *location,
                                        CUdeviceptr ptr)
{
    struct sim_resv *r;
    int slot;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemGetAccess);
    if (rc)
        return rc;
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    slot = location_slot(location, &rc);
    if (slot < 0)
        return rc;
    sim_lock();
    r = resv_of((uintptr_t)ptr);
    rc = CUDA_ERROR_INVALID_VALUE;
    if (r)
        for (struct sim_mapping *m = r->maps; m; m = m->next)
            if ((uintptr_t)ptr >= m->addr && (uintptr_t)ptr - m->addr < m->size) {
                *flags = m->access[slot];
                rc = CUDA_SUCCESS;
                break;
            }
    sim_unlock();
    return rc;
}

/* The mapping holding p (in its whole extent, a spill past the
 * reservation included), or NULL. Locked. */
static struct sim_mapping *mapping_at(uintptr_t p)
{
    for (struct sim_resv *r = sim_resvs; r; r = r->next)
        for (struct sim_mapping *m = r->maps; m; m = m->next)
            if (p >= m->addr && p - m->addr < m->size)
                return m;
    return NULL;
}

/* The handle that mapped addr (any address of the mapping), the same
 * value, with one more reference for cuMemRelease to drop; an address no
 * mapping holds is CUDA_ERROR_INVALID_VALUE; a handle released after its
 * map is valid again once retained (FACTS.md F42). */
SIM_API CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle,
                                                     void *addr)
{
    struct sim_mapping *m;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemRetainAllocationHandle);
    if (rc)
        return rc;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    m = mapping_at((uintptr_t)addr);
    if (!m) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        m->alloc->refs++;
        *handle = m->alloc->id;
    }
    sim_unlock();
    return rc;
}

/* The properties the allocation was made with (an imported one: no handle
 * type, its owner's location); a handle not held is
 * CUDA_ERROR_INVALID_VALUE (FACTS.md F43). */
SIM_API CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                                CUmemGenericAllocationHandle handle)
{
    struct sim_alloc *a;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuMemGetAllocationPropertiesFromHandle);
    if (rc)
        return rc;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    a = find_alloc_mapped(handle);
    if (!a) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        memset(prop, 0, sizeof(*prop));
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)a->handle_types;
        prop->location = a->loc;
    }
    sim_unlock();
    return rc;
}
