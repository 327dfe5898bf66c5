/* Slabs (cucore/slab.h): buffers carved as views out of large pool
 * allocations. Each slab keeps its free ranges (sorted by offset, merged)
 * and the ranges whose free's event has not been seen complete; a carved
 * buffer owns the node that describes its range, which goes to the
 * pending list at its release (buffer.c calls range_freed through the
 * view's carve hook, from its release, once its references, holds and leases are gone),
 * so a free allocates nothing and cannot fail half-way.
 *
 * Events are shared (struct mark): a range freed on the device's legacy
 * stream (the lease ends' and a NULL stream's) waits unmarked, with no
 * driver call, until the next carve records one event on that stream for
 * every such range of the allocator (recorded later on the same stream,
 * it completes after all they wait for). A range freed on another stream
 * gets an event of its own at its release, as that stream may be
 * destroyed before the next carve. So n buffers released together cost
 * one event, not n, and a reap queries each event once. */
#include "memory/slab.h"

#include <stdlib.h>

/* An event the pending ranges that point to it wait for. */
struct mark {
    CUevent ev;
    size_t refs; /* ranges pointing to it (s->lock) */
    int done;    /* seen complete */
};

struct cuc__slab_range {
    struct cuc__carve carve; /* first: a carved view's release finds us by it */
    struct cuc__slab_chunk *chunk;
    size_t off, size; /* size: rounded up to CUC_SLAB_ALIGN */
    struct mark *mark; /* pending: the free's event */
    struct cuc__slab_range *next;
};

struct cuc__slab_chunk {
    cuc_slab *slab;
    cuc_buffer *root; /* the slab's allocation (a reference) */
    size_t live;      /* bytes carved out and not released */
    size_t lost;      /* bytes whose free could not be ordered: never reused */
    struct cuc__slab_range *free, *pend;
    struct cuc__slab_range *unmarked; /* freed on the legacy stream, no event yet */
    struct cuc__slab_chunk *next;
};

struct cuc_slab {
    pthread_mutex_t lock;
    int refs;
    cuc_pool *pool; /* a reference */
    size_t slab_size;
    size_t unmarked; /* ranges on the chunks' unmarked lists */
    struct cuc__slab_chunk *chunks;
    struct cuc__slab_range *spare; /* nodes for the next carves (s->lock) */
};

/* A range node no longer used, kept for the next carve (s->lock held):
 * freed with the allocator. */
static void node_put_locked(cuc_slab *s, struct cuc__slab_range *r)
{
    r->next = s->spare;
    s->spare = r;
}

static size_t round_up(size_t n) { return (n + CUC_SLAB_ALIGN - 1) / CUC_SLAB_ALIGN * CUC_SLAB_ALIGN; }

