/* Kernel images (kernel_image.c): what a cubin, a PTX text and a fatbin
 * must look like before the driver sees them. Bytes only. */
#ifndef CUC_EXEC_KERNEL_IMAGE_H
#define CUC_EXEC_KERNEL_IMAGE_H

#include <stddef.h>

/* Checks that image matches kind and that its declared extents lie within
 * len; for PTX, *len is shortened to drop trailing NULs. why gets the
 * reason when it returns non-zero. */
int cuc__image_check(int kind, const void *image, size_t *len, char *why, size_t whylen);

/* "cubin", "PTX", "fatbin" or "unknown". */
const char *cuc__image_kind_name(int kind);

#endif
