/* Kernels (kernel.c): the process-wide cache of loaded images keyed by
 * (kind, SHA-256) and the kernels that share them. Their records
 * (kernel_share.c) load through the same cache. */
#ifndef CUC_EXEC_KERNEL_H
#define CUC_EXEC_KERNEL_H

#include "cucore/kernel.h"
#include "base/sha256.h"
#include "driver/driver.h"

struct cuc__library; /* one loaded image, shared by its kernels */

struct cuc_kernel {
    struct cuc__library *lib;
    CUkernel cu;
    char *name;
    /* Its parameters, asked of the driver at the first need (kernel_params.c):
     * params_known is set (release) once params and nparams are written. */
    int params_known;
    size_t nparams;
    cuc_kernel_param *params;
};

/* 0 when nargs arguments of sizes[i] bytes match k's parameters, else
 * CUC_E_INVALID naming the first that differs (kernel_params.c). */
int cuc__kernel_args_check(const cuc_kernel *k, const size_t *sizes, size_t nargs);

/* The library's creator, for the fork rule. */
pid_t cuc__kernel_creator(const cuc_kernel *k);

/* cuc_kernel_load after cuc__image_check, with the image's SHA-256 known.
 * The cache is keyed by (kind, len, hash): a cached library's hash was
 * computed or checked before its load, so the hash is the image's
 * identity and a hit reads no image byte. image NULL: only from the cache,
 * returning 1 (nothing set, no error message) when the cache has no such
 * image; a caller with unverified bytes asks so first, checks them, then
 * loads (a hit in between is still a hit). */
int cuc__kernel_load_checked(int kind, const void *image, size_t len,
                             const uint8_t hash[CUC__SHA256_LEN], const char *name,
                             cuc_kernel **out);

/* The same for an image whose hash the caller has not checked: claimed is
 * what a record says it is. A cache hit on claimed reads no image byte;
 * a miss hashes the image while the driver loads it, and returns 2
 * (nothing loaded or kept, no message set) when the hash is not claimed.
 * image must have passed cuc__image_check. */
int cuc__kernel_load_claimed(int kind, const void *image, size_t len,
                             const uint8_t claimed[CUC__SHA256_LEN], const char *name,
                             cuc_kernel **out);

/* Keeps k's library loaded after k is destroyed: the returned handle for
 * cuc__kernel_lib_drop (what a channel keeps for a peer that may name the
 * image by reference). */
void *cuc__kernel_lib_keep(const cuc_kernel *k);
void cuc__kernel_lib_drop(void *lib);

#endif
