/* Legacy-IPC memory: cuMemAlloc / cudaMalloc allocations as buffers that
 * do not own them (cuc_buffer_wrap). A wrapped allocation is a root of its
 * device's legacy pool (pool.h) holding its base's CUipcMemHandle, taken
 * once; a part of it is a view (buffer_view.c). The importer opens a base
 * once per (exporter, generation): the driver hands the same handle bytes
 * to a base freed and allocated again at one address (notes: handles
 * repeat), so the bytes alone could alias two allocations. The exporter's
 * identity is 16 random bytes per process, so that a record that comes
 * back to it resolves to the original pointer: the driver refuses an open
 * in the exporting process (CUDA_ERROR_INVALID_CONTEXT). */
#include "memory/buffer.h"
#include "os/fd.h"
#include "os/proc.h"

#include <stdlib.h>
#include <string.h>

static pthread_mutex_t self_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t self_id[16];
static pid_t self_pid; /* the process self_id is for (fork makes another) */
static uint64_t next_gen; /* atomic */

static int self_identity(uint8_t out[16])
{
    int rc = 0;

    pthread_mutex_lock(&self_lock);
    if (self_pid != cuc__pid()) {
        rc = cuc__random_bytes(self_id, sizeof(self_id), "a legacy IPC exporter id");
        if (!rc)
            self_pid = cuc__pid();
    }
    if (!rc)
        memcpy(out, self_id, sizeof(self_id));
    pthread_mutex_unlock(&self_lock);
    return rc;
}

int cuc__ipc_is_self(const uint8_t exporter[16])
{
    uint8_t me[16];

    return self_identity(me) == 0 && memcmp(me, exporter, sizeof(me)) == 0;
}

/* ---- the tables (pool->lock held) ---- */

struct gen_key {
    const uint8_t *exporter;
    uint64_t gen;
};

static uint64_t gen_hash(const uint8_t exporter[16], uint64_t gen)
{
    return cuc__hash_bytes(exporter, 16) ^ cuc__hash_u64(gen);
}

static int same_gen(const struct cuc__hnode *n, const void *key)
{
    const cuc_buffer *b = CUC_CONTAINER_OF(n, cuc_buffer, node);
    const struct gen_key *k = key;

    return b->ipc->gen == k->gen && memcmp(b->ipc->exporter, k->exporter, 16) == 0;
}

static int same_base(const struct cuc__hnode *n, const void *key)
{
    const struct cuc__ipc_base *ib = CUC_CONTAINER_OF(n, struct cuc__ipc_base, by_base);

    return ib->owner->ptr == *(const CUdeviceptr *)key;
}

cuc_buffer *cuc__ipc_find_locked(cuc_pool *pool, const uint8_t exporter[16], uint64_t gen)
{
    struct gen_key k = {exporter, gen};

    for (;;) {
        struct cuc__hnode *n = cuc__htab_find(&pool->bufs, gen_hash(exporter, gen),
                                              same_gen, &k);
        cuc_buffer *b = n ? CUC_CONTAINER_OF(n, cuc_buffer, node) : NULL;

        if (!b || b->state != CUC__BUF_FREEING)
            return b;
        pthread_cond_wait(&pool->cond, &pool->lock); /* its release drops it */
    }
}

/* Makes root findable by (exporter, gen); cuc__buffer_forget_locked and
 * cuc__ipc_forget_locked undo it. */
static int index_locked(cuc_buffer *root)
{
    int rc;

    root->node.hash = gen_hash(root->ipc->exporter, root->ipc->gen);
    rc = cuc__htab_insert(&root->pool->bufs, &root->node);
    root->have_export = rc == 0;
    if (rc || root->imported)
        return rc;
    root->ipc->by_base.hash = cuc__hash_u64(root->ptr);
    rc = cuc__htab_insert(&root->pool->bases, &root->ipc->by_base);
    if (rc)
        cuc__buffer_forget_locked(root);
    return rc;
}

/* The live wrapped root whose base is base, or NULL (waiting for one
 * being released to go). */
