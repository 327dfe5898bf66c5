/* cucore.Kernel: a symbol of a loaded image; pickles as image + kind +
 * name + hash, and one process loads each image once (cucore's cache;
 * kernel_wrap in handle.c gives one object an image and symbol). */
#include <string.h>

#include "handle.h"

static int kind_arg(const char *s, enum cuc_image_kind *kind)
{
    if (!strcmp(s, "ptx"))
        *kind = CUC_IMAGE_PTX;
    else if (!strcmp(s, "cubin"))
        *kind = CUC_IMAGE_CUBIN;
    else if (!strcmp(s, "fatbin"))
        *kind = CUC_IMAGE_FATBIN;
    else
        return py_raise_fmt(CUC_E_INVALID, "kernel kind \"%s\": use \"ptx\", \"cubin\" or "
                            "\"fatbin\"", s), -1;
    return 0;
}

static PyObject *kernel_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"image", "name", "kind", NULL};
    const char *name, *kname = "ptx";
    enum cuc_image_kind kind;
    Py_buffer img;
    cuc_kernel *k;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s*s|s", names, &img, &name, &kname))
        return NULL;
    if (kind_arg(kname, &kind)) {
        PyBuffer_Release(&img);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_kernel_load(kind, img.buf, (size_t)img.len, name, &k);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&img);
    return rc ? py_raise(rc) : kernel_wrap(k);
}

static void kernel_dealloc(PyObject *self)
{
    PyKernel *o = (PyKernel *)self;

    if (o->base.weak)
        PyObject_ClearWeakRefs(self);
    live_del(o->key, self);
    Py_XDECREF(o->key);
    if (o->base.pid == py_pid())
        cuc_kernel_destroy(o->base.h);
    Py_TYPE(self)->tp_free(self);
}

#define K(o) ((cuc_kernel *)H(o))

/* The name as str; one that is not UTF-8 (a cubin's symbol, from a peer)
 * is cucore.Error (CUC_E_BADMSG) quoting its bytes (as \\xNN: handle.c). */
static PyObject *get_name(PyObject *self, void *c)
{
    const char *name = cuc_kernel_name(K(self));
    size_t n = strlen(name);
    PyObject *s = PyUnicode_DecodeUTF8(name, (Py_ssize_t)n, NULL);

    if (s || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        return s;
    PyErr_Clear();
    return py_raise_fmt(CUC_E_BADMSG, "the kernel's name is not UTF-8: \"%.64s%s\" (%zu "
                        "bytes)", name, n > 64 ? "..." : "", n);
}

GETTER(get_kind, 1, PyUnicode_FromString(cuc_kernel_kind(K(self)) == CUC_IMAGE_PTX ? "ptx"
                                          : cuc_kernel_kind(K(self)) == CUC_IMAGE_CUBIN
                                          ? "cubin" : "fatbin"))

GETTER(get_hash, 1,
       PyBytes_FromStringAndSize((const char *)cuc_kernel_hash(K(self)), CUC_KERNEL_HASH_LEN))

static PyObject *get_image(PyObject *self, void *c)
{
    size_t n;
    const void *p = cuc_kernel_image(K(self), &n);

    return PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
}

/* ((offset, size), ...): the parameters as the driver lays them out. */
static PyObject *get_params(PyObject *self, void *c)
{
    cuc_kernel_param *v;
    PyObject *t;
    size_t n, i;
    int rc;

    if (py_check_pid(((PyHandle *)self)->pid, "kernel"))
        return NULL;
    rc = cuc_kernel_params(K(self), NULL, 0, &n);
    if (rc)
        return py_raise(rc);
    v = PyMem_New(cuc_kernel_param, n ? n : 1);
    if (!v)
        return PyErr_NoMemory();
    rc = cuc_kernel_params(K(self), v, n, &n);
    t = rc ? py_raise(rc) : PyTuple_New((Py_ssize_t)n);
    for (i = 0; t && i < n; i++) {
        PyObject *p = Py_BuildValue("(nn)", (Py_ssize_t)v[i].offset, (Py_ssize_t)v[i].size);

        if (!p)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, (Py_ssize_t)i, p);
    }
    PyMem_Free(v);
    return t;
}

static PyObject *k_reduce(PyObject *self, PyObject *noargs)
{
    cuc_msg *m = NULL;
    int rc = cuc_msg_create(&m);

    return handle_reduce(rc ? rc : cuc_msg_add_kernel(m, K(self)), m, 0);
}

static PyObject *k_stats(PyObject *cls, PyObject *noargs)
{
    size_t loads, hits;

    cuc_kernel_cache_stats(&loads, &hits);
    return Py_BuildValue("(nn)", (Py_ssize_t)loads, (Py_ssize_t)hits);
}

/* from_numba(dispatcher, signature): cucore._frameworks makes it. */
static PyObject *k_from_numba(PyObject *cls, PyObject *args)
{
    PyObject *d, *sig;

    if (!PyArg_ParseTuple(args, "OO", &d, &sig))
        return NULL;
    return py_frameworks("kernel_from_numba", "(OOO)", cls, d, sig);
}

static PyGetSetDef k_getset[] = {
    {"name", get_name, NULL, NULL, NULL},
    {"kind", get_kind, NULL, NULL, NULL},
    {"hash", get_hash, NULL, "SHA-256 of the image", NULL},
    {"image", get_image, NULL, NULL, NULL},
    {"params", get_params, NULL, "((offset, size), ...) of each parameter, as the driver "
     "lays them out: launch() packs each argument to its size", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef k_methods[] = {
    {"__reduce__", k_reduce, METH_NOARGS, NULL},
    {"from_numba", k_from_numba, METH_VARARGS | METH_CLASS,
     "from_numba(dispatcher, signature): a numba-cuda kernel compiled for signature, as "
     "its PTX"},
    {"cache_stats", k_stats, METH_NOARGS | METH_CLASS,
     "(images loaded, loads that reused one) since the process started"},
    {NULL, NULL, 0, NULL}};

int kernel_init(PyObject *m)
{
    PyTypeObject *t = &PyKernel_Type;

    t->tp_doc = "Kernel(image, name, kind=\"ptx\"|\"cubin\"|\"fatbin\")";
    t->tp_new = kernel_new;
    t->tp_dealloc = kernel_dealloc;
    t->tp_getset = k_getset;
    t->tp_methods = k_methods;
    return type_add(m, t);
}
