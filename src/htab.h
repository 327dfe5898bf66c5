/* An intrusive chained hash table (htab.c): entries embed a struct
 * cuc__hnode and are found by their 64-bit hash plus a caller's match
 * function, so one implementation serves tables keyed by pool id and by
 * pointer export data. Not thread-safe: the owner of a table locks around
 * it. Entries with equal keys may coexist; removal is by entry. */
#ifndef CUC_HTAB_H
#define CUC_HTAB_H

#include <stddef.h>
#include <stdint.h>

struct cuc__hnode {
    struct cuc__hnode *next;
    uint64_t hash;
};

struct cuc__htab {
    struct cuc__hnode **buckets; /* NULL until the first insert */
    size_t nbuckets;             /* a power of two */
    size_t count;
};

/* The first entry with this hash for which match(node, key) is non-zero,
 * or NULL. */
struct cuc__hnode *cuc__htab_find(const struct cuc__htab *t, uint64_t hash,
                                  int (*match)(const struct cuc__hnode *, const void *),
                                  const void *key);

/* Inserts n (n->hash set by the caller). CUC_E_NOMEM if the table needs to
 * grow and cannot (n is then not inserted). */
int cuc__htab_insert(struct cuc__htab *t, struct cuc__hnode *n);

/* Removes n if it is in the table. */
void cuc__htab_remove(struct cuc__htab *t, struct cuc__hnode *n);

/* Frees the bucket array (the entries are the caller's). */
void cuc__htab_free(struct cuc__htab *t);

/* A 64-bit hash of n bytes (FNV-1a, then a final mix). */
uint64_t cuc__hash_bytes(const void *p, size_t n);

#endif
