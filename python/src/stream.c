/* cucore.Stream: the default streams (singletons that cross processes as
 * kind + device UUID, wrapped by handle.c) and created streams (this
 * process only). */
#include "handle.h"

static PyObject *stream_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"device", "non_blocking", "priority", NULL};
    PyObject *d;
    int nb = 0, prio = 0, rc;
    cuc_device *dev;
    cuc_stream *s;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pi", names, &d, &nb, &prio))
        return NULL;
    if (PyTuple_GET_SIZE(args) + (kw ? PyDict_GET_SIZE(kw) : 0) == 1 &&
        PyObject_HasAttrString(d, "__cuda_stream__"))
        return stream_obj(d); /* another library's stream, wrapped */
    if (device_arg(d, &dev))
        return NULL;
    rc = cuc_stream_create(dev, nb ? CUC_STREAM_NON_BLOCKING : 0, prio, &s);
    return rc ? py_raise(rc) : stream_own(s, NULL);
}

static void stream_dealloc(PyObject *self)
{
    PyStream *o = (PyStream *)self;

    if (o->base.weak)
        PyObject_ClearWeakRefs(self);
    if (o->owned && o->base.pid == py_pid())
        cuc_stream_destroy(o->base.h);
    else if (!o->owned)
        live_del_ptr(o->base.h, self);
    Py_CLEAR(o->keep);
    Py_TYPE(self)->tp_free(self);
}

typedef int (*default_fn)(cuc_device *, cuc_stream **);

static PyObject *get_default(PyObject *arg, default_fn fn)
{
    cuc_device *dev;
    cuc_stream *s;
    int rc;

    if (device_arg(arg, &dev))
        return NULL;
    rc = fn(dev, &s);
    return rc ? py_raise(rc) : stream_wrap_default(s);
}

static PyObject *st_legacy(PyObject *cls, PyObject *arg)
{
    return get_default(arg, cuc_stream_legacy);
}

static PyObject *st_per_thread(PyObject *cls, PyObject *arg)
{
    return get_default(arg, cuc_stream_per_thread);
}

static PyObject *st_default(PyObject *cls, PyObject *arg)
{
    return get_default(arg, cuc_stream_default);
}

#define S(o) ((cuc_stream *)H(o))

static PyObject *st_sync(PyObject *self, PyObject *noargs)
{
    int rc;

    if (py_check_pid(((PyHandle *)self)->pid, "stream"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_stream_synchronize(S(self));
    Py_END_ALLOW_THREADS
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *st_query(PyObject *self, PyObject *noargs)
{
    int rc, done = 0;

    if (py_check_pid(((PyHandle *)self)->pid, "stream"))
        return NULL;
    rc = cuc_stream_query(S(self), &done);
    return rc ? py_raise(rc) : PyBool_FromLong(done);
}

static PyObject *st_wait(PyObject *self, PyObject *ev)
{
    int rc;

    if (!PyObject_TypeCheck(ev, &PyEvent_Type))
        return PyErr_Format(PyExc_TypeError, "Stream.wait takes a cucore.Event");
    if (py_check_pid(((PyHandle *)self)->pid, "stream") ||
        py_check_pid(((PyHandle *)ev)->pid, "event"))
        return NULL;
    rc = cuc_stream_wait_event(S(self), H(ev));
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *st_cuda_stream(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("(iK)", 0, (unsigned long long)(uintptr_t)cuc_stream_handle(S(self)));
}

static PyObject *st_reduce(PyObject *self, PyObject *noargs)
{
    cuc_msg *m = NULL;
    int rc;

    if (cuc_stream_kind(S(self)) == CUC_STREAM_CREATED)
        return py_raise_fmt(CUC_E_NOT_SERIALIZABLE, "a created stream (on device %s) is a "
                            "handle valid only in its process: send a cucore.Event(dev, "
                            "ipc=True) recorded on it, and have the receiver wait on it "
                            "(Stream.wait) from a stream of its own; or send "
                            "Stream.legacy(dev) / Stream.per_thread(dev)",
                            cuc_device_uuid_string(cuc_stream_device(S(self))));
    rc = cuc_msg_create(&m);
    return handle_reduce(rc ? rc : cuc_msg_add_stream(m, S(self)), m, 0);
}

GETTER(get_device, 1, device_wrap(cuc_stream_device(S(self))))

GETTER(get_kind, 1, PyUnicode_FromString(cuc_stream_kind(S(self)) == CUC_STREAM_CREATED
                                          ? "created" : cuc_stream_kind(S(self)) ==
                                          CUC_STREAM_LEGACY_DEFAULT ? "legacy" : "per-thread"))

GETTER(get_handle, 1, PyLong_FromVoidPtr(cuc_stream_handle(S(self))))

static PyObject *stream_repr(PyObject *self)
{
    PyObject *kind = get_kind(self, NULL), *r;

    if (!kind)
        return NULL;
    r = PyUnicode_FromFormat("<cucore.Stream %U on %s>", kind,
                             cuc_device_uuid_string(cuc_stream_device(S(self))));
    Py_DECREF(kind);
    return r;
}

static PyGetSetDef st_getset[] = {
    {"device", get_device, NULL, NULL, NULL},
    {"kind", get_kind, NULL, "\"legacy\", \"per-thread\" or \"created\"", NULL},
    {"handle", get_handle, NULL, "the driver's CUstream as an int", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef st_methods[] = {
    {"legacy", st_legacy, METH_O | METH_CLASS, "the device's legacy default stream"},
    {"per_thread", st_per_thread, METH_O | METH_CLASS, "the per-thread default stream"},
    {"default", st_default, METH_O | METH_CLASS, "what stream 0 means in this process"},
    {"synchronize", st_sync, METH_NOARGS, NULL},
    {"query", st_query, METH_NOARGS, "True when all queued work has completed"},
    {"wait", st_wait, METH_O, "make later work wait for an event"},
    {"__cuda_stream__", st_cuda_stream, METH_NOARGS, "(0, CUstream) for cuda.core"},
    {"__reduce__", st_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

int stream_init(PyObject *m)
{
    PyTypeObject *t = &PyStream_Type;

    t->tp_doc = "Stream(device, non_blocking=False, priority=0): a created stream "
                "(this process only); Stream(x): x's CUstream (x.__cuda_stream__()), "
                "which x keeps; Stream.legacy(dev) / Stream.per_thread(dev) pickle";
    t->tp_new = stream_new;
    t->tp_dealloc = stream_dealloc;
    t->tp_repr = stream_repr;
    t->tp_getset = st_getset;
    t->tp_methods = st_methods;
    return type_add(m, t);
}
