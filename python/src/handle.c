/* The low layer (handle.h): the objects' types, errors, fork checks, the
 * identity registry, wraps, arguments and pickles' reduce. It calls no
 * other file of the extension. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handle.h"

/* ---- types ---- */

#define TYPE(name, T)                                                                     \
    {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cucore." name, .tp_basicsize = sizeof(T),  \
     .tp_flags = Py_TPFLAGS_DEFAULT, .tp_weaklistoffset = offsetof(PyHandle, weak)}

PyTypeObject PyDevice_Type = TYPE("Device", PyDevice), PyStream_Type = TYPE("Stream", PyStream),
             PyEvent_Type = TYPE("Event", PyEvent), PyKernel_Type = TYPE("Kernel", PyKernel),
             PyPool_Type = TYPE("Pool", PyPool), PyBuffer_Type = TYPE("Buffer", PyBuffer),
             PyVmm_Type = TYPE("VMM", PyVmm);
PyTypeObject PyLaunchConfig_Type = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cucore.LaunchConfig",
                                    .tp_basicsize = sizeof(PyLaunchConfig),
                                    .tp_flags = Py_TPFLAGS_DEFAULT}; /* a value: no weak refs */

int type_add(PyObject *m, PyTypeObject *t)
{
    if (PyType_Ready(t))
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, strchr(t->tp_name, '.') + 1, (PyObject *)t)) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

/* ---- errors (the classes live in cucore._errors) ---- */

static PyObject *errors_mod;

int errors_init(PyObject *module)
{
    PyObject *base;

    errors_mod = PyImport_ImportModule("cucore._errors");
    base = errors_mod ? PyObject_GetAttrString(errors_mod, "Error") : NULL;
    if (!base)
        return -1;
    return PyModule_AddObject(module, "Error", base) ? (Py_DECREF(base), -1) : 0;
}

/* The class for code (cucore.Error when none is more specific). */
static PyObject *class_of(const char *code)
{
    PyObject *by = PyObject_GetAttrString(errors_mod, "BY_CODE"), *cls;

    if (!by)
        return NULL;
    cls = PyDict_GetItemString(by, code);
    Py_XINCREF(cls);
    Py_DECREF(by);
    return cls ? cls : PyObject_GetAttrString(errors_mod, "Error");
}

/* Raises cls(code, text). The text may quote bytes a peer sent (a kernel's
 * name) that are not UTF-8: they show as \\xNN escapes, never as a
 * UnicodeDecodeError in place of the error. */
static PyObject *raise_with(const char *code, const char *text)
{
    PyObject *cls = class_of(code), *exc, *msg;

    if (!cls)
        return NULL;
    msg = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "backslashreplace");
    exc = msg ? PyObject_CallFunction(cls, "sN", code, msg) : NULL;
    Py_DECREF(cls);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *py_raise(int status)
{
    const char *msg = cuc_errmsg();

    return raise_with(cuc_errname(status), msg[0] ? msg : cuc_strerror(status));
}

