"""Other frameworks' objects (cucore._frameworks) with no framework
installed: test-only arrays (fake_array.py) over memory of every kind
another allocator makes, through share() and through multiprocessing's
ForkingPickler once install() registered their class, to a child that
sees the GPUs in reverse order; refused kinds; the array kept until the
receivers' leases end, a killed receiver's included; the exit's wait for
them. And what users of those frameworks reach for first: copies between
Buffers, VMM resources and arrays, fills of 1/2/4-byte values, timing
events, pool access, zero-size buffers, stream priorities, other
libraries' streams and devices, a fork child's CUDA error."""
import copyreg
import gc
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
from multiprocessing.reduction import ForkingPickler

import pytest

import cucore
import fake_array as fa
from conftest import require_unshare
from test_multiproc import Child, N, exit_with_a_lease
from test_objects import PTX

DEV = 1 % N
REVERSED = ",".join(map(str, reversed(range(N))))
MiB = 1 << 20


def pattern(n, seed=0):
    return bytes((i * 7 + seed) & 255 for i in range(n))


def settle(count, want, timeout=10):
    """count() once it is want (within timeout), else its last value."""
    deadline = time.time() + timeout
    while count() != want and time.time() < deadline:
        gc.collect()
        time.sleep(0.01)
    return count()


def adopted():
    return cucore._core.adopted_count()


def quiet(child):
    """The adopted count once the child dropped what it holds (and the
    message it last received) and earlier tests' releases came in."""
    child.call("drop")
    last, deadline = adopted(), time.time() + 10
    while time.time() < deadline:
        gc.collect()
        time.sleep(0.1)
        if adopted() == last:
            break
        last = adopted()
    return last


@pytest.fixture(scope="module")
def child():
    c = Child("spawn", REVERSED)
    yield c
    c.close()


def strided(kind, iface, tag, dev=DEV):
    """A float32 view of 32 x 8 elements, every other one of each row,
    across the first 2 MiB boundary of 3 MiB of kind (two VMM chunks):
    the array, the bytes of its extent and their offset."""
    mem = fa.Memory(kind, dev, 3 * MiB, tag=tag)
    data = pattern(3 * MiB, seed=len(tag))
    mem.write(data)
    off = 2 * MiB - 1024
    if iface == "cai":
        x = fa.FakeCAI(mem, "<f4", shape=(32, 8), strides=(128, 8), offset=off)
    else:  # the same view, through a DLPack tensor's data + byte_offset
        x = fa.FakeDLPack(mem, (2, 32, 1), shape=(32, 8), strides=(32, 2),
                          data_offset=off - 8, byte_offset=8, tag=tag)
    extent = 31 * 128 + 7 * 8 + 4
    return x, data[off:off + extent]


@pytest.mark.parametrize("iface", ["cai", "dlpack"])
@pytest.mark.parametrize("kind", fa.SHARED_KINDS)
def test_every_kind_arrives_as_itself(child, uuids, kind, iface):
    """share() of an array over each kind of memory pickles by UUID: the
    child, seeing the GPUs in reverse order, gets an ArrayView on the GPU
    with our UUID, with the shape, strides and dtype we sent and the bytes
    of the view's extent (across two VMM chunks). The array is kept while
    the lease lives and freed after."""
    base = quiet(child)
    tag = "every-%s-%s" % (kind, iface)
    x, want = strided(kind, iface, tag)
    s = cucore.share(x)
    assert adopted() == base + 1
    got = child.call("describe", s)
    assert got == [("array", uuids[DEV], (32, 8), (128, 8), (2, 32, 1), want)]
    if iface == "dlpack":
        assert x.streams == [1] and tag in fa.DELETED  # ready for the stream waited for
    del s, x
    child.call("drop")  # the child's last message, and what it received, go
    assert settle(adopted, base) == base
    assert tag in fa.FREED


@pytest.mark.parametrize("kind", fa.SHARED_KINDS)
def test_forking_pickler_after_install(child, uuids, kind):
    """install(cls) registers share() for the class in multiprocessing's
    ForkingPickler: a Pipe's send carries the array itself; plain pickle
    is left alone."""
    cucore.install(fa.FakeCAI)
    tag = "forking-" + kind
    mem = fa.Memory(kind, DEV, MiB, tag=tag)
    mem.write(pattern(MiB, 3))
    x = fa.FakeCAI(mem, "<i8", shape=(16,), offset=64)
    got = child.call("describe", x)
    assert got == [("array", uuids[DEV], (16,), (8,), (0, 64, 1), pattern(MiB, 3)[64:192])]
    assert fa.FakeCAI in ForkingPickler._extra_reducers
    assert fa.FakeCAI not in copyreg.dispatch_table  # plain pickle: the class's own