static cuc_buffer *wrapped_at_locked(cuc_pool *pool, CUdeviceptr base)
{
    for (;;) {
        struct cuc__hnode *n = cuc__htab_find(&pool->bases, cuc__hash_u64(base),
                                              same_base, &base);
        cuc_buffer *b = n ? CUC_CONTAINER_OF(n, struct cuc__ipc_base, by_base)->owner : NULL;

        if (!b || b->state != CUC__BUF_FREEING)
            return b;
        pthread_cond_wait(&pool->cond, &pool->lock);
    }
}

/* ---- wrap ---- */

/* Why the driver's answer refuses ptr (it is not legacy-IPC capable):
 * CUC_E_INVALID naming what to use instead. Asked only on a refusal, so
 * that a wrap pays for the attributes it needs (each costs: bench_legacy
 * times them). */
static int refusal(CUdeviceptr ptr)
{
    CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
    unsigned type = 0, managed = 0;
    void *pool = NULL;
    void *data[3] = {&type, &managed, &pool};
    CUresult r = CUC_DRV->cuPointerGetAttributes(3, at, data, ptr);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuPointerGetAttributes", "cuc_buffer_wrap of %#llx",
                             (unsigned long long)ptr);
    if (type == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: %#llx is not CUDA memory "
                           "(host memory of malloc?): not shareable by IPC; allocate it "
                           "with cuMemAlloc", (unsigned long long)ptr);
    if (managed)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: %#llx is managed memory, "
                           "which is not shareable by IPC: allocate with cuMemAlloc, or "
                           "from a CUC_POOL_IPC pool", (unsigned long long)ptr);
    if (type == CU_MEMORYTYPE_HOST)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: %#llx is pinned host memory, "
                           "which is not shareable by legacy IPC: use a pinned host pool "
                           "with CUC_POOL_IPC and send its cuc_buffer",
                           (unsigned long long)ptr);
    if (pool)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: %#llx belongs to a memory "
                           "pool (cuMemAllocAsync): adopt it with cuc_buffer_adopt when "
                           "its pool is IPC-capable, else allocate from a CUC_POOL_IPC "
                           "pool (cuc_buffer_alloc_async) and send that cuc_buffer",
                           (unsigned long long)ptr);
    return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: %#llx is not legacy-IPC capable "
                       "(VMM memory, or memory opened from another process): share VMM "
                       "memory with cuc_vmm_adopt (cuc_memory_kind tells which), and "
                       "send on the cuc_buffer an opened allocation arrived as",
                       (unsigned long long)ptr);
}

/* What the driver says ptr is, and the allocation it is in (one call for
 * all of it: cuMemGetAddressRange's answer is two of the attributes);
 * CUC_E_INVALID naming what to use instead when legacy IPC cannot share
 * it. The driver calls memory legacy-IPC capable only when it is
 * cuMemAlloc device memory (not managed, pool, host or VMM memory:
 * sim/FACTS.md F37), so that attribute alone decides;
 * the others are asked only to say why not. */
static int classify(cuc_device *dev, CUdeviceptr ptr, CUdeviceptr *base, size_t *bsize)
{
    CUpointer_attribute at[4] = {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned ipc = 0;
    int ord = -1;
    CUdeviceptr start = 0;
    size_t size = 0;
    void *data[4] = {&ipc, &ord, &start, &size};
    CUresult r = CUC_DRV->cuPointerGetAttributes(4, at, data, ptr);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuPointerGetAttributes", "cuc_buffer_wrap of %#llx",
                             (unsigned long long)ptr);
    if (!ipc)
        return refusal(ptr);
    if (ord != dev->ordinal)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: %#llx is memory of device "
                           "%d, not of device %d (%s): wrap it with its own device",
                           (unsigned long long)ptr, ord, dev->ordinal, dev->uuid_str);
    if (!start || !size || ptr < start || ptr - start >= size)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: the driver puts %#llx in a "
                           "%zu-byte range at %#llx, which does not hold it",
                           (unsigned long long)ptr, size, (unsigned long long)start);
    *base = start;
    *bsize = size;
    return 0;
}

