/* cucore._core: the module (the layers are in handle.h). */
#include "mem.h"

static PyObject *py_driver(PyObject *self, PyObject *noargs)
{
    struct cuc_driver_info info;
    int rc = cuc_driver_load(&info);

    if (rc)
        return py_raise(rc);
    return Py_BuildValue("{s:s,s:i,s:O}", "path", info.path, "version", info.version,
                         "simulated", info.simulated ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"driver", py_driver, METH_NOARGS, "the driver in use: path, version, simulated"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "cucore._core", "cucore's C binding (see the cucore package)", -1,
    methods, NULL, NULL, NULL, NULL};

static int (*const inits[])(PyObject *m) = {
    errors_init, device_init, stream_init, event_init, kernel_init, launch_init, pool_init,
    buffer_init, vmm_init, slab_init, mem_init, wire_init, channel_init, share_init};

/* The loaders pickles name (handle_reduce). */
static int loaders_init(PyObject *m)
{
    PyObject *load = PyObject_GetAttrString(m, "_load");
    PyObject *attach = PyObject_GetAttrString(m, "_attach");

    if (!load || !attach) {
        Py_XDECREF(load);
        Py_XDECREF(attach);
        return -1;
    }
    handle_loaders(load, attach); /* kept for the process */
    return 0;
}

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&moddef);
    size_t i;

    if (!m)
        return NULL;
    for (i = 0; i < sizeof(inits) / sizeof(inits[0]); i++)
        if (inits[i](m))
            break;
    if (i < sizeof(inits) / sizeof(inits[0]) || live_init() || loaders_init(m) ||
        PyModule_AddStringConstant(m, "version", cuc_version_string())) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
