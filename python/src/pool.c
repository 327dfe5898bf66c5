/* cucore.Pool: stream-ordered memory pools; an IPC pool pickles through
 * the share point (its fd cannot ride in pickle bytes). */
#include <string.h>
#include <unistd.h>

#include "cucore_py.h"

PyObject *pool_wrap(cuc_pool *p)
{
    PyObject *o = live_get_ptr(p);
    PyPool *po;

    if (o || PyErr_Occurred()) {
        cuc_pool_unref(p);
        return o;
    }
    po = PyObject_New(PyPool, &PyPool_Type);
    if (!po) {
        cuc_pool_unref(p);
        return NULL;
    }
    po->weak = NULL;
    po->p = p;
    po->pid = py_pid();
    if (live_put_ptr(p, (PyObject *)po))
        Py_CLEAR(po);
    return (PyObject *)po;
}

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

    (void)type;
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
    live_del_ptr(o->p, self);
    if (o->pid == py_pid())
        cuc_pool_unref(o->p);
    PyObject_Free(self);
}

#define P(o) (((PyPool *)(o))->p)
#define POOL_LIVE(o) (py_check_pid(((PyPool *)(o))->pid, "pool") == 0)

static PyObject *pool_allocate(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"size", "stream", NULL};
    PyObject *so = Py_None;
    Py_ssize_t n;
    cuc_stream *s;
    cuc_buffer *b;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O", names, &n, &so) ||
        py_check_pid(((PyPool *)self)->pid, "pool") || stream_arg(so, &s))
        return NULL;
    if (n <= 0)
        return py_raise_fmt(CUC_E_INVALID, "allocate(%zd): the size must be at least 1", n);
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_buffer_alloc_async(P(self), (size_t)n, s, &b);
    if (rc == 0 && !s) {
        rc = buffer_sync_default(b); /* no stream given: ready on return */
        if (rc)
            cuc_buffer_unref_async(b, NULL);
    }
    Py_END_ALLOW_THREADS
    return rc ? py_raise(rc) : buffer_wrap_on(b, so);
}

static PyObject *pool_leases(PyObject *self, PyObject *noargs)
{
    size_t n;
    int rc;

    (void)noargs;
    if (!POOL_LIVE(self))
        return NULL;
    rc = share_lease_count(NULL, P(self), &n);
    return rc ? py_raise(rc) : PyLong_FromSize_t(n);
}

/* How long a wait for the share point's leases looks in a loop before it
 * sleeps: a lease end comes from a share point thread, and on the H200's
 * VM a thread it woke ran tens of microseconds late (the trade the
 * driver's CU_CTX_SCHED_YIELD makes). docs/PERFORMANCE.md has the A/B. */
#define LEASE_SPIN_MS 10

/* Waits for the pool's leases of channels (cucore's) and of the share
 * point (hold.c) together, in slices of either wait; the GIL released. */
static int wait_leases(cuc_pool *p, size_t left, int ms, size_t *now_left)
{
    int64_t start = hold_now_ms(), end = ms < 0 ? -1 : start + ms, rest;
    size_t c, h;
    int rc;

    for (;;) {
        c = 0;
        rc = cuc_pool_lease_count(p, &c);
        h = hold_count(NULL, p);
        if (rc)
            return rc;
        if (c + h <= left) /* also reports a deferred free that failed, once */
            return cuc_pool_lease_wait(p, NULL, c, 0);
        rest = end < 0 ? 20 : end - hold_now_ms();
        if (rest <= 0) {
            *now_left = c + h;
            return CUC_E_TIMEOUT;
        }
        rest = rest < 20 ? rest : 20;
        if (c > 0 && h <= left)
            rc = cuc_pool_lease_wait(p, NULL, left - h, (int)rest);
        else
            hold_wait(p, left > c ? left - c : 0, (int)rest, start + LEASE_SPIN_MS);
        if (rc && rc != CUC_E_TIMEOUT)
            return rc;
    }
}

static PyObject *pool_lease_wait(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"max_left", "timeout", NULL};
    PyObject *to = Py_None;
    Py_ssize_t left = 0;
    size_t n = 0;
    int rc, ms;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|nO", names, &left, &to) ||
        timeout_arg(to, &ms) || !POOL_LIVE(self))
        return NULL;
    if (left < 0)
        return py_raise_fmt(CUC_E_INVALID, "lease_wait: max_left %zd is negative", left);
    Py_BEGIN_ALLOW_THREADS
    rc = wait_leases(P(self), (size_t)left, ms, &n);
    Py_END_ALLOW_THREADS
    if (rc == CUC_E_TIMEOUT)
        return py_raise_fmt(rc, "lease_wait: %zu leases of pool still held after %.3f s "
                            "(importers that have not released their buffers)", n,
                            ms / 1000.0);
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *pool_reduce(PyObject *self, PyObject *noargs)
{
    (void)noargs;
    return share_reduce_pool((PyPool *)self);
}

static PyObject *get_device(PyObject *self, void *c)
{
    (void)c;
    if (!POOL_LIVE(self))
        return NULL;
    return device_wrap(cuc_pool_device(P(self)));
}

static PyObject *get_id(PyObject *self, void *c)
{
    uint8_t id[CUC_POOL_ID_LEN];

    (void)c;
    cuc_pool_id(P(self), id);
    return PyBytes_FromStringAndSize((const char *)id, CUC_POOL_ID_LEN);
}

static PyObject *get_kind(PyObject *self, void *c)
{
    (void)c;
    if (!POOL_LIVE(self))
        return NULL;
    return PyUnicode_FromString(cuc_pool_kind(P(self)) == CUC_POOL_DEVICE ? "device"
                                                                          : "pinned");
}

static PyObject *get_ipc(PyObject *self, void *c)
{
    (void)c;
    if (!POOL_LIVE(self))
        return NULL;
    return PyBool_FromLong(cuc_pool_is_ipc(P(self)));
}

static PyObject *get_imported(PyObject *self, void *c)
{
    (void)c;
    if (!POOL_LIVE(self))
        return NULL;
    return PyBool_FromLong(cuc_pool_is_imported(P(self)));
}

static PyGetSetDef pool_getset[] = {
    {"device", get_device, NULL, NULL, NULL},
    {"id", get_id, NULL, "the pool's 16-byte id", NULL},
    {"kind", get_kind, NULL, "\"device\" or \"pinned\"", NULL},
    {"ipc", get_ipc, NULL, NULL, NULL},
    {"is_imported", get_imported, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef pool_methods[] = {
    {"allocate", (PyCFunction)(void (*)(void))pool_allocate, METH_VARARGS | METH_KEYWORDS,
     "allocate(size, stream=None) -> Buffer (stream None: ready when this returns)"},
    {"lease_count", pool_leases, METH_NOARGS, "leases on this pool's buffers not ended"},
    {"lease_wait", (PyCFunction)(void (*)(void))pool_lease_wait, METH_VARARGS | METH_KEYWORDS,
     "lease_wait(max_left=0, timeout=-1)"},
    {"__reduce__", pool_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject PyPool_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cucore.Pool",
    .tp_basicsize = sizeof(PyPool),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pool(device, ipc=True, kind=\"device\"|\"pinned\", max_size=0)",
    .tp_new = pool_new,
    .tp_dealloc = pool_dealloc,
    .tp_weaklistoffset = offsetof(PyPool, weak),
    .tp_getset = pool_getset,
    .tp_methods = pool_methods,
};
