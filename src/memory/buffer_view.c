/* Views: a part of an allocation as a buffer of its own. A view holds a
 * reference to its allocation (the root: views of views flatten to it),
 * has its own references, holds and leases (buffer.c's, through the same
 * lease ops), and no driver memory: its release drops the root. Each pool
 * keeps its views by (root, offset, size), so that a view record that
 * arrives twice resolves to the same object, as a buffer record does. */
#include "memory/buffer.h"

#include <stdlib.h>

struct view_key {
    const cuc_buffer *root;
    size_t off, size;
};

static uint64_t view_hash(const cuc_buffer *root, size_t off, size_t size)
{
    return cuc__hash_u64((uint64_t)(uintptr_t)root ^ cuc__hash_u64(off) ^
                         cuc__hash_u64(size) * 31u);
}

static int same_view(const struct cuc__hnode *n, const void *key)
{
    const cuc_buffer *v = CUC_CONTAINER_OF(n, cuc_buffer, node);
    const struct view_key *k = key;

    return v->root == k->root && v->offset == k->off && v->size == k->size;
}

int cuc__view_new(cuc_buffer *root, size_t off, size_t size, cuc_buffer **out)
{
    cuc_buffer *v;
    int rc = cuc__buffer_new(root->pool, root->ptr + off, size, root->imported, &v);

    if (rc)
        return rc;
    v->root = root;
    v->offset = off;
    *out = v;
    return 0;
}

cuc_buffer *cuc__view_find_locked(cuc_buffer *root, size_t off, size_t size)
{
    struct view_key k = {root, off, size};
    uint64_t h = view_hash(root, off, size);

    for (;;) {
        struct cuc__hnode *n = cuc__htab_find(&root->pool->views, h, same_view, &k);
        cuc_buffer *v = n ? CUC_CONTAINER_OF(n, cuc_buffer, node) : NULL;

        if (!v || v->state != CUC__BUF_FREEING)
            return v;
        /* its release is under way and drops it from the table */
        pthread_cond_wait(&root->pool->cond, &root->pool->lock);
    }
}

void cuc__view_index_locked(cuc_buffer *v)
{
    struct view_key k = {v->root, v->offset, v->size};

    v->node.hash = view_hash(v->root, v->offset, v->size);
    if (cuc__htab_find(&v->pool->views, v->node.hash, same_view, &k))
        return;
    /* no memory for the table: the view works, it is just not found again */
    v->in_views = cuc__htab_insert(&v->pool->views, &v->node) == 0;
}

void cuc__view_insert_locked(cuc_buffer *v)
{
    v->node.hash = view_hash(v->root, v->offset, v->size);
    v->in_views = cuc__htab_insert(&v->pool->views, &v->node) == 0;
}

int cuc_buffer_view(cuc_buffer *parent, size_t offset, size_t size, cuc_buffer **out)
{
    cuc_buffer *root, *v;
    int rc;

    if (!parent || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_view: NULL argument");
    if (size == 0 || size > parent->size || offset > parent->size - size)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_view: %zu bytes at offset %zu do "
                           "not fit in the %zu-byte buffer (a view needs 1 byte or more "
                           "inside its parent)", size, offset, parent->size);
    root = parent->root ? parent->root : parent;
    /* the root reference is taken with the index, under one lock: parent
     * keeps root meanwhile */
    rc = cuc__view_new(root, parent->offset + offset, size, &v);
    if (rc)
        return rc;
    pthread_mutex_lock(&root->pool->lock);
    root->refs++;
    cuc__view_index_locked(v);
    pthread_mutex_unlock(&root->pool->lock);
    *out = v;
    return 0;
}

int cuc_buffer_is_view(const cuc_buffer *b) { return b->root != NULL; }
size_t cuc_buffer_offset(const cuc_buffer *b) { return b->offset; }
cuc_buffer *cuc_buffer_root(cuc_buffer *b) { return cuc_buffer_ref(b->root ? b->root : b); }
