/* The cucore._core extension: what its files share. The module is written
 * over cucore's public headers only (<cucore.h>); each object type has its
 * own file, and the pickle/share point machinery its own. */
#ifndef CUCORE_PY_H
#define CUCORE_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/types.h>

#include <cucore.h>

/* Types, each defined in the file of its name. */
extern PyTypeObject PyDevice_Type, PyStream_Type, PyEvent_Type, PyKernel_Type,
    PyLaunchConfig_Type, PyPool_Type, PyBuffer_Type, PyVmm_Type, PyChannel_Type,
    PyListener_Type, PySlab_Type;

typedef struct {
    PyObject_HEAD
    cuc_device *dev;
} PyDevice;

typedef struct {
    PyObject_HEAD
    PyObject *weak;
    cuc_stream *s;
    int owned; /* a created stream: destroyed with the object */
    pid_t pid;
} PyStream;

typedef struct {
    PyObject_HEAD
    PyObject *weak;
    cuc_event *e;
    pid_t pid;
} PyEvent;

typedef struct {
    PyObject_HEAD
    PyObject *weak;
    cuc_kernel *k;
    PyObject *key; /* hash + name: identity in this process */
    pid_t pid;
} PyKernel;

typedef struct {
    PyObject_HEAD
    cuc_launch_config cfg;
} PyLaunchConfig;

typedef struct {
    PyObject_HEAD
    PyObject *weak;
    cuc_pool *p;
    pid_t pid;
} PyPool;

/* keytab.c: a chained hash table of entries embedding a keynode, keyed by
 * a 64-bit integer (a token, an address), for the extension's own
 * registries (hold.c, claim.c): libcucore does not export its table.
 * Entries with equal keys may coexist. Not thread-safe: its owner locks. */
struct keynode {
    struct keynode *chain;
    uint64_t key;
};

struct keytab {
    struct keynode **buckets; /* NULL until the first insert */
    size_t nbuckets;          /* a power of two */
    size_t count;
};

/* The first entry with key, or the next one after n with n's key; NULL. */
struct keynode *keytab_first(const struct keytab *t, uint64_t key);
struct keynode *keytab_next(const struct keynode *n);
/* Inserts n (n->key set); -1 if the table had to grow and could not. */
int keytab_insert(struct keytab *t, struct keynode *n);
/* Removes n, which is in t. */
void keytab_remove(struct keytab *t, struct keynode *n);
/* Calls fn on every entry; fn must not change the table. */
void keytab_each(const struct keytab *t, void (*fn)(struct keynode *, void *), void *arg);

/* The imports (claim.c) a reference to imported memory is a user of. */
struct uses {
    const cuc_buffer *own, *up; /* their keys, or NULL */
};

/* A reference to drop and the imports whose user it was. */
struct drop {
    cuc_buffer *b;
    struct uses u;
};

typedef struct {
    PyObject_HEAD
    PyObject *weak;
    cuc_buffer *b; /* NULL once closed */
    pid_t pid;
    Py_ssize_t exports; /* live DLPack capsules and tensors (interop.c) */
    Py_ssize_t busy;    /* copies running with the GIL let go (copy.c) */
    PyObject *rec;      /* its record's bytes, made at its first pickle (share.c) */
    Py_ssize_t lease_at; /* where in rec the lease id is */
    int claimed;        /* it arrived by pickle: claim.c has its claims */
    const cuc_buffer *up; /* a view made here of an import that arrived by pickle */
    PyObject *stream;   /* the Stream its allocation was ordered on (allocate(stream=s),
                         * its views too): CAI and DLPack name it; NULL: the legacy one */
} PyBuffer;

typedef struct {
    PyObject_HEAD
    PyObject *weak;
    cuc_vmm *v;
    uint64_t token; /* its share point registration (0: none) */
    pid_t pid;
    Py_ssize_t busy; /* copies running with the GIL let go (copy.c) */
} PyVmm;

typedef struct {
    PyObject_HEAD
    cuc_channel *ch;
    pid_t pid;
    Py_ssize_t busy; /* calls running on it with the GIL let go */
} PyChannel;

typedef struct {
    PyObject_HEAD
    cuc_listener *l;
    PyObject *path;
    pid_t pid;
    int busy; /* an accept running with the GIL let go */
} PyListener;

/* errors.c: raises the cucore.Error subclass of status with cuc_errmsg()'s
 * text (or fmt's); returns NULL for `return py_raise(rc);`. */
