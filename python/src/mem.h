/* A Buffer's or a VMM resource's memory (mem.c): copies between host
 * bytes and it, and a Buffer seen by CuPy, PyTorch and numba without a
 * copy (CUDA Array Interface v3, DLPack). */
#ifndef CUCORE_PY_MEM_H
#define CUCORE_PY_MEM_H

#include "handle.h"

/* The memory a copy uses, found (span_fn: -1 raised when the object is
 * closed or its memory may not be used) only once the arguments are
 * parsed; busy is the object's count of calls using it with the GIL let
 * go, which its close() refuses. */
struct span {
    void *ptr;
    size_t size;
    cuc_device *dev;
    Py_ssize_t *busy;
};
typedef int (*span_fn)(PyObject *obj, struct span *out);
PyObject *mem_copy_from(PyObject *obj, span_fn open_span, PyObject *args, PyObject *kw);
PyObject *mem_to_bytes(PyObject *obj, span_fn open_span, PyObject *args, PyObject *kw);
PyObject *mem_fill(PyObject *obj, span_fn open_span, PyObject *args);

/* A Buffer's __cuda_array_interface__, __dlpack__, __dlpack_device__. */
PyObject *mem_cai(PyObject *self, void *closure);
PyObject *mem_dlpack(PyObject *self, PyObject *args, PyObject *kw);
PyObject *mem_dlpack_device(PyObject *self, PyObject *noargs);

#endif
