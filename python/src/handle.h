/* cucore._core's low layer (handle.c): the Python objects that hold
 * cucore handles, and what every file above uses on them. The extension
 * is written over cucore's public headers only (<cucore.h>); what other
 * libraries' objects are, it asks cucore._frameworks (py_frameworks). Its
 * layers (scripts/layers.sh checks them), bottom up:
 *   handle.c   the objects' layouts and types, errors, fork checks, the
 *              identity registry, wraps, arguments, pickles' reduce;
 *   mem.c      a Buffer's or VMM resource's memory: allocation, copies,
 *              CAI, DLPack; memory another allocator owns (adopt);
 *   device.c stream.c event.c kernel.c launch.c pool.c buffer.c vmm.c
 *   slab.c     one file a type: its methods and its init;
 *   wire.c     Python objects in cucore messages, a table a record type;
 *   channel.c share.c   Channel and Listener; the share point (unpickling);
 *   module.c   the module.
 * One return convention: a function returning int gives 0, or -1 with a
 * Python exception set; one returning PyObject * gives a new reference, or
 * NULL with an exception set. */
#ifndef CUCORE_PY_HANDLE_H
#define CUCORE_PY_HANDLE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/types.h>

#include <cucore.h>

/* Every object of the module begins so. */
typedef struct {
    PyObject_HEAD
    PyObject *weak;
    void *h;   /* the cucore object (NULL once closed) */
    pid_t pid; /* the process that made it: another one's is inert (fork) */
} PyHandle;

typedef PyHandle PyDevice, PyEvent, PyPool;

typedef struct {
    PyHandle base;
    Py_ssize_t busy;    /* copies running with the GIL let go (mem.c) */
    Py_ssize_t exports; /* live DLPack capsules and tensors (mem.c) */
} PyVmm;

typedef struct {
    PyHandle base;
    int owned;      /* a created or wrapped stream: destroyed with the object */
    PyObject *keep; /* a wrapped stream's maker (its __cuda_stream__ object) */
} PyStream;

typedef struct {
    PyHandle base;
    PyObject *key; /* hash + kind + name: its identity in this process */
} PyKernel;

typedef struct {
    PyObject_HEAD
    cuc_launch_config cfg;
} PyLaunchConfig;

typedef struct {
    PyHandle base;
    Py_ssize_t exports; /* live DLPack capsules and tensors (mem.c) */
    Py_ssize_t busy;    /* calls using its memory with the GIL let go */
    PyObject *stream;   /* the Stream its allocation was ordered on (allocate(stream=s),
                         * its views too): CAI and DLPack name it; NULL: the legacy one */
    int ready;          /* its memory may be used (cuc_buffer_ready said 0 once) */
} PyBuffer;

#define H(o) (((PyHandle *)(o))->h)

/* A getter of a PyGetSetDef table: expr once ok (else NULL: ok raised). */
#define GETTER(fn, ok, expr)                                                                 \
    static PyObject *fn(PyObject *self, void *closure) { return (ok) ? (expr) : NULL; }

/* The types, defined here with their name and size; each type's file sets
 * the rest in its init (module.c calls them). */
extern PyTypeObject PyDevice_Type, PyStream_Type, PyEvent_Type, PyKernel_Type,
    PyLaunchConfig_Type, PyPool_Type, PyBuffer_Type, PyVmm_Type;
/* Readies t and adds it to the module under its name. */
int type_add(PyObject *module, PyTypeObject *t);
int device_init(PyObject *m);
int stream_init(PyObject *m);
int event_init(PyObject *m);
int kernel_init(PyObject *m);
int launch_init(PyObject *m);
int pool_init(PyObject *m);
int buffer_init(PyObject *m);
int vmm_init(PyObject *m);
int slab_init(PyObject *m);
int wire_init(PyObject *m);
int channel_init(PyObject *m);
int share_init(PyObject *m);

/* Errors: the cucore.Error subclass of status (cucore._errors.BY_CODE)
 * with cuc_errmsg()'s text, or fmt's. */
int errors_init(PyObject *module);
PyObject *py_raise(int status);
PyObject *py_raise_fmt(int status, const char *fmt, ...);
int py_fail(int status); /* py_raise, returning -1 */