int errors_init(PyObject *module);
PyObject *py_raise(int status);
PyObject *py_raise_fmt(int status, const char *fmt, ...);
/* Raises a class of cucore._errors by name with code and text. */
PyObject *py_raise_named(const char *cls, const char *code, const char *fmt, ...);
/* This process's pid (cached; refreshed after fork). */
pid_t py_pid(void);
/* 0 if obj was made in this process; else raises (inherited through fork). */
int py_check_pid(pid_t pid, const char *what);
/* thread.c: fn(arg) on a new detached thread: 0, or -1 when none could
 * start. */
int py_thread_detached(void *(*fn)(void *), void *arg);

/* live.c: this process's Python object of a cucore object (identity across
 * pickle round trips). Lookups return a new reference or NULL (no error
 * set); an object registered by pointer removes itself (live_del_ptr)
 * before it goes. */
int live_init(void);
PyObject *live_get(PyObject *key);
int live_put(PyObject *key, PyObject *obj);
void live_del(PyObject *key);
PyObject *live_get_ptr(const void *p);
int live_put_ptr(const void *p, PyObject *obj);
void live_del_ptr(const void *p, const PyObject *obj);

/* device.c */
PyObject *device_wrap(cuc_device *dev);
/* A Device, an int ordinal, a UUID string, or anything with .uuid. */
int device_arg(PyObject *o, cuc_device **dev);
PyObject *py_devices(PyObject *self, PyObject *noargs);
PyObject *py_current_device(PyObject *self, PyObject *noargs);

/* stream.c: None is NULL (the legacy default stream). */
int stream_arg(PyObject *o, cuc_stream **s);
PyObject *stream_wrap_default(cuc_stream *s);

/* event.c, kernel.c, pool.c, buffer.c, vmm.c: wrap a reference the caller
 * gives away (the existing Python object when there is one). */
PyObject *event_wrap(cuc_event *e);
PyObject *kernel_wrap(cuc_kernel *k);
PyObject *launch_config_wrap(const cuc_launch_config *cfg);
PyObject *pool_wrap(cuc_pool *p);
PyObject *buffer_wrap(cuc_buffer *b);
PyObject *vmm_wrap(cuc_vmm *v);
int buffer_live(PyBuffer *b);
struct uses buffer_uses(const PyBuffer *o);
/* Waits for the legacy default stream of b's device. */
int buffer_sync_default(cuc_buffer *b); /* 0, or raises for a closed/inherited one */
int vmm_live(PyVmm *v);

/* wire.c: messages of Python objects. */
int wire_init(PyObject *module);
int wire_add(cuc_msg *m, PyObject *obj);
/* An fd number given by Python: an int (not a bool) in 0..INT_MAX; -1 raised. */
int wire_fd_arg(PyObject *o, int *fd);
/* Every record of m as objects (a tuple). */
PyObject *wire_resolve(cuc_msg *m);
/* One object in m (fd-free) as pickle's (cucore._core._load, (bytes,)). */
PyObject *wire_reduce(PyObject *obj);
PyObject *py_load(PyObject *self, PyObject *arg);