/* A new root for the allocation at base (refs 1), its handle taken. */
static int new_root(cuc_pool *pool, CUdeviceptr base, size_t bsize, cuc_buffer **out)
{
    struct cuc__ipc_base *ib = calloc(1, sizeof(*ib));
    cuc_buffer *b;
    CUresult r;
    int rc;

    if (!ib)
        return cuc__seterr(CUC_E_NOMEM, "out of memory wrapping an allocation");
    r = CUC_DRV->cuIpcGetMemHandle(&ib->handle, base);
    if (r != CUDA_SUCCESS) {
        free(ib);
        return cuc__cuda_err(r, "cuIpcGetMemHandle", "the %zu-byte allocation at %#llx "
                             "of device %s (cuMemAlloc memory only)", bsize,
                             (unsigned long long)base, pool->dev->uuid_str);
    }
    rc = self_identity(ib->exporter);
    if (!rc)
        rc = cuc__buffer_new(pool, base, bsize, 0, &b);
    if (rc) {
        free(ib);
        return rc;
    }
    ib->gen = __atomic_add_fetch(&next_gen, 1, __ATOMIC_RELAXED);
    ib->owner = b;
    b->ipc = ib;
    *out = b;
    return 0;
}

/* The wrapped root of base, found (a new reference) or made. */
static int root_of(cuc_pool *pool, CUdeviceptr base, size_t bsize, cuc_buffer **out)
{
    cuc_buffer *b, *made = NULL;
    CUevent stale = NULL;
    int rc = 0;

    pthread_mutex_lock(&pool->lock);
    b = wrapped_at_locked(pool, base);
    pthread_mutex_unlock(&pool->lock);
    if (!b && (rc = new_root(pool, base, bsize, &made)) != 0)
        return rc;
    pthread_mutex_lock(&pool->lock);
    b = wrapped_at_locked(pool, base); /* another thread may have been quicker */
    if (b && b->size == bsize) {
        b->refs++;
        if (b->state == CUC__BUF_DEFERRED) {
            b->state = CUC__BUF_LIVE;
            stale = b->free_after;
            b->free_after = NULL;
        }
    } else {
        /* (a base found with another size was freed and allocated again
         * while wrapped: the user's error; the new one gets its own) */
        b = made;
        made = NULL;
        rc = b ? index_locked(b) : cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: the "
                                               "allocation at %#llx changed under a "
                                               "concurrent wrap", (unsigned long long)base);
    }
    pthread_mutex_unlock(&pool->lock);
    if (stale)
        CUC_DRV->cuEventDestroy(stale);
    if (made || (rc && b)) {
        cuc_buffer *gone = made ? made : b;
        free(gone->ipc);
        free(gone);
        cuc_pool_unref(pool); /* not the last: the caller holds one */
    }
    if (!rc)
        *out = b;
    return rc;
}

/* The bases wrapped last in this process, by device: a pointer inside
 * one of them that is still wrapped (found in pool->bases, at that base
 * with that size) needs no driver call to be wrapped again; the table is
 * a hint, the pool's is the truth. Guarded by recent_lock. */
#define RECENT_BASES 16

struct recent_base {
    cuc_device *dev;
    CUdeviceptr base;
    size_t size;
    pid_t pid; /* a forked child asks the driver, which refuses it */
};

static pthread_mutex_t recent_lock = PTHREAD_MUTEX_INITIALIZER;
static struct recent_base recent[RECENT_BASES];
static unsigned recent_next;

static void recent_note(cuc_device *dev, CUdeviceptr base, size_t size)
{
    pid_t me = cuc__pid();

    pthread_mutex_lock(&recent_lock);
    for (unsigned i = 0; i < RECENT_BASES; i++) {
        if (recent[i].dev == dev && recent[i].base == base && recent[i].pid == me) {
            recent[i].size = size;
            pthread_mutex_unlock(&recent_lock);
            return;
        }
    }
    recent[recent_next] = (struct recent_base){dev, base, size, me};
    recent_next = (recent_next + 1) % RECENT_BASES;
    pthread_mutex_unlock(&recent_lock);
}

