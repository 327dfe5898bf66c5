/* A Buffer's or a VMM resource's memory (mem.h).
 *
 * Copies parse their arguments before the memory is looked at: parsing can
 * run Python code (an __index__, a buffer exporter, a CUDA array's
 * interface) that closes the object, and a pointer read before it would
 * be another allocation's by then. While a copy runs with the GIL let go,
 * the object counts it (span.busy), and its close() refuses: another
 * thread cannot unmap the memory under it.
 *
 * A Buffer is seen without a copy as a 1-D array of bytes: CUDA Array
 * Interface v3 and DLPack (the unversioned "dltensor" capsule, which every
 * DLPack consumer takes); both wait for an attached buffer's lease first
 * (buffer_ready). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <dlpack.h>

#include "mem.h"

static Py_ssize_t no_busy; /* a CUDA array's or host bytes': cucore counts nothing */

int mem_span(PyObject *o, struct span *out)
{
    unsigned long long ptr;
    PyObject *r;
    int ok;

    if (PyObject_TypeCheck(o, &PyBuffer_Type)) {
        if (buffer_ready((PyBuffer *)o))
            return -1;
        *out = (struct span){cuc_buffer_ptr(H(o)), cuc_buffer_size(H(o)),
                             cuc_buffer_device(H(o)), &((PyBuffer *)o)->busy};
        return 0;
    }
    if (PyObject_TypeCheck(o, &PyVmm_Type)) {
        if (handle_live(o, "VMM resource"))
            return -1;
        *out = (struct span){cuc_vmm_ptr(H(o)), cuc_vmm_size(H(o)), cuc_vmm_device(H(o)),
                             &((PyVmm *)o)->busy};
        return 0;
    }
    r = py_frameworks("_span", "(O)", o); /* (ptr, bytes) of a contiguous CUDA array */
    ok = r && PyArg_ParseTuple(r, "Kn", &ptr, &out->size);
    Py_XDECREF(r);
    *out = (struct span){(void *)(uintptr_t)ptr, out->size, NULL, &no_busy};
    return ok ? 0 : -1;
}

/* The stream, or for None the legacy default stream of the memory's own
 * device (cucore's NULL stream would be the current device's). */
static int stream_or_default(PyObject *so, cuc_device *dev, cuc_stream **s)
{
    int rc;

    if (so != Py_None)
        return stream_arg(so, s);
    rc = cuc_stream_legacy(dev, s);
    return rc ? (py_raise(rc), -1) : 0;
}

/* A copy's two sides: an array's first (finding it runs Python code,
 * which could close a Buffer or VMM resource whose span was taken). */
static int spans(PyObject *dst, PyObject *src, struct span *d, struct span *s)
{
    if (!PyObject_TypeCheck(dst, &PyBuffer_Type) && !PyObject_TypeCheck(dst, &PyVmm_Type))
        return mem_span(dst, d) || mem_span(src, s) ? -1 : 0;
    return mem_span(src, s) || mem_span(dst, d) ? -1 : 0;
}

/* All of s into d at off, on stream so (None: dev's legacy stream), and
 * waited for. */
static PyObject *copy(struct span *d, Py_ssize_t off, struct span *s, PyObject *so,
                      cuc_device *dev, const char *what)
{
    cuc_stream *st;
    int rc;

    if (stream_or_default(so, dev, &st))
        return NULL;
    if (off < 0 || (size_t)off > d->size || s->size > d->size - (size_t)off)
        return py_raise_fmt(CUC_E_INVALID, "%s: %zu bytes at offset %zd do not fit in %zu "
                            "bytes", what, s->size, off, d->size);
    (*d->busy)++;
    (*s->busy)++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_memcpy((char *)d->ptr + off, s->ptr, s->size, st);
    Py_END_ALLOW_THREADS
    (*d->busy)--;
    (*s->busy)--;
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

/* copy_from(data, offset=0, stream=None): bytes-like data, or all of a
 * Buffer's, VMM resource's or contiguous CUDA array's bytes. */
PyObject *mem_copy_from(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *names[] = {"data", "offset", "stream", NULL};
    PyObject *data, *so = Py_None, *r = NULL;
    int host, bad;
    struct span d, s;
    Py_ssize_t off = 0;
    Py_buffer v;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|nO", names, &data, &off, &so))
        return NULL;
    host = PyObject_CheckBuffer(data);
    if (host && PyObject_GetBuffer(data, &v, PyBUF_SIMPLE))
        return NULL;
    if ((so = stream_obj(so)) != NULL) {
        if (host)
            s = (struct span){v.buf, (size_t)v.len, NULL, &no_busy};
        bad = host ? mem_span(obj, &d) : spans(obj, data, &d, &s);
        r = bad ? NULL : copy(&d, off, &s, so, d.dev, "copy_from");
        Py_DECREF(so);
    }
    if (host)
        PyBuffer_Release(&v);
    return r;
}

/* copy_to(dst, stream=None): all of the memory into a Buffer, VMM
 * resource or contiguous CUDA array, from its start. */
PyObject *mem_copy_to(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dst", "stream", NULL};
    PyObject *dst, *so = Py_None, *r = NULL;
    struct span d, s;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", names, &dst, &so) ||
        !(so = stream_obj(so)))
        return NULL;
    if (!spans(dst, obj, &d, &s))
        r = copy(&d, 0, &s, so, s.dev, "copy_to");
    Py_DECREF(so);
    return r;
}

