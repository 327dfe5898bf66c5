/* cucore.Device: one object per GPU in this process (the singletons of
 * cuc_device), named by UUID on the wire. */
#include "cucore_py.h"

#define MAX_DEVICES 1024
static PyDevice *by_ordinal[MAX_DEVICES];
static PyObject *reduced[MAX_DEVICES]; /* each device's pickle, made once */

PyObject *device_wrap(cuc_device *dev)
{
    int i = cuc_device_ordinal(dev);
    PyDevice *d;

    if (i < 0 || i >= MAX_DEVICES)
        return PyErr_Format(PyExc_RuntimeError, "device ordinal %d out of range", i);
    if (!by_ordinal[i]) {
        d = PyObject_New(PyDevice, &PyDevice_Type);
        if (!d)
            return NULL;
        d->dev = dev;
        by_ordinal[i] = d; /* kept for the process: devices are never freed */
    }
    Py_INCREF(by_ordinal[i]);
    return (PyObject *)by_ordinal[i];
}

static int by_uuid_text(const char *text, cuc_device **dev)
{
    cuc_uuid u;
    int rc = cuc_uuid_parse(text, &u);

    if (rc == 0)
        rc = cuc_device_get_by_uuid(&u, dev);
    if (rc)
        py_raise(rc);
    return rc ? -1 : 0;
}

static int by_ordinal_num(PyObject *o, cuc_device **dev)
{
    long n = PyLong_AsLong(o);
    int rc;

    if (n == -1 && PyErr_Occurred())
        return -1;
    if (n < 0 || n > INT32_MAX) {
        py_raise_fmt(CUC_E_INVALID, "device ordinal %ld is negative or too large", n);
        return -1;
    }
    rc = cuc_device_get((int)n, dev);
    if (rc)
        py_raise(rc);
    return rc ? -1 : 0;
}

int device_arg(PyObject *o, cuc_device **dev)
{
    PyObject *u;
    int rc;

    if (PyObject_TypeCheck(o, &PyDevice_Type)) {
        *dev = ((PyDevice *)o)->dev;
        return 0;
    }
    if (PyLong_Check(o))
        return by_ordinal_num(o, dev);
    if (PyUnicode_Check(o))
        return by_uuid_text(PyUnicode_AsUTF8(o), dev);
    u = PyObject_GetAttrString(o, "uuid"); /* a cuda.core Device, for one */
    if (!u) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "a device is a cucore.Device, an ordinal, a UUID "
                     "string or an object with .uuid, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    rc = PyUnicode_Check(u) ? by_uuid_text(PyUnicode_AsUTF8(u), dev) : -1;
    if (rc && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "the object's .uuid is not a string");
    Py_DECREF(u);
    return rc;
}

static PyObject *device_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"device", "uuid", NULL};
    PyObject *o = NULL;
    const char *uuid = NULL;
    cuc_device *dev;

    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Oz", names, &o, &uuid))
        return NULL;
    if ((o != NULL) == (uuid != NULL))
        return PyErr_Format(PyExc_TypeError, "Device() takes an ordinal (or a device-like "
                            "object) or uuid=, exactly one");
    if (uuid ? by_uuid_text(uuid, &dev) : device_arg(o, &dev))
        return NULL;
    return device_wrap(dev);
}

PyObject *py_devices(PyObject *self, PyObject *noargs)
{
    PyObject *list, *d;
    cuc_device *dev;
    int n, i, rc;

    (void)self;
    (void)noargs;
    rc = cuc_device_count(&n);
    if (rc)
        return py_raise(rc);
    list = PyList_New(n);
    for (i = 0; list && i < n; i++) {
        rc = cuc_device_get(i, &dev);
        d = rc ? py_raise(rc) : device_wrap(dev);
        if (!d) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, d);
    }
    return list;
}

/* None when no context is current on this thread, or one that is not a
 * device's primary context (the application's own). */
PyObject *py_current_device(PyObject *self, PyObject *noargs)
{
    cuc_device *dev;
    int rc = cuc_device_current(&dev);

    (void)self;
    (void)noargs;
    if (rc == CUC_E_NOT_FOUND)
        return Py_NewRef(Py_None);
    return rc ? py_raise(rc) : device_wrap(dev);
}

#define DEV(o) (((PyDevice *)(o))->dev)

static PyObject *get_uuid(PyObject *o, void *c)
{
    (void)c;
    return PyUnicode_FromString(cuc_device_uuid_string(DEV(o)));
}

static PyObject *get_ordinal(PyObject *o, void *c)
{
    (void)c;
    return PyLong_FromLong(cuc_device_ordinal(DEV(o)));
}

