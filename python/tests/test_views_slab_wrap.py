"""Buffer views, slab sub-allocation and wrapped cuMemAlloc memory (legacy
CUDA IPC) through pickle, to children that see the GPUs in another order:
bytes checked both ways, leases, the same part twice is one object."""
import ctypes
import os
import pickle
import tempfile
import time

import pytest

import cucore
from test_multiproc import Child, N, Raw


def reversed_visible():
    return ",".join(map(str, reversed(range(N))))


def wait_zero(count, timeout=10):
    deadline = time.time() + timeout
    while count() and time.time() < deadline:
        time.sleep(0.01)
    return count()


def test_views_both_ways(uuids):
    child = Child("spawn", reversed_visible())
    try:
        pool = cucore.Pool(1 % N)
        parent = pool.allocate(4096)
        parent.copy_from(bytes(range(256)) * 16)
        a = parent.view(256, 512)
        b = a.view(100, 50)  # a view of a view: offsets add up
        c = parent.view(4000, 96)
        assert (a.is_view, a.offset, b.offset, c.offset) == (True, 256, 356, 4000)
        assert b.to_bytes() == (bytes(range(256)) * 16)[356:406]
        got = child.call("describe", [a, b, c])
        want = bytes(range(256)) * 16
        assert got == [("buffer", uuids[1 % N], 512, True, want[256:768]),
                       ("buffer", uuids[1 % N], 50, True, want[356:406]),
                       ("buffer", uuids[1 % N], 96, True, want[4000:4096])]
        child.call("write", c, b"\xee" * 96)  # into the parent's memory through a view
        assert parent.to_bytes()[4000:] == b"\xee" * 96
        first, second = pickle.dumps(b), pickle.dumps(b)
        assert child.call("same", Raw(first), Raw(second)) == [True, True]
        child.call("drop")
        for v in (parent, a, b, c):
            v.close()  # the views held the allocation; the leases hold it now
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0
    finally:
        child.close()


def test_slab_buffers_both_ways(uuids):
    child = Child("spawn", reversed_visible())
    try:
        pool = cucore.Pool(0)
        slab = cucore.Slab(pool, 1 << 16)
        bufs = [slab.allocate(100 + i) for i in range(40)]
        for i, x in enumerate(bufs):
            x.copy_from(bytes([i]) * x.size)
        assert all(x.is_view for x in bufs) and slab.stats()["slabs"] == 1
        got = child.call("describe", bufs)
        assert got == [("buffer", uuids[0], 100 + i, True, bytes([i]) * (100 + i))
                       for i in range(40)]
        child.call("write", bufs[7], b"\x77" * 107)
        assert bufs[7].to_bytes() == b"\x77" * 107
        child.call("drop")
        for x in bufs:
            x.close()
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0
        # the ranges came back once their leases ended: the slab went back to the pool
        assert wait_zero(lambda: slab.stats()["bytes_in_use"]) == 0
    finally:
        child.close()


def driver_alloc(size):
    """cuMemAlloc from the driver cucore loaded (the simulator, or libcuda)."""
    lib = ctypes.CDLL(cucore.driver()["path"])
    alloc = getattr(lib, "cuMemAlloc_v2")
    alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    ptr = ctypes.c_uint64()
    assert alloc(ctypes.byref(ptr), size) == 0
    free = getattr(lib, "cuMemFree_v2")
    free.argtypes = [ctypes.c_uint64]
    return ptr.value, lambda: free(ptr.value)


def test_wrapped_cumemalloc_both_ways(uuids):
    dev = cucore.Device(2 % N)
    # An earlier test's garbage collected in between frees on its own
    # device and puts this context back (test_current_context.py).
    dev.set_current()
    ptr, free = driver_alloc(1 << 16)
    child = Child("spawn", reversed_visible())
    try:
        head = cucore.wrap(dev, ptr, 4096)
        tail = cucore.wrap(dev, ptr + 8192, 1000)
        assert head.is_wrapped and tail.is_wrapped and tail.ptr == ptr + 8192
        head.copy_from(b"h" * 4096)
        tail.copy_from(b"t" * 1000)
        got = child.call("describe", [head, tail])
        assert got == [("buffer", uuids[2 % N], 4096, True, b"h" * 4096),
                       ("buffer", uuids[2 % N], 1000, True, b"t" * 1000)]
        child.call("write", tail, b"T" * 1000)
        assert tail.to_bytes() == b"T" * 1000
        child.call("drop")
        assert wait_zero(lambda: head.lease_count() + tail.lease_count()) == 0
        head.close()
        tail.close()
    finally:
        child.close()
        free()


def test_views_slab_and_wrapped_through_a_channel(uuids):
    """The same kinds of buffer through a cucore Channel (not pickle): the
    receiver, seeing the GPUs in another order, resolves a view, a slab's
    buffer and wrapped cuMemAlloc memory, reads their bytes, and each
    lease ends when it drops them."""
    dev = cucore.Device(1 % N)
    dev.set_current()
    ptr, free = driver_alloc(1 << 16)
    child = Child("spawn", reversed_visible())
    path = os.path.join(tempfile.mkdtemp(prefix="cucore-test-"), "v.sock")
    try:
        pool = cucore.Pool(1 % N)
        whole = pool.allocate(4096)
        whole.copy_from(bytes(range(256)) * 16)
        view = whole.view(512, 256)
        slab = cucore.Slab(pool, 1 << 16)
        carved = slab.allocate(300)
        carved.copy_from(b"s" * 300)
        wrapped = cucore.wrap(dev, ptr + 4096, 700)
        wrapped.copy_from(b"w" * 700)
        assert child.call("listen", path) is True
        ch = cucore.Channel.connect(path)
        ch.send(pool, view, carved, wrapped)
        got = child.call("accept_recv")
        assert got == [("buffer", uuids[1 % N], 256, True, bytes(range(256))),
                       ("buffer", uuids[1 % N], 300, True, b"s" * 300),
                       ("buffer", uuids[1 % N], 700, True, b"w" * 700)]
        assert view.lease_count() == carved.lease_count() == wrapped.lease_count() == 1
        child.call("drop")
        deadline = time.time() + 10
        while (view.lease_count() + carved.lease_count() + wrapped.lease_count() and
               time.time() < deadline):
            ch.pump(timeout=0.05)
        assert view.lease_count() + carved.lease_count() + wrapped.lease_count() == 0
        ch.close()
        for b in (view, whole, carved, wrapped):
            b.close()
    finally:
        child.close()
        free()
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(os.path.dirname(path))


def test_wrap_refuses_pool_memory():
    pool = cucore.Pool(0)
    b = pool.allocate(64)
    with pytest.raises(cucore.Error) as e:
        cucore.wrap(cucore.Device(0), b.ptr, 64)
    assert e.value.code == "CUC_E_INVALID"
