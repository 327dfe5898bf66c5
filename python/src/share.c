/* The share point (cucore/share.h) from Python: pickling a pool, buffer or
 * VMM resource detaches it (handle_reduce); unpickling attaches the bytes
 * here (_attach) and resolves the message's records as a channel's. The
 * library serves the share point on a thread of its own; nothing here
 * runs without the GIL but the library's calls. */
#include "wire.h"

/* _attach(bytes): the object of a detached message (pickle's loader), or
 * a tuple of them for a message of several (a C program's). A record that
 * does not resolve destroys the message unresolved: the library gives the
 * claim back, and the hold stays for the bytes' other receivers. */
static PyObject *py_attach(PyObject *self, PyObject *arg)
{
    PyObject *t, *o;
    Py_buffer v;
    cuc_msg *m;
    int rc;

    if (PyUnicode_Check(arg))
        return PyErr_Format(PyExc_TypeError, "_attach takes bytes, not str");
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_share_attach(v.buf, (size_t)v.len, &m);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    if (rc)
        return py_raise(rc);
    t = wire_resolve(m);
    cuc_msg_destroy(m);
    if (!t || PyTuple_GET_SIZE(t) != 1)
        return t;
    o = Py_NewRef(PyTuple_GET_ITEM(t, 0));
    Py_DECREF(t);
    return o;
}

/* share_point(): the socket's path, or None before the first pickle of a
 * pool, buffer or VMM resource made it. */
static PyObject *py_share_point(PyObject *self, PyObject *noargs)
{
    char path[CUC_SHARE_PATH_MAX + 1];
    int rc = cuc_share_path(path, sizeof(path));

    if (rc == CUC_E_INVALID || rc == CUC_E_NOT_FOUND) /* not started, no socket yet */
        return Py_NewRef(Py_None);
    return rc ? py_raise(rc) : PyUnicode_FromString(path);
}

/* _share_stats(): cuc_share_stats as a dict (zeros: not started). */
static PyObject *py_share_stats(PyObject *self, PyObject *noargs)
{
    struct cuc_share_stats s = {0};
    int rc = cuc_share_stats(&s);

    if (rc && rc != CUC_E_INVALID)
        return py_raise(rc);
    return Py_BuildValue("{snsnsnsnsn}", "holds", (Py_ssize_t)s.holds, "unclaimed",
                         (Py_ssize_t)s.unclaimed, "peers", (Py_ssize_t)s.peers,
                         "exporters", (Py_ssize_t)s.exporters, "pending",
                         (Py_ssize_t)s.pending);
}

/* Stops the share point, waiting ms for its leases. Under the GIL: no
 * Python thread detaches meanwhile (handle_reduce runs under it too). */
static void stop(int ms)
{
    int rc = cuc_share_stop(ms);

    if (rc && rc != CUC_E_FORKED) /* a fork child's is the parent's: nothing to say */
        PySys_WriteStderr("cucore: %s\n", cuc_errmsg());
}

/* _share_close(): stops the share point (a test's hook); the next pickle
 * starts it again. */
static PyObject *py_share_close(PyObject *self, PyObject *noargs)
{
    stop(0);
    return Py_NewRef(Py_None);
}

/* _share_exit(ms): the atexit handler (cucore/__init__.py): no share
 * point starts in this process from now on, and this one stops, waiting
 * ms (cucore.install's, else $CUCORE_SHARE_EXIT_WAIT_MS) for its leases. */
static PyObject *py_share_exit(PyObject *self, PyObject *args)
{
    int ms = 0;

    if (!PyArg_ParseTuple(args, "|i", &ms))
        return NULL;
    handle_share_exit();
    stop(ms > 0 ? ms : 0);
    return Py_NewRef(Py_None);
}

static PyMethodDef module_methods[] = {
    {"_attach", py_attach, METH_O, NULL},
    {"share_point", py_share_point, METH_NOARGS,
     "this process's share point socket, or None before it shared memory"},
    {"_share_stats", py_share_stats, METH_NOARGS, NULL},
    {"_share_close", py_share_close, METH_NOARGS, NULL},
    {"_share_exit", py_share_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

int share_init(PyObject *m)
{
    return PyModule_AddFunctions(m, module_methods);
}
