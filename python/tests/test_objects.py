"""Objects, errors and pickle in one process."""
import concurrent.futures
import errno
import multiprocessing
import os
import pickle

import pytest

import cucore
import workers

PTX = (b".version 7.0\n.target sm_70\n.address_size 64\n\n"
       b".visible .entry twice(.param .u64 out, .param .u32 n)\n{\n"
       b"  .reg .u32 %r<6>;\n  .reg .u64 %rd<4>;\n  .reg .pred %p;\n"
       b"  ld.param.u64 %rd1, [out];\n  ld.param.u32 %r1, [n];\n"
       b"  mov.u32 %r2, %ctaid.x;\n  mov.u32 %r3, %ntid.x;\n  mov.u32 %r4, %tid.x;\n"
       b"  mad.lo.u32 %r5, %r2, %r3, %r4;\n  setp.ge.u32 %p, %r5, %r1;\n  @%p bra DONE;\n"
       b"  cvta.to.global.u64 %rd1, %rd1;\n  mul.wide.u32 %rd2, %r5, 4;\n"
       b"  add.u64 %rd3, %rd1, %rd2;\n  shl.b32 %r1, %r5, 1;\n  st.global.u32 [%rd3], %r1;\n"
       b"DONE:\n  ret;\n}\n")

N = len(cucore.devices())


def rt(o):
    return pickle.loads(pickle.dumps(o))


def test_devices(uuids):
    devs = cucore.devices()
    assert len(devs) == len(uuids) >= 1
    for i, d in enumerate(devs):
        assert d.ordinal == i
        assert d.uuid.startswith("GPU-") and len(d.uuid) == 40
        assert cucore.Device(i) is d
        assert cucore.Device(uuid=d.uuid) is d
        assert cucore.Device(d.uuid.lower()) is d
        assert isinstance(d.name, str) and d.name
        assert len(d.compute_capability) == 2
        assert d.pci_bus_id.count(":") == 2
        d.set_current()


def test_device_from_any_object_with_uuid(uuids):
    class Foreign:  # as a cuda.core Device: .uuid without the "GPU-" prefix
        uuid = uuids[-1][4:]
    assert cucore.Device(Foreign()) is cucore.Device(len(uuids) - 1)


def test_errors_name_the_thing(uuids):
    absent = "GPU-00000000-0000-0000-0000-000000000001"
    with pytest.raises(cucore.NotVisibleError) as e:
        cucore.Device(uuid=absent)
    assert e.value.code == "CUC_E_NOT_VISIBLE"
    assert absent in str(e.value) and uuids[0] in e.value.message
    assert isinstance(e.value, cucore.Error)
    with pytest.raises(cucore.Error) as e:
        cucore.Device(len(uuids))
    assert e.value.code == "CUC_E_INVALID"
    with pytest.raises(cucore.Error):
        cucore.Device(uuid="GPU-nothex")
    # errors survive pickle (a worker's error reaches its parent)
    again = rt(e.value)
    assert type(again) is cucore.Error and again.code == e.value.code
    assert again.message == e.value.message
    assert issubclass(cucore.NotSerializableError, pickle.PicklingError)
    assert issubclass(cucore.TimeoutError, TimeoutError)
    assert issubclass(cucore.ExporterGoneError, cucore.PeerClosedError)


def test_device_pickle_is_identity_and_uuid():
    for d in cucore.devices():
        assert rt(d) is d
        fn, (data,) = d.__reduce__()
        assert fn is cucore._core._load and isinstance(data, bytes)
        assert bytes.fromhex(d.uuid[4:].replace("-", "")) in data


def test_default_streams():
    d = cucore.Device(0)
    leg, pt = cucore.Stream.legacy(d), cucore.Stream.per_thread(d)
    assert leg.kind == "legacy" and pt.kind == "per-thread"
    assert leg is cucore.Stream.legacy(0) and rt(leg) is leg and rt(pt) is pt
    assert leg.device is d
    assert cucore.Stream.default(d).kind in ("legacy", "per-thread")
    leg.synchronize()
    assert leg.query() is True


def test_created_stream_refused():
    s = cucore.Stream(cucore.Device(0))
    assert s.kind == "created"
    s.synchronize()
    with pytest.raises(cucore.NotSerializableError) as e:
        pickle.dumps(s)
    assert "Event" in str(e.value) and "Stream.legacy" in str(e.value)
    assert isinstance(e.value, pickle.PicklingError)
    assert s.__cuda_stream__()[1] == s.handle


