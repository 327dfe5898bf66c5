/* A Buffer seen by CuPy, PyTorch and numba without a copy: CUDA Array
 * Interface v3 and DLPack (the unversioned "dltensor" capsule, which every
 * DLPack consumer takes), both as a 1-D array of bytes. */
#include <stdlib.h>

#include <dlpack.h>

#include "cucore_py.h"

/* Buffers are allocated and freed on the legacy default stream (cucore's
 * NULL stream): consumers order their work after it. */
#define CAI_LEGACY_STREAM 1

static int is_pinned(cuc_buffer *b)
{
    return cuc_pool_kind(cuc_buffer_pool(b)) == CUC_POOL_PINNED_HOST;
}

PyObject *interop_cai(PyObject *self, void *closure)
{
    PyBuffer *o = (PyBuffer *)self;

    (void)closure;
    if (buffer_live(o))
        return NULL;
    return Py_BuildValue("{s:(n),s:s,s:(KO),s:i,s:O,s:i}", "shape",
                         (Py_ssize_t)cuc_buffer_size(o->b), "typestr", "|u1", "data",
                         (unsigned long long)(uintptr_t)cuc_buffer_ptr(o->b), Py_False, "version",
                         3, "strides", Py_None, "stream", CAI_LEGACY_STREAM);
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

PyObject *interop_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *maxv = Py_None, *dldev = Py_None, *copy = Py_None, *cap;
    PyBuffer *o = (PyBuffer *)self;
    struct managed *m;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", names, &stream, &maxv, &dldev, &copy) ||
        buffer_live(o))
        return NULL;
    if (copy == Py_True)
        return PyErr_Format(PyExc_BufferError, "__dlpack__(copy=True): a Buffer is shared, "
                            "not copied");
    /* Nothing to order for stream: every write through the Buffer is
     * complete when the call returns (synchronous copies). */
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
