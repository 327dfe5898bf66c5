/* A Buffer seen by CuPy, PyTorch and numba without a copy: CUDA Array
 * Interface v3 and DLPack (the unversioned "dltensor" capsule, which every
 * DLPack consumer takes), both as a 1-D array of bytes. */
#include <stdlib.h>

#include <dlpack.h>

#include "cucore_py.h"

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
        *s = ((PyStream *)o->stream)->s;
    } else {
        rc = cuc_stream_legacy(cuc_buffer_device(o->b), s);
        if (rc)
            return py_raise(rc), -1;
    }
    kind = cuc_stream_kind(*s);
    *proto = kind == CUC_STREAM_LEGACY_DEFAULT       ? PROTO_LEGACY_STREAM
             : kind == CUC_STREAM_PER_THREAD_DEFAULT ? PROTO_PER_THREAD_STREAM
                                                     : (long long)(intptr_t)cuc_stream_handle(*s);
    return 0;
}

PyObject *interop_cai(PyObject *self, void *closure)
{
    PyBuffer *o = (PyBuffer *)self;
    long long stream;
    cuc_stream *s;

    (void)closure;
    if (buffer_live(o) || producer_stream(o, &s, &stream))
        return NULL;
    return Py_BuildValue("{s:(n),s:s,s:(KO),s:i,s:O,s:L}", "shape",
                         (Py_ssize_t)cuc_buffer_size(o->b), "typestr", "|u1", "data",
                         (unsigned long long)(uintptr_t)cuc_buffer_ptr(o->b), Py_False, "version",
                         3, "strides", Py_None, "stream", stream);
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

PyObject *interop_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *maxv = Py_None, *dldev = Py_None, *copy = Py_None, *cap;
    PyBuffer *o = (PyBuffer *)self;
    long long consumer;
    struct managed *m;
    int type, id;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", names, &stream, &maxv, &dldev, &copy) ||
        consumer_stream(stream, &consumer) || dl_device_arg(dldev, &type, &id) ||
        buffer_live(o) || check_dl_device(type, id, o->b))
        return NULL;
    if (copy == Py_True)
        return PyErr_Format(PyExc_BufferError, "__dlpack__(copy=True): a Buffer is shared, "
                            "not copied");
    if (order_for(o, consumer))
        return NULL;
    m = calloc(1, sizeof(*m));
    if (!m)
        return PyErr_NoMemory();
    m->shape[0] = (int64_t)cuc_buffer_size(o->b);
    m->t.dl_tensor.data = cuc_buffer_ptr(o->b);
    m->t.dl_tensor.device = device_of(o->b);
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

PyObject *interop_dlpack_device(PyObject *self, PyObject *noargs)
{
    PyBuffer *o = (PyBuffer *)self;
    DLDevice d;

    (void)noargs;
    if (buffer_live(o))
        return NULL;
    d = device_of(o->b);
    return Py_BuildValue("(ii)", (int)d.device_type, d.device_id);
}