/* to_bytes(size=None, offset=0, stream=None) */
PyObject *mem_to_bytes(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *names[] = {"size", "offset", "stream", NULL};
    PyObject *so = Py_None, *sz = Py_None, *out, *r;
    Py_ssize_t off = 0, n = -1;
    struct span d, s;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OnO", names, &sz, &off, &so) ||
        (sz != Py_None && (n = PyNumber_AsSsize_t(sz, PyExc_OverflowError)) == -1 &&
         PyErr_Occurred()) || mem_span(obj, &s))
        return NULL;
    if (off < 0 || (size_t)off > s.size || (sz != Py_None && (n < 0 ||
                                                             (size_t)n > s.size - (size_t)off)))
        return py_raise_fmt(CUC_E_INVALID, "to_bytes: %zd bytes at offset %zd do not fit in "
                            "%zu", n, off, s.size);
    n = sz == Py_None ? (Py_ssize_t)(s.size - (size_t)off) : n;
    if (!(out = PyBytes_FromStringAndSize(NULL, n)))
        return NULL;
    d = (struct span){PyBytes_AS_STRING(out), (size_t)n, NULL, &no_busy};
    s.ptr = (char *)s.ptr + off;
    s.size = (size_t)n;
    r = copy(&d, 0, &s, so, s.dev, "to_bytes");
    Py_XDECREF(r);
    if (!r)
        Py_CLEAR(out);
    return out;
}

/* fill(value, width=1): every width-byte value of the memory (cuc_fill:
 * width 1, 2 or 4, little-endian), on its device's legacy stream. */
PyObject *mem_fill(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *names[] = {"value", "width", NULL};
    unsigned long long v;
    unsigned width = 1;
    struct span sp;
    cuc_stream *s;
    PyObject *vo;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|I", names, &PyLong_Type, &vo, &width) ||
        ((v = PyLong_AsUnsignedLongLong(vo)) == (unsigned long long)-1 && PyErr_Occurred()) ||
        mem_span(obj, &sp) || stream_or_default(Py_None, sp.dev, &s))
        return NULL;
    if (v > UINT32_MAX || (width >= 1 && width <= 4 && sp.size % width))
        return py_raise_fmt(CUC_E_INVALID, "fill(%llu, width=%u): %zu bytes are not a whole "
                            "number of values of width bytes (or the value is over 32 bits)",
                            v, width, sp.size);
    (*sp.busy)++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_fill(sp.ptr, (uint32_t)v, width, sp.size / (width ? width : 1), s);
    Py_END_ALLOW_THREADS
    (*sp.busy)--;
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

