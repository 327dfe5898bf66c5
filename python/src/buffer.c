/* cucore.Buffer: a pool allocation, a view of one, or wrapped cuMemAlloc
 * memory. Closing (or the last Python reference) drops cucore's reference:
 * an importer's memory is freed (by the share point's thread, a turn
 * later) and its release sent, and an exporter's free waits for the
 * leases. Every use of the memory waits for an attached buffer's lease
 * (buffer_ready). */
#include "mem.h"

/* Takes the reference out of the object, which stays, closed. */
static cuc_buffer *buffer_detach(PyBuffer *o)
{
    cuc_buffer *b = o->base.h;

    live_del_ptr(b, (PyObject *)o);
    o->base.h = NULL;
    Py_CLEAR(o->stream);
    return b;
}

/* Drops the reference (on stream s); the object stays, closed. */
static int buffer_drop(PyBuffer *o, cuc_stream *s)
{
    cuc_buffer *b;
    int rc;

    if (!o->base.h)
        return 0;
    b = buffer_detach(o);
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_buffer_unref_async(b, s);
    Py_END_ALLOW_THREADS
    return rc;
}

static void buffer_dealloc(PyObject *self)
{
    PyBuffer *o = (PyBuffer *)self;

    if (o->base.weak)
        PyObject_ClearWeakRefs(self);
    if (o->base.pid == py_pid())
        buffer_drop(o, NULL);
    else if (o->base.h)
        live_del_ptr(o->base.h, self); /* inherited through fork: forgotten, not dropped */
    Py_CLEAR(o->stream);
    Py_TYPE(self)->tp_free(self);
}

/* Raises BufferError (-1) while o's memory is in use beyond the object
 * (what: the call, and after: what it left undone), else 0: a DLPack
 * consumer's tensor would dangle, a copy on another thread would reach
 * unmapped or reused memory. */
static int in_use(const PyBuffer *o, const char *what, const char *after)
{
    if (o->exports)
        PyErr_Format(PyExc_BufferError, "%s: %zd DLPack capsule(s) or tensor(s) still use "
                     "the buffer's memory (drop them first)%s", what, o->exports, after);
    else if (o->busy)
        PyErr_Format(PyExc_BufferError, "%s: a copy on another thread is using the buffer's "
                     "memory, or waits for it%s", what, after);
    else
        return 0;
    return -1;
}

/* Raises why o cannot be closed by what: -1, or 0. */
static int closable(const PyBuffer *o, const char *what, const char *after)
{
    return in_use(o, what, after) || py_check_pid(o->base.pid, "buffer") ? -1 : 0;
}

static PyObject *buf_close(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", NULL};
    PyObject *so = Py_None;
    cuc_stream *s;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &so) || stream_arg(so, &s) ||
        closable((PyBuffer *)self, "close()", ""))
        return NULL;
    rc = buffer_drop((PyBuffer *)self, s);
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

/* Raises why item i of a close_many() cannot be closed: -1, or 0. */
static int closable_item(PyObject *o, Py_ssize_t i)
{
    char what[48];

    if (!PyObject_TypeCheck(o, &PyBuffer_Type))
        return PyErr_Format(PyExc_TypeError, "close_many(): item %zd is a %.100s, not a "
                            "cucore.Buffer; nothing was closed", i, Py_TYPE(o)->tp_name), -1;
    snprintf(what, sizeof(what), "close_many(): item %zd", i);
    return closable((PyBuffer *)o, what, "; nothing was closed");
}

/* Drops the references of the open buffers of tuple t together. */
static int drop_together(PyObject *t, cuc_stream *s)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(t);
    cuc_buffer **bufs = PyMem_New(cuc_buffer *, n ? n : 1);
    size_t k = 0;
    int rc;

    if (!bufs)
        return PyErr_NoMemory(), -1;
    for (i = 0; i < n; i++) {
        PyBuffer *o = (PyBuffer *)PyTuple_GET_ITEM(t, i);

        if (o->base.h) /* else closed, or listed twice */
            bufs[k++] = buffer_detach(o);
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_buffer_unref_many_async(bufs, k, s);
    Py_END_ALLOW_THREADS
    PyMem_Free(bufs);
    return rc ? py_fail(rc) : 0;
}

/* Buffer.close_many(buffers, stream=None): close() of each, done together
 * (C's cuc_buffer_unref_many_async, which says what it batches). */