def test_event():
    d = cucore.Device(0)
    e = cucore.Event(d, ipc=True)
    e.record(cucore.Stream(d))
    e.synchronize()
    assert e.query() is True and e.ipc and not e.is_imported
    assert rt(e) is e
    plain = cucore.Event(d, ipc=False)
    with pytest.raises(cucore.NotSerializableError):
        pickle.dumps(plain)
    s = cucore.Stream(d)
    s.wait(e)
    s.synchronize()


def test_launch_config_pickles_without_stream():
    c = cucore.LaunchConfig((8, 2), (128,), shared_mem=256, cluster=(2, 1, 1))
    assert c.grid == (8, 2, 1) and c.block == (128, 1, 1) and c.cluster == (2, 1, 1)
    assert rt(c) == c and c.shared_mem == 256 and not c.cooperative
    assert cucore.LaunchConfig(1, 1).cluster is None
    with pytest.raises(cucore.Error):
        cucore.LaunchConfig((3,), 32, cluster=2)  # cluster does not divide grid
    with pytest.raises(cucore.Error):
        cucore.LaunchConfig(1, 2048)


def test_kernel_pickle_and_launch(simulated):
    k = cucore.Kernel(PTX, "twice")
    assert k.name == "twice" and k.kind == "ptx" and len(k.hash) == 32
    assert rt(k) is k
    loads, hits = cucore.Kernel.cache_stats()
    k2 = cucore.Kernel(PTX, "twice")
    assert k2 is k
    assert cucore.Kernel.cache_stats() == (loads, hits + 1)
    with pytest.raises(cucore.Error) as e:
        cucore.Kernel(PTX, "absent")
    assert e.value.code == "CUC_E_NOT_FOUND" and "absent" in str(e.value)
    with pytest.raises(cucore.Error):
        cucore.Kernel(PTX, "twice", kind="elf")
    pool = cucore.Pool(0)
    buf = pool.allocate(4 * 256)
    args = (cucore.Stream.legacy(0), cucore.LaunchConfig(2, 128), k, buf, 256)
    if simulated:
        with pytest.raises(cucore.Error) as e:
            cucore.launch(*args)
        assert "cannot run kernels" in str(e.value)
        return
    cucore.launch(*args)
    cucore.Stream.legacy(0).synchronize()
    out = buf.to_bytes()
    assert [int.from_bytes(out[4 * i:4 * i + 4], "little") for i in range(256)] == \
        [2 * i for i in range(256)]


# echo(out, u8 a, u16 b, f32 c, f64 d, u32 e) stores each where
# struct "<BxHfdI" puts it; blob(.align 16 .b8 [24]) does nothing.
PTX_ECHO = (b".version 7.0\n.target sm_70\n.address_size 64\n\n"
            b".visible .entry echo(.param .u64 out, .param .u8 a, .param .u16 b,\n"
            b"    .param .f32 c, .param .f64 d, .param .u32 e)\n{\n"
            b"  .reg .b16 %rs<3>;\n  .reg .b32 %r1;\n  .reg .f32 %f1;\n"
            b"  .reg .f64 %fd1;\n  .reg .b64 %rd1;\n"
            b"  ld.param.u64 %rd1, [out];\n  cvta.to.global.u64 %rd1, %rd1;\n"
            b"  ld.param.u8 %rs1, [a];\n  st.global.u8 [%rd1], %rs1;\n"
            b"  ld.param.u16 %rs2, [b];\n  st.global.u16 [%rd1+2], %rs2;\n"
            b"  ld.param.f32 %f1, [c];\n  st.global.f32 [%rd1+4], %f1;\n"
            b"  ld.param.f64 %fd1, [d];\n  st.global.f64 [%rd1+8], %fd1;\n"
            b"  ld.param.u32 %r1, [e];\n  st.global.u32 [%rd1+16], %r1;\n"
            b"  ret;\n}\n\n"
            b".visible .entry blob(.param .align 16 .b8 s[24])\n{\n  ret;\n}\n")


