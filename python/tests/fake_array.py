"""Test-only CUDA arrays over memory of each kind another allocator makes,
made with the driver cucore loaded (the simulator in CI, libcuda on a GPU)
through ctypes, as a framework makes it:

    legacy    cuMemAlloc                  (PyTorch's, CuPy's, numba's default)
    pool-ipc  a pool with POSIX fd handles (cuda.core's IPC-enabled resource)
    pool      a pool without them          (CuPy's MemoryAsyncPool, cuda.core's default)
    vmm-fd    cuMemCreate chunks with POSIX fds, mapped in one reservation
              (PyTorch's expandable segments)
    vmm       the same without fds
    managed   cuMemAllocManaged

FakeCAI shows the memory as __cuda_array_interface__ v3, FakeDLPack as an
unversioned DLPack capsule (built here with ctypes, its deleter counted).
FREED lists the allocations freed so far (their tags): an array frees its
memory when it is collected, so a test sees when cucore let it go."""
import ctypes
import os

import cucore

KINDS = ("legacy", "pool-ipc", "pool", "vmm-fd", "vmm", "managed")
SHARED_KINDS = ("legacy", "pool-ipc", "vmm-fd")
FREED = []
C = ctypes
LEGACY_STREAM = C.c_void_p(1)  # CU_STREAM_LEGACY


class _Loc(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class _PoolProps(C.Structure):
    _fields_ = [("allocType", C.c_int), ("handleTypes", C.c_int), ("location", _Loc),
                ("win32", C.c_void_p), ("maxSize", C.c_size_t), ("usage", C.c_ushort),
                ("reserved", C.c_ubyte * 54)]


class _AllocProp(C.Structure):
    _fields_ = [("type", C.c_int), ("requestedHandleTypes", C.c_int), ("location", _Loc),
                ("win32", C.c_void_p), ("compressionType", C.c_ubyte),
                ("gpuDirectRDMACapable", C.c_ubyte), ("usage", C.c_ushort),
                ("reserved", C.c_ubyte * 4)]


class _Access(C.Structure):
    _fields_ = [("location", _Loc), ("flags", C.c_int)]


_drv = None


def driver():
    global _drv
    if _drv is None:
        _drv = C.CDLL(cucore.driver()["path"])
        u64, p, sz = C.c_uint64, C.c_void_p, C.c_size_t
        for name, args in [
                ("cuMemAlloc_v2", [C.POINTER(u64), sz]), ("cuMemFree_v2", [u64]),
                ("cuMemAllocManaged", [C.POINTER(u64), sz, C.c_uint]),
                ("cuMemPoolCreate", [C.POINTER(p), C.POINTER(_PoolProps)]),
                ("cuMemPoolDestroy", [p]),
                ("cuMemAllocFromPoolAsync", [C.POINTER(u64), sz, p, p]),
                ("cuMemFreeAsync", [u64, p]), ("cuStreamSynchronize", [p]),
                ("cuMemGetAllocationGranularity", [C.POINTER(sz), C.POINTER(_AllocProp),
                                                   C.c_int]),
                ("cuMemAddressReserve", [C.POINTER(u64), sz, sz, u64, C.c_ulonglong]),
                ("cuMemAddressFree", [u64, sz]),
                ("cuMemCreate", [C.POINTER(C.c_ulonglong), sz, C.POINTER(_AllocProp),
                                 C.c_ulonglong]),
                ("cuMemRelease", [C.c_ulonglong]),
                ("cuMemMap", [u64, sz, sz, C.c_ulonglong, C.c_ulonglong]),
                ("cuMemUnmap", [u64, sz]),
                ("cuMemSetAccess", [u64, sz, C.POINTER(_Access), sz]),
                ("cuMemcpyHtoDAsync_v2", [u64, p, sz, p]),
                ("cuMemcpyDtoH_v2", [p, u64, sz])]:
            getattr(_drv, name).argtypes = args
    return _drv


def ok(rc, what):
    assert rc == 0, "%s: CUDA error %d" % (what, rc)


class Memory:
    """nbytes of one kind on device ordinal dev (made current for each
    driver call); freed by free() or when collected."""

    def __init__(self, kind, dev, nbytes, tag=None):
        self.kind, self.dev, self.nbytes, self.tag = kind, dev, nbytes, tag
        self.pool = self.handles = self.ptr = None
        self.pid = os.getpid()
        self.current()
        getattr(self, "_make_" + kind.replace("-", "_"))()

    def current(self):
        cucore.Device(self.dev).set_current()

    def _make_legacy(self):
        p = C.c_uint64()
        ok(driver().cuMemAlloc_v2(C.byref(p), self.nbytes), "cuMemAlloc")
        self.ptr = p.value

    def _make_managed(self):
        p = C.c_uint64()
        ok(driver().cuMemAllocManaged(C.byref(p), self.nbytes, 1), "cuMemAllocManaged")
        self.ptr = p.value

    def _pool(self, fds):
        props = _PoolProps(allocType=1, handleTypes=1 if fds else 0,
                           location=_Loc(1, self.dev))  # pinned, POSIX fd, device
        self.pool = C.c_void_p()
        ok(driver().cuMemPoolCreate(C.byref(self.pool), C.byref(props)), "cuMemPoolCreate")
        p = C.c_uint64()
        ok(driver().cuMemAllocFromPoolAsync(C.byref(p), self.nbytes, self.pool, LEGACY_STREAM),
           "cuMemAllocFromPoolAsync")
        ok(driver().cuStreamSynchronize(LEGACY_STREAM), "cuStreamSynchronize")
        self.ptr = p.value

    def _make_pool_ipc(self):
        self._pool(True)

    def _make_pool(self):
        self._pool(False)

    def _vmm(self, fds):
        prop = _AllocProp(type=1, requestedHandleTypes=1 if fds else 0,
                          location=_Loc(1, self.dev))
        gran = C.c_size_t()
        ok(driver().cuMemGetAllocationGranularity(C.byref(gran), C.byref(prop), 0), "granularity")
        self.chunk = gran.value
        n = (self.nbytes + self.chunk - 1) // self.chunk
        base = C.c_uint64()
        ok(driver().cuMemAddressReserve(C.byref(base), n * self.chunk, 0, 0, 0), "reserve")
        self.ptr, self.handles = base.value, []
        access = _Access(location=_Loc(1, self.dev), flags=3)
        for i in range(n):
            h = C.c_ulonglong()
            ok(driver().cuMemCreate(C.byref(h), self.chunk, C.byref(prop), 0), "cuMemCreate")
            self.handles.append(h.value)
            at = self.ptr + i * self.chunk
            ok(driver().cuMemMap(at, self.chunk, 0, h.value, 0), "cuMemMap")
            ok(driver().cuMemSetAccess(at, self.chunk, C.byref(access), 1), "cuMemSetAccess")

    def _make_vmm_fd(self):
        self._vmm(True)

    def _make_vmm(self):
        self._vmm(False)

    def write(self, data, offset=0):
        self.current()
        ok(driver().cuMemcpyHtoDAsync_v2(self.ptr + offset, data, len(data), LEGACY_STREAM),
           "cuMemcpyHtoDAsync")
        ok(driver().cuStreamSynchronize(LEGACY_STREAM), "cuStreamSynchronize")

    def read(self, n, offset=0):
        out = C.create_string_buffer(n)
        self.current()
        ok(driver().cuMemcpyDtoH_v2(out, self.ptr + offset, n), "cuMemcpyDtoH")
        return out.raw

    def free(self):
        if self.ptr is None:
            return
        self.current()
        d = driver()
        if self.kind in ("legacy", "managed"):
            ok(d.cuMemFree_v2(self.ptr), "cuMemFree")
        elif self.pool is not None:
            ok(d.cuMemFreeAsync(self.ptr, LEGACY_STREAM), "cuMemFreeAsync")
            ok(d.cuStreamSynchronize(LEGACY_STREAM), "cuStreamSynchronize")
            ok(d.cuMemPoolDestroy(self.pool), "cuMemPoolDestroy")
        else:
            for i, h in enumerate(self.handles):
                ok(d.cuMemUnmap(self.ptr + i * self.chunk, self.chunk), "cuMemUnmap")
                ok(d.cuMemRelease(h), "cuMemRelease")
            ok(d.cuMemAddressFree(self.ptr, len(self.handles) * self.chunk), "addressFree")
        self.ptr = None
        FREED.append(self.tag)

    def __del__(self):
        if self.ptr is not None and os.getpid() == self.pid:
            self.free()


class FakeCAI:
    """An array of typestr over memory at offset, with shape and byte
    strides (None: contiguous), as __cuda_array_interface__ v3."""

    def __init__(self, memory, typestr="|u1", shape=None, strides=None, offset=0, stream=None):
        self.memory, self.typestr, self.offset, self.stream = memory, typestr, offset, stream
        self.shape = shape or (memory.nbytes // int(typestr[2:]),)
        self.strides = strides

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "strides": self.strides,
                "data": (self.memory.ptr + self.offset, False), "version": 3,
                "stream": self.stream}


class _DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int), ("device_id", C.c_int)]