int cuc_slab_create(cuc_pool *pool, size_t slab_size, cuc_slab **out)
{
    cuc_slab *s;

    if (!pool || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_slab_create: NULL argument");
    if (slab_size == 0 || slab_size > SIZE_MAX - CUC_SLAB_ALIGN)
        return cuc__seterr(CUC_E_INVALID, "cuc_slab_create: slab size %zu (give the "
                           "bytes of each slab, e.g. 2 MiB)", slab_size);
    if (pool->imported || !(pool->flags & CUC_POOL_IPC))
        return cuc__seterr(CUC_E_INVALID, "cuc_slab_create: pool %s is %s: slabs carve "
                           "an IPC pool of this process (a local pool's buffers are "
                           "never exported: allocate them plainly)",
                           cuc__pool_id_hex(pool->id).s, pool->imported ? "imported" : "not IPC");
    s = calloc(1, sizeof(*s));
    if (!s)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a slab allocator");
    pthread_mutex_init(&s->lock, NULL);
    s->refs = 1;
    s->pool = cuc_pool_ref(pool);
    s->slab_size = round_up(slab_size);
    *out = s;
    return 0;
}

cuc_slab *cuc_slab_ref(cuc_slab *s)
{
    if (!s)
        return NULL;
    pthread_mutex_lock(&s->lock);
    s->refs++;
    pthread_mutex_unlock(&s->lock);
    return s;
}

static void mark_put(struct mark *k)
{
    if (--k->refs == 0) {
        CUC_DRV->cuEventDestroy(k->ev);
        free(k);
    }
}

/* Puts r back into c's free list, merging with its neighbours. */
static void free_insert(struct cuc__slab_chunk *c, struct cuc__slab_range *r)
{
    struct cuc__slab_range **pp = &c->free, *prev = NULL;

    while (*pp && (*pp)->off < r->off) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    r->next = *pp;
    *pp = r;
    if (r->next && r->off + r->size == r->next->off) {
        struct cuc__slab_range *n = r->next;
        r->size += n->size;
        r->next = n->next;
        node_put_locked(c->slab, n);
    }
    if (prev && prev->off + prev->size == r->off) {
        prev->size += r->size;
        prev->next = r->next;
        node_put_locked(c->slab, r);
    }
}

/* One event recorded now on st (NULL: none usable; refs 1: the caller's),
 * or NULL where that failed; *synced then says whether st could be
 * synchronized instead. */
static struct mark *mark_on(cuc_stream *st, int *synced)
{
    struct mark *k = calloc(1, sizeof(*k));

    *synced = 0;
    if (k && st && CUC_DRV->cuEventCreate(&k->ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
        if (CUC_DRV->cuEventRecord(k->ev, st->cu) == CUDA_SUCCESS) {
            k->refs = 1;
            return k;
        }
        CUC_DRV->cuEventDestroy(k->ev);
    }
    free(k);
    *synced = st && CUC_DRV->cuStreamSynchronize(st->cu) == CUDA_SUCCESS;
    return NULL;
}

/* mark_on the device's legacy stream, made current. */
static struct mark *legacy_mark(cuc_slab *s, int *synced)
{
    CUC__CTX_RESTORE(guard);
    cuc_stream *st = NULL;

    if (cuc__stream_or_legacy(s->pool->dev, NULL, &st) || cuc__device_activate(&guard, st->dev))
        st = NULL;
    return mark_on(st, synced);
}

/* Moves c's unmarked ranges to its pending list under k; without k, to
 * its free list when the stream was synchronized, else they are lost
 * (never reused: the slab goes back with the allocator). s->lock held. */
static void mark_chunk_locked(struct cuc__slab_chunk *c, struct mark *k, int synced)
{
    while (c->unmarked) {
        struct cuc__slab_range *r = c->unmarked;
        c->unmarked = r->next;
        if (k) {
            k->refs++;
            r->mark = k;
            r->next = c->pend;
            c->pend = r;
        } else if (synced) {
            free_insert(c, r);
        } else {
            c->lost += r->size;
            node_put_locked(c->slab, r);
        }
    }
}

/* One event for every unmarked range of s (s->lock held). */
static void mark_unmarked_locked(cuc_slab *s)
{
    struct mark *k;
    int synced;

    if (!s->unmarked)
        return;
    k = legacy_mark(s, &synced);
    for (struct cuc__slab_chunk *c = s->chunks; c; c = c->next)
        mark_chunk_locked(c, k, synced);
    s->unmarked = 0;
    if (k)
        mark_put(k);
}

/* Moves the pending ranges whose event has completed to the free lists
 * (s->lock held), each event queried once. An event that reports
 * anything but done stays pending. */
static void reap_locked(cuc_slab *s)
{
    mark_unmarked_locked(s);
    for (struct cuc__slab_chunk *c = s->chunks; c; c = c->next) {
        struct cuc__slab_range **pp = &c->pend;
        struct mark *asked = NULL;
        while (*pp) {
            struct cuc__slab_range *r = *pp;
            if (!r->mark->done && r->mark != asked) {
                asked = r->mark;
                r->mark->done = CUC_DRV->cuEventQuery(r->mark->ev) == CUDA_SUCCESS;
            }
            if (!r->mark->done) {
                pp = &r->next;
                continue;
            }
            *pp = r->next;
            mark_put(r->mark);
            r->mark = NULL;
            free_insert(c, r);
        }
    }
}

/* Gives c's allocation back to the pool on stream, after the frees of its
 * pending ranges (a failed wait falls back to waiting here); c is out of
 * the slab's list already (s->lock taken here). */
static void chunk_return(struct cuc__slab_chunk *c, cuc_stream *stream)
{
    CUC__CTX_RESTORE(guard);
    cuc_slab *s = c->slab;
    cuc_stream *st = NULL;
    struct cuc__slab_range *r, *next;
    struct mark *waited = NULL;

    if (cuc__stream_or_legacy(s->pool->dev, stream, &st) || cuc__device_activate(&guard, st->dev))
        st = NULL;
    pthread_mutex_lock(&s->lock);
    if (c->unmarked) { /* its legacy-stream frees get their event now */
        int synced;
        struct mark *k = legacy_mark(s, &synced);
        for (struct cuc__slab_range *u = c->unmarked; u; u = u->next)
            s->unmarked--;
        mark_chunk_locked(c, k, synced);
        if (k)
            mark_put(k);
    }
    for (r = c->pend; r; r = next) {
        next = r->next;
        if (r->mark != waited && !r->mark->done &&
            (!st || CUC_DRV->cuStreamWaitEvent(st->cu, r->mark->ev, CU_EVENT_WAIT_DEFAULT) !=
                        CUDA_SUCCESS))
            CUC_DRV->cuEventSynchronize(r->mark->ev);
        waited = r->mark;
        mark_put(r->mark);
        free(r);
    }
    pthread_mutex_unlock(&s->lock);
    for (r = c->free; r; r = next) {
        next = r->next;
        free(r);
    }
    cuc_buffer_unref_async(c->root, stream);
    free(c);
}

static void slab_destroy(cuc_slab *s);

void cuc_slab_unref(cuc_slab *s)
{
    int last;

    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    last = --s->refs == 0;
    pthread_mutex_unlock(&s->lock);
    if (last)
        slab_destroy(s);
}

static void slab_destroy(cuc_slab *s)
{
    struct cuc__slab_chunk *c, *next;
    struct cuc__slab_range *r, *rnext;

    /* Only slabs with lost ranges are left (the others went with their
     * last range): the legacy stream orders their free after the work of
     * every blocking stream of the device. */
    for (c = s->chunks; c; c = next) {
        next = c->next;
        chunk_return(c, NULL);
    }
    for (r = s->spare; r; r = rnext) {
        rnext = r->next;
        free(r);
    }
    pthread_mutex_destroy(&s->lock);
    cuc_pool_unref(s->pool);
    free(s);
}

/* First fit of size bytes in c: the range taken, or 0 with none. */
static int take_locked(struct cuc__slab_chunk *c, size_t size, size_t *off)
{
    for (struct cuc__slab_range **pp = &c->free; *pp; pp = &(*pp)->next) {
        struct cuc__slab_range *f = *pp;
        if (f->size < size)
            continue;
        *off = f->off;
        f->off += size;
        f->size -= size;
        if (f->size == 0) {
            *pp = f->next;
            node_put_locked(c->slab, f);
        }
        c->live += size;
        return 1;
    }
    return 0;
}

/* A new slab, its whole range free, appended to s's list (not locked:
 * linked by the caller). */
static int chunk_new(cuc_slab *s, cuc_stream *stream, struct cuc__slab_chunk **out)
{
    struct cuc__slab_chunk *c = calloc(1, sizeof(*c));
    struct cuc__slab_range *r = calloc(1, sizeof(*r));
    int rc;

    if (!c || !r) {
        rc = cuc__seterr(CUC_E_NOMEM, "out of memory for a slab");
        goto undo_calloc;
    }
    rc = cuc_buffer_alloc_async(s->pool, s->slab_size, stream, &c->root);
    if (rc)
        goto undo_calloc;
    r->chunk = c;
    r->size = s->slab_size;
    c->free = r;
    c->slab = s;
    *out = c;
    return 0;
undo_calloc:
    free(r);
    free(c);
    return rc;
}

/* Carves size (rounded) bytes: the chunk and offset, with c->live
 * counting them (s->lock taken here). */
static int carve(cuc_slab *s, size_t size, cuc_stream *stream,
                 struct cuc__slab_chunk **chunk, size_t *off, struct cuc__slab_range **node)
{
    struct cuc__slab_chunk *c, **tail;
    struct cuc__slab_range *r;
    int rc;

    pthread_mutex_lock(&s->lock);
    if ((r = s->spare) != NULL) {
        s->spare = r->next;
    } else { /* none kept yet: one from malloc, unlocked */
        pthread_mutex_unlock(&s->lock);
        r = malloc(sizeof(*r));
        if (!r)
            return cuc__seterr(CUC_E_NOMEM, "out of memory for a slab range");
        pthread_mutex_lock(&s->lock);
    }
    reap_locked(s);
    for (tail = &s->chunks; (c = *tail); tail = &c->next) {
        if (take_locked(c, size, off)) {
            s->refs++; /* the carved buffer's */
            pthread_mutex_unlock(&s->lock);
            *chunk = c;
            *node = r;
            return 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    rc = chunk_new(s, stream, &c);
    if (rc) {
        free(r);
        return rc;
    }
    take_locked(c, size, off);
    pthread_mutex_lock(&s->lock);
    for (tail = &s->chunks; *tail; tail = &(*tail)->next)
        ;
    *tail = c;
    s->refs++;
    pthread_mutex_unlock(&s->lock);
    *chunk = c;
    *node = r;
    return 0;
}

/* Gives a range never used back at once (an alloc that failed after the
 * carve). */
static void uncarve(struct cuc__slab_chunk *c, struct cuc__slab_range *r)
{
    pthread_mutex_lock(&c->slab->lock);
    c->live -= r->size;
    c->slab->refs--; /* not the last: the caller holds one */
    free_insert(c, r);
    pthread_mutex_unlock(&c->slab->lock);
}

static int range_freed(struct cuc__carve *carve, cuc_stream *stream, int ordered);

int cuc_slab_alloc_async(cuc_slab *s, size_t size, cuc_stream *stream, cuc_buffer **out)
{
    struct cuc__slab_chunk *c = NULL;
    struct cuc__slab_range *r = NULL;
    cuc_buffer *v;
    size_t off = 0;
    int rc;

    if (!s || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_slab_alloc_async: NULL argument");
    if (size == 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_slab_alloc_async: size 0 (allocate at "
                           "least one byte)");
    if (size > s->slab_size)
        return cuc_buffer_alloc_async(s->pool, size, stream, out);
    rc = carve(s, round_up(size), stream, &c, &off, &r);
    if (rc)
        return rc;
    *r = (struct cuc__slab_range){{range_freed}, c, off, round_up(size), NULL, NULL};
    /* c stays: its live bytes count this range */
    rc = cuc__view_new(c->root, off, size, &v);
    if (rc) {
        uncarve(c, r);
        return rc;
    }
    v->carve = &r->carve;
    pthread_mutex_lock(&s->pool->lock);
    c->root->refs++; /* with the index, under one lock: c holds root meanwhile */
    cuc__view_index_locked(v);
    pthread_mutex_unlock(&s->pool->lock);
    *out = v;
    return 0;
}

static int range_freed(struct cuc__carve *carve, cuc_stream *stream, int ordered)
{
    CUC__CTX_RESTORE(guard);
    struct cuc__slab_range *r = (struct cuc__slab_range *)carve;
    struct cuc__slab_chunk *c = r->chunk;
    cuc_slab *s = c->slab;
    cuc_stream *st = NULL;
    struct mark *k = NULL;
    size_t size = r->size;
    int lost = 1, later, empty, last;

    if (cuc__stream_or_legacy(s->pool->dev, stream, &st))
        st = NULL;
    /* the legacy stream outlives us: its event can wait for the next carve */
    later = ordered && st && st->kind == CUC_STREAM_LEGACY_DEFAULT && st->dev == s->pool->dev;
    if (ordered && !later) {
        int synced;

        if (st && cuc__device_activate(&guard, st->dev))
            st = NULL;
        k = mark_on(st, &synced); /* an event of its own marks the range's free */
        lost = !k && !synced;
    }
    pthread_mutex_lock(&s->lock);
    c->live -= r->size;
    if (later) {
        lost = 0;
        r->next = c->unmarked;
        c->unmarked = r;
        s->unmarked++;
    } else if (lost) {
        c->lost += r->size;
        node_put_locked(s, r);
    } else if (k) {
        r->mark = k;
        r->next = c->pend;
        c->pend = r;
    } else {
        free_insert(c, r);
    }
    empty = c->live == 0 && c->lost == 0;
    if (empty) {
        struct cuc__slab_chunk **pp = &s->chunks;
        while (*pp != c)
            pp = &(*pp)->next;
        *pp = c->next;
    }
    last = --s->refs == 0; /* the carved buffer's reference */
    pthread_mutex_unlock(&s->lock);
    if (empty)
        chunk_return(c, stream);
    if (last)
        slab_destroy(s);
    /* unordered: the view's release reports why */
    return lost && ordered ? cuc__seterr(CUC_E_DRIVER, "freeing a %zu-byte slab buffer: neither an "
                              "event nor a synchronize of its stream worked, so its range "
                              "is not reused", size) : 0;
}

int cuc_slab_stats(cuc_slab *s, size_t *slabs, size_t *bytes_in_use)
{
    size_t n = 0, used = 0;

    if (!s)
        return cuc__seterr(CUC_E_INVALID, "cuc_slab_stats: NULL argument");
    pthread_mutex_lock(&s->lock);
    reap_locked(s);
    for (struct cuc__slab_chunk *c = s->chunks; c; c = c->next) {
        n++;
        used += c->live + c->lost;
        for (struct cuc__slab_range *r = c->pend; r; r = r->next)
            used += r->size;
        for (struct cuc__slab_range *r = c->unmarked; r; r = r->next)
            used += r->size;
    }
    pthread_mutex_unlock(&s->lock);
    if (slabs)
        *slabs = n;
    if (bytes_in_use)
        *bytes_in_use = used;
    return 0;
}