static PyObject *buf_close_many(PyObject *cls, PyObject *args, PyObject *kw)
{
    static char *names[] = {"buffers", "stream", NULL};
    PyObject *arg, *so = Py_None, *t;
    cuc_stream *s;
    Py_ssize_t i;
    int bad = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", names, &arg, &so) || stream_arg(so, &s))
        return NULL;
    t = PySequence_Tuple(arg); /* a copy: nothing the drops run can change it */
    if (!t)
        return NULL;
    for (i = 0; !bad && i < PyTuple_GET_SIZE(t); i++)
        bad = closable_item(PyTuple_GET_ITEM(t, i), i);
    if (!bad)
        bad = drop_together(t, s);
    Py_DECREF(t);
    return bad ? NULL : Py_NewRef(Py_None);
}

/* Buffer._detach_many(buffers): a list of buffers detached as one message
 * (one hold, one claim): (loader, (bytes,)), which loads as the tuple of
 * them, in order (multiprocessing's batches: cucore/_frameworks.py). */
static PyObject *buf_detach_many(PyObject *cls, PyObject *list)
{
    cuc_msg *m = NULL;
    int rc;

    if (!PyList_CheckExact(list))
        return PyErr_Format(PyExc_TypeError, "Buffer._detach_many takes a list of Buffers");
    rc = cuc_msg_create(&m);
    for (Py_ssize_t i = 0; !rc && i < PyList_GET_SIZE(list); i++) {
        PyObject *o = PyList_GET_ITEM(list, i);
        if (!PyObject_TypeCheck(o, &PyBuffer_Type) || buffer_ready((PyBuffer *)o)) {
            cuc_msg_destroy(m);
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "Buffer._detach_many: "
                                                          "item %zd is a %.100s, not a Buffer",
                                                          i, Py_TYPE(o)->tp_name);
        }
        rc = cuc_msg_add_buffer(m, (cuc_buffer *)H(o));
    }
    return handle_reduce(rc, m, 1);
}

static PyObject *buf_enter(PyObject *self, PyObject *noargs)
{
    return handle_live(self, "buffer") ? NULL : Py_NewRef(self);
}

static PyObject *buf_exit(PyObject *self, PyObject *args)
{
    int rc;

    if (closable((PyBuffer *)self, "leaving the with block", ""))
        return NULL;
    rc = buffer_drop((PyBuffer *)self, NULL);
    return rc ? py_raise(rc) : Py_NewRef(Py_False);
}

#define B(o) ((cuc_buffer *)H(o))
#define LIVE(o) (handle_live(o, "buffer") == 0)

static PyObject *buf_leases(PyObject *self, PyObject *noargs)
{
    size_t n;
    int rc;

    if (!LIVE(self))
        return NULL;
    rc = cuc_buffer_lease_count(B(self), &n);
    return rc ? py_raise(rc) : PyLong_FromSize_t(n);
}

/* view(offset, size): a part of the buffer as a Buffer of its own (no
 * driver call); it keeps the allocation alive, and pickles as the
 * allocation's identity + offset + size (the receiver imports the
 * allocation once). */
static PyObject *buf_view(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"offset", "size", NULL};
    PyObject *so;
    Py_ssize_t off, size;
    cuc_buffer *v;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "nn", names, &off, &size) ||
        buffer_ready((PyBuffer *)self))
        return NULL;
    if (off < 0 || size <= 0)
        return py_raise_fmt(CUC_E_INVALID, "view: offset %zd, size %zd", off, size);
    rc = cuc_buffer_view(B(self), (size_t)off, (size_t)size, &v);
    so = ((PyBuffer *)self)->stream;
    return rc ? py_raise(rc) : buffer_wrap_on(v, so ? so : Py_None);
}

/* Sent on only once its own lease is confirmed: the receiver's lease on
 * this process must not outlast memory this process may not use. */
static PyObject *buf_reduce(PyObject *self, PyObject *noargs)
{
    cuc_msg *m = NULL;
    int rc;

    if (buffer_ready((PyBuffer *)self))
        return NULL;
    rc = cuc_msg_create(&m);
    return handle_reduce(rc ? rc : cuc_msg_add_buffer(m, B(self)), m, 1);
}

