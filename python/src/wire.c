/* Python objects in cucore messages: what Channel.send/recv and pickle
 * use. A pickle of an fd-free object is (cucore._core._load, (bytes,)),
 * the bytes a cucore message, so a C program reads it as is. */
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "cucore_py.h"

int wire_fd_arg(PyObject *o, int *fd)
{
    long v;

    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "an fd is an int, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%R is not an fd number (0..%d)", o, INT_MAX);
        return -1;
    }
    *fd = (int)v;
    return 0;
}

int wire_add(cuc_msg *m, PyObject *o)
{
    int rc, fd;

    if (PyObject_TypeCheck(o, &PyDevice_Type))
        rc = cuc_msg_add_device(m, ((PyDevice *)o)->dev);
    else if (PyObject_TypeCheck(o, &PyStream_Type))
        rc = py_check_pid(((PyStream *)o)->pid, "stream") ? 1
                                                          : cuc_msg_add_stream(m, ((PyStream *)o)->s);
    else if (PyObject_TypeCheck(o, &PyEvent_Type))
        rc = py_check_pid(((PyEvent *)o)->pid, "event") ? 1 : cuc_msg_add_event(m, ((PyEvent *)o)->e);
    else if (PyObject_TypeCheck(o, &PyLaunchConfig_Type))
        rc = cuc_msg_add_launch_config(m, &((PyLaunchConfig *)o)->cfg);
    else if (PyObject_TypeCheck(o, &PyKernel_Type))
        rc = cuc_msg_add_kernel(m, ((PyKernel *)o)->k);
    else if (PyObject_TypeCheck(o, &PyPool_Type))
        rc = py_check_pid(((PyPool *)o)->pid, "pool") ? 1 : cuc_msg_add_pool(m, ((PyPool *)o)->p);
    else if (PyObject_TypeCheck(o, &PyBuffer_Type))
        rc = buffer_live((PyBuffer *)o) ? 1 : cuc_msg_add_buffer(m, ((PyBuffer *)o)->b);
    else if (PyObject_TypeCheck(o, &PyVmm_Type))
        rc = vmm_live((PyVmm *)o) ? 1 : cuc_msg_add_vmm(m, ((PyVmm *)o)->v);
    else if (PyLong_Check(o))
        rc = wire_fd_arg(o, &fd) ? 1 : cuc_msg_add_fd(m, fd, 0); /* a plain fd */
    else
        return PyErr_Format(PyExc_TypeError, "%.100s is not a cucore object (nor an fd)",
                            Py_TYPE(o)->tp_name), -1;
    if (rc == 1 || PyErr_Occurred())
        return -1;
    return rc ? (py_raise(rc), -1) : 0;
}

static PyObject *resolve_fd(cuc_msg *m, size_t i)
{
    int fd, rc = cuc_msg_take_fd(m, i, &fd, NULL);
    PyObject *o;

    if (rc)
        return py_raise(rc);
    o = PyLong_FromLong(fd);
    if (!o)
        close(fd);
    return o;
}

/* Record i as a Python object. */
static PyObject *resolve_one(cuc_msg *m, size_t i, int type)
{
    cuc_launch_config cfg;
    void *obj = NULL;
    int rc;

    switch (type) {
    case CUC_RECORD_DEVICE:
        rc = cuc_msg_get_device(m, i, (cuc_device **)&obj);
        return rc ? py_raise(rc) : device_wrap(obj);
    case CUC_RECORD_STREAM:
        rc = cuc_msg_get_stream(m, i, (cuc_stream **)&obj);
        return rc ? py_raise(rc) : stream_wrap_default(obj);
    case CUC_RECORD_EVENT:
        rc = cuc_msg_get_event(m, i, (cuc_event **)&obj);
        return rc ? py_raise(rc) : event_wrap(obj);
    case CUC_RECORD_LAUNCH_CONFIG:
        rc = cuc_msg_get_launch_config(m, i, &cfg);
        return rc ? py_raise(rc) : launch_config_wrap(&cfg);
    case CUC_RECORD_KERNEL:
    case CUC_RECORD_KERNEL_REF: /* the peer said it holds the image */
        Py_BEGIN_ALLOW_THREADS
        rc = cuc_msg_get_kernel(m, i, (cuc_kernel **)&obj);
        Py_END_ALLOW_THREADS
        return rc ? py_raise(rc) : kernel_wrap(obj);
    case CUC_RECORD_POOL:
        rc = cuc_msg_get_pool(m, i, (cuc_pool **)&obj);
        return rc ? py_raise(rc) : pool_wrap(obj);
    case CUC_RECORD_BUFFER:
    case CUC_RECORD_BUFFER_VIEW: /* a view or a slab's buffer */
    case CUC_RECORD_IPC_BUFFER:  /* wrapped cuMemAlloc memory */
        rc = cuc_msg_get_buffer(m, i, (cuc_buffer **)&obj);
        return rc ? py_raise(rc) : buffer_wrap(obj);
    case CUC_RECORD_VMM:
        Py_BEGIN_ALLOW_THREADS
        rc = cuc_msg_get_vmm(m, i, (cuc_vmm **)&obj);
        Py_END_ALLOW_THREADS
        return rc ? py_raise(rc) : vmm_wrap(obj);
    case CUC_RECORD_FD:
        return resolve_fd(m, i);
    default:
        return py_raise_fmt(CUC_E_VERSION, "record %zu is a %s record, which Python does "
                            "not resolve", i, cuc_record_type_name(type));
    }
}