PyObject *mem_allocate(cuc_pool *pool, cuc_slab *slab, size_t n, PyObject *so)
{
    cuc_stream *s;
    cuc_buffer *b;
    PyObject *r;
    int rc;

    if (!(so = stream_obj(so)) || stream_arg(so, &s)) {
        Py_XDECREF(so);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = slab ? cuc_slab_alloc_async(slab, n, s, &b) : cuc_buffer_alloc_async(pool, n, s, &b);
    if (rc == 0 && !s && ((rc = cuc_stream_legacy(cuc_buffer_device(b), &s)) ||
                          (rc = cuc_stream_synchronize(s))))
        cuc_buffer_unref_async(b, NULL);
    Py_END_ALLOW_THREADS
    r = rc ? py_raise(rc) : buffer_wrap_on(b, so);
    Py_DECREF(so);
    return r;
}

/* The protocols' names of the default streams (CUDA Array Interface v3
 * and DLPack alike); any other stream is its CUstream as an int. */
#define PROTO_LEGACY_STREAM 1
#define PROTO_PER_THREAD_STREAM 2
#define PROTO_NO_SYNC (-1)

#define MAX_DIMS 64

static int is_pinned(cuc_buffer *b)
{
    return cuc_pool_kind(cuc_buffer_pool(b)) == CUC_POOL_PINNED_HOST;
}

/* The stream the buffer's memory is ready on: the one its allocation was
 * ordered on, else the legacy default stream of its device (a Buffer is
 * ready on return from allocate() without a stream, an import and the
 * synchronous copies; cucore.launch(None, ...) writes on that stream). */
static int producer_stream(PyBuffer *o, cuc_stream **s, long long *proto)
{
    int rc, kind;

    if (o->stream) {
        *s = H(o->stream);
    } else {
        rc = cuc_stream_legacy(cuc_buffer_device(o->base.h), s);
        if (rc)
            return py_raise(rc), -1;
    }
    kind = cuc_stream_kind(*s);
    *proto = kind == CUC_STREAM_LEGACY_DEFAULT       ? PROTO_LEGACY_STREAM
             : kind == CUC_STREAM_PER_THREAD_DEFAULT ? PROTO_PER_THREAD_STREAM
                                                     : (long long)(intptr_t)cuc_stream_handle(*s);
    return 0;
}

PyObject *mem_cai(PyObject *self, void *closure)
{
    PyBuffer *o = (PyBuffer *)self;
    long long stream;
    cuc_stream *s;

    if (buffer_ready(o) || producer_stream(o, &s, &stream))
        return NULL;
    return Py_BuildValue("{s:(n),s:s,s:(KO),s:i,s:O,s:L}", "shape",
                         (Py_ssize_t)cuc_buffer_size(o->base.h), "typestr", "|u1", "data",
                         (unsigned long long)(uintptr_t)cuc_buffer_ptr(o->base.h), Py_False,
                         "version", 3, "strides", Py_None, "stream", stream);
}

/* A DLPack tensor, which its Buffer or VMM resource (manager_ctx) keeps,
 * counted in the object's exports. */
struct managed {
    DLManagedTensor t;
    Py_ssize_t *exports;
    int64_t dims[]; /* shape, then strides */
};

/* Called by the consumer, from any thread, when it drops the tensor. */
static void managed_delete(DLManagedTensor *t)
{
    PyGILState_STATE g = PyGILState_Ensure();

    (*((struct managed *)t)->exports)--;
    Py_DECREF((PyObject *)t->manager_ctx);
    free(t);
    PyGILState_Release(g);
}

static void capsule_free(PyObject *cap)
{
    DLManagedTensor *t;

    if (!PyCapsule_IsValid(cap, "dltensor"))
        return; /* consumed: renamed "used_dltensor", the consumer deletes it */
    t = PyCapsule_GetPointer(cap, "dltensor");
    if (t && t->deleter)
        t->deleter(t);
}

/* The unversioned capsule of ndim dims (shape, then strides in elements,
 * unless contiguous) at data, which owner keeps (counted in exports). */
static PyObject *capsule(PyObject *owner, Py_ssize_t *exports, void *data, DLDevice dev,
                         int ndim, const int64_t *dims, int strided, DLDataType dt)
{
    struct managed *m = calloc(1, sizeof(*m) + 2 * (size_t)ndim * sizeof(int64_t));
    PyObject *cap;

    if (!m)
        return PyErr_NoMemory();
    memcpy(m->dims, dims, 2 * (size_t)ndim * sizeof(int64_t));
    m->t.dl_tensor = (DLTensor){data, dev, ndim, dt, m->dims, strided ? m->dims + ndim : NULL, 0};
    m->t.manager_ctx = Py_NewRef(owner);
    m->t.deleter = managed_delete;
    m->exports = exports;
    (*exports)++;
    cap = PyCapsule_New(&m->t, "dltensor", capsule_free);
    if (!cap) {
        (*exports)--;
        Py_DECREF(owner);
        free(m);
    }
    return cap;
}

static DLDevice device_of(cuc_buffer *b)
{
    DLDevice d;

    d.device_type = is_pinned(b) ? kDLCUDAHost : kDLCUDA;
    d.device_id = is_pinned(b) ? 0 : cuc_device_ordinal(cuc_buffer_device(b));
    return d;
}

/* __dlpack__'s stream (None: the legacy default stream, as the standard
 * says) as the protocol's int; -1 raised for what the standard refuses. */
static int consumer_stream(PyObject *o, long long *out)
{
    long long v;

    if (o == Py_None) {
        *out = PROTO_LEGACY_STREAM;
        return 0;
    }
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "__dlpack__(stream=%R): a CUDA stream is an int "
                     "(1 legacy, 2 per-thread, -1 no synchronization, else a CUstream)", o);
        return -1;
    }
    v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v == 0 || v < PROTO_NO_SYNC) {
        PyErr_Format(PyExc_ValueError, "__dlpack__(stream=%lld): 0 is ambiguous and refused "
                     "by the DLPack standard; give 1 for the legacy default stream", v);
        return -1;
    }
    *out = v;
    return 0;
}

