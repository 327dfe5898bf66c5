/* The one hash table (htab.c): intrusive and chained. Entries embed a
 * struct cuc__hnode and are found by their 64-bit hash plus a match
 * function, so one implementation serves every table of the library:
 * devices by UUID, IPC pools by id, buffers by export data, events by IPC
 * handle, loaded images by SHA-256, VMM imports by lease, leases by id.
 * Not thread-safe: the owner of a table locks around it. Entries with
 * equal keys may coexist; removal is by entry. */
#ifndef CUC_BASE_HTAB_H
#define CUC_BASE_HTAB_H

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
 * or NULL. Inline, so that a constant match function inlines too (the
 * device lookup is on every device record's path). */
static inline struct cuc__hnode *
cuc__htab_find(const struct cuc__htab *t, uint64_t hash,
               int (*match)(const struct cuc__hnode *, const void *), const void *key)
{
    struct cuc__hnode *n;

    if (!t->buckets)
        return NULL;
    for (n = t->buckets[hash & (t->nbuckets - 1)]; n; n = n->next)
        if (n->hash == hash && match(n, key))
            return n;
    return NULL;
}

/* Inserts n (n->hash set by the caller). CUC_E_NOMEM if the table needs to
 * grow and cannot (n is then not inserted). */
int cuc__htab_insert(struct cuc__htab *t, struct cuc__hnode *n);

/* Removes n if it is in the table. */
void cuc__htab_remove(struct cuc__htab *t, struct cuc__hnode *n);

/* Calls fn on every entry, in no order. fn may free the entry it is
 * given, but must not otherwise change the table. */
void cuc__htab_each(const struct cuc__htab *t, void (*fn)(struct cuc__hnode *, void *),
                    void *arg);

/* Frees the bucket array (the entries are the caller's). */
void cuc__htab_free(struct cuc__htab *t);

/* A 64-bit hash of n bytes, a word at a time, with a final mix. */
uint64_t cuc__hash_bytes(const void *p, size_t n);

/* A 64-bit mix of one integer (lease ids, sequence-like keys). */
static inline uint64_t cuc__hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

#endif
