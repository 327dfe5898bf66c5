/* cucore.LaunchConfig (a plain value: no stream) and cucore.launch(). */
#include <string.h>

#include "handle.h"

/* An int in 0..UINT32_MAX (a bigger or negative one is refused, not
 * wrapped). */
static int u32_arg(PyObject *o, const char *what, uint32_t *out)
{
    unsigned long v = PyLong_Check(o) ? PyLong_AsUnsignedLong(o) : 0;

    if (!PyLong_Check(o) || PyErr_Occurred() || v > UINT32_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: %R is not an int in 0..%lu", what, o,
                     (unsigned long)UINT32_MAX);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* An int or a tuple of 1-3 ints; missing dimensions are 1. */
static int dims_arg(PyObject *o, const char *what, uint32_t d[3])
{
    PyObject *seq;
    Py_ssize_t n, i;
    unsigned long v;

    d[0] = d[1] = d[2] = 1;
    if (PyLong_Check(o)) {
        v = PyLong_AsUnsignedLong(o);
        if (PyErr_Occurred() || v > UINT32_MAX)
            return PyErr_Format(PyExc_ValueError, "%s: %R is not a dimension", what, o), -1;
        d[0] = (uint32_t)v;
        return 0;
    }
    seq = PySequence_Fast(o, "a launch dimension is an int or a tuple of 1-3 ints");
    if (!seq)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    for (i = 0; i < n && i < 3; i++) {
        v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred() || v > UINT32_MAX)
            break;
        d[i] = (uint32_t)v;
    }
    Py_DECREF(seq);
    if (i != n || n < 1 || n > 3) {
        PyErr_Clear();
        return PyErr_Format(PyExc_ValueError, "%s: %R is not 1-3 dimensions", what, o), -1;
    }
    return 0;
}

static PyObject *lc_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"grid", "block", "shared_mem", "cluster", "cooperative", NULL};
    PyObject *grid, *block, *cluster = Py_None, *shmem = NULL;
    int coop = 0, rc;
    cuc_launch_config cfg;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOp", names, &grid, &block, &shmem,
                                     &cluster, &coop))
        return NULL;
    cuc_launch_config_init(&cfg);
    if (dims_arg(grid, "grid", cfg.grid) || dims_arg(block, "block", cfg.block) ||
        (cluster != Py_None && dims_arg(cluster, "cluster", cfg.cluster)) ||
        (shmem && u32_arg(shmem, "shared_mem", &cfg.shared_mem)))
        return NULL;
    cfg.cooperative = (uint32_t)coop;
    rc = cuc_launch_config_check(&cfg);
    return rc ? py_raise(rc) : launch_config_wrap(&cfg);
}

#define CFG(o) (&((PyLaunchConfig *)(o))->cfg)

GETTER(get_grid, 1,
       Py_BuildValue("(III)", CFG(self)->grid[0], CFG(self)->grid[1], CFG(self)->grid[2]))
GETTER(get_block, 1,
       Py_BuildValue("(III)", CFG(self)->block[0], CFG(self)->block[1], CFG(self)->block[2]))

static PyObject *get_cluster(PyObject *o, void *c)
{
    const uint32_t *d = CFG(o)->cluster;

    if (d[0] == 1 && d[1] == 1 && d[2] == 1)
        return Py_NewRef(Py_None);
    return Py_BuildValue("(III)", d[0], d[1], d[2]);
}

GETTER(get_shmem, 1, PyLong_FromUnsignedLong(CFG(self)->shared_mem))
GETTER(get_coop, 1, PyBool_FromLong(CFG(self)->cooperative))

