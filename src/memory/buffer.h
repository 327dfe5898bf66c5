/* Buffers (buffer.c): allocation, references, the pool's table of its
 * buffers by export data, the lease ops that keep a buffer's memory while
 * importers map it, and the free itself. Their records (buffer_share.c)
 * export the pointer and import through the pool's table; many imported
 * buffers can be dropped at once (buffer_unref_many.c). */
#ifndef CUC_MEMORY_BUFFER_H
#define CUC_MEMORY_BUFFER_H

#include "cucore/memory.h"
#include "exec/stream.h"
#include "lease/gate.h"
#include "lease/lease.h"
#include "memory/pool.h"
#include "memory/settle.h"

enum cuc__buf_state {
    CUC__BUF_LIVE = 0,     /* references held */
    CUC__BUF_DEFERRED = 1, /* no reference; leases or messages keep it */
    CUC__BUF_FREEING = 2   /* the free is under way: not to be found */
};

/* The legacy-IPC identity of a wrapped or opened allocation (a root of a
 * legacy pool, pool.h): found in pool->bufs by (exporter, gen) through the
 * buffer's node, and, wrapped here, in pool->bases by its base through
 * by_base. */
struct cuc__ipc_base {
    CUipcMemHandle handle;
    uint8_t exporter[16];
    uint64_t gen;
    int opened; /* cuIpcOpenMemHandle'd: closed at the release */
    struct cuc_buffer *owner;
    struct cuc__hnode by_base;
};

/* All but pool, ptr, size, imported, root and offset are guarded by
 * pool->lock. A view (root set) has no driver memory of its own: it holds
 * a reference to the allocation it is part of, and is found in
 * pool->views through node (it never has export data). */
struct cuc__carve;
struct cuc__releases;

struct cuc_buffer {
    cuc_pool *pool; /* a reference */
    CUdeviceptr ptr;
    size_t size;
    int imported;
    pid_t creator; /* made here, or inherited through fork (inert) */
    int refs;      /* cuc_buffer_alloc_async / _ref / cuc_msg_get_buffer */
    size_t holds;  /* messages holding it (lease attachments) */
    size_t leases; /* leases begun and not ended */
    int state;     /* enum cuc__buf_state */
    CUevent free_after; /* DEFERRED: recorded on the last unref's stream */
    int have_export;
    CUmemPoolPtrExportData export_data;
    struct cuc__hnode node; /* in pool->bufs while have_export */
    struct cuc__hnode by_ptr; /* a pool import: in pool->imports while in_imports */
    int in_imports;
    struct cuc__upstream anchor; /* imported: the lease it was imported under */
    struct cuc__upstream *extra; /* further leases it arrived under */
    size_t nextra, extra_cap;
    cuc_buffer *root; /* a view: its allocation (a reference); else NULL */
    size_t offset;    /* a view: where it starts in root */
    int in_views;     /* a view findable in pool->views */
    struct cuc__carve *carve; /* a view carved by a slab allocator: its range */
    struct cuc__ipc_base *ipc; /* legacy IPC memory (an allocation, not a view) */
    /* memory another allocator owns (cuc_buffer_adopt, an allocation):
     * never freed here; its owner's releases run at the release. Always
     * set for a pool's adopted allocation (in pool->imports by by_ptr);
     * for legacy memory once an adopt gave it a release. */
    struct cuc__releases *adopted;
    /* from an attached message: what a use of the memory waits for (a
     * reference, set once, atomically, by the first message that gives it) */
    struct cuc__gate *gate;
};

/* Waits for b's gate, or its allocation's (0 at once for a buffer of no
 * attach); the gate's refusal or CUC_E_TIMEOUT otherwise. */
int cuc__buffer_pass(const cuc_buffer *b);
/* Gives b the gate of m, the message it was got from, unless it has one. */
void cuc__buffer_set_gate(cuc_buffer *b, const cuc_msg *m);

/* The ops of the leases a message holding the buffer begins. */
extern const struct cuc__lease_ops cuc__buffer_lease_ops;

/* A new buffer object (refs 1) of pool at ptr; takes a pool reference. */
int cuc__buffer_new(cuc_pool *pool, CUdeviceptr ptr, size_t size, int imported,
                    cuc_buffer **out);
/* Frees a buffer object (kept for this thread's next cuc__buffer_new; a
 * plain free() of one is fine too). NULL is ignored. */
void cuc__buffer_obj_free(cuc_buffer *b);

/* ---- the pool's tables by export data and by pointer (pool->lock held) ----
 * An allocation is named by the first CUC__EXPORT_KEY_LEN bytes of its
 * export data, the part the driver writes: the 16 it leaves unwritten
 * are sent as they were and passed to the driver, but a record that
 * differs from a buffer's only there names that buffer
 * (docs/wire-format.md, "The 16 unwritten bytes"). */
#define CUC__EXPORT_KEY_LEN 48u
/* Makes b findable by d (recorded as its export data); hash is d's, as
 * cuc__buffer_find_locked gave it, or 0 to have it computed. An import
 * (b->imported) is also made findable by its pointer. */
int cuc__buffer_index_locked(cuc_buffer *b, const CUmemPoolPtrExportData *d, uint64_t hash);
/* The buffer of pool with export data d that is not being freed, waiting
 * for one that is, or NULL; *hash is d's hash where it was computed, else
 * 0 (an import indexes with it: one hash of the key, not two). */
cuc_buffer *cuc__buffer_find_locked(cuc_pool *pool, const CUmemPoolPtrExportData *d,
                                    uint64_t *hash);
