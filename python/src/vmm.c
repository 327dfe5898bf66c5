/* cucore.VMM: physical chunks at one contiguous range, with peers; pickles
 * through the share point. */
#include "mem.h"

#define V(o) ((cuc_vmm *)H(o))
#define LIVE(o) (handle_live(o, "VMM resource") == 0)

/* Up to CUC_VMM_MAX_PEERS devices of a sequence. */
static int peers_arg(PyObject *o, cuc_device **peers, size_t *n)
{
    PyObject *seq = PySequence_Tuple(o); /* a copy: device_arg runs Python code */
    Py_ssize_t i, len;

    if (!seq)
        return -1;
    len = PyTuple_GET_SIZE(seq);
    if ((size_t)len > CUC_VMM_MAX_PEERS) {
        Py_DECREF(seq);
        return py_raise_fmt(CUC_E_INVALID, "%zd peers: at most %u", len,
                            CUC_VMM_MAX_PEERS), -1;
    }
    for (i = 0; i < len; i++) {
        if (device_arg(PyTuple_GET_ITEM(seq, i), &peers[i])) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *n = (size_t)len;
    return 0;
}

static PyObject *vmm_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"owner", "size", "peers", "chunks", NULL};
    cuc_device *owner, *peers[CUC_VMM_MAX_PEERS];
    size_t npeers = 0, gran, chunk, sizes[CUC_VMM_MAX_CHUNKS], i;
    PyObject *oo, *po = NULL;
    Py_ssize_t size, nch = 1;
    cuc_vmm *v;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "On|On", names, &oo, &size, &po, &nch) ||
        device_arg(oo, &owner) || (po && peers_arg(po, peers, &npeers)))
        return NULL;
    if (size <= 0 || nch < 1 || (size_t)nch > CUC_VMM_MAX_CHUNKS)
        return py_raise_fmt(CUC_E_INVALID, "VMM(size=%zd, chunks=%zd): the size must be "
                            "positive and chunks 1..%u", size, nch, CUC_VMM_MAX_CHUNKS);
    rc = cuc_vmm_granularity(owner, &gran);
    if (rc)
        return py_raise(rc);
    /* Equal chunks, each a multiple of the granularity, covering size. */
    chunk = ((size_t)size + (size_t)nch - 1) / (size_t)nch;
    chunk = (chunk + gran - 1) / gran * gran;
    for (i = 0; i < (size_t)nch; i++)
        sizes[i] = chunk;
    rc = cuc_vmm_create(owner, (const cuc_device *const *)peers, npeers, sizes,
                        (size_t)nch, &v);
    return rc ? py_raise(rc) : vmm_wrap(v);
}

static void vmm_drop(PyVmm *o)
{
    cuc_vmm *v = o->base.h;

    if (!v)
        return;
    live_del_ptr(v, (PyObject *)o);
    o->base.h = NULL;
    Py_BEGIN_ALLOW_THREADS
    cuc_vmm_unref(v);
    Py_END_ALLOW_THREADS
}

static void vmm_dealloc(PyObject *self)
{
    PyVmm *o = (PyVmm *)self;

    if (o->base.weak)
        PyObject_ClearWeakRefs(self);
    if (o->base.pid == py_pid())
        vmm_drop(o);
    else if (o->base.h)
        live_del_ptr(o->base.h, self); /* inherited through fork: forgotten, not dropped */
    Py_TYPE(self)->tp_free(self);
}

static PyObject *vmm_close(PyObject *self, PyObject *noargs)
{
    if (py_check_pid(((PyHandle *)self)->pid, "VMM resource"))
        return NULL;
    if (((PyVmm *)self)->exports)
        return PyErr_Format(PyExc_BufferError, "close(): %zd DLPack capsule(s) or tensor(s) "
                            "still use the VMM resource's memory (drop them first)",
                            ((PyVmm *)self)->exports);
    if (((PyVmm *)self)->busy)
        return PyErr_Format(PyExc_BufferError, "close(): a copy on another thread is using "
                            "the VMM resource's memory");
    vmm_drop((PyVmm *)self);
    return Py_NewRef(Py_None);
}

static PyObject *vmm_access(PyObject *self, PyObject *d)
{
    cuc_device *dev;
    unsigned flags;
    int rc;

    if (!LIVE(self) || device_arg(d, &dev))
        return NULL;
    rc = cuc_vmm_access(V(self), dev, &flags);
    return rc ? py_raise(rc) : access_name((int)flags);
}

static PyObject *vmm_leases(PyObject *self, PyObject *noargs)
{
    size_t n;
    int rc;

    if (!LIVE(self))
        return NULL;
    rc = cuc_vmm_lease_count(V(self), &n);
    return rc ? py_raise(rc) : PyLong_FromSize_t(n);
}

static PyObject *vmm_reduce(PyObject *self, PyObject *noargs)
{
    cuc_msg *m = NULL;
    int rc;

    if (!LIVE(self))
        return NULL;
    rc = cuc_msg_create(&m);
    return handle_reduce(rc ? rc : cuc_msg_add_vmm(m, V(self)), m, 1);
}

GETTER(get_ptr, LIVE(self), PyLong_FromVoidPtr(cuc_vmm_ptr(V(self))))
GETTER(get_size, LIVE(self), PyLong_FromSize_t(cuc_vmm_size(V(self))))
GETTER(get_device, LIVE(self), device_wrap(cuc_vmm_device(V(self))))

static PyObject *get_peers(PyObject *self, void *c)
{
    size_t i, n;
    PyObject *t, *d;

    if (!LIVE(self))
        return NULL;
    n = cuc_vmm_peer_count(V(self));
    t = PyTuple_New((Py_ssize_t)n);
    for (i = 0; t && i < n; i++) {
        d = device_wrap(cuc_vmm_peer(V(self), i));
        if (!d) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, d);
    }
    return t;
}

GETTER(get_imported, LIVE(self), PyBool_FromLong(cuc_vmm_is_imported(V(self))))
GETTER(get_closed, 1, PyBool_FromLong(V(self) == NULL))

static PyGetSetDef vmm_getset[] = {
    {"ptr", get_ptr, NULL, NULL, NULL},
    {"size", get_size, NULL, NULL, NULL},
    {"device", get_device, NULL, "the owner", NULL},
    {"peers", get_peers, NULL, NULL, NULL},
    {"is_imported", get_imported, NULL, NULL, NULL},
    {"closed", get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef vmm_methods[] = {
    {"copy_from", (PyCFunction)(void (*)(void))mem_copy_from, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"copy_to", (PyCFunction)(void (*)(void))mem_copy_to, METH_VARARGS | METH_KEYWORDS, NULL},
    {"to_bytes", (PyCFunction)(void (*)(void))mem_to_bytes, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"fill", (PyCFunction)(void (*)(void))mem_fill, METH_VARARGS | METH_KEYWORDS, NULL},
    {"access", vmm_access, METH_O, "a device's access: \"rw\", \"r\" or \"\""},
    {"lease_count", vmm_leases, METH_NOARGS, NULL},
    {"close", vmm_close, METH_NOARGS, NULL},
    {"__reduce__", vmm_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

int vmm_init(PyObject *m)
{
    PyTypeObject *t = &PyVmm_Type;

    t->tp_doc = "VMM(owner, size, peers=(), chunks=1): size rounded up to the granularity";
    t->tp_new = vmm_new;
    t->tp_dealloc = vmm_dealloc;
    t->tp_getset = vmm_getset;
    t->tp_methods = vmm_methods;
    return type_add(m, t);
}
