/* cucore.Slab: many small buffers carved out of large allocations of an
 * IPC pool (cucore/slab.h), so that a receiver imports each slab once and
 * every buffer in it with no driver call. */
#include "mem.h"

typedef struct {
    PyObject_HEAD
    cuc_slab *s;
    pid_t pid;
} PySlab;

static PyTypeObject PySlab_Type;

static PyObject *slab_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"pool", "slab_size", NULL};
    PyObject *po;
    Py_ssize_t size = 1 << 20;
    PySlab *o;
    cuc_slab *s;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|n", names, &PyPool_Type, &po, &size))
        return NULL;
    if (py_check_pid(((PyHandle *)po)->pid, "pool"))
        return NULL;
    if (size <= 0)
        return py_raise_fmt(CUC_E_INVALID, "Slab: slab_size %zd (give a positive size)", size);
    rc = cuc_slab_create(H(po), (size_t)size, &s);
    if (rc)
        return py_raise(rc);
    o = (PySlab *)type->tp_alloc(type, 0);
    if (!o) {
        cuc_slab_unref(s);
        return NULL;
    }
    o->s = s;
    o->pid = py_pid();
    return (PyObject *)o;
}

static void slab_dealloc(PyObject *self)
{
    PySlab *o = (PySlab *)self;

    if (o->pid == py_pid())
        cuc_slab_unref(o->s); /* its buffers keep it until they go */
    Py_TYPE(self)->tp_free(self);
}

static PyObject *slab_allocate(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"size", "stream", NULL};
    PyObject *so = Py_None;
    Py_ssize_t size;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O", names, &size, &so) ||
        py_check_pid(((PySlab *)self)->pid, "slab"))
        return NULL;
    if (size <= 0)
        return py_raise_fmt(CUC_E_INVALID, "Slab.allocate: size %zd", size);
    return mem_allocate(NULL, ((PySlab *)self)->s, (size_t)size, so);
}

static PyObject *slab_stats(PyObject *self, PyObject *noargs)
{
    PySlab *o = (PySlab *)self;
    size_t slabs = 0, used = 0;
    int rc;

    if (py_check_pid(o->pid, "slab"))
        return NULL;
    rc = cuc_slab_stats(o->s, &slabs, &used);
    return rc ? py_raise(rc) : Py_BuildValue("{snsn}", "slabs", (Py_ssize_t)slabs,
                                             "bytes_in_use", (Py_ssize_t)used);
}

static PyMethodDef slab_methods[] = {
    {"allocate", (PyCFunction)(void (*)(void))slab_allocate, METH_VARARGS | METH_KEYWORDS,
     "allocate(size, stream=None): a Buffer carved from a slab (a view of it)"},
    {"stats", slab_stats, METH_NOARGS, "{'slabs': held, 'bytes_in_use': carved or pending}"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject PySlab_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cucore.Slab",
    .tp_basicsize = sizeof(PySlab),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Slab(pool, slab_size=1 MiB): small buffers carved from large allocations of "
              "an IPC pool; each pickles as a view of its slab",
    .tp_new = slab_new,
    .tp_dealloc = slab_dealloc,
    .tp_methods = slab_methods,
};

int slab_init(PyObject *m)
{
    return type_add(m, &PySlab_Type);
}