def test_params_on_a_thread_with_no_context():
    """The driver answers a kernel's parameters only in a context
    (CUDA_ERROR_INVALID_CONTEXT with none current, on a GPU as on the
    simulator): a thread that has none gets them all the same, and has
    none after."""
    import threading

    seen = {}

    def ask():
        try:
            seen["before"] = cucore.current_device()
            seen["params"] = cucore.Kernel(PTX_ECHO, "blob").params
            seen["after"] = cucore.current_device()
        except Exception as e:  # noqa: BLE001 (asserted below)
            seen["error"] = e

    t = threading.Thread(target=ask)
    t.start()
    t.join()
    assert "error" not in seen, seen.get("error")
    assert seen == {"before": None, "params": ((0, 24),), "after": None}


def test_launch_packs_each_argument_as_its_parameter(simulated):
    """An int or float becomes its parameter's size (asked of the driver):
    a float for an f32 parameter is a float32, not the first half of a
    double. On a GPU the kernel stores what it got; on the simulator the
    launch gets as far as the driver (which runs no kernels)."""
    import ctypes
    import struct

    echo = cucore.Kernel(PTX_ECHO, "echo")
    assert echo.params == ((0, 8), (8, 1), (10, 2), (12, 4), (16, 8), (24, 4))
    assert cucore.Kernel(PTX_ECHO, "blob").params == ((0, 24),)
    buf = cucore.Pool(0).allocate(32)
    buf.copy_from(bytes(32))
    cfg, s = cucore.LaunchConfig(1, 1), cucore.Stream.legacy(0)
    values = (200, -3, 1.5, 2.25, 2**32 - 1)
    for c in (1.5, ctypes.c_float(1.5)):
        args = (buf, 200, -3, c, 2.25, 2**32 - 1)
        if simulated:
            with pytest.raises(cucore.Error) as e:
                cucore.launch(s, cfg, echo, *args)
            assert "cannot run kernels" in str(e.value)
            continue
        cucore.launch(s, cfg, echo, *args)
        s.synchronize()
        assert buf.to_bytes()[:20] == struct.pack("<BxhfdI", *values)
    bad = [((buf, 200, -3, 1.5, 2.25), cucore.Error, "takes 6 parameters, 5 arguments"),
           ((buf, 256, 0, 0.0, 0.0, 0), OverflowError, "argument 1 (256)"),
           ((buf, -129, 0, 0.0, 0.0, 0), OverflowError, "parameter 1's 1 byte"),
           ((buf, 0, 65536, 0.0, 0.0, 0), OverflowError, "argument 2"),
           ((buf, 0, 0, 1e300, 0.0, 0), OverflowError, "4-byte float"),
           ((buf, 0, 0, ctypes.c_double(1.0), 0.0, 0), cucore.Error,
            "parameter 3 takes 4 bytes, argument 3 has 8"),
           ((buf, buf, 0, 0.0, 0.0, 0), cucore.Error, "parameter 1 takes 1 byte, argument 1 has 8"),
           ((2**64, 0, 0, 0.0, 0.0, 0), OverflowError, "argument 0"),
           ((buf, 0, 0, 0.0, 0.0, 2**32), OverflowError, "argument 5")]
    for args, exc, text in bad:
        with pytest.raises(exc) as e:
            cucore.launch(s, cfg, echo, *args)
        assert text in str(e.value) and "echo" in str(e.value), (args, str(e.value))
    with pytest.raises(TypeError) as e:
        cucore.launch(s, cfg, cucore.Kernel(PTX_ECHO, "blob"), 7)
    assert "parameter 0 is 24 bytes" in str(e.value)
    if not simulated:
        assert buf.to_bytes()[:20] == struct.pack("<BxhfdI", *values)  # nothing ran