/* A recent base of dev holding ptr, or 0. */
static int recent_find(cuc_device *dev, CUdeviceptr ptr, CUdeviceptr *base, size_t *size)
{
    pid_t me = cuc__pid();
    int found = 0;

    pthread_mutex_lock(&recent_lock);
    for (unsigned i = 0; i < RECENT_BASES && !found; i++) {
        const struct recent_base *e = &recent[i];
        if (e->dev == dev && e->pid == me && ptr >= e->base && ptr - e->base < e->size) {
            *base = e->base;
            *size = e->size;
            found = 1;
        }
    }
    pthread_mutex_unlock(&recent_lock);
    return found;
}

/* The live wrapped root at base of that size (a new reference), or NULL:
 * then nothing of the pool's changed. */
static cuc_buffer *root_if_wrapped(cuc_pool *pool, CUdeviceptr base, size_t bsize)
{
    cuc_buffer *b;

    pthread_mutex_lock(&pool->lock);
    b = wrapped_at_locked(pool, base);
    if (b && (b->size != bsize || b->state != CUC__BUF_LIVE))
        b = NULL; /* a deferred one is revived by root_of, with its event */
    if (b)
        b->refs++;
    pthread_mutex_unlock(&pool->lock);
    return b;
}

int cuc__ipc_root(cuc_device *dev, CUdeviceptr ptr, size_t size, CUdeviceptr base,
                  size_t bsize, cuc_buffer **out)
{
    cuc_pool *pool;
    int rc;

    if (!base || !bsize || ptr < base || ptr - base >= bsize ||
        size > bsize - (size_t)(ptr - base))
        return cuc__seterr(CUC_E_INVALID, "%zu bytes at %#llx do not fit in the %zu-byte "
                           "allocation at %#llx the driver puts them in", size,
                           (unsigned long long)ptr, bsize, (unsigned long long)base);
    rc = cuc__pool_legacy(dev, &pool);
    if (rc)
        return rc;
    rc = root_of(pool, base, bsize, out);
    if (!rc)
        recent_note(dev, base, bsize);
    cuc_pool_unref(pool); /* the root holds one */
    return rc;
}

/* The root for [ptr, ptr + size): of a base wrapped already, with no
 * driver call, or found by the driver and wrapped now. */
static int wrap_root(cuc_device *dev, CUdeviceptr ptr, size_t size, CUdeviceptr *basep,
                     cuc_buffer **out)
{
    CUC__CTX_KEEP(guard);
    CUdeviceptr base = 0;
    size_t bsize = 0;
    cuc_buffer *root = NULL;
    cuc_pool *pool;
    int rc, known = recent_find(dev, ptr, &base, &bsize);

    if (known && size > bsize - (size_t)(ptr - base))
        known = 0; /* the driver's answer decides, and its error names it */
    rc = cuc__pool_legacy(dev, &pool);
    if (rc)
        return rc;
    if (known)
        root = root_if_wrapped(pool, base, bsize);
    if (!root) {
        rc = cuc__device_activate(&guard, dev);
        if (!rc)
            rc = classify(dev, ptr, &base, &bsize);
        if (!rc && size > bsize - (size_t)(ptr - base))
            rc = cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: %zu bytes at %#llx run "
                             "past the end of its %zu-byte allocation at %#llx (offset "
                             "%llu)", size, (unsigned long long)ptr, bsize,
                             (unsigned long long)base, (unsigned long long)(ptr - base));
        if (!rc)
            rc = root_of(pool, base, bsize, &root);
        if (!rc)
            recent_note(dev, base, bsize);
    }
    cuc_pool_unref(pool); /* the root holds one */
    if (rc)
        return rc;
    *basep = base;
    *out = root;
    return 0;
}