static PyObject *lc_richcompare(PyObject *a, PyObject *b, int op)
{
    int eq;

    if (!PyObject_TypeCheck(b, &PyLaunchConfig_Type) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    eq = !memcmp(CFG(a), CFG(b), sizeof(cuc_launch_config));
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyObject *lc_repr(PyObject *o)
{
    const cuc_launch_config *c = CFG(o);

    return PyUnicode_FromFormat("<cucore.LaunchConfig grid=(%u,%u,%u) block=(%u,%u,%u) "
                                "cluster=(%u,%u,%u) shared_mem=%u cooperative=%u>",
                                c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1],
                                c->block[2], c->cluster[0], c->cluster[1], c->cluster[2],
                                c->shared_mem, c->cooperative);
}

static PyObject *lc_reduce(PyObject *self, PyObject *noargs)
{
    cuc_msg *m = NULL;
    int rc = cuc_msg_create(&m);

    return handle_reduce(rc ? rc : cuc_msg_add_launch_config(m, CFG(self)), m, 0);
}

static PyGetSetDef lc_getset[] = {
    {"grid", get_grid, NULL, "blocks (not clusters) in x, y, z", NULL},
    {"block", get_block, NULL, "threads per block", NULL},
    {"cluster", get_cluster, NULL, "blocks per cluster, or None", NULL},
    {"shared_mem", get_shmem, NULL, "dynamic shared memory per block", NULL},
    {"cooperative", get_coop, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef lc_methods[] = {
    {"__reduce__", lc_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

/* Kernel arguments, each stored as the kernel's parameter of that index
 * takes it (cuc_kernel_params): an int in that many bytes (range
 * checked), a float as a half, float or double, a Buffer or VMM as its
 * device pointer; a bytes-like object (a ctypes or NumPy scalar, a packed
 * struct) as its own bytes. cuc_launch_checked then holds every size and
 * the count against the kernel's. */
#define MAX_ARGS 64

#if PY_VERSION_HEX < 0x030B0000
#define PyFloat_Pack2 _PyFloat_Pack2
#define PyFloat_Pack4 _PyFloat_Pack4
#endif

struct args {
    uint64_t slot[MAX_ARGS];
    Py_buffer views[MAX_ARGS];
    void *ptrs[MAX_ARGS];
    size_t sizes[MAX_ARGS];
    int nviews;
};

/* v in psize bytes, little-endian (the GPU's order), if it fits as a
 * signed or an unsigned integer of that size. */
static int int_put(struct args *a, int i, PyObject *o, size_t psize, const char *kname)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    unsigned long long u = (unsigned long long)v;
    int fits;

    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0) {
        u = PyLong_AsUnsignedLongLong(o); /* a raw pointer above 2^63 */
        if (PyErr_Occurred())
            PyErr_Clear();
        else
            overflow = 0;
    }
    if (psize == 8)
        fits = !overflow;
    else if (psize == 1 || psize == 2 || psize == 4)
        fits = !overflow && v >= -(1LL << (8 * psize - 1)) && v < (1LL << (8 * psize));
    else
        return PyErr_Format(PyExc_TypeError, "kernel \"%.256s\": parameter %d is %zu "
                            "bytes, not an integer's size: pass %zu bytes (a bytes-like "
                            "object) for it", kname, i, psize, psize), -1;
    if (!fits)
        return PyErr_Format(PyExc_OverflowError, "kernel \"%.256s\": argument %d (%R) "
                            "does not fit parameter %d's %zu byte%s", kname, i, o, i,
                            psize, psize == 1 ? "" : "s"), -1;
    a->slot[i] = u; /* the low psize bytes, on a little-endian host */
    a->sizes[i] = psize;
    return 0;
}

static int float_put(struct args *a, int i, PyObject *o, size_t psize, const char *kname)
{
    double d = PyFloat_AS_DOUBLE(o);
    unsigned char *p = (unsigned char *)&a->slot[i];

    a->sizes[i] = psize;
    if (psize == 8)
        return memcpy(p, &d, sizeof(d)), 0;
    if (psize == 4 && PyFloat_Pack4(d, (char *)p, 1) == 0)
        return 0;
    if (psize == 2 && PyFloat_Pack2(d, (char *)p, 1) == 0)
        return 0;
    if (psize == 4 || psize == 2) {
        PyErr_Clear();
        return PyErr_Format(PyExc_OverflowError, "kernel \"%.256s\": argument %d (%R) "
                            "does not fit parameter %d's %zu-byte float", kname, i, o, i,
                            psize), -1;
    }
    return PyErr_Format(PyExc_TypeError, "kernel \"%.256s\": parameter %d is %zu bytes, "
                        "not a float's size: pass %zu bytes (a bytes-like object) for it",
                        kname, i, psize, psize), -1;
}

/* psize: the parameter's size; an argument past the last parameter gets
 * 8 (the count check refuses the launch anyway). */
static int arg_put(struct args *a, int i, PyObject *o, size_t psize, const char *kname)
{
    a->ptrs[i] = &a->slot[i];
    a->slot[i] = 0;
    a->sizes[i] = 8;
    if (PyObject_TypeCheck(o, &PyBuffer_Type)) {
        if (buffer_ready((PyBuffer *)o))
            return -1;
        a->slot[i] = (uint64_t)(uintptr_t)cuc_buffer_ptr(H(o));
    } else if (PyObject_TypeCheck(o, &PyVmm_Type)) {
        if (handle_live(o, "VMM resource"))
            return -1;
        a->slot[i] = (uint64_t)(uintptr_t)cuc_vmm_ptr(H(o));
    } else if (PyFloat_Check(o)) {
        return float_put(a, i, o, psize, kname);
    } else if (PyLong_Check(o)) {
        return int_put(a, i, o, psize, kname);
    } else if (PyObject_CheckBuffer(o)) {
        if (PyObject_GetBuffer(o, &a->views[a->nviews], PyBUF_SIMPLE))
            return -1;
        a->ptrs[i] = a->views[a->nviews].buf;
        a->sizes[i] = (size_t)a->views[a->nviews++].len;
    } else {
        PyErr_Format(PyExc_TypeError, "kernel argument %d: %.100s is not an int, float, "
                     "buffer, VMM or bytes-like scalar", i, Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

static void args_release(struct args *a)
{
    while (a->nviews > 0)
        PyBuffer_Release(&a->views[--a->nviews]);
}

static PyObject *py_launch(PyObject *self, PyObject *args)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args), i;
    cuc_kernel_param params[MAX_ARGS];
    PyObject *so, *co, *ko;
    struct args a;
    cuc_stream *s;
    cuc_kernel *k;
    size_t np;
    int rc = 0;

    if (n < 3 || n - 3 > MAX_ARGS)
        return PyErr_Format(PyExc_TypeError, "launch(stream, config, kernel, *args): at "
                            "most %d kernel arguments", MAX_ARGS);
    co = PyTuple_GET_ITEM(args, 1);
    ko = PyTuple_GET_ITEM(args, 2);
    if (!PyObject_TypeCheck(co, &PyLaunchConfig_Type) || !PyObject_TypeCheck(ko, &PyKernel_Type))
        return PyErr_Format(PyExc_TypeError, "launch(stream, config, kernel, *args) takes a "
                            "cucore.LaunchConfig and a cucore.Kernel");
    so = stream_obj(PyTuple_GET_ITEM(args, 0)); /* before any memory is looked at */
    if (!so || stream_arg(so, &s) || py_check_pid(((PyHandle *)ko)->pid, "kernel"))
        goto fail_stream;
    k = H(ko);
    rc = cuc_kernel_params(k, params, MAX_ARGS, &np);
    if (rc) {
        py_raise(rc);
        goto fail_stream;
    }
    a.nviews = 0;
    for (i = 3; i < n && rc == 0; i++)
        rc = arg_put(&a, (int)(i - 3), PyTuple_GET_ITEM(args, i),
                     (size_t)(i - 3) < np ? params[i - 3].size : 8, cuc_kernel_name(k));
    if (rc == 0)
        rc = cuc_launch_checked(s, CFG(co), k, n > 3 ? a.ptrs : NULL, a.sizes,
                                (size_t)(n - 3));
    else
        rc = 1; /* a Python error is set */
    args_release(&a);
    Py_DECREF(so);
    if (rc == 1)
        return NULL;
    return rc ? py_raise(rc) : Py_NewRef(Py_None);

fail_stream:
    Py_XDECREF(so);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"launch", py_launch, METH_VARARGS, "launch(stream, config, kernel, *args)"},
    {NULL, NULL, 0, NULL}};

int launch_init(PyObject *m)
{
    PyTypeObject *t = &PyLaunchConfig_Type;

    t->tp_doc = "LaunchConfig(grid, block, shared_mem=0, cluster=None, cooperative=False)";
    t->tp_new = lc_new;
    t->tp_repr = lc_repr;
    t->tp_richcompare = lc_richcompare;
    t->tp_getset = lc_getset;
    t->tp_methods = lc_methods;
    return type_add(m, t) || PyModule_AddFunctions(m, module_methods) ? -1 : 0;
}
