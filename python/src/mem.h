/* A Buffer's or a VMM resource's memory (mem.c): copies between host
 * bytes, CUDA arrays and it, a Buffer seen by CuPy, PyTorch and numba
 * without a copy (CUDA Array Interface v3, DLPack), and memory another
 * allocator owns (adopt). */
#ifndef CUCORE_PY_MEM_H
#define CUCORE_PY_MEM_H

#include "handle.h"

/* The memory a copy uses: a Buffer's or VMM resource's (-1 raised when it
 * is closed or may not be used), or a CUDA array's (found by
 * cucore._frameworks); busy is the object's count of calls using it with
 * the GIL let go, which its close() refuses. */
struct span {
    void *ptr;
    size_t size;
    cuc_device *dev;
    Py_ssize_t *busy;
};
int mem_span(PyObject *obj, struct span *out);
/* Buffer's and VMM's methods: copy_from(data, offset=0, stream=None),
 * copy_to(dst, stream=None), to_bytes(size=None, offset=0, stream=None),
 * fill(value, width=1). */
PyObject *mem_copy_from(PyObject *obj, PyObject *args, PyObject *kw);
PyObject *mem_copy_to(PyObject *obj, PyObject *args, PyObject *kw);
PyObject *mem_to_bytes(PyObject *obj, PyObject *args, PyObject *kw);
PyObject *mem_fill(PyObject *obj, PyObject *args, PyObject *kw);

/* allocate(n, stream=None) of a pool (or a slab), the stream any object
 * with __cuda_stream__: without one the buffer is ready on return. */
PyObject *mem_allocate(cuc_pool *pool, cuc_slab *slab, size_t n, PyObject *stream);

/* A Buffer's __cuda_array_interface__, __dlpack__, __dlpack_device__. */
PyObject *mem_cai(PyObject *self, void *closure);
PyObject *mem_dlpack(PyObject *self, PyObject *args, PyObject *kw);
PyObject *mem_dlpack_device(PyObject *self, PyObject *noargs);

/* The module's adopt, adopted_count, dlpack_view, dlpack_describe. */
int mem_init(PyObject *m);

#endif