def test_pool_and_buffer():
    d = cucore.Device(1 % N)
    pool = cucore.Pool(d)
    assert pool.device is d and pool.ipc and not pool.is_imported and len(pool.id) == 16
    with pool.allocate(1000) as buf:
        assert buf.size == 1000 and buf.device is d and buf.ptr != 0
        buf.copy_from(bytes(range(250)) * 4)
        assert buf.to_bytes() == bytes(range(250)) * 4
        assert buf.to_bytes(size=10, offset=5) == bytes(range(5, 15))
        buf.fill(7)
        assert buf.to_bytes() == b"\x07" * 1000
        assert buf.pool is pool
        assert rt(buf) is buf and rt(pool) is pool
        with pytest.raises(cucore.Error):
            buf.copy_from(b"x" * 1001)
    assert buf.closed
    with pytest.raises(ValueError):
        buf.size
    with pytest.raises(cucore.Error):
        pool.allocate(-1)
    local = cucore.Pool(d, ipc=False)
    b = local.allocate(16)
    with pytest.raises(cucore.NotSerializableError):
        pickle.dumps(b)
    with pytest.raises(cucore.NotSerializableError):
        pickle.dumps(local)
    b.close()
    pinned = cucore.Pool(d, kind="pinned")
    pb = pinned.allocate(64)
    pb.copy_from(b"p" * 64)
    assert pb.to_bytes() == b"p" * 64 and pinned.kind == "pinned"
    assert pb.__dlpack_device__() == (3, 0)


def test_vmm():
    devs = cucore.devices()
    v = cucore.VMM(devs[0], 1000, peers=devs[1:])
    assert v.size >= 1000 and v.device is devs[0]
    assert v.peers == tuple(devs[1:])
    assert all(v.access(p) == "rw" for p in devs)
    v.copy_from(b"v" * 100)
    assert v.to_bytes(size=100) == b"v" * 100
    assert rt(v) is v
    with pytest.raises(cucore.Error):
        cucore.VMM(devs[0], 10, peers=[devs[0]])  # the owner is no peer


def test_cuda_array_interface_and_dlpack():
    pool = cucore.Pool(2 % N)
    buf = pool.allocate(96)
    cai = buf.__cuda_array_interface__
    assert cai == {"shape": (96,), "typestr": "|u1", "data": (buf.ptr, False),
                   "version": 3, "strides": None, "stream": 1}
    assert buf.__dlpack_device__() == (2, 2 % N)  # kDLCUDA, its ordinal
    cap = buf.__dlpack__(stream=None)
    assert type(cap).__name__ == "PyCapsule" and "dltensor" in repr(cap)
    with pytest.raises(BufferError):
        buf.close()  # a view is live
    del cap
    buf.close()


def test_with_block_keeps_memory_a_dlpack_consumer_uses():
    """Leaving a with block refuses, as close() does, while a DLPack
    capsule or tensor still uses the memory: closing it would leave the
    consumer reading the next allocation at the same address."""
    pool = cucore.Pool(0)
    with pytest.raises(BufferError, match="leaving the with block: 1 DLPack"):
        with pool.allocate(64) as buf:
            cap = buf.__dlpack__()
    assert not buf.closed
    del cap
    with buf:
        pass
    assert buf.closed


class ClosesOnIndex:
    """An offset or size whose __index__ closes the memory's object, then
    allocates another of the same size (which may take the same address)."""

    def __init__(self, obj, make, value=0):
        self.obj, self.make, self.value, self.made = obj, make, value, None

    def __index__(self):
        self.obj.close()
        self.made = self.make()
        self.made.copy_from(b"k" * 256)
        return self.value


@pytest.mark.parametrize("kind", ["buffer", "vmm"])
def test_copy_arguments_that_close_the_memory(kind):
    """copy_from and to_bytes parse their arguments before they look at
    the memory: an argument's __index__ that closes the object makes the
    call raise, and never reaches the memory allocated after it."""
    pool = cucore.Pool(0)

    def make():
        return pool.allocate(256) if kind == "buffer" else cucore.VMM(0, 256)

    for call in ("copy_from", "to_bytes"):
        obj = make()
        arg = ClosesOnIndex(obj, make)
        with pytest.raises(ValueError, match="is closed"):
            if call == "copy_from":
                obj.copy_from(b"X" * 256, offset=arg)
            else:
                obj.to_bytes(size=arg)
        assert arg.made.to_bytes(size=256) == b"k" * 256
        arg.made.close()


