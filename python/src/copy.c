/* Copies between host bytes and a Buffer's or a VMM resource's memory.
 *
 * The arguments are parsed before the memory is looked at: parsing can run
 * Python code (an __index__, a buffer exporter) that closes the object, and
 * a pointer read before it would be another allocation's by then. While
 * the copy runs with the GIL let go, the object counts it (span.busy), and
 * its close() refuses: another thread cannot unmap the memory under it. */
#include "cucore_py.h"

/* The stream, or for None the legacy default stream of the memory's own
 * device (cucore's NULL stream would be the current device's). */
static int stream_or_default(PyObject *so, cuc_device *dev, cuc_stream **s)
{
    int rc;

    if (so != Py_None)
        return stream_arg(so, s);
    rc = cuc_stream_legacy(dev, s);
    return rc ? (py_raise(rc), -1) : 0;
}

/* The memory of obj (open_span: its liveness checked) and the stream;
 * -1 raised. */
static int span_and_stream(PyObject *obj, span_fn open_span, PyObject *so, struct span *sp,
                           cuc_stream **s)
{
    if (open_span(obj, sp))
        return -1;
    return stream_or_default(so, sp->dev, s);
}

/* copy_from(data, offset=0, stream=None): bytes-like into the memory. */
PyObject *mem_copy_from(PyObject *obj, span_fn open_span, PyObject *args, PyObject *kw)
{
    static char *names[] = {"data", "offset", "stream", NULL};
    PyObject *so = Py_None;
    Py_ssize_t off = 0;
    struct span sp;
    cuc_stream *s;
    Py_buffer v;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|nO", names, &v, &off, &so))
        return NULL;
    if (span_and_stream(obj, open_span, so, &sp, &s))
        goto fail_data;
    if (off < 0 || (size_t)off > sp.size || (size_t)v.len > sp.size - (size_t)off) {
        py_raise_fmt(CUC_E_INVALID, "copy_from: %zd bytes at offset %zd do not fit in %zu "
                     "bytes", v.len, off, sp.size);
        goto fail_data;
    }
    (*sp.busy)++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_memcpy((char *)sp.ptr + off, v.buf, (size_t)v.len, s);
    Py_END_ALLOW_THREADS
    (*sp.busy)--;
    PyBuffer_Release(&v);
    return rc ? py_raise(rc) : Py_NewRef(Py_None);

fail_data:
    PyBuffer_Release(&v);
    return NULL;
}

/* to_bytes(size=None, offset=0, stream=None) */
PyObject *mem_to_bytes(PyObject *obj, span_fn open_span, PyObject *args, PyObject *kw)
{
    static char *names[] = {"size", "offset", "stream", NULL};
    PyObject *so = Py_None, *sz = Py_None, *out;
    Py_ssize_t off = 0, n = -1;
    struct span sp;
    cuc_stream *s;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OnO", names, &sz, &off, &so))
        return NULL;
    if (sz != Py_None && (n = PyNumber_AsSsize_t(sz, PyExc_OverflowError)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (span_and_stream(obj, open_span, so, &sp, &s))
        return NULL;
    if (off < 0 || (size_t)off > sp.size)
        return py_raise_fmt(CUC_E_INVALID, "to_bytes: offset %zd outside %zu bytes", off,
                            sp.size);
    if (sz == Py_None)
        n = (Py_ssize_t)(sp.size - (size_t)off);
    if (n < 0 || (size_t)n > sp.size - (size_t)off)
        return py_raise_fmt(CUC_E_INVALID, "to_bytes: %zd bytes at offset %zd do not fit in "
                            "%zu", n, off, sp.size);
    out = PyBytes_FromStringAndSize(NULL, n);
    if (!out)
        return NULL;
    (*sp.busy)++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_memcpy(PyBytes_AS_STRING(out), (const char *)sp.ptr + off, (size_t)n, s);
    Py_END_ALLOW_THREADS
    (*sp.busy)--;
    if (rc) {
        Py_DECREF(out);
        return py_raise(rc);
    }
    return out;
}

/* fill(byte): every byte of the memory, on its device's legacy stream. */
PyObject *mem_fill(PyObject *obj, span_fn open_span, PyObject *args)
{
    unsigned char v;
    struct span sp;
    cuc_stream *s;
    int rc;

    if (!PyArg_ParseTuple(args, "b", &v) ||
        span_and_stream(obj, open_span, Py_None, &sp, &s))
        return NULL;
    (*sp.busy)++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_memset(sp.ptr, v, sp.size, s);
    Py_END_ALLOW_THREADS
    (*sp.busy)--;
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}
