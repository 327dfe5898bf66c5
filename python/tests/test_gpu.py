"""On a real GPU only: a received buffer is the same memory to CuPy,
PyTorch and numba (same pointer, same bytes, no copy), and a kernel
launched through cucore writes into memory another process sent."""
import gc
import multiprocessing

import pytest

import cucore
from test_objects import PTX

pytestmark = pytest.mark.skipif(cucore.driver()["simulated"],
                                reason="GPU-only: the simulated driver runs no kernels")


def consume(kind, buf):
    """In the child: view the received buffer with a framework."""
    if kind == "cupy":
        import cupy
        a = cupy.asarray(buf)
        return (a.data.ptr, a.get().tobytes(), buf.ptr)
    if kind == "torch":
        import torch
        t = torch.from_dlpack(buf)
        return (t.data_ptr(), t.cpu().numpy().tobytes(), buf.ptr)
    if kind == "numba":
        from numba import cuda
        a = cuda.as_cuda_array(buf)
        return (a.__cuda_array_interface__["data"][0], a.copy_to_host().tobytes(), buf.ptr)
    if kind == "kernel":
        k = cucore.Kernel(PTX, "twice")
        n = buf.size // 4
        cucore.launch(cucore.Stream.legacy(buf.device), cucore.LaunchConfig((n + 127) // 128, 128),
                      k, buf, n)
        cucore.Stream.legacy(buf.device).synchronize()
        return (buf.ptr, buf.to_bytes(), buf.ptr)
    raise ValueError(kind)


def gpu_child(conn):
    while True:
        item = conn.recv()
        if item is None:
            return
        try:
            reply = consume(*item)
        except Exception as e:  # a missing framework is reported, not hidden
            reply = ("error", type(e).__name__, str(e))
        # The buffer goes before the reply: the parent then waits for its
        # lease, and frameworks may hold the buffer in reference cycles.
        del item
        gc.collect()
        conn.send(reply)


@pytest.fixture(scope="module")
def child():
    ctx = multiprocessing.get_context("spawn")
    conn, theirs = ctx.Pipe()
    p = ctx.Process(target=gpu_child, args=(theirs,))
    p.start()
    yield conn
    conn.send(None)
    p.join(60)


def roundtrip(child, kind, buf):
    child.send((kind, buf))
    got = child.recv()
    if got[0] == "error":
        if got[1] in ("ModuleNotFoundError", "ImportError"):
            pytest.skip("%s not importable in the child: %s" % (kind, got[2]))
        raise AssertionError(got)
    return got


@pytest.mark.parametrize("kind", ["cupy", "torch", "numba"])
def test_zero_copy_in_child(child, kind):
    pool = cucore.Pool(0)
    buf = pool.allocate(4096)
    data = bytes(range(256)) * 16
    buf.copy_from(data)
    ptr, seen, mapped = roundtrip(child, kind, buf)
    assert seen == data
    # the framework's array is the child's mapping of our memory: no copy
    assert ptr == mapped != 0
    buf.close()
    pool.lease_wait(0, timeout=30)


@pytest.mark.parametrize("kind", ["cupy", "torch", "numba"])
def test_zero_copy_same_pointer_here(kind):
    buf = cucore.Pool(0).allocate(1024)
    buf.copy_from(b"\x42" * 1024)
    if not _has(kind):
        pytest.skip(kind + " not importable")
    ptr, seen, _ = consume(kind, buf)
    assert ptr == buf.ptr and seen == b"\x42" * 1024


def test_kernel_on_received_buffer(child):
    buf = cucore.Pool(0).allocate(4 * 1000)
    _, seen, _ = roundtrip(child, "kernel", buf)
    want = b"".join((2 * i).to_bytes(4, "little") for i in range(1000))
    assert seen == want and buf.to_bytes() == want  # the child wrote our memory


def _has(kind):
    import importlib.util
    return importlib.util.find_spec(kind) is not None




def torch_then_cucore():
    """In a fresh process: PyTorch makes GPU 0's primary context current
    before cucore has used the GPU; cucore names it, and dropping cucore
    objects in a thread with no context leaves that thread with none."""
    import threading
    try:
        import torch
    except ImportError as e:
        return ("error", "ImportError", str(e))
    torch.zeros(1, device="cuda")
    import cucore as c
    d = c.current_device()
    seen = {}
    pool = c.Pool(d if d is not None else 0)
    bufs = [pool.allocate(4096) for _ in range(3)]

    def drop():
        bufs.clear()
        seen["after"] = c.current_device()

    t = threading.Thread(target=drop)
    t.start()
    t.join()
    return (None if d is None else d.ordinal, torch.cuda.current_device(), seen["after"],
            c.current_device() is d)


def test_torch_context_is_a_cucore_device():
    import concurrent.futures
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as ex:
        got = ex.submit(torch_then_cucore).result(timeout=120)
    if got[0] == "error":
        pytest.skip("torch not importable in the child: %s" % got[2])
    ordinal, torch_ordinal, after_in_thread, still = got
    assert ordinal == torch_ordinal
    assert after_in_thread is None
    assert still