@pytest.mark.parametrize("kind", ["buffer", "vmm"])
def test_close_refused_while_a_copy_runs(kind):
    """close() on one thread while copy_from runs on another (the GIL let
    go) raises BufferError instead of unmapping the memory under the copy;
    once the copy is over, close() closes. A close that lands between two
    copies closes the object, and the copying thread then sees it closed:
    the test tries again with a new object until a close met a copy."""
    import threading

    size = 64 << 20
    data = b"c" * size
    pool = cucore.Pool(0)
    refused = 0
    for _ in range(5):
        obj = pool.allocate(size) if kind == "buffer" else cucore.VMM(0, size)
        started, stop, seen = threading.Event(), threading.Event(), []

        def copy():
            started.set()
            try:
                while not stop.is_set():
                    obj.copy_from(data)
            except ValueError as e:  # a close between two copies
                seen.append(e)

        t = threading.Thread(target=copy)
        t.start()
        started.wait()
        try:
            obj.close()
        except BufferError as e:
            assert "a copy on another thread is using" in str(e)
            refused += 1
        stop.set()
        t.join()
        assert obj.closed == (refused == 0) or seen == []
        obj.close()
        assert obj.closed
        if refused:
            break
    assert refused == 1


def test_close_many_closes_all_or_none():
    """Buffer.close_many checks every item before it closes any; closed
    buffers and repeats are skipped; each open one's memory is freed (the
    simulator's frees counted) before it returns."""
    dev = cucore.Device(1 % N)
    pool = cucore.Pool(dev)
    bufs = [pool.allocate(32) for _ in range(4)]
    bufs[1].close()
    with pytest.raises(TypeError, match="item 4 is a int, not a cucore.Buffer"):
        cucore.Buffer.close_many(bufs + [7])
    cap = bufs[2].__dlpack__(stream=None)
    with pytest.raises(BufferError, match=r"item 2: 1 DLPack capsule\(s\) or tensor\(s\) "
                       r"still use the buffer's memory \(drop them first\); nothing was closed"):
        cucore.Buffer.close_many(bufs)
    assert [b.closed for b in bufs] == [False, True, False, False]
    del cap
    with pytest.raises(TypeError):
        cucore.Buffer.close_many(5)
    cucore.Buffer.close_many((b for b in bufs + bufs), stream=cucore.Stream(dev))
    assert [b.closed for b in bufs] == [True] * 4
    cucore.Buffer.close_many([])
    # the frees counted in a fresh process: no other test's late frees land there
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as ex:
        frees = ex.submit(workers.close_many_frees, 1 % N).result(timeout=60)
    assert frees in (None, 3)  # None: not the simulator


def test_close_many_drops_every_reference_when_a_free_fails():
    """The second of three frees fails (the simulator's fault injection):
    close_many raises the driver's error and every buffer is closed all
    the same, as C's cuc_buffer_unref_many_async drops every reference."""
    lib = workers.sim_lib()
    if lib is None:
        pytest.skip("injects a fault into the simulator")
    pool = cucore.Pool(0)
    bufs = [pool.allocate(32) for _ in range(3)]
    assert lib.cucore_sim_fail(b"cuMemFreeAsync:2", None, 0) == 0
    try:
        with pytest.raises(cucore.Error, match="cuMemFreeAsync") as e:
            cucore.Buffer.close_many(bufs)
    finally:
        assert lib.cucore_sim_fail(b"", None, 0) == 0
    assert e.value.code == "CUC_E_DRIVER"
    assert [b.closed for b in bufs] == [True] * 3


def test_kernel_again_through_a_channel_goes_by_reference():
    """The second send of a kernel on a channel whose receiver loaded its
    image carries the hash and name, not the image (a kernel ref record):
    the receiver resolves it to the same kernel."""
    a, b = cucore.Channel.pair()
    k = cucore.Kernel(PTX, "twice")
    got = []
    for _ in range(3):
        a.send(k, cucore.LaunchConfig(1, 32))
        got.append(b.recv(timeout=5)[0])
        a.pump(timeout=0.2)  # the receiver's "kernel held" reaches the sender
    assert all(g.hash == k.hash and g.name == "twice" for g in got)
    assert got[1] is got[0] and got[2] is got[0]
    a.close()
    b.close()


