"""The objects users already have, crossing processes as themselves.

``share(x)`` takes any CUDA array (``__cuda_array_interface__`` v2/v3 or
``__dlpack__`` on a CUDA device, a torch tensor, a cuda.core Buffer): the
library finds how its memory was allocated (``cuc_memory_kind``:
``cudaMalloc`` memory by legacy IPC, an allocation of an IPC-capable pool
through that pool, PyTorch's expandable segments as VMM chunks by fd),
keeps ``x`` alive while anything of it is leased, and the result pickles
so that the receiver gets the same kind of object back: a torch tensor, a
CuPy array, a numba device array, a cuda.core Buffer, or an ArrayView when
it lacks that framework.

``install("torch")`` makes every ForkingPickler (``torch.multiprocessing``)
send CUDA tensors and storages this way (by UUID, with leases, without
pidfd); ``install("cuda.core")`` makes cuda.core's Device, LaunchConfig,
Stream and Buffer pickle as cucore's do. Frameworks are imported only when
asked for. The binding (cucore._core) calls _span, _cuda_stream and
kernel_from_numba here: what another library's object is, is found here.
"""
import collections
import copyreg
import gc
import importlib.util
import operator
import os
import re
import struct
import sys
import threading
import weakref

from . import _core
from ._errors import Error, NotSerializableError