/* The import of pool at ptr that is not being freed, waiting for one that
 * is, or NULL. */
cuc_buffer *cuc__buffer_import_at_locked(cuc_pool *pool, CUdeviceptr ptr);
/* Removes b from the tables. */
void cuc__buffer_forget_locked(cuc_buffer *b);

/* Called with pool->lock held when something that keeps b went away:
 * 1 if nothing keeps it any more (its state is then FREEING and the caller
 * must call cuc__buffer_release() after unlocking). */
int cuc__buffer_unkept_locked(cuc_buffer *b);
/* Frees what b holds: the driver's memory (stream, or after free_after
 * on the legacy stream), its entry in the pool's table, its upstream
 * leases, the pool reference. A view's release instead drops its
 * allocation, after what its last unref's stream had queued, then its
 * upstream leases (the allocation unmapped first when that was its last
 * reference). Returns the first failure; when the free of an imported
 * buffer (or the ordering of an imported view's) failed its leases are
 * kept, not released. */
int cuc__buffer_release(cuc_buffer *b, cuc_stream *stream);
/* The driver's part of a free, on stream (NULL: the device's legacy
 * stream): waits for a deferred free's event, cuMemFreeAsync, and for an
 * imported buffer, when sync, waits for the stream (the exporter may reuse
 * the memory once we release). The first failure is returned. */
int cuc__buffer_free_memory(cuc_buffer *b, cuc_stream *stream, int sync);
/* cuMemFreeAsync of b's memory on s, whose device is current (no deferred
 * free's event to wait for). */
int cuc__buffer_free_on(cuc_buffer *b, cuc_stream *s);
/* Appends to this thread's message that the leases were kept. */
void cuc__buffer_note_kept(void);

/* 1 if stream (NULL: the legacy one) is the legacy default stream of b's
 * device, which orders a later free there after what it has queued. */
static inline int cuc__buffer_on_legacy(const cuc_buffer *b, const cuc_stream *stream)
{
    return !stream || (stream->kind == CUC_STREAM_LEGACY_DEFAULT && stream->dev == b->pool->dev);
}

/* buffer_share.c: b's pointer export data, computed by the driver the
 * first time and cached (b is then findable by it in its pool). */
int cuc__buffer_export(const cuc_buffer *b, CUmemPoolPtrExportData *out);

/* ---- views (buffer_view.c) ---- */
/* A new view (refs 1) of size bytes at off in root (an allocation, not a
 * view), taking over the caller's reference to root. Not indexed. */
int cuc__view_new(cuc_buffer *root, size_t off, size_t size, cuc_buffer **out);
/* The view of root at (off, size) findable in the pool's table and not
 * being freed (waiting for one that is), or NULL (pool->lock held). */
cuc_buffer *cuc__view_find_locked(cuc_buffer *root, size_t off, size_t size);
/* Makes v findable (pool->lock held); a view of the same part already
 * there stays the one found. */
void cuc__view_index_locked(cuc_buffer *v);
/* cuc__view_index_locked() for a view whose part the caller has just
 * looked for and not found, under the same hold of pool->lock. */
void cuc__view_insert_locked(cuc_buffer *v);

/* ---- carved views (slab.c) ---- */
/* The range a sub-allocator carved a view from: a view's release calls
 * freed once the view is out of pool->views, to give the range back in
 * order after stream (ordered 0: the wait for the last unref's stream
 * failed, and the range must never be reused). A callback, as lease ops are: the allocator sits
 * above buffers and views. */
struct cuc__carve {
    int (*freed)(struct cuc__carve *c, cuc_stream *stream, int ordered);
};
/* ---- legacy IPC memory (buffer_ipc.c) ---- */
/* The wrapped or opened allocation of (exporter, gen) in a legacy pool,
 * not being freed, or NULL (pool->lock held). */
cuc_buffer *cuc__ipc_find_locked(cuc_pool *pool, const uint8_t exporter[16], uint64_t gen);
/* The wrapped root (a new reference) of the cuMemAlloc allocation of dev
 * at base (bsize bytes, as the driver gave them) that [ptr, ptr + size)
 * is in: found, or wrapped now (its handle taken). CUC_E_INVALID when
 * the part does not fit. */
int cuc__ipc_root(cuc_device *dev, CUdeviceptr ptr, size_t size, CUdeviceptr base,
                  size_t bsize, cuc_buffer **out);
/* 1 if exporter is this process's identity. */
int cuc__ipc_is_self(const uint8_t exporter[16]);
/* Opens what rec names (cuIpcOpenMemHandle) as a new imported allocation
 * of pool (refs 1, no lease yet), findable (pool->lock held). */
int cuc__ipc_open_locked(cuc_pool *pool, const struct cuc_ipc_buffer_record *rec,
                         cuc_buffer **out);
/* rec's identity and handle fields for root (an allocation with ipc). */
void cuc__ipc_fill(const cuc_buffer *root, struct cuc_ipc_buffer_record *rec);
/* buffer.c: the driver's part of releasing root (its ipc set): an opened base waits
 * for stream (NULL: legacy) and is closed; wrapped memory is the user's,
 * nothing is freed. */
int cuc__ipc_free_memory(cuc_buffer *root, cuc_stream *stream);
/* Drops root from the pool's tables (pool->lock held). */
void cuc__ipc_forget_locked(cuc_buffer *root);

/* What a wait for b's leases watches. */
struct cuc__lease_gauge *cuc__buffer_gauge(cuc_buffer *b, struct cuc__lease_gauge *g);

#endif