PyObject *py_raise_fmt(int status, const char *fmt, ...)
{
    char text[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return raise_with(cuc_errname(status), text);
}

int py_fail(int status)
{
    py_raise(status);
    return -1;
}

/* ---- fork ---- */

static pid_t cached_pid;

static void pid_after_fork(void)
{
    cached_pid = getpid();
}

/* getpid() is a system call (glibc no longer caches it), and every object
 * checks it on every use. */
pid_t py_pid(void)
{
    if (!cached_pid) {
        cached_pid = getpid();
        pthread_atfork(NULL, NULL, pid_after_fork);
    }
    return cached_pid;
}

int py_check_pid(pid_t pid, const char *what)
{
    if (pid == py_pid())
        return 0;
    py_raise_fmt(CUC_E_FORKED, "this %s was inherited through fork from process %ld: "
                 "objects inherited through fork are inert (CUDA state does not "
                 "survive fork); send it to this process by pickle instead",
                 what, (long)pid);
    return -1;
}

int handle_live(PyObject *o, const char *what)
{
    if (py_check_pid(((PyHandle *)o)->pid, what))
        return -1;
    if (!H(o)) {
        PyErr_Format(PyExc_ValueError, "the %s is closed", what);
        return -1;
    }
    return 0;
}

/* Counted busy while it waits: another thread's close() cannot free it. */
int buffer_ready(PyBuffer *o)
{
    int rc;

    if (handle_live((PyObject *)o, "buffer"))
        return -1;
    if (o->ready || !cuc_buffer_is_imported(o->base.h))
        return 0; /* a lease confirmed stays so; this process's own memory has none */
    o->busy++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_buffer_ready(o->base.h);
    Py_END_ALLOW_THREADS
    o->busy--;
    if (rc)
        return py_fail(rc);
    o->ready = 1;
    return 0;
}

/* ---- the identity registry: key -> the object's address (an int) ---- */

static PyObject *table;

int live_init(void)
{
    table = PyDict_New();
    return table ? 0 : -1;
}

/* An object whose count reached zero is being deallocated: not handed out. */
PyObject *live_get(PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(table, key), *obj;

    if (!v)
        return NULL;
    obj = PyLong_AsVoidPtr(v);
    return obj && Py_REFCNT(obj) > 0 ? Py_NewRef(obj) : NULL;
}

int live_put(PyObject *key, PyObject *obj)
{
    PyObject *v = PyLong_FromVoidPtr(obj);
    int rc = v ? PyDict_SetItem(table, key, v) : -1;

    Py_XDECREF(v);
    return rc;
}

/* Called from deallocators: leaves the exception state as it was. */
void live_del(PyObject *key, PyObject *obj)
{
    PyObject *type, *value, *tb, *v;

    PyErr_Fetch(&type, &value, &tb);
    v = key ? PyDict_GetItemWithError(table, key) : NULL;
    if (v && PyLong_AsVoidPtr(v) == obj && PyDict_DelItem(table, key))
        PyErr_Clear();
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

void live_del_ptr(const void *p, PyObject *obj)
{
    PyObject *key = PyLong_FromVoidPtr((void *)p);

    live_del(key, obj);
    Py_XDECREF(key);
    if (!key)
        PyErr_Clear();
}

/* ---- wraps ---- */

static void drop(PyTypeObject *t, void *h)
{
    if (t == &PyPool_Type)
        cuc_pool_unref(h);
    else if (t == &PyBuffer_Type)
        cuc_buffer_unref_async(h, NULL);
    else if (t == &PyVmm_Type)
        cuc_vmm_unref(h);
    else if (t == &PyEvent_Type)
        cuc_event_unref(h); /* default streams are never released */
}

PyObject *handle_wrap(PyTypeObject *t, void *h)
{
    PyObject *key = PyLong_FromVoidPtr(h), *o = key ? live_get(key) : NULL;

    if (o || !key || PyErr_Occurred()) {
        drop(t, h);
        Py_XDECREF(key);
        return o;
    }
    o = t->tp_alloc(t, 0);
    if (!o) {
        drop(t, h);
    } else {
        H(o) = h;
        ((PyHandle *)o)->pid = py_pid();
        if (live_put(key, o))
            Py_CLEAR(o); /* its dealloc drops h */
    }
    Py_DECREF(key);
    return o;
}

#define MAX_DEVICES 1024
static PyObject *devices[MAX_DEVICES]; /* kept for the process: devices are never freed */

PyObject *device_wrap(cuc_device *dev)
{
    int i = cuc_device_ordinal(dev);

    if (i < 0 || i >= MAX_DEVICES)
        return PyErr_Format(PyExc_RuntimeError, "device ordinal %d out of range", i);
    if (!devices[i]) {
        devices[i] = PyDevice_Type.tp_alloc(&PyDevice_Type, 0);
        if (!devices[i])
            return NULL;
        H(devices[i]) = dev;
        ((PyHandle *)devices[i])->pid = py_pid();
    }
    return Py_NewRef(devices[i]);
}

PyObject *buffer_wrap_on(cuc_buffer *b, PyObject *stream)
{
    PyObject *o = buffer_wrap(b);

    if (o && stream != Py_None && !((PyBuffer *)o)->stream)
        ((PyBuffer *)o)->stream = Py_NewRef(stream);
    return o;
}

/* The same image and symbol loaded twice is one object. */
PyObject *kernel_wrap(cuc_kernel *k)
{
    const char *name = cuc_kernel_name(k);
    size_t n = strlen(name);
    PyObject *key = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(CUC_KERNEL_HASH_LEN + 1 + n));
    PyObject *o = NULL;

    if (key) {
        char *p = PyBytes_AS_STRING(key);
        memcpy(p, cuc_kernel_hash(k), CUC_KERNEL_HASH_LEN);
        p[CUC_KERNEL_HASH_LEN] = (char)cuc_kernel_kind(k);
        memcpy(p + CUC_KERNEL_HASH_LEN + 1, name, n);
        o = live_get(key);
    }
    if (o || !key || PyErr_Occurred()) {
        cuc_kernel_destroy(k);
        Py_XDECREF(key);
        return o;
    }
    o = PyKernel_Type.tp_alloc(&PyKernel_Type, 0);
    if (!o) {
        cuc_kernel_destroy(k);
        Py_DECREF(key);
        return NULL;
    }
    H(o) = k;
    ((PyHandle *)o)->pid = py_pid();
    ((PyKernel *)o)->key = key;
    if (live_put(key, o))
        Py_CLEAR(o);
    return o;
}

PyObject *launch_config_wrap(const cuc_launch_config *cfg)
{
    PyObject *o = PyLaunchConfig_Type.tp_alloc(&PyLaunchConfig_Type, 0);

    if (o)
        ((PyLaunchConfig *)o)->cfg = *cfg;
    return o;
}

/* ---- arguments ---- */

static int by_uuid_text(const char *text, cuc_device **dev)
{
    cuc_uuid u;
    int rc;

    if (!text)
        return -1; /* the str did not encode: raised */
    rc = cuc_uuid_parse(text, &u);
    if (rc == 0)
        rc = cuc_device_get_by_uuid(&u, dev);
    return rc ? py_fail(rc) : 0;
}

static int by_ordinal(PyObject *o, cuc_device **dev)
{
    long n = PyLong_AsLong(o);
    int rc;

    if (n == -1 && PyErr_Occurred())
        return -1;
    if (n < 0 || n > INT32_MAX)
        return py_raise_fmt(CUC_E_INVALID, "device ordinal %ld is negative or too large",
                            n), -1;
    rc = cuc_device_get((int)n, dev);
    return rc ? py_fail(rc) : 0;
}

/* A torch.device("cuda", i): ordinal i here (PyTorch's ordinals are the
 * driver's, under the same CUDA_VISIBLE_DEVICES). */
static int by_torch_device(PyObject *o, cuc_device **dev)
{
    PyObject *type = PyObject_GetAttrString(o, "type"), *i = PyObject_GetAttrString(o, "index");
    int rc = -1;

    if (type && i && PyUnicode_Check(type) && PyLong_Check(i) &&
        PyUnicode_CompareWithASCIIString(type, "cuda") == 0)
        rc = by_ordinal(i, dev);
    else
        PyErr_Clear(), PyErr_Format(PyExc_TypeError, "a device is a cucore.Device, an "
                                    "ordinal, a UUID string, an object with .uuid or a "
                                    "torch.device('cuda', i), not %R", o);
    Py_XDECREF(type);
    Py_XDECREF(i);
    return rc;
}

int device_arg(PyObject *o, cuc_device **dev)
{
    PyObject *u;
    int rc;

    if (PyObject_TypeCheck(o, &PyDevice_Type)) {
        *dev = H(o);
        return 0;
    }
    if (PyLong_Check(o))
        return by_ordinal(o, dev);
    if (PyUnicode_Check(o))
        return by_uuid_text(PyUnicode_AsUTF8(o), dev);
    u = PyObject_GetAttrString(o, "uuid"); /* a cuda.core Device, for one */
    if (!u) {
        PyErr_Clear();
        return by_torch_device(o, dev);
    }
    rc = PyUnicode_Check(u) ? by_uuid_text(PyUnicode_AsUTF8(u), dev) : -1;
    if (rc && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "the object's .uuid is not a string");
    Py_DECREF(u);
    return rc;
}

/* Another library's stream (cucore._frameworks gives its CUstream and
 * device) as a Stream that keeps it; the default streams' handles give
 * cucore's singletons (cuc_stream_wrap). */
PyObject *stream_obj(PyObject *o)
{
    PyObject *r, *d, *w = NULL;
    unsigned long long h;
    cuc_device *dev;
    cuc_stream *s;
    int rc;

    if (o == Py_None || PyObject_TypeCheck(o, &PyStream_Type))
        return Py_NewRef(o);
    r = py_frameworks("_cuda_stream", "(O)", o);
    if (!r || !PyArg_ParseTuple(r, "KO", &h, &d) || device_arg(d, &dev))
        goto out;
    rc = cuc_stream_wrap(dev, (void *)(uintptr_t)h, &s);
    w = rc ? py_raise(rc)
           : cuc_stream_kind(s) == CUC_STREAM_CREATED ? stream_own(s, o) : stream_wrap_default(s);
out:
    Py_XDECREF(r);
    return w;
}

PyObject *stream_own(cuc_stream *s, PyObject *keep)
{
    PyStream *o = (PyStream *)PyStream_Type.tp_alloc(&PyStream_Type, 0);

    if (!o) {
        cuc_stream_destroy(s);
        return NULL;
    }
    o->base.h = s;
    o->base.pid = py_pid();
    o->owned = 1;
    o->keep = keep ? Py_NewRef(keep) : NULL;
    return (PyObject *)o;
}

int stream_arg(PyObject *o, cuc_stream **s)
{
    if (o == Py_None) {
        *s = NULL;
        return 0;
    }
    if (!PyObject_TypeCheck(o, &PyStream_Type)) {
        PyErr_Format(PyExc_TypeError, "expected a cucore.Stream or None, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (py_check_pid(((PyHandle *)o)->pid, "stream"))
        return -1;
    *s = H(o);
    return 0;
}

/* A longer wait than an int of milliseconds holds waits that long (24.8
 * days); NaN is refused. */
int timeout_arg(PyObject *o, int *ms)
{
    double t;

    if (o == Py_None) {
        *ms = -1;
        return 0;
    }
    t = PyFloat_AsDouble(o);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(t)) {
        PyErr_SetString(PyExc_ValueError, "timeout is NaN: give seconds, or None to wait "
                        "without a limit");
        return -1;
    }
    *ms = t < 0 ? -1 : t * 1000 >= 2147483647.0 ? 2147483647 : (int)(t * 1000);
    return 0;
}

int fd_arg(PyObject *o, int *fd)
{
    long v;

    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "an fd is an int, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%R is not an fd number (0..%d)", o, INT_MAX);
        return -1;
    }
    *fd = (int)v;
    return 0;
}