@pytest.mark.parametrize("kind,name", [("pool", '"pool"'), ("vmm", '"vmm"'),
                                       ("managed", '"managed"')])
def test_refused_kinds_say_what_to_use(child, kind, name):
    """Memory cucore cannot share (a pool without IPC, VMM memory without
    fds, managed memory) is refused by share() and by a ForkingPickler's
    send, naming its kind and what to use; nothing stays adopted."""
    cucore.install(fa.FakeCAI)
    base = quiet(child)
    x = fa.FakeCAI(fa.Memory(kind, DEV, MiB, tag="refused-" + kind))
    for attempt in (lambda: cucore.share(x), lambda: child.call("describe", x)):
        with pytest.raises(cucore.Error) as e:
            attempt()
        assert e.value.code == "CUC_E_INVALID" and name in e.value.message
        assert "copy the bytes" in e.value.message or "IPC" in e.value.message
    assert adopted() == base


@pytest.mark.parametrize("kind", ["legacy", "vmm-fd"])
def test_array_kept_until_the_lease_ends(child, uuids, kind):
    """We drop every reference to the array once shared: cucore keeps it
    (not freed, its bytes intact for the child) until the child drops
    what it received; then it is freed."""
    base = quiet(child)
    tag = "kept-" + kind
    mem = fa.Memory(kind, DEV, MiB, tag=tag)
    mem.write(pattern(MiB, 5))
    x = fa.FakeCAI(mem, "|u1", shape=(4096,), offset=100)
    assert child.call("hold", cucore.share(x)) >= 1
    del x, mem
    gc.collect()
    time.sleep(0.2)
    assert adopted() == base + 1 and tag not in fa.FREED
    held = child.call("describe_held")
    assert held[-1] == ("array", uuids[DEV], (4096,), (1,), (1, 8, 1), pattern(MiB, 5)[100:4196])
    child.call("drop")
    assert settle(adopted, base) == base
    assert tag in fa.FREED


def test_killed_receiver_ends_the_lease(uuids):
    """A receiver SIGKILLed while it holds the array: its connection
    closes, the lease ends, and the array is freed."""
    base = adopted()
    c = Child("spawn", REVERSED)
    try:
        mem = fa.Memory("vmm-fd", DEV, MiB, tag="killed")
        x = fa.FakeCAI(mem, "<u4", shape=(8,))
        assert c.call("hold", cucore.share(x)) == 1
        del x, mem
        assert adopted() == base + 1
        os.kill(c.proc.pid, signal.SIGKILL)
        c.proc.join(30)
        assert settle(adopted, base) == base
        assert "killed" in fa.FREED
    finally:
        c.close()


ARRAY_CONSUMER = """
import pickle, sys, cucore
o = pickle.loads(bytes.fromhex(sys.stdin.readline()))
data = o.mem.to_bytes(size=o.nbytes, offset=o.offset)
print(type(o).__name__, o.device.uuid, o.shape, data.hex(), flush=True)
"""


NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc")


