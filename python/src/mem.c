/* A Buffer's or a VMM resource's memory (mem.h).
 *
 * Copies parse their arguments before the memory is looked at: parsing can
 * run Python code (an __index__, a buffer exporter) that closes the
 * object, and a pointer read before it would be another allocation's by
 * then. While a copy runs with the GIL let go, the object counts it
 * (span.busy), and its close() refuses: another thread cannot unmap the
 * memory under it.
 *
 * A Buffer is seen without a copy as a 1-D array of bytes: CUDA Array
 * Interface v3 and DLPack (the unversioned "dltensor" capsule, which every
 * DLPack consumer takes); both wait for an attached buffer's lease first
 * (buffer_ready). */
#include <stdlib.h>

#include <dlpack.h>

#include "mem.h"

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

/* The memory of obj (open_span: its liveness checked) and the stream;
 * -1 raised. */
static int span_and_stream(PyObject *obj, span_fn open_span, PyObject *so, struct span *sp,
                           cuc_stream **s)
{
    if (open_span(obj, sp))
        return -1;
    return stream_or_default(so, sp->dev, s);
}

/* copy_from(data, offset=0, stream=None): bytes-like into the memory. */
PyObject *mem_copy_from(PyObject *obj, span_fn open_span, PyObject *args, PyObject *kw)
{
    static char *names[] = {"data", "offset", "stream", NULL};
    PyObject *so = Py_None;
    Py_ssize_t off = 0;
    struct span sp;
    cuc_stream *s;
    Py_buffer v;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|nO", names, &v, &off, &so))
        return NULL;
    if (span_and_stream(obj, open_span, so, &sp, &s))
        goto fail_data;
    if (off < 0 || (size_t)off > sp.size || (size_t)v.len > sp.size - (size_t)off) {
        py_raise_fmt(CUC_E_INVALID, "copy_from: %zd bytes at offset %zd do not fit in %zu "
                     "bytes", v.len, off, sp.size);
        goto fail_data;
    }
    (*sp.busy)++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_memcpy((char *)sp.ptr + off, v.buf, (size_t)v.len, s);
    Py_END_ALLOW_THREADS
    (*sp.busy)--;
    PyBuffer_Release(&v);
    return rc ? py_raise(rc) : Py_NewRef(Py_None);

fail_data:
    PyBuffer_Release(&v);
    return NULL;
}

/* to_bytes(size=None, offset=0, stream=None) */
PyObject *mem_to_bytes(PyObject *obj, span_fn open_span, PyObject *args, PyObject *kw)
{
    static char *names[] = {"size", "offset", "stream", NULL};
    PyObject *so = Py_None, *sz = Py_None, *out;
    Py_ssize_t off = 0, n = -1;
    struct span sp;
    cuc_stream *s;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OnO", names, &sz, &off, &so))
        return NULL;
    if (sz != Py_None && (n = PyNumber_AsSsize_t(sz, PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (span_and_stream(obj, open_span, so, &sp, &s))
        return NULL;
    if (off < 0 || (size_t)off > sp.size)
        return py_raise_fmt(CUC_E_INVALID, "to_bytes: offset %zd outside %zu bytes", off,
                            sp.size);
    if (sz == Py_None)
        n = (Py_ssize_t)(sp.size - (size_t)off);
    if (n < 0 || (size_t)n > sp.size - (size_t)off)
        return py_raise_fmt(CUC_E_INVALID, "to_bytes: %zd bytes at offset %zd do not fit in "
                            "%zu", n, off, sp.size);
    out = PyBytes_FromStringAndSize(NULL, n);
    if (!out)
        return NULL;
    (*sp.busy)++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_memcpy(PyBytes_AS_STRING(out), (const char *)sp.ptr + off, (size_t)n, s);
    Py_END_ALLOW_THREADS
    (*sp.busy)--;
    if (rc) {
        Py_DECREF(out);
        return py_raise(rc);
    }
    return out;
}

/* fill(byte): every byte of the memory, on its device's legacy stream. */
PyObject *mem_fill(PyObject *obj, span_fn open_span, PyObject *args)
{
    unsigned char v;
    struct span sp;
    cuc_stream *s;
    int rc;

    if (!PyArg_ParseTuple(args, "b", &v) ||
        span_and_stream(obj, open_span, Py_None, &sp, &s))
        return NULL;
    (*sp.busy)++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_memset(sp.ptr, v, sp.size, s);
    Py_END_ALLOW_THREADS
    (*sp.busy)--;
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

/* The protocols' names of the default streams (CUDA Array Interface v3
 * and DLPack alike); any other stream is its CUstream as an int. */
#define PROTO_LEGACY_STREAM 1
#define PROTO_PER_THREAD_STREAM 2
#define PROTO_NO_SYNC (-1)

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

struct managed {
    DLManagedTensor t;
    int64_t shape[1];
};

/* Called by the consumer, from any thread, when it drops the tensor. */
static void managed_delete(DLManagedTensor *t)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyBuffer *o = t->manager_ctx;

    o->exports--;
    Py_DECREF(o);
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

PyObject *mem_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *maxv = Py_None, *dldev = Py_None, *copy = Py_None, *cap;
    PyBuffer *o = (PyBuffer *)self;
    long long consumer;
    struct managed *m;
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
    m = calloc(1, sizeof(*m));
    if (!m)
        return PyErr_NoMemory();
    m->shape[0] = (int64_t)cuc_buffer_size(o->base.h);
    m->t.dl_tensor.data = cuc_buffer_ptr(o->base.h);
    m->t.dl_tensor.device = device_of(o->base.h);
    m->t.dl_tensor.ndim = 1;
    m->t.dl_tensor.dtype.code = kDLUInt;
    m->t.dl_tensor.dtype.bits = 8;
    m->t.dl_tensor.dtype.lanes = 1;
    m->t.dl_tensor.shape = m->shape;
    m->t.manager_ctx = o;
    m->t.deleter = managed_delete;
    Py_INCREF(o);
    o->exports++;
    cap = PyCapsule_New(&m->t, "dltensor", capsule_free);
    if (!cap) {
        o->exports--;
        Py_DECREF(o);
        free(m);
    }
    return cap;
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