/* Closes the fds already taken into t (the records of type FD that are
 * set), which the message no longer owns. */
static void close_taken(PyObject *t, cuc_msg *m)
{
    size_t i, n = (size_t)PyTuple_GET_SIZE(t);
    int type;

    for (i = 0; i < n; i++)
        if (PyTuple_GET_ITEM(t, (Py_ssize_t)i) && cuc_msg_record_type(m, i, &type) == 0 &&
            type == CUC_RECORD_FD)
            close((int)PyLong_AsLong(PyTuple_GET_ITEM(t, (Py_ssize_t)i)));
}

/* The message's records as a tuple. Its fds are taken last, once every
 * other record resolved, and closed again if one of them cannot be: an
 * fd taken out of the message has no owner but the tuple. */
PyObject *wire_resolve(cuc_msg *m)
{
    size_t n = cuc_msg_record_count(m), i;
    PyObject *t = PyTuple_New((Py_ssize_t)n), *o;
    int type, fds;

    if (!t)
        return NULL;
    for (fds = 0; fds < 2; fds++)
        for (i = 0; i < n; i++) {
            cuc_msg_record_type(m, i, &type);
            if ((type == CUC_RECORD_FD) != fds)
                continue;
            o = resolve_one(m, i, type);
            if (!o)
                goto fail_tuple;
            PyTuple_SET_ITEM(t, (Py_ssize_t)i, o);
        }
    return t;

fail_tuple:
    close_taken(t, m);
    Py_DECREF(t);
    return NULL;
}

static PyObject *load_fn; /* cucore._core._load, for __reduce__ */

int wire_init(PyObject *module)
{
    load_fn = PyObject_GetAttrString(module, "_load");
    return load_fn ? 0 : -1;
}

PyObject *wire_reduce(PyObject *obj)
{
    PyObject *bytes, *r;
    cuc_msg *m;
    size_t len;
    void *buf;
    int rc;

    rc = cuc_msg_create(&m);
    if (rc)
        return py_raise(rc);
    if (wire_add(m, obj)) {
        cuc_msg_destroy(m);
        return NULL;
    }
    rc = cuc_msg_to_bytes(m, &buf, &len);
    cuc_msg_destroy(m);
    if (rc)
        return py_raise(rc);
    bytes = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    if (!bytes)
        return NULL;
    r = Py_BuildValue("(O(O))", load_fn, bytes);
    Py_DECREF(bytes);
    return r;
}

/* Bytes already loaded that name a process-lifetime singleton (a device,
 * a default stream): the same bytes always give the same object. */
#define SINGLETON_CACHE_MAX 4096
static PyObject *singletons;

static int is_singleton(PyObject *o)
{
    return PyObject_TypeCheck(o, &PyDevice_Type) ||
           (PyObject_TypeCheck(o, &PyStream_Type) && !((PyStream *)o)->owned);
}

static void remember(PyObject *bytes, PyObject *o)
{
    if (!PyBytes_CheckExact(bytes) || !is_singleton(o))
        return;
    if (!singletons && !(singletons = PyDict_New())) {
        PyErr_Clear();
        return;
    }
    if (PyDict_GET_SIZE(singletons) < SINGLETON_CACHE_MAX &&
        PyDict_SetItem(singletons, bytes, o))
        PyErr_Clear();
}

/* _load(bytes): the object of a one-record message (pickle's loader). */
PyObject *py_load(PyObject *self, PyObject *arg)
{
    PyObject *t, *o;
    Py_buffer v;
    cuc_msg *m;
    int rc;

    (void)self;
    o = singletons && PyBytes_CheckExact(arg) ? PyDict_GetItemWithError(singletons, arg)
                                                : NULL;
    if (o)
        return Py_NewRef(o);
    if (PyErr_Occurred() || PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE))
        return NULL;
    rc = cuc_msg_from_bytes(v.buf, (size_t)v.len, &m);
    PyBuffer_Release(&v);
    if (rc)
        return py_raise(rc);
    if (cuc_msg_record_count(m) != 1) {
        size_t n = cuc_msg_record_count(m);

        cuc_msg_destroy(m);
        return py_raise_fmt(CUC_E_BADMSG, "a cucore pickle holds one record, this one %zu", n);
    }
    t = wire_resolve(m);
    cuc_msg_destroy(m);
    if (!t)
        return NULL;
    o = Py_NewRef(PyTuple_GET_ITEM(t, 0));
    Py_DECREF(t);
    remember(arg, o);
    return o;
}