def consume_in_namespace(data):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=REVERSED)
    return subprocess.run([*NAMESPACE, sys.executable, "-c", ARRAY_CONSUMER],
                          input=data.hex() + "\n", capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize("kind", fa.SHARED_KINDS)
def test_consumer_in_another_pid_namespace(uuids, kind):
    """An array of each shared kind (cuMemAlloc memory by legacy IPC, pool
    and VMM memory by fd) shared with share() and loaded by a consumer in
    another PID and mount namespace (a container's view: the socket
    directory shared, nothing else), its GPUs in reverse order: bytes and
    UUID arrive, as the driver opens legacy IPC there (sim/FACTS.md F48),
    and the array is freed once the consumer has gone."""
    require_unshare(NAMESPACE)
    base = adopted()
    tag = "namespace-" + kind
    mem = fa.Memory(kind, DEV, MiB, tag=tag)
    mem.write(pattern(MiB, 9))
    data = pickle.dumps(cucore.share(fa.FakeCAI(mem, "|u1", shape=(4096,), offset=100)))
    del mem
    p = consume_in_namespace(data)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["ArrayView", uuids[DEV], "(4096,)",
                                pattern(MiB, 9)[100:4196].hex()]
    assert settle(adopted, base) == base
    assert tag in fa.FREED


def test_views_of_one_allocation_share_one_import(child, uuids):
    """Two arrays over parts of one cuMemAlloc allocation, and two over
    one allocation of an IPC pool: the child opens each allocation once
    and reads every part; the same part sent back comes home as our own
    memory (A -> B -> A)."""
    opens = child.call("count", "cuIpcOpenMemHandle")
    imports = child.call("count", "cuMemPoolImportPointer")
    xs = []
    for kind in ("legacy", "pool-ipc"):
        mem = fa.Memory(kind, DEV, MiB, tag="one-import-" + kind)
        mem.write(pattern(MiB, 9))
        xs += [fa.FakeCAI(mem, "|u1", shape=(1000,), offset=off) for off in (0, 5000)]
    assert child.call("hold", *[cucore.share(x) for x in xs])
    got = child.call("describe_held")[-4:]
    assert [g[5] for g in got] == [pattern(MiB, 9)[o:o + 1000] for o in (0, 5000) * 2]
    if opens is not None:  # the simulator counts
        assert child.call("count", "cuIpcOpenMemHandle") - opens == 1
        assert child.call("count", "cuMemPoolImportPointer") - imports == 1
    back = [pickle.loads(p) for p in child.call("reshare")[-4:]]
    assert [b.ptr for b in back] == [x.memory.ptr + x.offset for x in xs]
    assert [b.mem.to_bytes(size=1000, offset=b.offset) for b in back] == [g[5] for g in got]
    del back
    child.call("drop")


def test_cucore_memory_shares_as_itself(child, uuids):
    """share() of a cucore Buffer or VMM resource sends that object: the
    child gets a byte view of it, and nothing is adopted."""
    base = quiet(child)
    buf = cucore.Pool(DEV).allocate(300)
    buf.copy_from(pattern(300, 4))
    v = cucore.VMM(DEV, 1)
    v.copy_from(pattern(64, 6))
    got = child.call("describe", cucore.share(buf), cucore.share(v))
    assert got[0] == ("array", uuids[DEV], (300,), (1,), (1, 8, 1), pattern(300, 4))
    assert got[1][:5] == ("array", uuids[DEV], (v.size,), (1,), (1, 8, 1))
    assert got[1][5][:64] == pattern(64, 6)
    assert adopted() == base
    child.call("drop")


def test_dlpack_describe_consumes_the_capsule():
    """dlpack_describe reads a capsule as a consumer: contiguous strides
    for a NULL strides pointer, byte_offset added to the address, the
    deleter run once and the capsule renamed (a second read is refused);
    memory that is not a CUDA device's is refused by name."""
    mem = fa.Memory("legacy", 0, 4096)
    x = fa.FakeDLPack(mem, (0, 16, 1), shape=(4, 6), data_offset=32, byte_offset=6,
                      tag="describe")
    cap = x.__dlpack__()
    deleted = len(fa.DELETED)
    assert cucore._core.dlpack_describe(cap) == (mem.ptr + 38, (2, 0), struct.pack("2q", 4, 6),
                                                 None, (0, 16, 1))
    assert fa.DELETED[deleted:] == ["describe"]
    with pytest.raises(ValueError):
        cucore._core.dlpack_describe(cap)
    assert fa.DELETED[deleted:] == ["describe"]
    assert cucore._frameworks._from_dlpack(x.__dlpack__()) == (mem.ptr + 38, 48, (4, 6),
                                                               (12, 2), (0, 16, 1))
    cpu = fa.FakeDLPack(mem, device_type=1)
    with pytest.raises(cucore.Error) as e:
        cucore.share(cpu)
    assert "device type 1" in e.value.message
    neg = fa.FakeDLPack(mem, (1, 8, 1), shape=(4,), strides=(-1,), data_offset=8)
    with pytest.raises(cucore.Error) as e:
        cucore.share(neg)
    assert "negative" in e.value.message


def test_copies_between_buffers_vmm_and_arrays():
    """copy_from takes bytes, a Buffer, a VMM resource or a contiguous CUDA
    array (its interface or its DLPack tensor); copy_to the same as its
    destination; both check the sizes; a non-contiguous array is
    refused."""
    pool = cucore.Pool(0)
    a, b = pool.allocate(4096), pool.allocate(8192)
    v = cucore.VMM(0, 4096)
    a.copy_from(pattern(4096, 1))
    b.copy_from(a, offset=100, stream=cucore.Stream(0))
    assert b.to_bytes(size=4096, offset=100) == pattern(4096, 1)
    a.copy_to(v)
    assert v.to_bytes(size=4096) == pattern(4096, 1)
    mem = fa.Memory("legacy", 0, 4096)
    a.copy_to(fa.FakeCAI(mem, "<u4"))
    assert mem.read(4096) == pattern(4096, 1)
    mem.write(pattern(4096, 2))
    a.copy_from(fa.FakeDLPack(mem, (1, 32, 1)), stream=cucore.Stream.legacy(0))
    assert a.to_bytes() == pattern(4096, 2)
    whole = pool.allocate(v.size)  # a VMM resource is whole chunks
    v.copy_to(whole)
    assert whole.to_bytes(size=4096) == pattern(4096, 1)
    with pytest.raises(cucore.Error):
        a.copy_from(b)  # 8192 bytes into 4096
    with pytest.raises(cucore.Error):
        b.copy_to(a)
    with pytest.raises(cucore.Error) as e:
        a.copy_from(fa.FakeCAI(mem, "<u4", shape=(16,), strides=(8,)))
    assert "non-contiguous" in e.value.message
    with pytest.raises(cucore.Error):
        a.copy_from(object())


def test_fill_widths():
    """fill(value, width) writes 1-, 2- or 4-byte values (little-endian);
    a size that is not a whole number of values, a value too wide and
    another width are refused."""
    buf = cucore.Pool(0).allocate(64)
    buf.fill(0xAB)
    assert buf.to_bytes() == b"\xab" * 64
    buf.fill(0x1234, 2)
    assert buf.to_bytes() == b"\x34\x12" * 32
    buf.fill(0xDEADBEEF, width=4)
    assert buf.to_bytes() == b"\xef\xbe\xad\xde" * 16
    odd = cucore.Pool(0).allocate(6)
    for bad in [(odd, 1, 4), (buf, 0x10000, 2), (buf, 0x100, 1), (buf, 1, 3), (buf, 1 << 32, 4)]:
        with pytest.raises(cucore.Error) as e:
            bad[0].fill(bad[1], bad[2])
        assert e.value.code == "CUC_E_INVALID"
    v = cucore.VMM(0, 1)
    v.fill(0x0102, 2)
    assert v.to_bytes(size=4) == b"\x02\x01\x02\x01"


def test_timing_events():
    """Event(dev, timing=True) is a timing event (not IPC unless asked,
    which the driver refuses with timing); elapsed() gives milliseconds
    between two recorded ones, and refuses events that record no time."""
    start, end = cucore.Event(0, timing=True), cucore.Event(0, timing=True)
    assert not start.ipc
    start.record()
    end.record()
    end.synchronize()
    assert start.elapsed(end) >= 0.0
    with pytest.raises(cucore.Error) as e:
        cucore.Event(0).elapsed(end)
    assert e.value.code == "CUC_E_INVALID"
    with pytest.raises(cucore.Error):
        cucore.Event(0, ipc=True, timing=True)
    with pytest.raises(TypeError):
        start.elapsed(0)


@pytest.mark.skipif(N < 2, reason="needs a second GPU")
def test_pool_access_from_python():
    """set_access grants and revokes a device's access to a pool's memory
    here; access() reads it back; read-only is the driver's to refuse, and
    a word other than "rw", "r", None is refused."""
    pool = cucore.Pool(0)
    assert pool.access(0) == "rw" and pool.access(1) == ""
    pool.set_access(cucore.Device(1), "rw")
    assert pool.access(1) == "rw"
    pool.set_access(1, None)
    assert pool.access(1) == ""
    with pytest.raises(cucore.Error) as e:
        pool.set_access(1, "r")
    assert e.value.code == "CUC_E_NOT_SUPPORTED"
    with pytest.raises(cucore.Error) as e:
        pool.set_access(1, "write")
    assert e.value.code == "CUC_E_INVALID" and '"write"' in e.value.message


def test_zero_size_buffers():
    """allocate(0) gives a buffer of size 0 at address 0 (as cuda.core
    allows): it fills, copies and views as nothing; pickling it is refused
    saying there is nothing to share."""
    buf = cucore.Pool(0).allocate(0)
    assert buf.size == 0 and buf.ptr == 0 and buf.to_bytes() == b""
    buf.fill(1)
    buf.copy_from(b"")
    assert buf.__cuda_array_interface__["shape"] == (0,)
    with pytest.raises(cucore.Error) as e:
        pickle.dumps(buf)
    assert "size 0" in e.value.message and "nothing to share" in e.value.message
    with pytest.raises(cucore.Error):
        cucore.Pool(0).allocate(-1)
    buf.close()


def test_stream_priority_outside_the_range_is_refused():
    with pytest.raises(cucore.Error) as e:
        cucore.Stream(0, priority=-100)
    assert e.value.code == "CUC_E_INVALID" and "-100" in e.value.message
    assert "range" in e.value.message
    cucore.Stream(0, priority=-1).synchronize()


class ForeignStream:
    """Another library's stream: __cuda_stream__ and a .device."""

    def __init__(self, handle, device=None):
        self.handle, self.device = handle, device

    def __cuda_stream__(self):
        return (0, self.handle)


class TorchLikeDevice:
    type, index = "cuda", DEV


def test_other_libraries_streams_and_devices():
    """Stream(x), launch(x, ...) and allocate(stream=x) take any object
    with __cuda_stream__: x's CUstream, on x's device, not cucore's to
    destroy (x is kept) nor to send; its default handles are cucore's
    default streams. Device(x) takes a torch.device-like object."""
    maker = cucore.Stream(DEV)  # the "framework's" stream: cucore's, to check its handle
    x = ForeignStream(maker.handle, cucore.Device(DEV))
    s = cucore.Stream(x)
    assert s.handle == maker.handle and s.device.ordinal == DEV and s.kind == "created"
    s.synchronize()
    with pytest.raises(cucore.NotSerializableError):
        pickle.dumps(s)
    buf = cucore.Pool(DEV).allocate(400, stream=x)
    assert buf.__cuda_array_interface__["stream"] == maker.handle
    x.device = TorchLikeDevice()
    k = cucore.Kernel(PTX, "twice")
    try:  # on x's stream, of the device its torch.device-like .device names
        cucore.launch(x, cucore.LaunchConfig(1, 100), k, buf, 100)
    except cucore.Error as e:
        assert cucore.driver()["simulated"] and "cannot run kernels" in e.message
        assert "on device %d" % DEV in e.message
    maker.synchronize()
    del s
    maker.synchronize()  # wrapping and dropping left the maker's stream alive
    assert cucore.Stream(ForeignStream(1, DEV)) is cucore.Stream.legacy(DEV)
    assert cucore.Stream(ForeignStream(2, DEV)) is cucore.Stream.per_thread(DEV)
    cucore.Device(DEV).set_current()
    assert cucore.Stream(ForeignStream(0)) is cucore.Stream.legacy(DEV)  # current device
    assert cucore.Device(TorchLikeDevice()) is cucore.Device(DEV)
    with pytest.raises(TypeError):
        cucore.Pool(0).allocate(8, stream=object())
    with pytest.raises(TypeError):
        cucore.Device(object())


def test_kernel_from_a_numba_like_dispatcher():
    """Kernel.from_numba compiles the dispatcher for the signature and
    loads its PTX by the .entry it names."""
    class Dispatcher:
        def compile(self, sig):
            self.sig = sig
            return type("K", (), {"argument_types": ("out", "n")})()

        def inspect_asm(self, argtypes):
            assert argtypes == ("out", "n")
            return PTX.decode()

    k = cucore.Kernel.from_numba(Dispatcher(), "void(uint32[:], uint32)")
    assert k.name == "twice" and k.kind == "ptx" and k.hash == cucore.Kernel(PTX, "twice").hash


@pytest.mark.skipif(bool(os.environ.get("CUCORE_TEST_TSAN")),
                    reason="ThreadSanitizer cannot start threads in a fork child")
def test_fork_child_cuda_error_names_fork():
    """A forked child's driver call fails: the error Python shows names
    fork and says to use spawn or exec."""
    cucore.Pool(0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            cucore.Pool(0)
            msg = "no error"
        except cucore.Error as e:
            msg = e.message
        os.write(w, msg.encode()[:4000])
        os._exit(0)
    os.close(w)
    msg = os.read(r, 4096).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert "fork() child" in msg and "spawn or exec" in msg, msg


def test_exit_waits_for_adopted_memorys_leases(child):
    """A process that shared an array and exits while a receiver holds it
    waits install()'s time for the lease, saying so, and exits once the
    receiver releases it (the array's release runs on the share point's
    thread while the exit holds the GIL); with a shorter time it says what
    it gave up."""
    for wait_s, releases in ((20, True), (0.3, False)):
        _, described, err, took = exit_with_a_lease(child, """
            import pickle, sys, cucore, fake_array as fa
            cucore.install(fa.FakeCAI, exit_wait_s=%r)
            mem = fa.Memory("legacy", 0, 4096)
            mem.write(b"exit-wait-array!")
            x = fa.FakeCAI(mem, "|u1", shape=(16,))
            sys.stdout.buffer.write(pickle.dumps(cucore.share(x)).hex().encode() + b"\\n")
            sys.stdout.flush()
            del x, mem
            sys.stdin.readline()
        """ % wait_s, releases)
        assert described[5] == b"exit-wait-array!"
        assert b"waiting up to" in err
        if releases:
            assert b"still held" not in err and took < 15
        else:
            assert b"1 leases of 1 processes still held after 300 ms" in err, err
            child.call("drop")


def test_tensor_record_without_torch_and_hostile():
    """A torch tensor's record (cucore._frameworks._load_tensor's
    arguments, as a peer sends them) loads as an ArrayView of its storage's
    bytes where this process lacks PyTorch; a range outside its memory, or
    a memory that is not one, is refused before anything is imported."""
    pytest.importorskip("cucore")
    try:
        import torch  # noqa: F401
        pytest.skip("PyTorch is installed here: test_gpu_frameworks.py covers the tensors")
    except ImportError:
        pass
    from cucore import _frameworks as fw
    buf = cucore.Pool(DEV).allocate(4096)
    buf.copy_from(pattern(4096, 5))
    meta = ("float32", (16,), (1,), 0, False, False)
    view = fw._load_tensor(buf, 1024, 64, meta)
    assert isinstance(view, fw.ArrayView) and view.ptr == buf.ptr + 1024
    assert view.shape == (64,) and view.dtype == (1, 8, 1)
    assert view.mem.to_bytes(size=64, offset=1024) == pattern(4096, 5)[1024:1088]
    for args in [(buf, 4090, 64), (buf, -8, 64), (buf, 0, 1 << 40), ("buf", 0, 64),
                 (buf, 0.0, 64), (cucore.Device(DEV), 0, 64)]:
        with pytest.raises(cucore.Error) as e:
            fw._load_tensor(*args, meta)
        assert e.value.code == "CUC_E_BADMSG", args


class _CollectorAtDump:
    seen = []

    def __reduce__(self):
        _CollectorAtDump.seen.append(gc.isenabled())
        return (int, (7,))


class _CollectorAtLoad:
    def __reduce__(self):
        return (gc.isenabled, ())  # called by the loads: the collector's state then


def test_forking_pickler_pauses_the_collector():
    """multiprocessing's ForkingPickler, as cucore wraps it, dumps and
    loads with the cyclic collector paused and leaves it as it found it:
    on, or off where the program turned it off; with two threads in
    dumps at once, on once both are done."""
    import threading
    assert getattr(ForkingPickler.dumps.__func__, "_cucore", False)  # wrapped
    seen = _CollectorAtDump.seen
    seen.clear()
    assert gc.isenabled()
    assert ForkingPickler.loads(ForkingPickler.dumps([_CollectorAtDump()])) == [7]
    assert ForkingPickler.loads(ForkingPickler.dumps(_CollectorAtLoad())) is False
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        ForkingPickler.dumps([_CollectorAtDump()])
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()
    both = threading.Barrier(2)

    class Meet:
        def __reduce__(self):
            both.wait(10)  # the two dumps overlap here
            return (int, (1,))
    threads = [threading.Thread(target=ForkingPickler.dumps, args=([Meet()],)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.isenabled()
