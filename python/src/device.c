/* cucore.Device: one object per GPU in this process (the singletons of
 * cuc_device, wrapped by handle.c), named by UUID on the wire. */
#include "handle.h"

#define MAX_DEVICES 1024
static PyObject *reduced[MAX_DEVICES]; /* each device's pickle, made once */

static PyObject *device_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"device", "uuid", NULL};
    PyObject *o = NULL, *uuid = NULL;
    cuc_device *dev;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OU", names, &o, &uuid))
        return NULL;
    if ((o != NULL) == (uuid != NULL))
        return PyErr_Format(PyExc_TypeError, "Device() takes an ordinal (or a device-like "
                            "object) or uuid=, exactly one");
    return device_arg(o ? o : uuid, &dev) ? NULL : device_wrap(dev);
}

static PyObject *py_devices(PyObject *self, PyObject *noargs)
{
    PyObject *list, *d;
    cuc_device *dev;
    int n, i, rc;

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
static PyObject *py_current_device(PyObject *self, PyObject *noargs)
{
    cuc_device *dev;
    int rc = cuc_device_current(&dev);

    if (rc == CUC_E_NOT_FOUND)
        return Py_NewRef(Py_None);
    return rc ? py_raise(rc) : device_wrap(dev);
}

#define DEV(o) ((cuc_device *)H(o))

GETTER(get_uuid, 1, PyUnicode_FromString(cuc_device_uuid_string(DEV(self))))
GETTER(get_ordinal, 1, PyLong_FromLong(cuc_device_ordinal(DEV(self))))
GETTER(get_name, 1, PyUnicode_FromString(cuc_device_name(DEV(self))))
GETTER(get_pci, 1, PyUnicode_FromString(cuc_device_pci_bus_id(DEV(self))))

static PyObject *get_cc(PyObject *o, void *c)
{
    int major, minor;

    cuc_device_compute_capability(DEV(o), &major, &minor);
    return Py_BuildValue("(ii)", major, minor);
}

GETTER(get_memory, 1, PyLong_FromSize_t(cuc_device_total_memory(DEV(self))))

static PyObject *set_current(PyObject *o, PyObject *noargs)
{
    int rc = cuc_device_set_current(DEV(o));

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

static PyObject *reduce_now(PyObject *o)
{
    cuc_msg *m = NULL;
    int rc = cuc_msg_create(&m);

    return handle_reduce(rc ? rc : cuc_msg_add_device(m, DEV(o)), m, 0);
}

/* A device's record never changes in a process: its pickle is made once. */
static PyObject *device_reduce(PyObject *o, PyObject *noargs)
{
    int i = cuc_device_ordinal(DEV(o));

    if (i < 0 || i >= MAX_DEVICES)
        return reduce_now(o);
    if (!reduced[i])
        reduced[i] = reduce_now(o);
    Py_XINCREF(reduced[i]);
    return reduced[i];
}

/* Skips object.__reduce_ex__'s detour through copyreg: pickle's cost of a
 * device is then a dict lookup and a cached tuple. */
static PyObject *device_reduce_ex(PyObject *o, PyObject *protocol)
{
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

static PyMethodDef module_methods[] = {
    {"devices", py_devices, METH_NOARGS, "every device this process sees"},
    {"current_device", py_current_device, METH_NOARGS,
     "the device whose primary context is current on this thread, or None"},
    {NULL, NULL, 0, NULL}};

int device_init(PyObject *m)
{
    PyTypeObject *t = &PyDevice_Type;

    t->tp_doc = "Device(ordinal) or Device(uuid=...): a GPU, by UUID across processes";
    t->tp_new = device_new;
    t->tp_repr = device_repr;
    t->tp_getset = device_getset;
    t->tp_methods = device_methods;
    return type_add(m, t) || PyModule_AddFunctions(m, module_methods) ? -1 : 0;
}
