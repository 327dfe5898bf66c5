/* The owner's callbacks of adopted memory: a growing list, run once. */
#include "memory/release.h"
#include "base/array.h"
#include "base/error.h"

#include <stdlib.h>

int cuc__releases_add(struct cuc__releases **rp, void (*fn)(void *), void *arg)
{
    struct cuc__releases *r = *rp;
    int rc;

    if (!r && (r = calloc(1, sizeof(*r))) == NULL)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for an adopted allocation");
    *rp = r;
    if (!fn)
        return 0;
    rc = cuc__array_reserve((void **)&r->v, &r->cap, r->n + 1, sizeof(*r->v), 0, NULL);
    if (rc)
        return rc;
    r->v[r->n++] = (struct cuc__release){fn, arg};
    return 0;
}

void cuc__releases_run(struct cuc__releases *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        r->v[i].fn(r->v[i].arg);
    cuc__releases_drop(r);
}

void cuc__releases_drop(struct cuc__releases *r)
{
    if (!r)
        return;
    free(r->v);
    free(r);
}