/* Fork: this process's pid (cached, refreshed after fork); an object made
 * by another process raises CUC_E_FORKED naming what it is. */
pid_t py_pid(void);
int py_check_pid(pid_t pid, const char *what);
/* The object is of this process and not closed (ValueError). */
int handle_live(PyObject *o, const char *what);
/* A buffer whose memory may be used: live, and for an attached one its
 * exporter's confirmation waited for (the GIL let go). */
int buffer_ready(PyBuffer *o);

/* The identity registry: this process's Python object of a cucore object
 * (by its address) or of a kernel (by its key), not kept alive by it. Each
 * object takes itself out (live_del) before it goes. */
int live_init(void);
PyObject *live_get(PyObject *key); /* a new reference, or NULL (no error) */
int live_put(PyObject *key, PyObject *obj);
void live_del(PyObject *key, PyObject *obj);
void live_del_ptr(const void *p, PyObject *obj);

/* Wraps: each takes the reference the caller gives away and returns this
 * process's object of it (the existing one when there is one; handle_wrap:
 * of type t, found by the handle's address). */
PyObject *handle_wrap(PyTypeObject *t, void *h);
PyObject *device_wrap(cuc_device *dev);
PyObject *kernel_wrap(cuc_kernel *k);
PyObject *launch_config_wrap(const cuc_launch_config *cfg);
PyObject *buffer_wrap_on(cuc_buffer *b, PyObject *stream); /* stream None: none kept */
PyObject *stream_own(cuc_stream *s, PyObject *keep); /* a created or wrapped one */
static inline PyObject *stream_wrap_default(cuc_stream *s)
{
    return handle_wrap(&PyStream_Type, s);
}
static inline PyObject *event_wrap(cuc_event *e) { return handle_wrap(&PyEvent_Type, e); }
static inline PyObject *pool_wrap(cuc_pool *p) { return handle_wrap(&PyPool_Type, p); }
static inline PyObject *buffer_wrap(cuc_buffer *b) { return handle_wrap(&PyBuffer_Type, b); }
static inline PyObject *vmm_wrap(cuc_vmm *v) { return handle_wrap(&PyVmm_Type, v); }

/* Arguments. A device: a Device, an ordinal, a UUID string, anything
 * with .uuid (cuda.core's), or a torch.device("cuda", i) (ordinal i). A
 * stream: a Stream, or None (NULL: the legacy default stream); stream_obj
 * makes one of any object with __cuda_stream__ (a new reference: None, a
 * Stream, or a new Stream wrapping another library's). A timeout:
 * seconds, None or negative for no limit (-1 ms). An fd: an int (not a
 * bool) in 0..INT_MAX. */
int device_arg(PyObject *o, cuc_device **dev);
PyObject *stream_obj(PyObject *o);
int stream_arg(PyObject *o, cuc_stream **s);
int timeout_arg(PyObject *o, int *ms);
int fd_arg(PyObject *o, int *fd);
/* A device's access to a pool's or VMM resource's memory as "rw", "r" or
 * "" (none). */
static inline PyObject *access_name(int a)
{
    _Static_assert((int)CUC_POOL_ACCESS_READ == (int)CUC_VMM_ACCESS_READ &&
                   (int)CUC_POOL_ACCESS_READWRITE == (int)CUC_VMM_ACCESS_READWRITE, "one set");
    return PyUnicode_FromString(a == CUC_VMM_ACCESS_READWRITE ? "rw"
                                : a == CUC_VMM_ACCESS_READ    ? "r" : "");
}

/* Pickles. module.c gives the loaders: _load (a message's bytes) and
 * _attach (a detached message's). handle_reduce makes (loader, (bytes,))
 * of m, which it destroys, once rc (the status of making m) is 0, else
 * raises rc: shared, through the share point (started at the first),
 * else as plain bytes. After handle_share_exit no share point starts in
 * this process. */
void handle_loaders(PyObject *load, PyObject *attach);
/* cucore._frameworks's function name, called with Py_BuildValue(fmt, ...)
 * (a tuple): what frameworks' objects are is Python's to find. */
PyObject *py_frameworks(const char *name, const char *fmt, ...);
PyObject *handle_reduce(int rc, cuc_msg *m, int shared);
void handle_share_exit(void);

#endif