def test_channel_pair_in_process():
    a, b = cucore.Channel.pair()
    d = cucore.Device(3 % N)
    pool = cucore.Pool(d)
    buf = pool.allocate(32)
    buf.copy_from(b"c" * 32)
    a.send(d, cucore.Stream.per_thread(d), cucore.LaunchConfig(1, 32), pool, buf)
    got = b.recv(timeout=5)
    assert got[0] is d and got[1] is cucore.Stream.per_thread(d)
    assert got[2] == cucore.LaunchConfig(1, 32)
    assert got[3] is pool and got[4] is buf
    with pytest.raises(cucore.TimeoutError) as e:
        b.recv(timeout=0)
    assert e.value.errno == errno.ETIMEDOUT and e.value.code == "CUC_E_TIMEOUT"
    again = rt(e.value)
    assert type(again) is cucore.TimeoutError and again.errno == errno.ETIMEDOUT
    assert again.code == "CUC_E_TIMEOUT" and again.message == e.value.message
    with pytest.raises(cucore.NotSerializableError):
        pickle.dumps(a)
    # The buffer's lease is still held by b's side: closing a keeps the
    # link (channel.h), so b sees no close yet.
    a.close()
    with pytest.raises(cucore.TimeoutError):
        b.recv(timeout=0)
    b.close()
    # With no lease outstanding a close reaches the peer at once.
    a, b = cucore.Channel.pair()
    a.send(d)
    assert b.recv(timeout=5) == (d,)
    a.close()
    with pytest.raises(cucore.PeerClosedError):
        b.recv(timeout=5)
    b.close()
    # Nothing of this test may close fds during a later test's count: the
    # traceback e holds this frame (pool, buffer) until a collection.
    del e, got
    buf.close()
    pool.lease_wait(0, timeout=10)


def test_listen_connect(tmp_path):
    path = str(tmp_path / "sock")
    with cucore.listen(path) as lst:
        c = cucore.Channel.connect(path, timeout=5)
        s = lst.accept(timeout=5)
        c.send(cucore.Device(1 % N))
        assert s.recv(timeout=5) == (cucore.Device(1 % N),)
        assert s.peer_pid > 0
        c.close()
        s.close()


def test_share_point():
    """No socket until the first pickle of a pool, buffer or VMM resource;
    then a socket of mode 0600 in a directory only this uid may use."""
    import os
    import stat
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", "import cucore, pickle; "
                        "print(cucore.share_point()); "
                        "pickle.dumps(cucore.Pool(0)); print(cucore.share_point())"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    before, after = p.stdout.split()
    assert before == "None" and after.endswith(".sock") and not os.path.exists(after)
    pickle.dumps(cucore.Pool(0))
    sp = cucore.share_point()
    st = os.stat(sp)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    st = os.stat(os.path.dirname(sp))
    assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


def test_timeout_and_count_arguments():
    """A NaN timeout is refused (it would reach the library as an
    undefined int); a timeout beyond what an int of milliseconds holds
    waits that long, None without a limit; a negative count is refused."""
    import math

    pool = cucore.Pool(0)
    a, b = cucore.Channel.pair()
    for call in (lambda t: pool.lease_wait(timeout=t), lambda t: b.recv(timeout=t)):
        with pytest.raises(ValueError, match="timeout is NaN"):
            call(math.nan)
        with pytest.raises(TypeError):
            call("1")
    pool.lease_wait(timeout=1e300)  # nothing leased: returns at once
    pool.lease_wait(0, None)
    with pytest.raises(cucore.Error, match="max_left -1 is negative"):
        pool.lease_wait(-1)
    a.send(cucore.Device(0))
    assert b.recv(timeout=1e300) == (cucore.Device(0),)
    a.close()
    b.close()


def waiting_call(make, start, wake, refuse, attempts=5):
    """Makes an object (MAKE), runs START(obj) on a thread until it is
    inside the library's call (the GIL let go), then REFUSE(obj), which
    must raise CUC_E_BUSY, then WAKE(obj), which makes START return: the
    object and START's result. A try whose REFUSE came before the call
    began (it closed the object) is repeated with a new object."""
    import threading
    import time

    for _ in range(attempts):
        obj, started, out = make(), threading.Event(), []

        def run():
            started.set()
            try:
                out.append(start(obj))
            except (ValueError, cucore.Error) as e:  # closed before it began
                out.append(e)

        t = threading.Thread(target=run)
        t.start()
        started.wait()
        time.sleep(0.05)  # into the call
        try:
            refuse(obj)
        except cucore.Error as e:
            assert e.code == "CUC_E_BUSY" and "another thread is" in str(e)
            wake(obj)
            t.join()
            return obj, out[0]
        t.join()
    raise AssertionError("the call never started within %d tries" % attempts)