/* Makes the memory safe to use on the consumer's stream: unless that is
 * the producer's own stream (or -1: the consumer orders it itself), the
 * producer's stream is waited for here (the buffer counted busy: its
 * close() cannot run meanwhile). */
static int order_for(PyBuffer *o, long long consumer)
{
    long long producer;
    cuc_stream *s;
    int rc;

    if (producer_stream(o, &s, &producer))
        return -1;
    if (consumer == PROTO_NO_SYNC || consumer == producer)
        return 0;
    o->busy++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_stream_synchronize(s);
    Py_END_ALLOW_THREADS
    o->busy--;
    return rc ? (py_raise(rc), -1) : 0;
}

/* dl_device: None (*type -1), or a (device_type, device_id) tuple; read
 * before the buffer is looked at (its ints may run Python code). */
static int dl_device_arg(PyObject *want, int *type, int *id)
{
    *type = -1;
    if (want == Py_None)
        return 0;
    return PyArg_ParseTuple(want, "ii;dl_device is a (device_type, device_id) tuple", type,
                            id) ? 0 : -1;
}

/* The dl_device asked for must be where the memory is: no copy is made. */
static int check_dl_device(int type, int id, cuc_buffer *b)
{
    DLDevice d = device_of(b);

    if (type < 0 || (type == (int)d.device_type && id == d.device_id))
        return 0;
    PyErr_Format(PyExc_BufferError, "__dlpack__(dl_device=(%d, %d)): the buffer is on (%d, "
                 "%d) and is shared, not copied", type, id, (int)d.device_type, d.device_id);
    return -1;
}

static const DLDataType bytes_type = {kDLUInt, 8, 1};

PyObject *mem_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *maxv = Py_None, *dldev = Py_None, *copy = Py_None;
    PyBuffer *o = (PyBuffer *)self;
    long long consumer;
    int64_t dims[2];
    int type, id;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", names, &stream, &maxv, &dldev, &copy) ||
        consumer_stream(stream, &consumer) || dl_device_arg(dldev, &type, &id) ||
        buffer_ready(o) || check_dl_device(type, id, o->base.h))
        return NULL;
    if (copy == Py_True)
        return PyErr_Format(PyExc_BufferError, "__dlpack__(copy=True): a Buffer is shared, "
                            "not copied");
    if (order_for(o, consumer))
        return NULL;
    dims[0] = (int64_t)cuc_buffer_size(o->base.h);
    dims[1] = 1;
    return capsule(self, &o->exports, cuc_buffer_ptr(o->base.h), device_of(o->base.h), 1, dims,
                   0, bytes_type);
}

PyObject *mem_dlpack_device(PyObject *self, PyObject *noargs)
{
    PyBuffer *o = (PyBuffer *)self;
    DLDevice d;

    if (handle_live(self, "buffer"))
        return NULL;
    d = device_of(o->base.h);
    return Py_BuildValue("(ii)", (int)d.device_type, d.device_id);
}

/* ---- typed views (cucore._frameworks's ArrayView, which checks that
 * the view fits in its memory) and what a DLPack tensor is ---- */

/* dlpack_view(mem, offset, dims, (code, bits, lanes), stream): a capsule
 * of that view of a Buffer or VMM resource, counted as the object's
 * export; dims: the shape, then the strides in elements (native int64s);
 * a Buffer's stream is ordered for the consumer's as __dlpack__ does. */
