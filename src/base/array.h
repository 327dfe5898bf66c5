/* Growing arrays (array.c): the one growth rule of the library (message
 * records, fds and bytes; a split message being rejoined). */
#ifndef CUC_BASE_ARRAY_H
#define CUC_BASE_ARRAY_H

#include <stddef.h>

/* Makes room for need elements of elem bytes in *arr, whose capacity is
 * *cap: doubles from max(*cap, 16), but never past most (0: no bound).
 * *arr may be the caller's inline storage inl, which is copied out on the
 * first growth and never freed (inl NULL: *arr is the heap's or NULL).
 * CUC_E_NOMEM leaves *arr and *cap as they were. */
int cuc__array_reserve(void **arr, size_t *cap, size_t need, size_t elem, size_t most,
                       void *inl);

#endif
