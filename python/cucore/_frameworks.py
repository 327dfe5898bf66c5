"""The objects users already have, crossing processes as themselves.

``share(x)`` takes any CUDA array (``__cuda_array_interface__`` v2/v3 or
``__dlpack__`` on a CUDA device): the library finds how its memory was
allocated (``cuc_memory_kind``: ``cudaMalloc`` memory by legacy IPC, an
allocation of an IPC-capable pool through that pool, PyTorch's expandable
segments as VMM chunks by fd), keeps ``x`` alive while anything of it is
leased, and the result pickles so that the receiver gets the same kind of
object back: a torch tensor, a CuPy array, a numba device array, a
cuda.core Buffer, or a cucore array view when it lacks that framework.

``install("torch")`` makes ``torch.multiprocessing`` send CUDA tensors and
storages this way (by UUID, with leases, without pidfd);
``install("cuda.core")`` makes cuda.core's Device, LaunchConfig, Stream and
Buffer pickle as cucore's do. Frameworks are imported only when asked for.
"""
import copyreg
import os
import sys

from . import _core
from ._errors import Error, NotSerializableError

# DLPack type codes (dlpack.h: DLDataTypeCode)
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_COMPLEX, _DL_BOOL = 0, 1, 2, 4, 5, 6

_TYPESTR_CODE = {"i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT, "c": _DL_COMPLEX,
                 "b": _DL_BOOL}


class ArrayDesc(tuple):
    """(ptr, nbytes, shape, strides in bytes, (code, bits, lanes))."""
    __slots__ = ()

    def __new__(cls, ptr, nbytes, shape, strides, dtype):
        return tuple.__new__(cls, (ptr, nbytes, tuple(shape), tuple(strides), dtype))