def test_channel_close_refused_while_another_thread_waits_in_it(tmp_path):
    """close() and leaving the with block refuse (CUC_E_BUSY) while another
    thread is in recv on the channel (the library's destroy must not race
    it: it would free the channel under that call); a second accept on a
    listener, and its close, refuse while one thread accepts."""
    for refuse in (lambda p: p[0].close(), lambda p: p[0].__exit__(None, None, None)):
        (a, b), got = waiting_call(cucore.Channel.pair, lambda p: p[0].recv(timeout=30),
                                   lambda p: p[1].send(cucore.Device(0)), refuse)
        assert got == (cucore.Device(0),)
        a.close()
        b.close()
    path = str(tmp_path / "l.sock")
    peer = []

    def make():
        if os.path.exists(path):
            os.unlink(path)
        return cucore.listen(path)

    def refuse(listener):  # a second accept refuses too; then the close (its error)
        try:
            listener.accept(timeout=0)
        except cucore.Error as e:
            assert e.code in ("CUC_E_BUSY", "CUC_E_TIMEOUT")  # TIMEOUT: not yet accepting
        listener.close()

    listener, accepted = waiting_call(
        make, lambda listener: listener.accept(timeout=30),
        lambda listener: peer.append(cucore.Channel.connect(path, timeout=5)), refuse)
    accepted.close()
    peer[0].close()
    listener.close()


def test_fd_numbers_are_ints_in_range():
    """A bool or an int out of 0..INT_MAX is not an fd: send and from_fd
    refuse it rather than truncate it to another fd (from_fd would take
    that one over, and close it on failure)."""
    import os
    import tempfile

    a, b = cucore.Channel.pair()
    with tempfile.TemporaryFile() as f:
        n = f.fileno()
        for bad, exc in ((True, TypeError), (2**32 + n, ValueError), (-1, ValueError)):
            with pytest.raises(exc):
                a.send(bad)
            with pytest.raises(exc):
                cucore.Channel.from_fd(bad)
        os.fstat(n)  # still ours
        a.send(n)
        (got,) = b.recv(timeout=5)
        assert os.path.sameopenfile(got, n)
        os.close(got)
    a.close()
    b.close()


def test_launch_config_shared_mem_is_not_wrapped():
    for bad in (2**32 + 1024, -(2**32) + 16, -1, 1.5):
        with pytest.raises(ValueError, match="shared_mem"):
            cucore.LaunchConfig(1, 1, shared_mem=bad)
    assert cucore.LaunchConfig(1, 1, shared_mem=1024).shared_mem == 1024


def test_vmm_peers_read_once():
    """The peers are copied before each is looked at: a device-like
    object whose .uuid shrinks the list changes nothing."""
    devs = cucore.devices()
    if len(devs) < 3:
        pytest.skip("needs 3 devices")
    peers = []

    class Shrinks:
        @property
        def uuid(self):
            peers.clear()
            return devs[1].uuid

    peers.extend([Shrinks(), devs[2]])
    v = cucore.VMM(devs[0], 1000, peers=peers)
    assert v.peers == (devs[1], devs[2])
    v.close()


def test_cai_and_dlpack_name_the_allocation_stream():
    """A buffer allocated on a stream is ready on that stream: the CUDA
    Array Interface names it (1 legacy, 2 per-thread, else its handle),
    a view of it too; one allocated without a stream (ready on return)
    names the legacy stream. __dlpack__(stream=X) waits for the producer's
    stream when X is another stream (the simulator counts the
    synchronize), not when X is that stream or -1; the standard's
    refusals (stream 0, a non-int, another dl_device) raise."""
    dev = cucore.Device(0)
    pool = cucore.Pool(dev)
    created = cucore.Stream(dev, non_blocking=True)
    cases = [(None, 1), (cucore.Stream.legacy(dev), 1), (cucore.Stream.per_thread(dev), 2),
             (created, created.handle)]
    for stream, want in cases:
        buf = pool.allocate(64, stream=stream)
        assert buf.__cuda_array_interface__["stream"] == want
        assert buf.view(8, 8).__cuda_array_interface__["stream"] == want
        buf.close()
    buf = pool.allocate(64, stream=created)
    for consumer, waits in ((created.handle, 0), (-1, 0), (1, 1), (None, 1), (2, 1)):
        before = workers.sim_count("cuStreamSynchronize")
        cap = buf.__dlpack__(stream=consumer)
        if before is not None:
            assert workers.sim_count("cuStreamSynchronize") - before == waits, consumer
        del cap
    with pytest.raises(ValueError, match="0 is ambiguous"):
        buf.__dlpack__(stream=0)
    with pytest.raises(TypeError, match="a CUDA stream is an int"):
        buf.__dlpack__(stream="1")
    assert buf.__dlpack__(dl_device=buf.__dlpack_device__()) is not None
    with pytest.raises(BufferError, match="shared, not copied"):
        buf.__dlpack__(dl_device=(1, 0))  # kDLCPU
    buf.close()