int cuc_buffer_wrap(cuc_device *dev, void *p, size_t size, cuc_buffer **out)
{
    CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)p, base = 0;
    cuc_buffer *root, *v;
    size_t bsize;
    int rc;

    if (!dev || !p || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: NULL argument");
    if (size == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_buffer_wrap: size 0 (wrap at least one "
                           "byte)");
    rc = wrap_root(dev, ptr, size, &base, &root);
    if (rc)
        return rc;
    bsize = root->size;
    if (ptr == base && size == bsize) {
        *out = root;
        return 0;
    }
    rc = cuc_buffer_view(root, (size_t)(ptr - base), size, &v);
    cuc_buffer_unref_async(root, NULL); /* the view holds it (or it goes) */
    if (!rc)
        *out = v;
    return rc;
}

int cuc_buffer_is_wrapped(const cuc_buffer *b)
{
    return (b->root ? b->root : b)->ipc != NULL;
}

/* ---- send and receive ---- */

void cuc__ipc_fill(const cuc_buffer *root, struct cuc_ipc_buffer_record *rec)
{
    rec->device = *cuc_device_uuid(root->pool->dev);
    memcpy(rec->exporter, root->ipc->exporter, 16);
    rec->generation = root->ipc->gen;
    rec->base_size = root->size;
    rec->handle_type = CUC_IPC_HANDLE_LEGACY;
    memcpy(rec->handle, root->ipc->handle.reserved, CUC_IPC_HANDLE_LEN);
}

/* Finding 13.7 for legacy IPC: the record may claim no more than the
 * driver mapped. */
static int check_opened(CUdeviceptr ptr, const struct cuc_ipc_buffer_record *rec)
{
    CUdeviceptr base = 0;
    size_t mapped = 0;
    CUresult r = CUC_DRV->cuMemGetAddressRange(&base, &mapped, ptr);

    if (r != CUDA_SUCCESS)
        return cuc__cuda_err(r, "cuMemGetAddressRange", "checking the size of an "
                             "allocation opened by legacy IPC");
    if (base != ptr || rec->base_size > mapped)
        return cuc__seterr(CUC_E_BADMSG, "ipc buffer record claims a %llu-byte "
                           "allocation, but the handle opened %zu bytes (at offset %llu "
                           "of what the driver mapped): refused",
                           (unsigned long long)rec->base_size, mapped,
                           (unsigned long long)(ptr - base));
    return 0;
}

int cuc__ipc_open_locked(cuc_pool *pool, const struct cuc_ipc_buffer_record *rec,
                         cuc_buffer **out)
{
    CUC__CTX_KEEP(guard);
    struct cuc__ipc_base *ib = calloc(1, sizeof(*ib));
    CUdeviceptr ptr = 0;
    cuc_buffer *b = NULL;
    CUresult r;
    int rc;

    if (!ib)
        return cuc__seterr(CUC_E_NOMEM, "out of memory importing an ipc buffer");
    memcpy(ib->handle.reserved, rec->handle, CUC_IPC_HANDLE_LEN);
    memcpy(ib->exporter, rec->exporter, 16);
    ib->gen = rec->generation;
    rc = cuc__device_activate(&guard, pool->dev);
    if (rc)
        goto free_ib;
    r = CUC_DRV->cuIpcOpenMemHandle(&ptr, ib->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CUDA_SUCCESS) {
        rc = cuc__cuda_err(r, "cuIpcOpenMemHandle", "%llu-byte allocation of device %s "
                           "(generation %llu): the exporter freed it, exited, or the "
                           "handle is not one", (unsigned long long)rec->base_size,
                           pool->dev->uuid_str, (unsigned long long)rec->generation);
        goto free_ib;
    }
    ib->opened = 1;
    rc = check_opened(ptr, rec);
    if (!rc)
        rc = cuc__buffer_new(pool, ptr, (size_t)rec->base_size, 1, &b);
    if (rc)
        goto close;
    b->ipc = ib;
    ib->owner = b;
    rc = index_locked(b);
    if (rc)
        goto free_b;
    *out = b;
    return 0;
free_b:
    free(b);
    cuc_pool_unref(pool); /* not the last: the caller holds one */
close:
    CUC_DRV->cuIpcCloseMemHandle(ptr);
free_ib:
    free(ib);
    return rc;
}
