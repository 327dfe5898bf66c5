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
};

/* 1 if the cache holds a library of exactly these image bytes under this
 * hash. A cached library's hash is always its own bytes' (it was computed
 * or checked before the load), so equal bytes prove the claimed hash
 * without hashing again: a receiver of an image it already has pays a
 * memcmp, not a SHA-256. */
int cuc__kernel_cache_has(int kind, const void *image, size_t len,
                          const uint8_t hash[CUC__SHA256_LEN]);
/* cuc_kernel_load after cuc__image_check, with the image's SHA-256 known. */
int cuc__kernel_load_checked(int kind, const void *image, size_t len,
                             const uint8_t hash[CUC__SHA256_LEN], const char *name,
                             cuc_kernel **out);

#endif