# DLPack type codes (dlpack.h: DLDataTypeCode)
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_COMPLEX, _DL_BOOL = 0, 1, 2, 4, 5, 6
_U8 = (_DL_UINT, 8, 1)
_TYPESTR_CODE = {"i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT, "c": _DL_COMPLEX, "b": _DL_BOOL}
_CODE_TYPESTR = {v: k for k, v in _TYPESTR_CODE.items()}
_MAX_DIMS = 64

# An array's memory: its first element's address, the bytes from there to
# past its last, its shape, strides in bytes and DLPack (code, bits, lanes).
ArrayDesc = collections.namedtuple("ArrayDesc", "ptr nbytes shape strides dtype")


def _contiguous(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _extent(shape, strides, itemsize):
    """Bytes from the first element to past the last (0 when empty)."""
    if 0 in shape:
        return 0
    if strides and min(strides) < 0:
        raise Error("CUC_E_INVALID", "an array with negative strides is not shared as "
                    "itself: share a copy of it")
    return sum([(n - 1) * s for n, s in zip(shape, strides)]) + itemsize


def _from_cai(cai):
    typestr = cai["typestr"]
    code = _TYPESTR_CODE.get(typestr[1:2])
    if code is None or typestr[0] == ">" or cai.get("mask") is not None:
        raise Error("CUC_E_NOT_SUPPORTED", "__cuda_array_interface__ typestr %r%s: cucore "
                    "shares little-endian ints, floats, complex and bools, unmasked" %
                    (typestr, " with a mask" if cai.get("mask") is not None else ""))
    itemsize = int(typestr[2:])
    shape = tuple(int(n) for n in cai["shape"])
    strides = tuple(int(s) for s in (cai.get("strides") or _contiguous(shape, itemsize)))
    ptr = cai["data"][0] or 0
    return ArrayDesc(ptr, _extent(shape, strides, itemsize), shape, strides,
                     (code, itemsize * 8, 1))


def _from_dlpack(cap):
    """The ArrayDesc of a DLPack capsule (consumed: its deleter runs)."""
    ptr, (dev_type, _), shape, strides, dtype = _core.dlpack_describe(cap)
    code, bits, lanes = dtype
    shape = struct.unpack("%dq" % (len(shape) // 8), shape)
    if strides is not None:
        strides = struct.unpack("%dq" % len(shape), strides)
    if dev_type not in (2, 3, 13):  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        raise Error("CUC_E_INVALID", "a DLPack tensor on device type %d: cucore shares "
                    "CUDA memory (device types 2, 3, 13)" % dev_type)
    if not bits or bits * lanes % 8:
        raise Error("CUC_E_NOT_SUPPORTED", "a DLPack tensor of %d-bit x %d elements: cucore "
                    "shares whole bytes" % (bits, lanes))
    item = bits * lanes // 8
    strides = _contiguous(shape, item) if strides is None else tuple(s * item for s in strides)
    if any(n < 0 for n in shape):
        raise Error("CUC_E_INVALID", "a DLPack tensor of shape %s" % (shape,))
    return ArrayDesc(ptr, _extent(shape, strides, item), shape, strides, dtype)


def _framework_of(x):
    mod = type(x).__module__.split(".")[0]
    if mod == "cuda":
        return "cuda.core"
    if mod == "numba_cuda":
        return "numba"
    return mod if mod in ("torch", "cupy", "numba") else "array"


def _describe(x, fw):
    """(ArrayDesc, stream): the stream the producer's work on x is ordered
    on, as the CUDA Array Interface names it (an int; None: the legacy
    default stream)."""
    if fw == "cuda.core" and hasattr(x, "handle") and hasattr(x, "size"):
        n = int(x.size)
        return ArrayDesc(int(x.handle), n, (n,), (1,), _U8), None
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(cai), cai.get("stream")
    if hasattr(x, "__dlpack__"):
        try:  # ready for the legacy default stream, which share() then waits for
            cap = x.__dlpack__(stream=1)
        except TypeError:
            cap = x.__dlpack__()
        return _from_dlpack(cap), None
    raise Error("CUC_E_INVALID", "a %s has neither __cuda_array_interface__ nor __dlpack__: "
                "share() and copies take CUDA arrays" % type(x).__name__)


def _span(x):
    """(ptr, bytes) of a contiguous CUDA array: Buffer.copy_from/copy_to."""
    if _framework_of(x) == "torch":
        desc = _torch_desc(x)
    else:
        desc = _describe(x, _framework_of(x))[0]
    if desc.strides != _contiguous(desc.shape, desc.dtype[1] * desc.dtype[2] // 8):
        raise Error("CUC_E_INVALID", "a copy of a non-contiguous array (shape %s, strides %s "
                    "bytes): make it contiguous first" % (desc.shape, desc.strides))
    return desc.ptr, desc.nbytes


def _torch_desc(t):
    import torch
    if not t.is_cuda:
        raise Error("CUC_E_INVALID", "a CPU tensor: cucore shares and copies CUDA memory "
                    "(pickle a CPU tensor as usual)")
    if t.dtype == torch.bfloat16:
        code = _DL_BFLOAT
    elif t.dtype == torch.bool:
        code = _DL_BOOL
    elif t.dtype.is_complex:
        code = _DL_COMPLEX
    elif t.dtype.is_floating_point:
        code = _DL_FLOAT
    else:
        code = _DL_INT if t.dtype.is_signed else _DL_UINT
    size = t.element_size()
    strides = tuple(s * size for s in t.stride())
    shape = tuple(t.shape)
    return ArrayDesc(t.data_ptr(), _extent(shape, strides, size), shape, strides,
                     (code, size * 8, 1))


class _Handle:
    """A CUstream as an int (a CUDA Array Interface's stream) with its
    device, for cucore.Stream."""
    __slots__ = ("handle", "device")

    def __init__(self, handle, device):
        self.handle, self.device = handle, device

    def __cuda_stream__(self):
        return (0, self.handle)


def _cuda_stream(x):
    """(CUstream, device) of another library's stream: what its
    __cuda_stream__() gives, on its .device (cuda.core's, PyTorch's) or
    .device_id (CuPy's), else the current device (else 0)."""
    if not hasattr(x, "__cuda_stream__"):
        raise TypeError("expected a cucore.Stream, an object with __cuda_stream__, or None, "
                        "not %s" % type(x).__name__)
    _, handle = x.__cuda_stream__()
    dev = getattr(x, "device", None)
    if dev is None:
        dev = getattr(x, "device_id", None)
    if dev is None:
        dev = _core.current_device() or 0
    return handle, dev


def _wait(stream, device):
    """Waits for the producer's work: stream (a cucore.Stream, an object
    with __cuda_stream__, an int CUstream; None: device's legacy default
    stream)."""
    if stream is None:
        _core.Stream.legacy(device).synchronize()
    else:
        _core.Stream(_Handle(stream, device) if isinstance(stream, int) else stream).synchronize()


# Memory this process received, by id: sending it on (A -> B -> C) sends
# the Buffer it arrived as (the driver does not export it again).
_received = {}


def _remember(mem):
    ref = _received.get(id(mem))
    if ref is None or ref() is not mem:
        _received[id(mem)] = weakref.ref(mem, lambda _, k=id(mem): _received.pop(k, None))


def _adopt(ptr, nbytes, owner):
    """(mem, offset) of nbytes at ptr: adopted (owner kept meanwhile), or
    the received Buffer it is part of."""
    try:
        return _core.adopt(ptr, nbytes, owner)
    except Error:
        for ref in list(_received.values()):
            m = ref()
            if (m is not None and not m.closed and m.ptr <= ptr and
                    ptr + nbytes <= m.ptr + m.size):
                return m, ptr - m.ptr
        raise


def _device_of_empty(x):
    for d in (getattr(x, "device", None), getattr(x, "device_id", None)):
        if d is not None:
            try:
                return _core.Device(d)
            except (TypeError, Error):
                pass
    return _core.current_device() or _core.Device(0)


def wrap(device, ptr, size):
    """Memory from cuMemAlloc / cudaMalloc on device, size bytes at ptr, as
    a Buffer that does not own it (legacy CUDA IPC): keep it allocated while
    the Buffer and its leases live. share() keeps the array itself alive,
    and takes pool and VMM memory too."""
    dev = _core.Device(device)
    mem, off = _core.adopt(ptr, size, None)
    if isinstance(mem, _core.Buffer) and mem.is_wrapped and mem.device is dev:
        return mem if off == 0 and size == mem.size else mem.view(off, size)
    raise Error("CUC_E_INVALID", "wrap(%s, %#x, %d): not cuMemAlloc memory of that device "
                "(%s): share() takes an array of pool or VMM memory" %
                (dev.uuid, ptr, size, "a pool's or VMM memory" if mem.device is dev
                 else "memory of " + mem.device.uuid))


class Shared:
    """A CUDA array shared as itself: pickle it; the receiver gets the same
    kind of object (see share()). Its memory (a Buffer or VMM resource; a
    Device for an empty array) keeps the array alive while any receiver
    leases it."""
    __slots__ = ("mem", "offset", "desc", "framework", "meta", "__weakref__")

    def __init__(self, mem, offset, desc, framework, meta=None):
        self.mem, self.offset, self.desc = mem, offset, desc
        self.framework, self.meta = framework, meta

    def __reduce__(self):
        _, nbytes, shape, strides, dtype = self.desc
        if self.framework == "torch":
            return (_load_tensor, (self.mem, self.offset, nbytes, self.meta))
        return (_load_array, (self.mem, self.offset, nbytes, shape, strides, dtype,
                              self.framework, self.meta))

    def __repr__(self):
        return "<cucore.Shared %s %s, %d bytes>" % (self.framework, self.desc.shape,
                                                    self.desc.nbytes)


def share(x, stream=None):
    """x, any CUDA array (a torch tensor, CuPy array, numba device array,
    cuda.core Buffer, or anything with __cuda_array_interface__ or
    __dlpack__ on a CUDA device), as a Shared that pickles by UUID and
    leases; x is kept until no receiver leases its memory. The work queued
    on x must be done before a receiver reads it: share() waits for stream
    (a cucore.Stream or anything with __cuda_stream__), by default for
    PyTorch's current stream of x's device, the stream its
    __cuda_array_interface__ names, else the device's legacy default
    stream (which waits for blocking streams only)."""
    if isinstance(x, Shared):
        return x
    if isinstance(x, (_core.Buffer, _core.VMM)):  # cucore's own memory: itself
        return Shared(x, 0, ArrayDesc(x.ptr, x.size, (x.size,), (1,), _U8), "array")
    fw = _framework_of(x)
    if fw == "torch":
        return _torch_shared(x, stream, grad=False)
    desc, producer = _describe(x, fw)
    if desc.nbytes == 0:
        mem, offset = _device_of_empty(x), 0
    else:
        mem, offset = _adopt(desc.ptr, desc.nbytes, x)
    _wait(producer if stream is None else stream, mem.device if desc.nbytes else mem)
    return Shared(mem, offset, desc, fw)


class ArrayView:
    """Received memory as an array: __cuda_array_interface__ and __dlpack__
    of shape, strides (bytes) and DLPack dtype over a cucore Buffer or VMM
    resource (a Device for an empty array), which it keeps."""
    __slots__ = ("mem", "offset", "nbytes", "shape", "strides", "dtype", "__weakref__")

    def __init__(self, mem, offset, nbytes, shape, strides, dtype):
        self.mem, self.offset, self.nbytes = mem, offset, nbytes
        self.shape, self.strides, self.dtype = shape, strides, dtype

    @property
    def ptr(self):
        return self.mem.ptr + self.offset if self.nbytes else 0

    @property
    def device(self):
        return self.mem if isinstance(self.mem, _core.Device) else self.mem.device

    @property
    def __cuda_array_interface__(self):
        code, bits, lanes = self.dtype
        kind = _CODE_TYPESTR.get(code)
        if kind is None or lanes != 1:
            raise AttributeError("__cuda_array_interface__ has no typestr for DLPack type "
                                 "(%d, %d, %d) (bfloat16?): use __dlpack__" % self.dtype)
        return {"shape": self.shape, "typestr": "%s%s%d" % ("|" if bits == 8 else "<", kind,
                                                           bits // 8),
                "data": (self.ptr, False), "strides": self.strides, "version": 3,
                "stream": None}

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("__dlpack__(copy=True): an ArrayView is shared, not copied")
        if isinstance(self.mem, _core.Device):
            raise BufferError("__dlpack__ of an empty ArrayView (it has no memory): use its "
                              "__cuda_array_interface__, or its shape")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("__dlpack__(dl_device=%r): the memory is on %r and is shared, "
                              "not copied" % (dl_device, self.__dlpack_device__()))
        item = self.dtype[1] * self.dtype[2] // 8
        dims = struct.pack("%dq" % (2 * len(self.shape)), *self.shape,
                           *(s // item for s in self.strides))
        return _core.dlpack_view(self.mem, self.offset, dims, self.dtype, stream)

    def __dlpack_device__(self):
        if isinstance(self.mem, _core.Buffer):
            return self.mem.__dlpack_device__()
        return (2, self.device.ordinal)  # kDLCUDA

    def __repr__(self):
        return "<cucore.ArrayView %s dtype %s on %s>" % (self.shape, self.dtype,
                                                         self.device.uuid)


_INT = frozenset((int,))
_MEMS = frozenset((_core.Buffer, _core.VMM, _core.Device))


def _checked(mem, offset, nbytes, shape, strides, dtype):
    """The view's fields, from a peer's bytes: a view that reaches outside
    its memory, or is not a view at all, is refused (CUC_E_BADMSG). Types
    are checked exactly (one set of them), so that a bool or a float
    cannot stand in for an int."""
    ok = (type(mem) in _MEMS and type(shape) is tuple and type(strides) is tuple and
          type(dtype) is tuple and len(dtype) == 3 and len(shape) == len(strides) <= _MAX_DIMS
          and set(map(type, shape + strides + dtype + (offset, nbytes))) <= _INT)
    if ok:
        code, bits, lanes = dtype
        item = bits * lanes // 8
        ok = (0 <= code < 256 and 0 < bits < 256 and bits % 8 == 0 and 0 < lanes < 65536 and
              min(shape, default=0) >= 0 and min(strides, default=0) >= 0 and
              not any(s % item for s in strides))
    if ok:
        size = 0 if type(mem) is _core.Device else mem.size
        ok = (nbytes == _extent(shape, strides, item) and 0 <= offset and
              (nbytes == 0 or offset + nbytes <= size))
    if not ok:
        raise Error("CUC_E_BADMSG", "a shared array that does not fit its memory: offset %r, "
                    "%r bytes, shape %r, strides %r, dtype %r" % (offset, nbytes, shape,
                                                                   strides, dtype))


def _load_array(mem, offset, nbytes, shape, strides, dtype, framework, meta):
    _checked(mem, offset, nbytes, shape, strides, dtype)
    if not isinstance(mem, _core.Device):
        _remember(mem)
    view = ArrayView(mem, offset, nbytes, shape, strides, dtype)
    rebuild = _REBUILD.get(framework)
    if rebuild is None:
        return view
    try:
        return rebuild(view, meta)
    except ImportError:
        return view  # the receiver lacks that framework: cucore's view of it


def _rebuild_cupy(view, meta):
    import cupy
    with cupy.cuda.Device(view.device.ordinal):
        return cupy.asarray(view)


def _rebuild_numba(view, meta):
    from numba import cuda
    with cuda.gpus[view.device.ordinal]:
        return cuda.as_cuda_array(view)


def _rebuild_cudacore(view, meta):
    return _cc_module().Buffer.from_handle(view.ptr, view.nbytes, owner=view)


_REBUILD = {"cupy": _rebuild_cupy, "numba": _rebuild_numba,
            "cuda.core": _rebuild_cudacore}


# ---- torch: a tensor over its whole storage (one import per storage) ----

# the ForkingPickler.dumps under way: .waited, the devices whose current
# stream it waited for; .batch, its _batch_of; the loads under way:
# .storages, _torch_storage's
_tls = threading.local()


def _torch_wait(t, stream):
    """Waits for the tensor's producer: stream, else PyTorch's current
    stream of its device, once per ForkingPickler.dumps (install): no
    reducer queues GPU work between the tensors of one dumps."""
    if stream is not None:
        return _wait(stream, t.device)
    dev = t.get_device()
    waited = getattr(_tls, "waited", None)
    if waited is not None:
        if dev in waited:  # no reducer changes a current stream within one dumps
            return
        waited.add(dev)
    _torch.cuda.current_stream(dev).synchronize()


_torch = None  # the torch module, once a tensor was shared or loaded


def _torch_module():
    """The torch module, imported once (ImportError where it is not)."""
    global _torch
    if _torch is None:
        import torch
        _torch = torch
    return _torch

_torch_names = {}  # torch.dtype -> its name in torch ("float32")
_torch_devices = {}  # ordinal -> torch.device


def _torch_parts(t, stream, grad):
    """(mem, offset, nbytes, meta) of a CUDA tensor: its whole storage as
    (part of) the memory that carries it, and what _load_tensor needs."""
    if not t.is_cuda:
        raise Error("CUC_E_INVALID", "a CPU tensor: cucore shares CUDA memory (pickle a "
                    "CPU tensor as usual)")
    if grad and t.requires_grad and not t.is_leaf:
        raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which requires_grad, "
                           "since autograd does not support crossing process boundaries. "
                           "If you just want to transfer the data, call detach() on the "
                           "tensor before serializing (e.g., putting it on the queue).")
    storage = t.untyped_storage()
    base, nbytes = storage.data_ptr(), storage.nbytes()
    name = _torch_names.get(t.dtype)
    if name is None:
        name = _torch_names[t.dtype] = str(t.dtype)[len("torch."):]
    param = grad and type(t) is not _torch.Tensor and isinstance(t, _torch.nn.Parameter)
    meta = (name, tuple(t.size()), tuple(t.stride()), t.storage_offset(),
            bool(grad and t.requires_grad), param)
    if nbytes == 0:
        return _core.Device(t.device), 0, 0, meta
    _torch_wait(t, stream)
    mem, offset = _adopt(base, nbytes, storage)
    return mem, offset, nbytes, meta


def _torch_shared(t, stream, grad):
    _torch_module()
    mem, offset, nbytes, meta = _torch_parts(t, stream, grad)
    return Shared(mem, offset, ArrayDesc(t.untyped_storage().data_ptr(), nbytes, (nbytes,),
                                         (1,), _U8), "torch", meta)


def _torch_storage(mem, offset, nbytes):
    """A torch storage of nbytes at offset in received memory: within one
    ForkingPickler.loads, a slice of the one storage over the whole memory
    (one DLPack import a memory), the same storage for the same range (the
    sender's views of one storage stay views of one)."""
    cache = getattr(_tls, "storages", None)
    if cache is None:
        return _dlpack_storage(mem, offset, nbytes)
    key = (id(mem), offset, nbytes)
    st = cache.get(key)
    if st is None:
        whole = cache.get(id(mem))
        if whole is None:
            _remember(mem)
            whole = cache[id(mem)] = _dlpack_storage(mem, 0, mem.size)
        st = cache[key] = whole[offset:offset + nbytes]
    return st


def _dlpack_storage(mem, offset, nbytes):
    """A torch storage over nbytes at offset of received memory, through a
    DLPack capsule (no stream to order: the sender waited for its work)."""
    view = ArrayView(mem, offset, nbytes, (nbytes,), (1,), _U8)
    return _torch.from_dlpack(view.__dlpack__(stream=-1)).untyped_storage()


def _load_tensor(mem, offset, nbytes, meta):
    """The tensor a sender's _torch_parts describe, over its storage in
    received memory (a peer's bytes: a range outside the memory, or a
    layout outside the storage, is refused); its bytes as an ArrayView
    where this process lacks PyTorch."""
    try:
        _torch_module()
    except ImportError:
        return _load_array(mem, offset, nbytes, (nbytes,), (1,), _U8, "array", None)
    empty = type(mem) is _core.Device and offset == 0 == nbytes
    if not (empty or type(mem) in _MEMS and type(offset) is int and type(nbytes) is int and
            0 <= offset and 0 < nbytes and offset + nbytes <= mem.size):
        raise Error("CUC_E_BADMSG", "a shared tensor outside its memory: %r bytes at offset "
                    "%r of a %s" % (nbytes, offset, type(mem).__name__))
    try:
        dtype_name, size, stride, soff, requires_grad, param = meta
        dtype = getattr(_torch, dtype_name) if type(dtype_name) is str else None
        if not isinstance(dtype, _torch.dtype):
            raise TypeError("dtype %r" % (dtype_name,))
        if not (type(size) is tuple and type(stride) is tuple and len(size) == len(stride)
                and min(stride, default=0) >= 0 and type(soff) is int and soff >= 0):
            raise ValueError("size %r, stride %r, offset %r" % (size, stride, soff))
        ordinal = mem.ordinal if empty else mem.device.ordinal
        dev = _torch_devices.get(ordinal)
        if dev is None:
            dev = _torch_devices[ordinal] = _torch.device("cuda", ordinal)
        if empty:
            t = _torch.empty_strided(size, stride, dtype=dtype, device=dev)
        else:  # set_ checks the layout against the storage (not resizable)
            t = _torch.empty(0, dtype=dtype, device=dev).set_(
                _torch_storage(mem, offset, nbytes), soff, size, stride)
    except (TypeError, ValueError, RuntimeError) as e:
        raise Error("CUC_E_BADMSG", "a shared tensor that is not one (%s): %r" % (e, meta))
    if param is True:
        return _torch.nn.Parameter(t, requires_grad=requires_grad is True)
    return t.requires_grad_(requires_grad is True)


def _storage_of(tensor):
    return tensor.untyped_storage()


def _typed_storage_of(tensor, dtype_name):
    import torch
    return torch.TypedStorage(wrap_storage=tensor.untyped_storage(),
                              dtype=getattr(torch, dtype_name), _internal=True)


_installed = set()
_exit_wait_ms = None  # install()'s, else $CUCORE_SHARE_EXIT_WAIT_MS


def _install_torch():
    torch = _torch_module()
    import torch.multiprocessing.reductions as red
    from multiprocessing.reduction import ForkingPickler

    red.init_reductions()
    torch_reducers = {red.reduce_tensor: "tensor", red.reduce_storage: "storage"}
    for name in ("reduce_typed_storage", "reduce_typed_storage_child"):
        if hasattr(red, name):
            torch_reducers[getattr(red, name)] = "typed"

    def on_tensor(plain):
        def reduce(t):
            if not t.is_cuda or t.layout != torch.strided or t.is_nested:
                return plain(t)  # CPU (and sparse, nested) tensors: torch's own
            return (_load_tensor, _torch_parts(t, None, grad=True))
        return reduce

    def on_storage(plain, typed):
        def reduce(s):
            if s.device.type != "cuda":
                return plain(s)
            u = s._untyped_storage if typed else s
            t = torch.empty(0, dtype=torch.uint8, device=s.device).set_(u, 0, (u.nbytes(),),
                                                                         (1,))
            shared = _torch_shared(t, None, grad=False)  # loads as that tensor
            if typed:
                return (_typed_storage_of, (shared, str(s.dtype)[len("torch."):]))
            return (_storage_of, (shared,))
        return reduce

    for cls, plain in list(ForkingPickler._extra_reducers.items()):
        kind = torch_reducers.get(plain)
        if kind == "tensor":
            ForkingPickler.register(cls, on_tensor(plain))
        elif kind is not None:
            ForkingPickler.register(cls, on_storage(plain, kind == "typed"))
    _wrap_dumps(ForkingPickler)


class _AfterImport:
    """A one-shot import hook (sys.meta_path): fn(module) right after the
    module named is imported."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the finders after this one
        if spec is not None and spec.loader is not None:
            run, fn = spec.loader.exec_module, self.fn

            def exec_module(module):
                run(module)
                fn(module)
            spec.loader.exec_module = exec_module  # this spec's own loader
        return spec


def after_import(name, fn):
    """fn(module) once module name is imported: now, if it is."""
    mod = sys.modules.get(name)
    if mod is not None:
        fn(mod)
    else:
        sys.meta_path.insert(0, _AfterImport(name, fn))


_gc_lock = threading.Lock()
_gc_paused = [0, False]  # dumps and loads under way; whether the collector was on


def _gc_pause():
    with _gc_lock:
        if _gc_paused[0] == 0:
            _gc_paused[1] = gc.isenabled()
            gc.disable()
        _gc_paused[0] += 1


def _gc_resume():
    with _gc_lock:
        _gc_paused[0] -= 1
        if _gc_paused[0] == 0 and _gc_paused[1]:
            gc.enable()


def _wrap_dumps(pickler):
    """Wraps multiprocessing's ForkingPickler (Pipe, Queue, Pool): in each
    dumps the tensors wait for their stream once, and the Buffers of a
    list or tuple dumped whole, from its first item on, are detached
    together (_batch_of); in each loads the tensors of one memory share
    one import (_torch_storage). Both run with the cyclic collector
    paused: the objects they make are kept, not garbage, and a collection
    among them walks every object of the process (all of PyTorch's: it
    cost more than the tensors themselves)."""
    if getattr(pickler.dumps, "_cucore", False):
        return
    plain_dumps, plain_loads = pickler.dumps.__func__, pickler.loads

    def dumps(cls, obj, protocol=None):
        outer = getattr(_tls, "waited", None)
        if outer is None:
            _gc_pause()
            _tls.waited, _tls.batch = set(), _batch_of(obj)
        try:
            return plain_dumps(cls, obj, protocol)
        finally:
            if outer is None:
                _tls.waited = _tls.batch = None
                _gc_resume()

    def loads(data, *args, **kwargs):
        outer = getattr(_tls, "storages", None)
        if outer is None:
            _gc_pause()
            _tls.storages = {}
        try:
            return plain_loads(data, *args, **kwargs)
        finally:
            if outer is None:
                _tls.storages = None
                _gc_resume()
    dumps._cucore = True
    pickler.dumps = classmethod(dumps)
    pickler.loads = staticmethod(loads)
    pickler.register(_core.Buffer, _reduce_buffer)


class _Batch:
    """Buffers detached together: pickled once (pickle's memo), it loads as
    the tuple of them, each buffer as its item."""
    __slots__ = ("reduced",)

    def __init__(self, reduced):
        self.reduced = reduced

    def __reduce__(self):
        return self.reduced


def _batch_of(obj):
    """(a _Batch, {id(buffer): its index}) for a list or tuple whose first
    item is a Buffer: its Buffers detached as one message (one hold, one
    claim, one message to attach), or None. A Buffer that cannot be
    detached leaves them to pickle one by one (and raise there)."""
    if not isinstance(obj, (list, tuple)) or not obj or type(obj[0]) is not _core.Buffer:
        return None
    bufs, index = [], {}
    for x in obj:
        if type(x) is _core.Buffer and id(x) not in index:
            index[id(x)] = len(bufs)
            bufs.append(x)
    if len(bufs) < 2:
        return None
    try:
        return _Batch(_core.Buffer._detach_many(bufs)), index
    except Error:
        return None


def _reduce_buffer(b):
    """A Buffer in ForkingPickler: its item of the dump's batch, else
    itself."""
    batch = getattr(_tls, "batch", None)
    i = batch[1].get(id(b)) if batch else None
    if i is None:
        return b.__reduce__()
    return (operator.getitem, (batch[0], i))


# ---- cuda.core ----

def _cc_module():
    try:
        import cuda.core as cc
        cc.Device
    except (ImportError, AttributeError):
        import cuda.core.experimental as cc
    return cc


def _cc_device(uuid):
    return _cc_module().Device(_core.Device(uuid=uuid).ordinal)


def _reduce_cc_device(d):
    u = str(d.uuid)
    return (_cc_device, (u if u.startswith("GPU-") else "GPU-" + u,))


_CC_CONFIG = ("grid", "cluster", "block", "shmem_size", "is_cooperative",
              "programmatic_stream_serialization")


def _cc_launch_config(fields):
    return _cc_module().LaunchConfig(**fields)


def _reduce_cc_launch_config(c):
    fields = {}
    for name in _CC_CONFIG:
        v = getattr(c, name, None)
        if v is not None:
            fields[name] = tuple(v) if isinstance(v, (tuple, list)) else v
    return (_cc_launch_config, (fields,))


def _reduce_cc_stream(s):
    raise NotSerializableError(
        "CUC_E_NOT_SERIALIZABLE", "a cuda.core Stream is a handle valid only in the process "
        "that created it: send a cucore.Event(dev, ipc=True) recorded on it and have the "
        "receiver wait on it from a stream of its own, or send cucore.Stream.legacy(dev) / "
        "Stream.per_thread(dev)")


def _reduce_cc_buffer(b):
    return share(b).__reduce__()


def _install_cudacore():
    cc = _cc_module()
    copyreg.pickle(cc.Device, _reduce_cc_device)
    copyreg.pickle(cc.LaunchConfig, _reduce_cc_launch_config)
    copyreg.pickle(cc.Stream, _reduce_cc_stream)
    copyreg.pickle(cc.Buffer, _reduce_cc_buffer)


def _install_arrays(cls):
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(cls, lambda x: share(x).__reduce__())


def _array_class(name):
    if name == "cupy":
        import cupy
        return cupy.ndarray
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    return DeviceNDArray


def install(name, exit_wait_s=None):
    """Makes a framework's objects cross processes through cucore: "torch"
    (CUDA tensors and storages in every ForkingPickler, torch.multiprocessing's
    included, by UUID and leases; CPU tensors stay torch's), "cuda.core"
    (Device by UUID, LaunchConfig without a stream, a created Stream refused
    saying what to send, Buffer as share() does), or any array class
    ("cupy": cupy.ndarray, "numba": its DeviceNDArray, or the class itself)
    whose objects every ForkingPickler then sends as share() does. At exit this process
    waits up to exit_wait_s (default: $CUCORE_SHARE_EXIT_WAIT_MS, else 30 s
    once "torch" is installed, else 0) for other processes' leases of its
    memory, and says what it gave up."""
    global _exit_wait_ms
    if name == "torch":
        if name not in _installed:
            _install_torch()
        if (exit_wait_s is None and _exit_wait_ms is None and
                "CUCORE_SHARE_EXIT_WAIT_MS" not in os.environ):
            exit_wait_s = 30.0
    elif name in ("cuda.core", "cuda_core"):
        if "cuda.core" not in _installed:
            _install_cudacore()
        name = "cuda.core"
    elif name in ("cupy", "numba") or isinstance(name, type):
        _install_arrays(name if isinstance(name, type) else _array_class(name))
    else:
        raise ValueError("install(%r): cucore installs into \"torch\", \"cuda.core\", "
                         "\"cupy\", \"numba\" or an array class" % (name,))
    _installed.add(name)
    if exit_wait_s is not None:
        _exit_wait_ms = max(0, int(exit_wait_s * 1000))


def exit_wait_ms():
    """How long the exit waits for leases: install()'s, else
    $CUCORE_SHARE_EXIT_WAIT_MS, else 0."""
    if _exit_wait_ms is not None:
        return _exit_wait_ms
    try:
        return max(0, int(os.environ.get("CUCORE_SHARE_EXIT_WAIT_MS", "0")))
    except ValueError:
        return 0


# ---- numba ----

def kernel_from_numba(cls, dispatcher, signature):
    """Kernel.from_numba: the dispatcher's kernel compiled for signature
    (numba's compile()), as its PTX for the current device, whose one
    .entry names it."""
    kernel = dispatcher.compile(signature)
    ptx = dispatcher.inspect_asm(tuple(kernel.argument_types))
    names = re.findall(r"\.entry\s+([\w$%]+)", ptx)
    if len(names) != 1:
        raise Error("CUC_E_INVALID", "Kernel.from_numba: the PTX of %r has %d entries (%s), "
                    "not one" % (signature, len(names), ", ".join(names)))
    return cls(ptx.encode(), names[0], kind="ptx")

