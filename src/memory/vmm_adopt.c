/* VMM memory another allocator mapped (cuc_vmm_adopt): PyTorch's
 * expandable segments map physical chunks, each cuMemCreate'd with POSIX
 * fd handles, back to back in one reserved range. The chunks under
 * [ptr, ptr + size) are found by the pointer's mapping attributes, one
 * chunk at a time, and retained (cuMemRetainAllocationHandle), so that
 * the resource exports their fds as a created one does; the owner's
 * mapping is never unmapped here (vmm.c's teardown). */
#include "memory/adopt.h"
#include "memory/vmm.h"

#include <stdlib.h>

/* The chunks mapped over [ptr, ptr + size): their starts and sizes. */
struct chunks {
    size_t n;
    CUdeviceptr base[CUC_VMM_MAX_CHUNKS];
    size_t size[CUC_VMM_MAX_CHUNKS];
};

/* The mapping holding at (MAPPING_BASE_ADDR / MAPPING_SIZE: a VMM
 * mapping's, sim/FACTS.md F37, F38); size 0 where nothing is mapped. */
static int mapping_at(CUdeviceptr at, CUdeviceptr *base, size_t *size)
{
    CUpointer_attribute a[2] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
    void *data[2] = {base, size};
    CUresult r;

    *base = 0;
    *size = 0;
    r = CUC_DRV->cuPointerGetAttributes(2, a, data, at);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuPointerGetAttributes", "cuc_vmm_adopt: the mapping "
                             "at %#llx", (unsigned long long)at);
    if (*size && (at < *base || at - *base >= *size))
        *size = 0; /* not a mapping that holds it: none */
    return 0;
}

static int find_chunks(CUdeviceptr ptr, size_t size, struct chunks *c)
{
    CUdeviceptr at = ptr, end = ptr + size;
    int rc;

    c->n = 0;
    while (at < end) {
        CUdeviceptr b;
        size_t s;
        if ((rc = mapping_at(at, &b, &s)) != 0)
            return rc;
        if (!s)
            return cuc__seterr(CUC_E_INVALID, "cuc_vmm_adopt: a hole at %#llx (offset "
                               "%llu of the %zu bytes at %#llx): nothing is mapped there",
                               (unsigned long long)at, (unsigned long long)(at - ptr),
                               size, (unsigned long long)ptr);
        if (c->n == CUC_VMM_MAX_CHUNKS)
            return cuc__seterr(CUC_E_LIMIT, "cuc_vmm_adopt: the %zu bytes at %#llx span "
                               "more than %u chunks (CUC_VMM_MAX_CHUNKS)", size,
                               (unsigned long long)ptr, CUC_VMM_MAX_CHUNKS);
        c->base[c->n] = b;
        c->size[c->n++] = s;
        at = b + s;
    }
    return 0;
}

/* Retains chunk i's handle and checks it is dev's, exportable as an fd. */
static int retain_chunk(const cuc_device *dev, const struct chunks *c, size_t i,
                        CUdeviceptr ptr, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop;
    CUresult r = CUC_DRV->cuMemRetainAllocationHandle(h, (void *)(uintptr_t)c->base[i]);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemRetainAllocationHandle", "cuc_vmm_adopt: chunk %zu "
                             "(%zu bytes at offset %lld)", i, c->size[i],
                             (long long)(c->base[i] - ptr));
    r = CUC_DRV->cuMemGetAllocationPropertiesFromHandle(&prop, *h);
    if (r != CUDA_SUCCESS) {
        CUC_DRV->cuMemRelease(*h);
        return cuc__cuda_err(r, "cuMemGetAllocationPropertiesFromHandle", "cuc_vmm_adopt: "
                             "chunk %zu", i);
    }
    if (!(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        CUC_DRV->cuMemRelease(*h);
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_adopt: chunk %zu (%zu bytes at offset "
                           "%lld) was created without the POSIX fd handle type (handle "
                           "types 0x%x), so the driver cannot export it: create the "
                           "chunks with requestedHandleTypes = "
                           "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (PyTorch does for "
                           "expandable segments), or copy the bytes into a cucore pool's "
                           "buffer", i, c->size[i], (long long)(c->base[i] - ptr),
                           (unsigned)prop.requestedHandleTypes);
    }
    if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != dev->cu) {
        CUC_DRV->cuMemRelease(*h);
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_adopt: chunk %zu (at offset %lld) is "
                           "memory of %s %d, not of device %d (%s): a resource's chunks "
                           "are all of its device", i, (long long)(c->base[i] - ptr),
                           prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? "device"
                                                                             : "host location",
                           prop.location.id, dev->ordinal, dev->uuid_str);
    }
    return 0;
}

/* A new adopted resource of the chunks c, their handles retained. */
static int adopt_new(cuc_device *dev, const struct chunks *c, CUdeviceptr ptr, cuc_vmm **out)
{
    cuc_vmm *v = cuc__vmm_new_adopted(dev, c->n);
    int rc = 0;

    if (!v)
        return cuc__seterr(CUC_E_NOMEM, "out of memory adopting %zu VMM chunks", c->n);
    v->base = c->base[0];
    for (size_t i = 0; i < c->n && !rc; i++) {
        rc = retain_chunk(dev, c, i, ptr, &v->handles[i]);
        v->nchunks = rc ? i : i + 1; /* what discard releases */
        v->sizes[i] = c->size[i];
        v->size += c->size[i];
    }
    if (rc) {
        cuc__vmm_adopted_discard(v);
        return rc;
    }
    *out = v;
    return 0;
}

int cuc_vmm_adopt(cuc_device *dev, void *p, size_t size, void (*release)(void *),
                  void *arg, cuc_vmm **out, size_t *offset)
{
    CUC__CTX_KEEP(guard);
    CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)p;
    struct cuc__mem_info info;
    struct chunks *c;
    cuc_vmm *v = NULL, *had;
    size_t total = 0;
    int rc;

    if (!dev || !p || !out || !offset)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_adopt: NULL argument");
    if (size == 0 || size > CUC_VMM_MAX_BYTES || ptr + size < ptr)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_adopt: size %zu (1 byte to "
                           "CUC_VMM_MAX_BYTES, not past the end of the address space)",
                           size);
    rc = cuc__device_activate(&guard, dev);
    if (!rc)
        rc = cuc__memory_classify(ptr, "cuc_vmm_adopt", &info);
    if (!rc && info.kind != CUC_MEMORY_VMM_FD)
        rc = cuc__memory_refuse("cuc_vmm_adopt", p, info.kind);
    if (rc)
        return rc;
    c = malloc(sizeof(*c));
    if (!c)
        return cuc__seterr(CUC_E_NOMEM, "out of memory adopting VMM memory");
    rc = find_chunks(ptr, size, c);
    for (size_t i = 0; !rc && i < c->n; i++)
        total += c->size[i];
    if (!rc)
        v = cuc__vmm_adopted_find(c->base[0], total, release, arg, &rc);
    if (!rc && !v && (rc = adopt_new(dev, c, ptr, &v)) == 0) {
        had = cuc__vmm_adopted_publish(v, release, arg, &rc);
        if (had || rc) {
            cuc__vmm_adopted_discard(v); /* another thread's is the one */
            v = had;
        }
    }
    if (!rc) {
        *offset = (size_t)(ptr - c->base[0]);
        *out = v;
    }
    free(c);
    return rc;
}
