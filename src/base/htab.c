/* Intrusive chained hash table: buckets double when the load passes 1, so
 * chains stay short; a failed grow leaves the table as it was. */
#include "base/htab.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_BUCKETS 16u

static int grow(struct cuc__htab *t)
{
    size_t nb = t->nbuckets ? 2 * t->nbuckets : FIRST_BUCKETS, i;
    struct cuc__hnode **b = calloc(nb, sizeof(*b));

    if (!b)
        return cuc__seterr(CUC_E_NOMEM, "out of memory growing a table of %zu "
                           "entries to %zu buckets", t->count, nb);
    for (i = 0; i < t->nbuckets; i++) {
        struct cuc__hnode *n = t->buckets[i], *next;
        for (; n; n = next) {
            next = n->next;
            n->next = b[n->hash & (nb - 1)];
            b[n->hash & (nb - 1)] = n;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
    return 0;
}

int cuc__htab_insert(struct cuc__htab *t, struct cuc__hnode *n)
{
    struct cuc__hnode **slot;

    if (t->count >= t->nbuckets) {
        int rc = grow(t);
        if (rc)
            return rc;
    }
    slot = &t->buckets[n->hash & (t->nbuckets - 1)];
    n->next = *slot;
    *slot = n;
    t->count++;
    return 0;
}

void cuc__htab_remove(struct cuc__htab *t, struct cuc__hnode *n)
{
    struct cuc__hnode **pp;

    if (!t->buckets)
        return;
    for (pp = &t->buckets[n->hash & (t->nbuckets - 1)]; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            n->next = NULL;
            t->count--;
            return;
        }
}

void cuc__htab_each(const struct cuc__htab *t, void (*fn)(struct cuc__hnode *, void *),
                    void *arg)
{
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct cuc__hnode *n = t->buckets[i], *next;
        for (; n; n = next) {
            next = n->next;
            fn(n, arg);
        }
    }
}

void cuc__htab_free(struct cuc__htab *t)
{
    free(t->buckets);
    t->buckets = NULL;
    t->nbuckets = t->count = 0;
}

/* A word at a time: the keys are UUIDs, pool ids, export data and
 * digests, hashed on both sides of every share, where a byte-at-a-time
 * hash cost a tenth of the importer's work. Entries exist only for objects
 * the driver accepted, so a peer's crafted keys cannot fill a chain. */
uint64_t cuc__hash_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n, w;

    for (; n >= 8; b += 8, n -= 8) {
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    if (n) {
        w = 0;
        memcpy(&w, b, n);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    }
    return cuc__hash_u64(h);
}