GETTER(get_size, LIVE(self), PyLong_FromSize_t(cuc_buffer_size(B(self))))
GETTER(get_ptr, !buffer_ready((PyBuffer *)self), PyLong_FromVoidPtr(cuc_buffer_ptr(B(self))))
GETTER(get_device, LIVE(self), device_wrap(cuc_buffer_device(B(self))))
GETTER(get_pool, LIVE(self), pool_wrap(cuc_pool_ref(cuc_buffer_pool(B(self)))))
GETTER(get_imported, LIVE(self), PyBool_FromLong(cuc_buffer_is_imported(B(self))))
GETTER(get_is_view, LIVE(self), PyBool_FromLong(cuc_buffer_is_view(B(self))))
GETTER(get_offset, LIVE(self), PyLong_FromSize_t(cuc_buffer_offset(B(self))))
GETTER(get_is_wrapped, LIVE(self), PyBool_FromLong(cuc_buffer_is_wrapped(B(self))))
GETTER(get_closed, 1, PyBool_FromLong(B(self) == NULL))

static PyGetSetDef buf_getset[] = {
    {"size", get_size, NULL, NULL, NULL},
    {"ptr", get_ptr, NULL, "the device (or pinned host) address", NULL},
    {"device", get_device, NULL, NULL, NULL},
    {"pool", get_pool, NULL, NULL, NULL},
    {"is_imported", get_imported, NULL, NULL, NULL},
    {"closed", get_closed, NULL, NULL, NULL},
    {"is_view", get_is_view, NULL, "a part of an allocation (view, Slab)", NULL},
    {"offset", get_offset, NULL, "where it starts in its allocation", NULL},
    {"is_wrapped", get_is_wrapped, NULL, "memory shared by legacy CUDA IPC (wrap)", NULL},
    {"__cuda_array_interface__", mem_cai, NULL, "version 3, bytes (|u1)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef buf_methods[] = {
    {"copy_from", (PyCFunction)(void (*)(void))mem_copy_from, METH_VARARGS | METH_KEYWORDS,
     "copy_from(data, offset=0, stream=None): copy in bytes-like data, or all of a Buffer, "
     "VMM or contiguous CUDA array (synchronous)"},
    {"copy_to", (PyCFunction)(void (*)(void))mem_copy_to, METH_VARARGS | METH_KEYWORDS,
     "copy_to(dst, stream=None): copy all of it into a Buffer, VMM or contiguous CUDA array "
     "(synchronous)"},
    {"to_bytes", (PyCFunction)(void (*)(void))mem_to_bytes, METH_VARARGS | METH_KEYWORDS,
     "to_bytes(size=None, offset=0, stream=None)"},
    {"fill", (PyCFunction)(void (*)(void))mem_fill, METH_VARARGS | METH_KEYWORDS,
     "fill(value, width=1): set every 1-, 2- or 4-byte value"},
    {"lease_count", buf_leases, METH_NOARGS, "leases of other processes not ended"},
    {"view", (PyCFunction)(void (*)(void))buf_view, METH_VARARGS | METH_KEYWORDS,
     "view(offset, size): a part of the buffer as a Buffer (no driver call)"},
    {"close", (PyCFunction)(void (*)(void))buf_close, METH_VARARGS | METH_KEYWORDS,
     "close(stream=None): drop this object's reference"},
    {"close_many", (PyCFunction)(void (*)(void))buf_close_many,
     METH_VARARGS | METH_KEYWORDS | METH_STATIC,
     "close_many(buffers, stream=None): close() each, together (what close() leaves to the "
     "share point's thread goes there; the rest with one synchronize a stream and the "
     "releases in one message an exporter); closed ones and repeats are skipped; if "
     "any item cannot be closed (not a Buffer, DLPack capsules live) it raises and closes "
     "none"},
    {"__enter__", buf_enter, METH_NOARGS, NULL},
    {"__exit__", buf_exit, METH_VARARGS, NULL},
    {"__dlpack__", (PyCFunction)(void (*)(void))mem_dlpack, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"__dlpack_device__", mem_dlpack_device, METH_NOARGS, NULL},
    {"__reduce__", buf_reduce, METH_NOARGS, NULL},
    {"_detach_many", buf_detach_many, METH_O | METH_STATIC, NULL},
    {NULL, NULL, 0, NULL}};

int buffer_init(PyObject *m)
{
    PyTypeObject *t = &PyBuffer_Type;

    t->tp_doc = "a pool allocation (Pool.allocate); pickles through the share point";
    t->tp_dealloc = buffer_dealloc;
    t->tp_getset = buf_getset;
    t->tp_methods = buf_methods;
    return type_add(m, t);
}
