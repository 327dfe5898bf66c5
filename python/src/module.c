/* cucore._core: module definition. */
#include "cucore_py.h"

static PyObject *py_driver(PyObject *self, PyObject *noargs)
{
    struct cuc_driver_info info;
    int rc = cuc_driver_load(&info);

    (void)self;
    (void)noargs;
    if (rc)
        return py_raise(rc);
    return Py_BuildValue("{s:s,s:i,s:O}", "path", info.path, "version", info.version,
                         "simulated", info.simulated ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"devices", py_devices, METH_NOARGS, "every device this process sees"},
    {"current_device", py_current_device, METH_NOARGS,
     "the device whose primary context is current on this thread, or None"},
    {"launch", py_launch, METH_VARARGS, "launch(stream, config, kernel, *args)"},
    {"listen", py_listen, METH_O, "listen(path) -> Listener"},
    {"driver", py_driver, METH_NOARGS, "the driver in use: path, version, simulated"},
    {"share_point", py_share_point, METH_NOARGS, "this process's share point (starts it)"},
    {"host_id", py_host_id, METH_NOARGS, "hostname/machine-id, as pickles carry it"},
    {"_share_close", py_share_close, METH_NOARGS, NULL},
    {"_share_exit", py_share_exit, METH_NOARGS, NULL},
    {"_share_flush", py_share_flush, METH_NOARGS, NULL},
    {"wrap", (PyCFunction)(void (*)(void))py_wrap, METH_VARARGS | METH_KEYWORDS,
     "wrap(device, ptr, size): cuMemAlloc'd memory as a Buffer (legacy CUDA IPC); the "
     "caller keeps it allocated while the Buffer and its leases live"},
    {"_share_stats", py_share_stats, METH_NOARGS, NULL},
    {"_share_parked", py_share_parked, METH_NOARGS, NULL},
    {"_load", py_load, METH_O, NULL},
    {"_load_shared", (PyCFunction)(void (*)(void))py_load_shared, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "cucore._core", "cucore's C binding (see the cucore package)", -1,
    methods, NULL, NULL, NULL, NULL};

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t))
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t)) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

static int add_types(PyObject *m)
{
    return add_type(m, &PyDevice_Type, "Device") || add_type(m, &PyStream_Type, "Stream") ||
           add_type(m, &PyEvent_Type, "Event") || add_type(m, &PyKernel_Type, "Kernel") ||
           add_type(m, &PyLaunchConfig_Type, "LaunchConfig") ||
           add_type(m, &PyPool_Type, "Pool") || add_type(m, &PyBuffer_Type, "Buffer") ||
           add_type(m, &PyVmm_Type, "VMM") || add_type(m, &PyChannel_Type, "Channel") ||
           add_type(m, &PyListener_Type, "Listener") || add_type(m, &PySlab_Type, "Slab")
               ? -1 : 0;
}

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&moddef);

    if (!m)
        return NULL;
    if (add_types(m) || live_init() || errors_init(m) || wire_init(m) || share_init(m) ||
        PyModule_AddStringConstant(m, "version", cuc_version_string())) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