def _contiguous_strides(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _extent(shape, strides, itemsize):
    """Bytes from the first element to past the last (0 for an empty array)."""
    if any(n == 0 for n in shape):
        return 0
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    if lo < 0:
        raise Error("CUC_E_INVALID", "an array with negative strides cannot be shared "
                    "as itself: copy it (x.copy()) first")
    return hi + itemsize


def _from_cai(cai):
    ptr = cai["data"][0] or 0
    typestr = cai["typestr"]
    code = _TYPESTR_CODE.get(typestr[1])
    if code is None or typestr[0] == ">":
        raise Error("CUC_E_NOT_SUPPORTED", "__cuda_array_interface__ typestr %r: cucore "
                    "shares little-endian ints, floats, complex and bools" % typestr)
    itemsize = int(typestr[2:])
    shape = tuple(cai["shape"])
    strides = cai.get("strides") or _contiguous_strides(shape, itemsize)
    return ArrayDesc(ptr, _extent(shape, strides, itemsize), shape, strides,
                     (code, itemsize * 8, 1))


def _torch_desc(t):
    import torch
    code = {True: _DL_FLOAT}.get(t.dtype.is_floating_point)
    if t.dtype == torch.bfloat16:
        code = _DL_BFLOAT
    elif t.dtype == torch.bool:
        code = _DL_BOOL
    elif t.dtype.is_complex:
        code = _DL_COMPLEX
    elif not t.dtype.is_floating_point:
        code = _DL_INT if t.dtype.is_signed else _DL_UINT
    size = t.element_size()
    strides = tuple(s * size for s in t.stride())
    return ArrayDesc(t.data_ptr(), _extent(tuple(t.shape), strides, size), tuple(t.shape),
                     strides, (code, size * 8, 1))


def _framework_of(x):
    mod = type(x).__module__.split(".")[0]
    if mod == "cuda":
        return "cuda.core"
    return mod if mod in ("torch", "cupy", "numba") else "cucore"


def describe(x):
    """What x is: its framework and an ArrayDesc of its memory."""
    fw = _framework_of(x)
    if fw == "torch":
        if not x.is_cuda:
            raise Error("CUC_E_INVALID", "a CPU tensor: share() is for CUDA memory; "
                        "pickle it as usual")
        return fw, _torch_desc(x)
    if fw == "cuda.core" and hasattr(x, "handle") and hasattr(x, "size"):
        n = int(x.size)
        return fw, ArrayDesc(int(x.handle), n, (n,), (1,), (_DL_UINT, 8, 1))
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return fw, _from_cai(cai)
    if hasattr(x, "__dlpack__"):
        return fw, ArrayDesc(*_core.dlpack_describe(x))
    raise Error("CUC_E_INVALID", "%s has neither __cuda_array_interface__ nor "
                "__dlpack__: share() takes CUDA arrays" % type(x).__name__)


class Shared:
    """A CUDA array shared as itself: pickle it; the receiver gets the same
    kind of object (see share()). Keeps the array alive while any receiver
    leases its memory."""
    __slots__ = ("mem", "offset", "desc", "framework", "meta", "__weakref__")

    def __init__(self, mem, offset, desc, framework, meta=None):
        self.mem, self.offset, self.desc = mem, offset, desc
        self.framework, self.meta = framework, meta

    def __reduce__(self):
        _, nbytes, shape, strides, dtype = self.desc
        return (_load_array, (self.mem, self.offset, nbytes, shape, strides, dtype,
                              self.framework, self.meta))

    def __repr__(self):
        return "<cucore.Shared %s %s of %d bytes>" % (self.framework, self.desc[2],
                                                       self.desc[1])


def share(x, stream=None):
    """x (any CUDA array: a torch tensor, CuPy array, numba device array,
    cuda.core Buffer, or anything with __cuda_array_interface__ or
    __dlpack__ on a CUDA device) as a Shared that pickles by UUID and
    leases. The work queued on x so far must be done before a receiver
    reads it: share() waits for stream (an object with __cuda_stream__, or
    None: the framework's current stream for torch, the legacy default
    stream otherwise)."""
    fw, desc = describe(x)
    _sync_before(fw, x, stream)
    mem, offset = _core.adopt(desc[0], max(desc[1], 1), x)
    return Shared(mem, offset, desc, fw)


def _sync_before(fw, x, stream):
    if stream is not None:
        _core.stream_sync(stream)
    elif fw == "torch":
        import torch
        torch.cuda.current_stream(x.device).synchronize()
    else:
        _core.stream_sync(None, _core.memory_device(_describe_ptr(x)))


def _describe_ptr(x):
    return describe(x)[1][0]


class ArrayView:
    """Received memory as an array: __cuda_array_interface__ and __dlpack__
    over a cucore Buffer or VMM resource, which it keeps open."""
    __slots__ = ("mem", "offset", "nbytes", "shape", "strides", "dtype", "__weakref__")

    def __init__(self, mem, offset, nbytes, shape, strides, dtype):
        self.mem, self.offset, self.nbytes = mem, offset, nbytes
        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), tuple(dtype)

    @property
    def ptr(self):
        return self.mem.ptr + self.offset

    @property
    def device(self):
        return self.mem.device

    @property
    def __cuda_array_interface__(self):
        code, bits, lanes = self.dtype
        kind = {_DL_INT: "i", _DL_UINT: "u", _DL_FLOAT: "f", _DL_COMPLEX: "c",
                _DL_BOOL: "b"}.get(code)
        if kind is None or lanes != 1:
            raise AttributeError("__cuda_array_interface__ has no typestr for DLPack "
                                 "type code %d (bfloat16?): use __dlpack__" % code)
        return {"shape": self.shape, "typestr": "<%s%d" % (kind, bits // 8),
                "data": (self.ptr, False), "strides": self.strides, "version": 3,
                "stream": None}

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return _core.dlpack_view(self.mem, self.offset, self.shape, self.strides,
                                 self.dtype, stream)

    def __dlpack_device__(self):
        return self.mem.__dlpack_device__()

    def __repr__(self):
        return "<cucore.ArrayView %s dtype %s on %s>" % (self.shape, self.dtype,
                                                         self.device.uuid)


def _load_array(mem, offset, nbytes, shape, strides, dtype, framework, meta):
    view = ArrayView(mem, offset, nbytes, shape, strides, dtype)
    rebuild = _REBUILD.get(framework)
    if rebuild is None:
        return view
    try:
        return rebuild(view, meta)
    except ImportError:
        return view  # the receiver lacks that framework: cucore's view of it


def _rebuild_torch(view, meta):
    import torch
    t = torch.from_dlpack(view)
    if meta is not None:  # install("torch"): the tensor over its storage
        dtype_name, size, stride, storage_offset, requires_grad = meta
        dtype = getattr(torch, dtype_name)
        t = torch.empty(0, dtype=dtype, device=t.device).set_(
            t.untyped_storage(), storage_offset, size, stride)
        t.requires_grad_(requires_grad)
    return t


def _rebuild_cupy(view, meta):
    import cupy
    with cupy.cuda.Device(view.device.ordinal):
        return cupy.asarray(view)


def _rebuild_numba(view, meta):
    from numba import cuda
    with cuda.gpus[view.device.ordinal]:
        return cuda.as_cuda_array(view)


def _rebuild_cudacore(view, meta):
    from cuda.core import Buffer
    return Buffer.from_handle(view.ptr, view.nbytes, owner=view)


_REBUILD = {"torch": _rebuild_torch, "cupy": _rebuild_cupy, "numba": _rebuild_numba,
            "cuda.core": _rebuild_cudacore}


# ---- install("torch") ----

def _reduce_cuda_storage_of(t):
    """The tensor t through its whole storage (one import per storage)."""
    import torch
    storage = t.untyped_storage()
    base, nbytes = storage.data_ptr(), storage.nbytes()
    torch.cuda.current_stream(t.device).synchronize()
    mem, offset = _core.adopt(base, max(nbytes, 1), storage)
    meta = (str(t.dtype).split(".")[1], tuple(t.size()), tuple(t.stride()),
            t.storage_offset(), bool(t.requires_grad))
    return Shared(mem, offset, ArrayDesc(base, nbytes, (nbytes,), (1,), (_DL_UINT, 8, 1)),
                  "torch", meta)


def _install_torch(exit_wait_s):
    import torch
    import torch.multiprocessing.reductions as red
    from multiprocessing.reduction import ForkingPickler

    red.init_reductions()
    plain = dict(ForkingPickler._extra_reducers)

    def reduce_tensor(t):
        if not t.is_cuda:
            return plain[type(t)](t)
        return _reduce_cuda_storage_of(t).__reduce__()

    def reduce_storage(s):
        if s.device.type != "cuda":
            return plain[type(s)](s)
        t = torch.empty(0, dtype=torch.uint8, device=s.device).set_(s.untyped(), 0,
                                                                     (s.nbytes(),), (1,))
        rebuilt = _reduce_cuda_storage_of(t).__reduce__()
        return (_storage_of, rebuilt)

    for cls, reducer in plain.items():
        if reducer is red.reduce_tensor:
            ForkingPickler.register(cls, reduce_tensor)
        elif reducer in (red.reduce_storage, getattr(red, "reduce_typed_storage", None),
                         getattr(red, "reduce_typed_storage_child", None)):
            ForkingPickler.register(cls, reduce_storage)
    _core.share_exit_wait(int(exit_wait_s * 1000))


def _storage_of(*args):
    return _load_array(*args).untyped_storage()


# ---- install("cuda.core") ----

def _cc_device(uuid):
    from cuda.core import Device
    from . import Device as CDevice
    return Device(CDevice(uuid=uuid).ordinal)


def _reduce_cc_device(d):
    u = str(d.uuid)
    return (_cc_device, (u if u.startswith("GPU-") else "GPU-" + u,))


def _cc_launch_config(grid, block, cluster, shmem, cooperative):
    from cuda.core import LaunchConfig
    kw = {"grid": grid, "block": block, "shmem_size": shmem}
    if cluster is not None:
        kw["cluster"] = cluster
    if cooperative:
        kw["is_cooperative"] = True
    return LaunchConfig(**kw)


def _reduce_cc_launch_config(c):
    return (_cc_launch_config, (tuple(c.grid), tuple(c.block),
                                tuple(c.cluster) if c.cluster else None,
                                int(c.shmem_size), bool(getattr(c, "is_cooperative", False))))


def _reduce_cc_stream(s):
    raise NotSerializableError(
        "CUC_E_NOT_SERIALIZABLE", "a cuda.core Stream is a handle valid only in the process "
        "that created it: send an IPC event (cucore.Event(dev, ipc=True)) recorded on it, "
        "or create a stream in the receiver")


def _reduce_cc_buffer(b):
    return share(b).__reduce__()


def _install_cudacore():
    import cuda.core as cc
    copyreg.pickle(cc.Device, _reduce_cc_device)
    copyreg.pickle(cc.LaunchConfig, _reduce_cc_launch_config)
    copyreg.pickle(cc.Stream, _reduce_cc_stream)
    copyreg.pickle(cc.Buffer, _reduce_cc_buffer)


def install(name, exit_wait_s=30.0):
    """Makes a framework's objects cross processes through cucore:
    "torch" (CUDA tensors and storages in torch.multiprocessing and every
    ForkingPickler, by UUID and leases; a producer that exits waits up to
    exit_wait_s for its consumers' leases, and says what it gave up) or
    "cuda.core" (Device by UUID, LaunchConfig without a stream, a created
    Stream refused saying what to send, Buffer as share() does)."""
    if name == "torch":
        _install_torch(exit_wait_s)
    elif name in ("cuda.core", "cuda_core"):
        _install_cudacore()
    else:
        raise ValueError("install(%r): cucore installs into 'torch' or 'cuda.core'" % name)
