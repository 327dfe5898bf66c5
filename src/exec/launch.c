/* Launch configurations: the rules a configuration obeys (checked on
 * both sides of a message: launch_share.c) and cuLaunchKernelEx. */
#include "exec/launch.h"
#include "exec/kernel.h"
#include "exec/stream.h"

#include <stdio.h>
#include <string.h>

void cuc_launch_config_init(cuc_launch_config *cfg)
{
    int i;

    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    for (i = 0; i < 3; i++)
        cfg->grid[i] = cfg->block[i] = cfg->cluster[i] = 1;
}

static int dims_problem(const char *what, const uint32_t d[3], const uint32_t max[3],
                        uint64_t max_product, char *why, size_t wl)
{
    static const char axis[3] = {'x', 'y', 'z'};
    uint64_t product = 1;
    int i;

    for (i = 0; i < 3; i++) {
        if (d[i] == 0 || d[i] > max[i]) {
            snprintf(why, wl, "%s.%c is %u (1..%u)", what, axis[i], d[i], max[i]);
            return -1;
        }
        product *= d[i];
    }
    if (product > max_product) {
        snprintf(why, wl, "%s %ux%ux%u is %llu, more than %llu", what, d[0], d[1], d[2],
                 (unsigned long long)product, (unsigned long long)max_product);
        return -1;
    }
    return 0;
}

int cuc__launch_config_problem(const cuc_launch_config *c, char *why, size_t wl)
{
    static const uint32_t grid_max[3] = {CUC_LAUNCH_MAX_GRID_X, CUC_LAUNCH_MAX_GRID_YZ,
                                         CUC_LAUNCH_MAX_GRID_YZ};
    static const uint32_t block_max[3] = {CUC_LAUNCH_MAX_BLOCK_XY, CUC_LAUNCH_MAX_BLOCK_XY,
                                          CUC_LAUNCH_MAX_BLOCK_Z};
    static const uint32_t cluster_max[3] = {CUC_LAUNCH_MAX_CLUSTER, CUC_LAUNCH_MAX_CLUSTER,
                                            CUC_LAUNCH_MAX_CLUSTER};
    static const char axis[3] = {'x', 'y', 'z'};
    size_t i;

    if (dims_problem("grid", c->grid, grid_max, UINT64_MAX, why, wl) ||
        dims_problem("block", c->block, block_max, CUC_LAUNCH_MAX_THREADS, why, wl) ||
        dims_problem("cluster", c->cluster, cluster_max, CUC_LAUNCH_MAX_CLUSTER, why, wl))
        return -1;
    for (i = 0; i < 3; i++)
        if (c->grid[i] % c->cluster[i]) {
            snprintf(why, wl, "cluster.%c (%u) does not divide grid.%c (%u)", axis[i],
                     c->cluster[i], axis[i], c->grid[i]);
            return -1;
        }
    if (c->shared_mem > CUC_LAUNCH_MAX_SHARED_MEM) {
        snprintf(why, wl, "shared_mem is %u bytes, more than %u", c->shared_mem,
                 CUC_LAUNCH_MAX_SHARED_MEM);
        return -1;
    }
    if (c->cooperative > 1) {
        snprintf(why, wl, "cooperative is %u (0 or 1)", c->cooperative);
        return -1;
    }
    for (i = 0; i < CUC_ARRAY_LEN(c->reserved); i++)
        if (c->reserved[i]) {
            snprintf(why, wl, "reserved[%zu] is %u, must be 0", i, c->reserved[i]);
            return -1;
        }
    return 0;
}

int cuc_launch_config_check(const cuc_launch_config *cfg)
{
    char why[160];

    if (!cfg)
        return cuc__seterr(CUC_E_INVALID, "cuc_launch_config_check: cfg is NULL");
    if (cuc__launch_config_problem(cfg, why, sizeof(why)))
        return cuc__seterr(CUC_E_INVALID, "launch config: %s", why);
    return 0;
}

static int launch_err(CUresult r, const cuc_stream *s, const cuc_launch_config *cfg,
                      const cuc_kernel *k)
{
    struct cuc_driver_info info;
    int sim = r == CUDA_ERROR_NOT_SUPPORTED && cuc_driver_load(&info) == 0 && info.simulated;

    return cuc__cuda_err(r, "cuLaunchKernelEx", "kernel \"%.256s\", grid %ux%ux%u, "
                         "block %ux%ux%u, on device %d (%s)%s", k->name, cfg->grid[0],
                         cfg->grid[1], cfg->grid[2], cfg->block[0], cfg->block[1],
                         cfg->block[2], cuc_device_ordinal(s->dev),
                         cuc_device_uuid_string(s->dev),
                         sim ? "; the simulated driver cannot run kernels" : "");
}

/* sizes NULL: unchecked (cuc_launch). */
static int launch(cuc_stream *stream, const cuc_launch_config *cfg, cuc_kernel *k,
                  void **args, const size_t *sizes, size_t nargs)
{
    CUC__CTX_KEEP(guard);
    CUlaunchAttribute attrs[2];
    CUlaunchConfig lc;
    cuc_stream *s;
    unsigned n = 0;
    CUresult r;
    int rc;

    rc = cuc_launch_config_check(cfg);
    if (!rc)
        rc = cuc__stream_or_legacy(NULL, stream, &s);
    if (!rc)
        rc = cuc__stream_activate(&guard, s);
    if (!rc && sizes)
        rc = cuc__kernel_args_check(k, sizes, nargs);
    if (rc)
        return rc;
    memset(attrs, 0, sizeof(attrs));
    if (cfg->cluster[0] * cfg->cluster[1] * cfg->cluster[2] > 1) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim.x = cfg->cluster[0];
        attrs[n].value.clusterDim.y = cfg->cluster[1];
        attrs[n].value.clusterDim.z = cfg->cluster[2];
        n++;
    }
    if (cfg->cooperative) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[n].value.cooperative = 1;
        n++;
    }
    memset(&lc, 0, sizeof(lc));
    lc.gridDimX = cfg->grid[0];
    lc.gridDimY = cfg->grid[1];
    lc.gridDimZ = cfg->grid[2];
    lc.blockDimX = cfg->block[0];
    lc.blockDimY = cfg->block[1];
    lc.blockDimZ = cfg->block[2];
    lc.sharedMemBytes = cfg->shared_mem;
    lc.hStream = s->cu;
    lc.attrs = n ? attrs : NULL;
    lc.numAttrs = n;
    /* A library's CUkernel may be passed as the CUfunction: the driver
     * takes the context from the stream (cuLaunchKernelEx, CUDA 12). */
    r = CUC_DRV->cuLaunchKernelEx(&lc, (CUfunction)k->cu, args, NULL);
    if (r != CUDA_SUCCESS)
        return launch_err(r, s, cfg, k);
    return 0;
}

int cuc_launch(cuc_stream *stream, const cuc_launch_config *cfg, cuc_kernel *k,
               void **args)
{
    if (!cfg || !k)
        return cuc__seterr(CUC_E_INVALID, "cuc_launch: NULL argument");
    return launch(stream, cfg, k, args, NULL, 0);
}

int cuc_launch_checked(cuc_stream *stream, const cuc_launch_config *cfg, cuc_kernel *k,
                       void **args, const size_t *sizes, size_t nargs)
{
    static const size_t none[1];

    if (!cfg || !k || (nargs && (!args || !sizes)))
        return cuc__seterr(CUC_E_INVALID, "cuc_launch_checked: NULL argument");
    return launch(stream, cfg, k, args, sizes ? sizes : none, nargs);
}
