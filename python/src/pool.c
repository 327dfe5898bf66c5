/* cucore.Pool: stream-ordered memory pools; an IPC pool pickles through
 * the share point (its fd cannot ride in pickle bytes). */
#include <string.h>

#include "mem.h"

static int kind_arg(const char *s, int *kind)
{
    if (!strcmp(s, "device"))
        *kind = CUC_POOL_DEVICE;
    else if (!strcmp(s, "pinned"))
        *kind = CUC_POOL_PINNED_HOST;
    else
        return py_raise_fmt(CUC_E_INVALID, "pool kind \"%s\": use \"device\" or \"pinned\"",
                            s), -1;
    return 0;
}

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"device", "ipc", "kind", "max_size", NULL};
    struct cuc_pool_props props;
    const char *kind = "device";
    Py_ssize_t max = 0;
    cuc_device *dev;
    PyObject *d;
    cuc_pool *p;
    int ipc = 1, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|psn", names, &d, &ipc, &kind, &max) ||
        device_arg(d, &dev))
        return NULL;
    cuc_pool_props_init(&props);
    if (kind_arg(kind, &props.kind))
        return NULL;
    props.flags = ipc ? CUC_POOL_IPC : 0;
    props.max_size = (size_t)(max < 0 ? 0 : max);
    rc = cuc_pool_create(dev, &props, &p);
    return rc ? py_raise(rc) : pool_wrap(p);
}

static void pool_dealloc(PyObject *self)
{
    PyPool *o = (PyPool *)self;

    if (o->weak)
        PyObject_ClearWeakRefs(self);
    live_del_ptr(o->h, self);
    if (o->pid == py_pid())
        cuc_pool_unref(o->h);
    Py_TYPE(self)->tp_free(self);
}

#define P(o) ((cuc_pool *)H(o))
#define POOL_LIVE(o) (py_check_pid(((PyHandle *)(o))->pid, "pool") == 0)

static PyObject *pool_allocate(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"size", "stream", NULL};
    PyObject *so = Py_None;
    Py_ssize_t n;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O", names, &n, &so) ||
        py_check_pid(((PyHandle *)self)->pid, "pool"))
        return NULL;
    if (n < 0)
        return py_raise_fmt(CUC_E_INVALID, "allocate(%zd): the size is negative", n);
    return mem_allocate(P(self), NULL, (size_t)n, so);
}

static PyObject *pool_leases(PyObject *self, PyObject *noargs)
{
    size_t n;
    int rc;

    if (!POOL_LIVE(self))
        return NULL;
    rc = cuc_pool_lease_count(P(self), &n);
    return rc ? py_raise(rc) : PyLong_FromSize_t(n);
}

static PyObject *pool_lease_wait(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"max_left", "timeout", NULL};
    PyObject *to = Py_None;
    Py_ssize_t left = 0;
    int rc, ms;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|nO", names, &left, &to) ||
        timeout_arg(to, &ms) || !POOL_LIVE(self))
        return NULL;
    if (left < 0)
        return py_raise_fmt(CUC_E_INVALID, "lease_wait: max_left %zd is negative", left);
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_pool_lease_wait(P(self), NULL, (size_t)left, ms);
    Py_END_ALLOW_THREADS
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

/* set_access(device, "rw" | "r" | None): a device's access to the pool's
 * memory in this process (cuc_pool_set_access; "r" is the driver's to
 * refuse). */
static PyObject *pool_set_access(PyObject *self, PyObject *args)
{
    PyObject *d, *mo;
    const char *m = "";
    cuc_device *dev;
    int rc;

    if (!PyArg_ParseTuple(args, "OO", &d, &mo) || !POOL_LIVE(self) || device_arg(d, &dev) ||
        (mo != Py_None && !(m = PyUnicode_AsUTF8(mo))))
        return NULL;
    if (strcmp(m, "rw") && strcmp(m, "r") && m[0])
        return py_raise_fmt(CUC_E_INVALID, "set_access(%s): access \"%s\": give \"rw\", "
                            "\"r\" or None", cuc_device_uuid_string(dev), m);
    rc = cuc_pool_set_access(P(self), dev, !m[0] ? CUC_POOL_ACCESS_NONE : m[1]
                                                  ? CUC_POOL_ACCESS_READWRITE
                                                  : CUC_POOL_ACCESS_READ);
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

/* access(device): "rw", "r" or "" (none), as the driver reports it. */
static PyObject *pool_access(PyObject *self, PyObject *d)
{
    cuc_device *dev;
    int rc, a;

    if (!POOL_LIVE(self) || device_arg(d, &dev))
        return NULL;
    rc = cuc_pool_get_access(P(self), dev, &a);
    return rc ? py_raise(rc) : access_name(a);
}

static PyObject *pool_reduce(PyObject *self, PyObject *noargs)
{
    cuc_msg *m = NULL;
    int rc;

    if (!POOL_LIVE(self))
        return NULL;
    rc = cuc_msg_create(&m);
    return handle_reduce(rc ? rc : cuc_msg_add_pool(m, P(self)), m, 1);
}

GETTER(get_device, POOL_LIVE(self), device_wrap(cuc_pool_device(P(self))))

static PyObject *get_id(PyObject *self, void *c)
{
    uint8_t id[CUC_POOL_ID_LEN];

    cuc_pool_id(P(self), id);
    return PyBytes_FromStringAndSize((const char *)id, CUC_POOL_ID_LEN);
}

GETTER(get_kind, POOL_LIVE(self),
       PyUnicode_FromString(cuc_pool_kind(P(self)) == CUC_POOL_DEVICE ? "device" : "pinned"))
GETTER(get_ipc, POOL_LIVE(self), PyBool_FromLong(cuc_pool_is_ipc(P(self))))
GETTER(get_imported, POOL_LIVE(self), PyBool_FromLong(cuc_pool_is_imported(P(self))))

static PyGetSetDef pool_getset[] = {
    {"device", get_device, NULL, NULL, NULL},
    {"id", get_id, NULL, "the pool's 16-byte id", NULL},
    {"kind", get_kind, NULL, "\"device\" or \"pinned\"", NULL},
    {"ipc", get_ipc, NULL, NULL, NULL},
    {"is_imported", get_imported, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef pool_methods[] = {
    {"allocate", (PyCFunction)(void (*)(void))pool_allocate, METH_VARARGS | METH_KEYWORDS,
     "allocate(size, stream=None) -> Buffer (stream None: ready when this returns; size 0: "
     "pointer 0, not shareable)"},
    {"lease_count", pool_leases, METH_NOARGS, "leases on this pool's buffers not ended"},
    {"lease_wait", (PyCFunction)(void (*)(void))pool_lease_wait, METH_VARARGS | METH_KEYWORDS,
     "lease_wait(max_left=0, timeout=-1)"},
    {"set_access", pool_set_access, METH_VARARGS,
     "set_access(device, \"rw\" | None): grant or revoke a device's access here"},
    {"access", pool_access, METH_O, "a device's access here: \"rw\", \"r\" or \"\""},
    {"__reduce__", pool_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

int pool_init(PyObject *m)
{
    PyTypeObject *t = &PyPool_Type;

    t->tp_doc = "Pool(device, ipc=True, kind=\"device\"|\"pinned\", max_size=0)";
    t->tp_new = pool_new;
    t->tp_dealloc = pool_dealloc;
    t->tp_getset = pool_getset;
    t->tp_methods = pool_methods;
    return type_add(m, t);
}
