/* Doubling growth, so that n appends cost O(n). */
#include "base/array.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

int cuc__array_reserve(void **arr, size_t *cap, size_t need, size_t elem, size_t most,
                       void *inl)
{
    size_t ncap = *cap > 16 ? *cap : 16;
    void *p;

    if (need <= *cap)
        return 0;
    while (ncap < need)
        ncap *= 2;
    if (most && ncap > most)
        ncap = most > need ? most : need;
    if (inl && *arr == inl) {
        p = malloc(ncap * elem);
        if (p)
            memcpy(p, inl, *cap * elem);
    } else {
        p = realloc(*arr, ncap * elem);
    }
    if (!p)
        return cuc__seterr(CUC_E_NOMEM, "out of memory growing an array to %zu "
                           "entries of %zu bytes", ncap, elem);
    *arr = p;
    *cap = ncap;
    return 0;
}