static PyObject *py_dlpack_view(PyObject *self, PyObject *args)
{
    int64_t dims[2 * MAX_DIMS];
    PyObject *mem, *stream;
    long long consumer;
    Py_ssize_t off, n;
    const char *d;
    DLDataType dt;
    int ndim;

    if (!PyArg_ParseTuple(args, "Ony#(BBH)O", &mem, &off, &d, &n, &dt.code, &dt.bits,
                          &dt.lanes, &stream) || consumer_stream(stream, &consumer))
        return NULL;
    if (n % (2 * 8) || n > (Py_ssize_t)sizeof(dims))
        return PyErr_Format(PyExc_ValueError, "dlpack_view: %zd bytes of dims", n);
    memcpy(dims, d, (size_t)n);
    ndim = (int)(n / 16);
    if (PyObject_TypeCheck(mem, &PyBuffer_Type)) {
        if (buffer_ready((PyBuffer *)mem) || order_for((PyBuffer *)mem, consumer))
            return NULL;
        return capsule(mem, &((PyBuffer *)mem)->exports, (char *)cuc_buffer_ptr(H(mem)) + off,
                       device_of(H(mem)), ndim, dims, 1, dt);
    }
    if (!PyObject_TypeCheck(mem, &PyVmm_Type))
        return PyErr_Format(PyExc_TypeError, "dlpack_view of a %.100s", Py_TYPE(mem)->tp_name);
    if (handle_live(mem, "VMM resource"))
        return NULL;
    return capsule(mem, &((PyVmm *)mem)->exports, (char *)cuc_vmm_ptr(H(mem)) + off,
                   (DLDevice){kDLCUDA, cuc_device_ordinal(cuc_vmm_device(H(mem)))}, ndim,
                   dims, 1, dt);
}

/* (address + byte_offset, (device type, id), shape, strides in elements
 * (None: contiguous), (code, bits, lanes)) of a DLPack tensor, the shape
 * and strides as native int64s. */
static PyObject *describe(const DLTensor *t)
{
    Py_ssize_t n = (Py_ssize_t)t->ndim * 8;

    if (t->ndim < 0 || t->ndim > MAX_DIMS)
        return py_raise_fmt(CUC_E_NOT_SUPPORTED, "a DLPack tensor of %d dimensions: cucore "
                            "takes up to %d", t->ndim, MAX_DIMS);
    return Py_BuildValue("(K(ii)y#y#(iii))",
                         (unsigned long long)(uintptr_t)t->data + t->byte_offset,
                         (int)t->device.device_type, t->device.device_id,
                         n ? (const char *)t->shape : "", n, (const char *)t->strides, n,
                         t->dtype.code, t->dtype.bits, t->dtype.lanes);
}

/* dlpack_describe(x): describe() of x's unversioned capsule (x, or what
 * x.__dlpack__() gives), consumed: renamed, its deleter run (which may
 * run Python code: describe's error is kept aside meanwhile). What the
 * array is, is cucore._frameworks's to say. */
static PyObject *py_dlpack_describe(PyObject *self, PyObject *x)
{
    PyObject *cap = PyCapsule_CheckExact(x) ? Py_NewRef(x)
                                            : PyObject_CallMethod(x, "__dlpack__", NULL);
    DLManagedTensor *m = cap ? PyCapsule_GetPointer(cap, "dltensor") : NULL;
    PyObject *r = m ? describe(&m->dl_tensor) : NULL, *et, *ev, *tb;

    PyErr_Fetch(&et, &ev, &tb);
    if (m && PyCapsule_SetName(cap, "used_dltensor") == 0 && m->deleter)
        m->deleter(m);
    PyErr_Restore(et, ev, tb);
    Py_XDECREF(cap);
    return r;
}

/* ---- memory another allocator owns ---- */

/* An adopt's owner, kept until the library's release. That may run on any
 * thread (the share point's too, while the main thread holds the GIL and
 * waits for it: its stop at exit), so it never waits for the GIL: it
 * queues the owner, dropped with the GIL by a pending call, or by the
 * next adopt() or adopted_count(). */
struct owner {
    PyObject *obj;
    struct owner *next;
};
static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owner *released; /* under owners_lock */
static Py_ssize_t kept;         /* owners taken and not dropped (the GIL's) */