class _DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class _DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", _DLDevice), ("ndim", C.c_int),
                ("dtype", _DLDataType), ("shape", C.POINTER(C.c_int64)),
                ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class _DLManaged(C.Structure):
    pass


_DELETER = C.CFUNCTYPE(None, C.POINTER(_DLManaged))
_DLManaged._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", C.c_void_p),
                       ("deleter", _DELETER)]
_NAME = b"dltensor"
_capsule_new = C.pythonapi.PyCapsule_New
_capsule_new.restype = C.py_object
_capsule_new.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]
_LIVE = {}  # address -> (struct, shape, strides): what a capsule points at
DELETED = []  # the tags of capsules whose deleter ran


@_DELETER
def _delete(m):
    DELETED.append(_LIVE.pop(C.addressof(m.contents))[3])


class FakeDLPack:
    """An array over memory as an unversioned DLPack capsule: data at
    data_offset, byte_offset on top, shape and element strides (None:
    contiguous, a NULL pointer), dtype (code, bits, lanes)."""

    def __init__(self, memory, dtype=(1, 8, 1), shape=None, strides=None, data_offset=0,
                 byte_offset=0, device_type=2, tag=None):
        self.memory, self.dtype, self.strides = memory, dtype, strides
        self.data_offset, self.byte_offset, self.device_type = data_offset, byte_offset, device_type
        self.shape = shape or (memory.nbytes * 8 // (dtype[1] * dtype[2]),)
        self.tag, self.streams = tag, []

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        n = len(self.shape)
        shape = (C.c_int64 * n)(*self.shape)
        strides = (C.c_int64 * n)(*self.strides) if self.strides is not None else None
        m = _DLManaged()
        m.dl_tensor = _DLTensor(self.memory.ptr + self.data_offset,
                                _DLDevice(self.device_type, self.memory.dev), n,
                                _DLDataType(*self.dtype), shape,
                                strides if strides is not None else None, self.byte_offset)
        m.deleter = _delete
        _LIVE[C.addressof(m)] = (m, shape, strides, self.tag)
        return _capsule_new(C.addressof(m), _NAME, None)

    def __dlpack_device__(self):
        return (self.device_type, self.memory.dev)
