/* The IPC pools of this process (created here or imported), by pool id, so
 * that a buffer record finds its pool and a pool record that arrives twice
 * gives the same object. A pool whose count has reached zero is on its way
 * out: it is skipped, never revived. */
#include "memory_impl.h"

#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuc__htab table;

static uint64_t id_hash(const uint8_t id[CUC_POOL_ID_LEN])
{
    return cuc__hash_bytes(id, CUC_POOL_ID_LEN);
}

/* Takes a reference when the pool matches and is still alive. */
static int match_and_ref(const struct cuc__hnode *n, const void *key)
{
    cuc_pool *p = (cuc_pool *)((const char *)n - offsetof(cuc_pool, reg_node));
    int refs = __atomic_load_n(&p->refs, __ATOMIC_RELAXED);

    if (memcmp(p->id, key, CUC_POOL_ID_LEN) != 0)
        return 0;
    while (refs > 0)
        if (__atomic_compare_exchange_n(&p->refs, &refs, refs + 1, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return 1;
    return 0;
}

int cuc__pool_registry_add(cuc_pool *p)
{
    int rc;

    p->reg_node.hash = id_hash(p->id);
    pthread_mutex_lock(&lock);
    rc = cuc__htab_insert(&table, &p->reg_node);
    pthread_mutex_unlock(&lock);
    return rc;
}

cuc_pool *cuc__pool_registry_find(const uint8_t id[CUC_POOL_ID_LEN])
{
    struct cuc__hnode *n;

    pthread_mutex_lock(&lock);
    n = cuc__htab_find(&table, id_hash(id), match_and_ref, id);
    pthread_mutex_unlock(&lock);
    return n ? (cuc_pool *)((char *)n - offsetof(cuc_pool, reg_node)) : NULL;
}

void cuc__pool_registry_remove(cuc_pool *p)
{
    pthread_mutex_lock(&lock);
    cuc__htab_remove(&table, &p->reg_node);
    if (table.count == 0)
        cuc__htab_free(&table); /* nothing left for a leak checker to see */
    pthread_mutex_unlock(&lock);
}
