/* Python objects in cucore messages (wire.h): the types a message
 * carries, each with its add, and a table of the record types a message
 * resolves to objects, each with its get. A pickle of an fd-free
 * object is (cucore._load, (bytes,)), the bytes a cucore message, so a C
 * program reads it as is. */
#include <unistd.h>

#include "wire.h"

#define PID_OK(o, what) (py_check_pid(((PyHandle *)(o))->pid, what) == 0)
#define IS(o, T) PyObject_TypeCheck(o, &T)

/* o into m: 0, a CUC_E_*, 1 (raised), or 2 (not a cucore object). A
 * buffer is sent on only once its own lease is confirmed (as its pickle). */
static int add(cuc_msg *m, PyObject *o)
{
    int fd;

    if (IS(o, PyDevice_Type))
        return cuc_msg_add_device(m, H(o));
    if (IS(o, PyKernel_Type))
        return cuc_msg_add_kernel(m, H(o));
    if (IS(o, PyStream_Type))
        return PID_OK(o, "stream") ? cuc_msg_add_stream(m, H(o)) : 1;
    if (IS(o, PyEvent_Type))
        return PID_OK(o, "event") ? cuc_msg_add_event(m, H(o)) : 1;
    if (IS(o, PyLaunchConfig_Type))
        return cuc_msg_add_launch_config(m, &((PyLaunchConfig *)o)->cfg);
    if (IS(o, PyPool_Type))
        return PID_OK(o, "pool") ? cuc_msg_add_pool(m, H(o)) : 1;
    if (IS(o, PyBuffer_Type))
        return buffer_ready((PyBuffer *)o) ? 1 : cuc_msg_add_buffer(m, H(o));
    if (IS(o, PyVmm_Type))
        return handle_live(o, "VMM resource") ? 1 : cuc_msg_add_vmm(m, H(o));
    if (PyLong_Check(o)) /* a plain fd */
        return fd_arg(o, &fd) ? 1 : cuc_msg_add_fd(m, fd, 0);
    return 2;
}

int wire_add(cuc_msg *m, PyObject *o)
{
    int rc = add(m, o);

    if (rc == 2)
        PyErr_Format(PyExc_TypeError, "%.100s is not a cucore object (nor an fd)",
                     Py_TYPE(o)->tp_name);
    return rc == 1 || rc == 2 || PyErr_Occurred() ? -1 : rc ? py_fail(rc) : 0;
}

/* get_NAME(m, i): record i as its object (cuc_msg_get_NAME, then its wrap). */
#define MSG_GETTER(name, T, get, wrap)                                     \
    static PyObject *name(cuc_msg *m, size_t i)                            \
    {                                                                      \
        T x;                                                               \
        int rc = get(m, i, &x);                                            \
        return rc ? py_raise(rc) : wrap(x);                                \
    }
MSG_GETTER(get_device, cuc_device *, cuc_msg_get_device, device_wrap)
MSG_GETTER(get_stream, cuc_stream *, cuc_msg_get_stream, stream_wrap_default)
MSG_GETTER(get_event, cuc_event *, cuc_msg_get_event, event_wrap)
MSG_GETTER(get_pool, cuc_pool *, cuc_msg_get_pool, pool_wrap)
/* A buffer, a view (or a slab's buffer), or wrapped cuMemAlloc memory. */
MSG_GETTER(get_buffer, cuc_buffer *, cuc_msg_get_buffer, buffer_wrap)

static PyObject *get_config(cuc_msg *m, size_t i)
{
    cuc_launch_config cfg;
    int rc = cuc_msg_get_launch_config(m, i, &cfg);

    return rc ? py_raise(rc) : launch_config_wrap(&cfg);
}

/* A kernel, or a kernel ref (the peer said it holds the image). */
static PyObject *get_kernel(cuc_msg *m, size_t i)
{
    cuc_kernel *k;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = cuc_msg_get_kernel(m, i, &k);
    Py_END_ALLOW_THREADS
    return rc ? py_raise(rc) : kernel_wrap(k);
}

static PyObject *get_vmm(cuc_msg *m, size_t i)
{
    cuc_vmm *v;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = cuc_msg_get_vmm(m, i, &v);
    Py_END_ALLOW_THREADS
    return rc ? py_raise(rc) : vmm_wrap(v);
}

static PyObject *get_fd(cuc_msg *m, size_t i)
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

static PyObject *(*const gets[])(cuc_msg *m, size_t i) = {
    [CUC_RECORD_DEVICE] = get_device, [CUC_RECORD_STREAM] = get_stream,
    [CUC_RECORD_EVENT] = get_event, [CUC_RECORD_LAUNCH_CONFIG] = get_config,
    [CUC_RECORD_KERNEL] = get_kernel, [CUC_RECORD_KERNEL_REF] = get_kernel,
    [CUC_RECORD_POOL] = get_pool, [CUC_RECORD_BUFFER] = get_buffer,
    [CUC_RECORD_BUFFER_VIEW] = get_buffer, [CUC_RECORD_IPC_BUFFER] = get_buffer,
    [CUC_RECORD_VMM] = get_vmm, [CUC_RECORD_FD] = get_fd,
};

/* Record i as a Python object. */
static PyObject *resolve_one(cuc_msg *m, size_t i, int type)
{
    if (type > 0 && (size_t)type < sizeof(gets) / sizeof(gets[0]) && gets[type])
        return gets[type](m, i);
    return py_raise_fmt(CUC_E_VERSION, "record %zu is a %s record, which Python does not "
                        "resolve", i, cuc_record_type_name(type));
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
static PyObject *py_load(PyObject *self, PyObject *arg)
{
    PyObject *t, *o;
    Py_buffer v;
    cuc_msg *m;
    int rc;

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

static PyMethodDef module_methods[] = {
    {"_load", py_load, METH_O, NULL},
    {NULL, NULL, 0, NULL}};

int wire_init(PyObject *m)
{
    return PyModule_AddFunctions(m, module_methods);
}