/* ---- pickles ---- */

static PyObject *loaders[2]; /* _load, _attach */
static pid_t share_exited;   /* the process whose exit stopped its share point */

void handle_loaders(PyObject *load, PyObject *attach)
{
    loaders[0] = load;
    loaders[1] = attach;
}

PyObject *py_frameworks(const char *name, const char *fmt, ...)
{
    static PyObject *mod; /* kept for the process */
    PyObject *fn, *args, *r;
    va_list ap;

    if (!mod && !(mod = PyImport_ImportModule("cucore._frameworks")))
        return NULL;
    va_start(ap, fmt);
    args = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    fn = args ? PyObject_GetAttrString(mod, name) : NULL;
    r = fn ? PyObject_Call(fn, args, NULL) : NULL;
    Py_XDECREF(fn);
    Py_XDECREF(args);
    return r;
}

void handle_share_exit(void)
{
    share_exited = py_pid();
}

/* A share point started after the exit's stop (a daemon thread, a later
 * atexit handler) would hold objects for a process that is going. */
PyObject *handle_reduce(int rc, cuc_msg *m, int shared)
{
    PyObject *bytes;
    void *buf = NULL;
    size_t len = 0;

    if (!rc && shared && share_exited == py_pid()) {
        cuc_msg_destroy(m);
        return py_raise_fmt(CUC_E_INVALID, "process %ld is exiting: its share point "
                            "stopped at exit, so objects with memory can no longer be "
                            "pickled here; pickle them before the interpreter exits",
                            (long)py_pid());
    }
    if (!rc && shared)
        rc = cuc_share_start(NULL);
    if (!rc)
        rc = shared ? cuc_share_detach(m, &buf, &len) : cuc_msg_to_bytes(m, &buf, &len);
    cuc_msg_destroy(m);
    if (rc)
        return py_raise(rc);
    bytes = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return bytes ? Py_BuildValue("(O(N))", loaders[shared], bytes) : NULL;
}
