/* Pool access for devices other than the owner (cuMemPoolSetAccess,
 * cuMemPoolGetAccess), with the driver's refusals named before it is
 * asked (sim/FACTS.md F20): read-only, the owner's own access revoked, a
 * device that cannot reach the owner. */
#include "memory/pool.h"
#include "memory/vmm.h"

#include <string.h>

static const char *access_name(int a)
{
    return a == CUC_POOL_ACCESS_READWRITE ? "read-write"
           : a == CUC_POOL_ACCESS_READ    ? "read-only"
                                          : "no";
}

static int check_set(const cuc_pool *p, const cuc_device *dev, int access)
{
    if (access != CUC_POOL_ACCESS_NONE && access != CUC_POOL_ACCESS_READ &&
        access != CUC_POOL_ACCESS_READWRITE)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_set_access: access %d is not "
                           "CUC_POOL_ACCESS_NONE or _READWRITE", access);
    if (access == CUC_POOL_ACCESS_READ)
        return cuc__seterr(CUC_E_NOT_SUPPORTED, "cuc_pool_set_access: the driver has "
                           "no read-only access to memory pools (it answers "
                           "CUDA_ERROR_NOT_SUPPORTED): grant device %d (%s) "
                           "CUC_POOL_ACCESS_READWRITE or CUC_POOL_ACCESS_NONE",
                           dev->ordinal, dev->uuid_str);
    if (p->kind != CUC_POOL_DEVICE)
        return 0;
    if (dev == p->dev && access != CUC_POOL_ACCESS_READWRITE)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_set_access: device %d (%s) owns "
                           "the pool and keeps its read-write access (the driver "
                           "answers CUDA_ERROR_INVALID_DEVICE)", dev->ordinal,
                           dev->uuid_str);
    if (dev != p->dev && access == CUC_POOL_ACCESS_READWRITE)
        return cuc__vmm_check_peer_access(p->dev, dev, "cuc_pool_set_access: ");
    return 0;
}

int cuc_pool_set_access(cuc_pool *p, cuc_device *dev, int access)
{
    CUmemAccessDesc d;
    CUresult r;
    int rc;

    if (!p || !dev)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_set_access: NULL argument");
    rc = check_set(p, dev, access);
    if (rc)
        return rc;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev->cu;
    d.flags = access == CUC_POOL_ACCESS_READWRITE ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                                  : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    r = CUC_DRV->cuMemPoolSetAccess(p->cu, &d, 1);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemPoolSetAccess", "%s access for device %d (%s) to "
                             "%s %s pool %s of device %s", access_name(access),
                             dev->ordinal, dev->uuid_str,
                             p->imported ? "imported" : "local",
                             cuc__pool_kind_name(p->kind), cuc__pool_id_hex(p->id).s,
                             p->dev->uuid_str);
    return 0;
}

int cuc_pool_get_access(const cuc_pool *p, cuc_device *dev, int *access)
{
    CUmemLocation loc;
    CUmemAccess_flags f;
    CUresult r;

    if (!p || !dev || !access)
        return cuc__seterr(CUC_E_INVALID, "cuc_pool_get_access: NULL argument");
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = dev->cu;
    r = CUC_DRV->cuMemPoolGetAccess(&f, p->cu, &loc);
    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemPoolGetAccess", "device %d (%s), pool %s",
                             dev->ordinal, dev->uuid_str, cuc__pool_id_hex(p->id).s);
    *access = f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CUC_POOL_ACCESS_READWRITE
              : f == CU_MEM_ACCESS_FLAGS_PROT_READ    ? CUC_POOL_ACCESS_READ
                                                      : CUC_POOL_ACCESS_NONE;
    return 0;
}