static PyObject *get_name(PyObject *o, void *c)
{
    (void)c;
    return PyUnicode_FromString(cuc_device_name(DEV(o)));
}

static PyObject *get_pci(PyObject *o, void *c)
{
    (void)c;
    return PyUnicode_FromString(cuc_device_pci_bus_id(DEV(o)));
}

static PyObject *get_cc(PyObject *o, void *c)
{
    int major, minor;

    (void)c;
    cuc_device_compute_capability(DEV(o), &major, &minor);
    return Py_BuildValue("(ii)", major, minor);
}

static PyObject *get_memory(PyObject *o, void *c)
{
    (void)c;
    return PyLong_FromSize_t(cuc_device_total_memory(DEV(o)));
}

static PyObject *set_current(PyObject *o, PyObject *noargs)
{
    int rc = cuc_device_set_current(DEV(o));

    (void)noargs;
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

/* `with device:` scopes of this thread: what each found current, innermost
 * last. A device object is shared by every thread, so the stack is the
 * thread's, not the object's. */
#define SCOPE_MAX 64
static _Thread_local void *scope_saved[SCOPE_MAX];
static _Thread_local int scope_depth;

static PyObject *device_enter(PyObject *o, PyObject *noargs)
{
    void *saved;
    int rc;

    (void)noargs;
    if (scope_depth == SCOPE_MAX)
        return PyErr_Format(PyExc_RuntimeError, "`with device:` nested %d deep on this "
                            "thread: leave some first", SCOPE_MAX);
    rc = cuc_device_context_save(&saved);
    if (!rc)
        rc = cuc_device_set_current(DEV(o));
    if (rc)
        return py_raise(rc);
    scope_saved[scope_depth++] = saved;
    return Py_NewRef(o);
}

/* Puts back what the innermost scope found, even when its body raised. */
static PyObject *device_exit(PyObject *o, PyObject *args)
{
    int rc;

    (void)o;
    (void)args;
    if (scope_depth == 0)
        return PyErr_Format(PyExc_RuntimeError, "__exit__ without __enter__ on this thread");
    rc = cuc_device_context_restore(scope_saved[--scope_depth]);
    return rc ? py_raise(rc) : Py_NewRef(Py_False);
}

static PyObject *device_repr(PyObject *o)
{
    return PyUnicode_FromFormat("<cucore.Device %d %s (%s)>", cuc_device_ordinal(DEV(o)),
                                cuc_device_uuid_string(DEV(o)), cuc_device_name(DEV(o)));
}

/* A device's record never changes in a process: its pickle is made once. */
static PyObject *device_reduce(PyObject *o, PyObject *noargs)
{
    int i = cuc_device_ordinal(DEV(o));

    (void)noargs;
    if (i < 0 || i >= MAX_DEVICES)
        return wire_reduce(o);
    if (!reduced[i])
        reduced[i] = wire_reduce(o);
    Py_XINCREF(reduced[i]);
    return reduced[i];
}

/* Skips object.__reduce_ex__'s detour through copyreg: pickle's cost of a
 * device is then a dict lookup and a cached tuple. */
static PyObject *device_reduce_ex(PyObject *o, PyObject *protocol)
{
    (void)protocol;
    return device_reduce(o, NULL);
}

static PyGetSetDef device_getset[] = {
    {"uuid", get_uuid, NULL, "the GPU's UUID, \"GPU-...\": its identity everywhere", NULL},
    {"ordinal", get_ordinal, NULL, "its index among this process's devices", NULL},
    {"name", get_name, NULL, NULL, NULL},
    {"pci_bus_id", get_pci, NULL, NULL, NULL},
    {"compute_capability", get_cc, NULL, "(major, minor)", NULL},
    {"total_memory", get_memory, NULL, "bytes of device memory", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef device_methods[] = {
    {"set_current", set_current, METH_NOARGS, "make its primary context current"},
    {"__enter__", device_enter, METH_NOARGS,
     "make its primary context current until the with block ends"},
    {"__exit__", device_exit, METH_VARARGS, "put back the context the with block found"},
    {"__reduce__", device_reduce, METH_NOARGS, NULL},
    {"__reduce_ex__", device_reduce_ex, METH_O, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject PyDevice_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cucore.Device",
    .tp_basicsize = sizeof(PyDevice),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Device(ordinal) or Device(uuid=...): a GPU, by UUID across processes",
    .tp_new = device_new,
    .tp_repr = device_repr,
    .tp_getset = device_getset,
    .tp_methods = device_methods,
};
