/* libFuzzer target: the simulator's image scanner (sim/sim_image.c) over
 * hostile bytes, PTX text, cubin ELF, fatbins plain and compressed. The
 * scanner is what the simulated cuLibraryLoadData and cuLibraryGetKernel
 * read an application's image with, and tests feed it hostile cubins on
 * purpose.
 *
 * Besides not crashing or leaking: a refusal is one of the driver's codes
 * for an image, a refusal at load is an image refusal, and what is
 * accepted is well formed: named kernels, params NULL exactly when there
 * are none, and a PTX parameter list laid out in ascending offsets
 * inside the 32764-byte parameter space (a cubin's records are taken as
 * written, as the driver takes them). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_kernel(const struct sim_kname *k)
{
    size_t i;

    if (!k->name || !k->name[0] || (k->nparams == 0) != (k->params == NULL))
        abort();
    if (k->src != SIM_PARAMS_PTX)
        return;
    for (i = 0; i < k->nparams; i++) {
        const struct sim_param *p = &k->params[i];
        if ((uint64_t)p->offset + p->size > SIM_PARAM_SPACE)
            abort();
        if (i && p->offset < k->params[i - 1].offset + k->params[i - 1].size)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sim_names names;
    CUresult rc;
    size_t i;

    memset(&names, 0, sizeof(names));
    rc = sim_image_scan_len(data, size, &names);
    if (names.refused_at_load && rc != CUDA_ERROR_INVALID_IMAGE)
        abort();
    switch (rc) {
    case CUDA_SUCCESS:
        for (i = 0; i < names.n; i++)
            check_kernel(&names.v[i]);
        break;
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_NO_BINARY_FOR_GPU: /* a fatbin with nothing for sm_90 */
    case CUDA_ERROR_OUT_OF_MEMORY:
        if (names.v || names.n)
            abort(); /* a failed scan frees what it found */
        break;
    default:
        abort();
    }
    sim_names_free(&names);
    return 0;
}