/* share.c: the share point (objects with fds through pickle). */
PyObject *share_reduce_pool(PyPool *p);
PyObject *share_reduce_buffer(PyBuffer *b);
PyObject *share_reduce_vmm(PyVmm *v);
PyObject *py_load_shared(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *py_share_point(PyObject *self, PyObject *noargs);
PyObject *py_share_close(PyObject *self, PyObject *noargs);
PyObject *py_share_exit(PyObject *self, PyObject *noargs);
PyObject *py_host_id(PyObject *self, PyObject *noargs);
void share_vmm_forget(uint64_t token);
int share_init(PyObject *module);
PyObject *py_share_flush(PyObject *self, PyObject *noargs);
PyObject *py_share_stats(PyObject *self, PyObject *noargs);
PyObject *py_share_parked(PyObject *self, PyObject *noargs);
struct conn; /* the kept channel to one exporter */
/* Sends n lease ops (claims; releases with bit 63) as one message, without
 * waiting for an answer; an exporter that is gone drops them. */
void share_conn_post(struct conn *c, const uint64_t *ops, size_t n);
/* Reads the stale notices that came unasked, without waiting (claim.c's
 * thread after each round; a request in progress reads them itself). */
void share_conn_drain(struct conn *c);

/* hold.c: the exporter's holds (a pickle's token) and leases (a claimed
 * token, one connection's). */
struct lessee;
/* A lease op (claim.c -> share.c -> hold.c) is a hold token, a release
 * with this bit set (tokens never have it: hold.c). */
#define RELEASE_BIT (1ull << 63)
int hold_new(cuc_buffer *b, struct uses u, uint64_t *token);
int64_t hold_now_ms(void);
int64_t hold_sync_after_ms(uint64_t token);
struct lessee *hold_lessee_new(void);
void hold_lessee_end(struct lessee *l);
int hold_apply(struct lessee *l, uint64_t token, int claim);
void hold_apply_many(struct lessee *l, uint64_t *ops, size_t n, size_t *nstale);
void hold_sweep(void);
size_t hold_count(const cuc_buffer *b, const cuc_pool *pool);
size_t hold_wait(const cuc_pool *pool, size_t max_left, int ms, int64_t spin_until);
void hold_stats(size_t *unclaimed, size_t *leased);
/* A message from an importer was dropped unread (no fd free for it): the
 * holds unclaimed now may have lost their claims; they are kept past
 * their time (hold.c). */
void hold_keep_unclaimed(void);
void hold_after_fork(void);

/* claim.c: the importer's claims, queued for the exporters. A reference
 * that maps imported memory is a user of one or two imports (its own, if
 * it arrived by pickle; the one it is a view of, if a view was made from
 * that here): their claims are released when their last user has gone. */
struct imp;
int claim_add(const cuc_buffer *b, struct conn *c, uint64_t token, int post, int use);
int claim_give_back(struct conn *c, uint64_t token);
void claim_use(struct uses u);
void claim_unuse(struct uses u, int failed);
int claim_finish(cuc_buffer *b, struct uses u, cuc_stream *s);
int claim_drop_later(cuc_buffer *b, struct uses u);
int claim_drop_many(struct drop *d, size_t n, cuc_stream *s);
void claim_send_now(void);
void claim_flush(void);
void claim_close(void);
void claim_after_fork(void);
void claim_mark_stale(struct conn *c, long pid, const uint64_t *tokens, size_t n);
int claim_check(const cuc_buffer *b);

/* park.c: references of imports sent on through a Channel, kept (their
 * users not counted off) until those leases end. */
int park_if_leased(cuc_buffer *b, struct uses u);
size_t park_count(void);
void park_after_fork(void);
/* Holds and leases of a buffer / of a pool's buffers, C's and the share
 * point's together (buffer.c, pool.c). */
int share_lease_count(const cuc_buffer *b, const cuc_pool *pool, size_t *n);

PyObject *py_listen(PyObject *self, PyObject *arg);

/* slab.c */
PyObject *py_wrap(PyObject *self, PyObject *args, PyObject *kw);

/* launch.c */
PyObject *py_launch(PyObject *self, PyObject *args);

/* buffer.c: a Buffer allocated on stream so (None: none kept). */
PyObject *buffer_wrap_on(cuc_buffer *b, PyObject *so);

/* interop.c: __cuda_array_interface__ / __dlpack__ of a buffer. */
PyObject *interop_cai(PyObject *self, void *closure);
PyObject *interop_dlpack(PyObject *self, PyObject *args, PyObject *kw);
PyObject *interop_dlpack_device(PyObject *self, PyObject *noargs);

/* timeout.c: seconds (None or negative: no limit) as milliseconds (-1:
 * no limit); -1 raised for NaN or a non-number. */
int timeout_arg(PyObject *o, int *ms);

/* copy.c: copy_from / to_bytes / fill of a Buffer's or a VMM resource's
 * memory. A span is that memory, found (span_fn: -1 raised when the object
 * is closed) only once the arguments are parsed; busy is the object's count
 * of copies running with the GIL let go, which its close() refuses. */
struct span {
    void *ptr;
    size_t size;
    cuc_device *dev;
    Py_ssize_t *busy;
};
typedef int (*span_fn)(PyObject *obj, struct span *out);
PyObject *mem_copy_from(PyObject *obj, span_fn open_span, PyObject *args, PyObject *kw);
PyObject *mem_to_bytes(PyObject *obj, span_fn open_span, PyObject *args, PyObject *kw);
PyObject *mem_fill(PyObject *obj, span_fn open_span, PyObject *args);

#endif