def test_from_fd_takes_the_fd_only_on_success():
    """Channel.from_fd(fd) that fails leaves the caller's fd open (it closed
    it: from_fd(0) closed stdin); one that succeeds takes it over."""
    import socket
    import tempfile

    from conftest import fd_count

    with tempfile.TemporaryFile() as f:  # not a socket: refused
        with pytest.raises(cucore.Error, match="not a socket"):
            cucore.Channel.from_fd(f.fileno())
        os.fstat(f.fileno())  # still open
        f.write(b"still ours")
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fa, fb = a.detach(), b.detach()
    before = fd_count()
    ca = cucore.Channel.from_fd(fa)
    cb = cucore.Channel.from_fd(fb)
    assert fd_count() == before  # taken over: the fds moved, none was added
    ca.send(cucore.devices()[0])
    assert cb.recv(timeout=5) == (cucore.devices()[0],)
    ca.close()
    cb.close()
    assert fd_count() == before - 2


def _cubin(name):
    """An EM_CUDA ELF64 with one kernel, name (bytes), of no parameters."""
    import struct

    shstr = b"\0.shstrtab\0.strtab\0.symtab\0.text\0"
    strtab = b"\0" + name + b"\0"
    sym = bytes(24) + struct.pack("<IBBHQQ", 1, 0x12, 0x10, 4, 0, 16)  # GLOBAL FUNC, entry
    body = bytearray(shstr + strtab)
    body += bytes(-(64 + len(body)) % 8)
    symoff = 64 + len(body)
    body += sym
    textoff = 64 + len(body)
    body += bytes(16)
    body += bytes(-(64 + len(body)) % 8)
    shoff = 64 + len(body)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41]) + bytes(8)
    hdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 5, 1)

    def sh(name_off, typ, off, size, link=0, info=0, ent=0):
        return struct.pack("<IIQQQQIIQQ", name_off, typ, 0, 0, off, size, link, info, 8, ent)

    shdrs = (bytes(64) + sh(1, 3, 64, len(shstr)) + sh(11, 3, 64 + len(shstr), len(strtab))
             + sh(19, 2, symoff, len(sym), link=2, info=1, ent=24) + sh(27, 1, textoff, 16))
    return hdr + bytes(body) + shdrs


def test_kernel_names_not_utf8_are_cucore_errors(simulated):
    """A kernel name a peer sends need not be UTF-8 (a cubin's symbol is
    any bytes): Kernel.name, and an error quoting the name, are
    cucore.Error, not UnicodeDecodeError."""
    import hashlib

    if not simulated:
        pytest.skip("a hand-made cubin loads on the simulator only")
    k = cucore.Kernel(_cubin(b"cucname"), "cucname", kind="cubin")
    assert k.name == "cucname"
    load, (data,) = k.__reduce__()
    bad = _cubin(b"cucnam\xff")
    data = (data.replace(b"cucname", b"cucnam\xff")
            .replace(hashlib.sha256(k.image).digest(), hashlib.sha256(bad).digest()))
    kb = load(data)
    assert kb.image == bad
    with pytest.raises(cucore.Error) as e:
        kb.name
    assert e.value.code == "CUC_E_BADMSG" and "cucnam\\xff" in str(e.value)
    # a name the image does not have: the error quotes it
    kp = cucore.Kernel(PTX, "twice")
    load, (data,) = kp.__reduce__()
    at = data.index(b"twice\0")
    with pytest.raises(cucore.Error) as e:
        load(data[:at] + b"tw\xffce" + data[at + 5:])
    assert "tw\\xffce" in str(e.value)
