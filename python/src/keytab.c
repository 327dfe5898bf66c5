/* The extension's hash table (cucore_py.h): chained, doubled when it holds
 * as many entries as buckets, the key mixed by one multiply (tokens are a
 * sequence, addresses aligned: their high bits vary least). */
#include <stdlib.h>

#include "cucore_py.h"

#define FIRST_BUCKETS 1024

static size_t slot(const struct keytab *t, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (t->nbuckets - 1);
}

struct keynode *keytab_first(const struct keytab *t, uint64_t key)
{
    struct keynode *n = t->buckets ? t->buckets[slot(t, key)] : NULL;

    while (n && n->key != key)
        n = n->chain;
    return n;
}

struct keynode *keytab_next(const struct keynode *n)
{
    struct keynode *e = n->chain;

    while (e && e->key != n->key)
        e = e->chain;
    return e;
}

static int grow(struct keytab *t)
{
    size_t n = t->nbuckets ? t->nbuckets * 2 : FIRST_BUCKETS, old = t->nbuckets, i;
    struct keynode **b = calloc(n, sizeof(*b)), **was = t->buckets, *e, *next;

    if (!b)
        return -1;
    t->buckets = b;
    t->nbuckets = n;
    for (i = 0; i < old; i++)
        for (e = was[i]; e; e = next) {
            next = e->chain;
            e->chain = b[slot(t, e->key)];
            b[slot(t, e->key)] = e;
        }
    free(was);
    return 0;
}

int keytab_insert(struct keytab *t, struct keynode *n)
{
    size_t i;

    if (t->count >= t->nbuckets && grow(t))
        return -1;
    i = slot(t, n->key);
    n->chain = t->buckets[i];
    t->buckets[i] = n;
    t->count++;
    return 0;
}

void keytab_remove(struct keytab *t, struct keynode *n)
{
    struct keynode **p = &t->buckets[slot(t, n->key)];

    while (*p != n)
        p = &(*p)->chain;
    *p = n->chain;
    t->count--;
}

void keytab_each(const struct keytab *t, void (*fn)(struct keynode *, void *), void *arg)
{
    struct keynode *e, *next;

    for (size_t i = 0; i < t->nbuckets; i++)
        for (e = t->buckets[i]; e; e = next) {
            next = e->chain;
            fn(e, arg);
        }
}