#if PY_VERSION_HEX >= 0x030D0000
#define FINALIZING() Py_IsFinalizing()
#else
#define FINALIZING() _Py_IsFinalizing()
#endif

static int drop_released(void *unused)
{
    struct owner *o, *next;

    pthread_mutex_lock(&owners_lock);
    o = released;
    released = NULL;
    pthread_mutex_unlock(&owners_lock);
    for (; o; o = next) {
        next = o->next;
        Py_DECREF(o->obj);
        kept--;
        free(o);
    }
    return 0;
}

/* An owner released while Python finalizes is left: its objects may be
 * gone, and the process is ending. */
static void owner_release(void *arg)
{
    struct owner *o = arg;

    if (FINALIZING())
        return;
    pthread_mutex_lock(&owners_lock);
    o->next = released;
    released = o;
    pthread_mutex_unlock(&owners_lock);
    Py_AddPendingCall(drop_released, NULL); /* refused (its queue full): dropped later */
}

/* adopt(ptr, size, owner) -> (mem, offset): size bytes at ptr, another
 * allocator's: the Buffer of its allocation (cuc_buffer_adopt, then
 * cuc_buffer_root: one object to pickle for all its parts) or, VMM memory
 * with POSIX fds, a VMM resource of its chunks (cuc_vmm_adopt), and ptr's
 * offset in it; owner (None: the caller keeps
 * the memory, as wrap() says) is kept until cucore no longer uses the
 * memory. Other kinds: the library's refusal naming the kind and what to
 * use. */
static PyObject *py_adopt(PyObject *self, PyObject *args)
{
    void (*fn)(void *);
    PyObject *ptro, *owner, *mem;
    Py_ssize_t size;
    size_t off = 0;
    struct owner *o = NULL;
    cuc_device *dev;
    cuc_buffer *b = NULL, *part;
    cuc_vmm *v;
    void *ptr;
    int kind, rc;

    if (!PyArg_ParseTuple(args, "OnO", &ptro, &size, &owner) ||
        (!(ptr = PyLong_AsVoidPtr(ptro)) && PyErr_Occurred()) || drop_released(NULL))
        return NULL;
    if (size <= 0)
        return py_raise_fmt(CUC_E_INVALID, "adopt: %zd bytes (nothing to share)", size);
    if (owner != Py_None && !(o = malloc(sizeof(*o))))
        return PyErr_NoMemory();
    fn = owner != Py_None ? owner_release : NULL;
    if (o)
        o->obj = owner;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_memory_kind(ptr, &kind, &dev);
    if (!rc && !dev) /* no device's: the adopt below refuses it by kind */
        rc = cuc_device_get(0, &dev);
    if (!rc && kind == CUC_MEMORY_VMM_FD)
        rc = cuc_vmm_adopt(dev, ptr, (size_t)size, fn, o, &v, &off);
    else if (!rc && !(rc = cuc_buffer_adopt(dev, ptr, (size_t)size, fn, o, &part))) {
        b = cuc_buffer_root(part), off = cuc_buffer_offset(part); /* before part's unref */
        (void)cuc_buffer_unref_async(part, NULL);
    }
    Py_END_ALLOW_THREADS
    if (rc) {
        free(o);
        return py_raise(rc);
    }
    if (o) {
        Py_INCREF(owner);
        kept++;
    }
    mem = kind == CUC_MEMORY_VMM_FD ? vmm_wrap(v) : buffer_wrap(b);
    return mem ? Py_BuildValue("(Nn)", mem, (Py_ssize_t)off) : NULL;
}

static PyObject *py_adopted_count(PyObject *self, PyObject *noargs)
{
    drop_released(NULL);
    return PyLong_FromSsize_t(kept);
}

static PyMethodDef module_methods[] = {
    {"adopt", py_adopt, METH_VARARGS, "adopt(ptr, size, owner) -> (Buffer or VMM, offset)"},
    {"adopted_count", py_adopted_count, METH_NOARGS, "adopted owners still kept"},
    {"dlpack_view", py_dlpack_view, METH_VARARGS, NULL},
    {"dlpack_describe", py_dlpack_describe, METH_O, NULL},
    {NULL, NULL, 0, NULL}};

int mem_init(PyObject *m)
{
    return PyModule_AddFunctions(m, module_methods);
}
