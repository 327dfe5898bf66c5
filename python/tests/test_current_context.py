"""cucore leaves the thread's current context alone when an object goes:
a buffer, pool, event or stream collected (by `del`, or by the cycle
collector wherever it happens to run) does not move the thread to the
object's device, which would move PyTorch's or CuPy's current device with
it. Operations (creating, allocating, synchronizing) still make their
device current, as Device.set_current() does."""
import gc
import threading

import pytest

import cucore


def objects_of(dev):
    """One object of each kind that frees driver state, made by operations
    (each leaves dev current)."""
    pool = cucore.Pool(dev, ipc=True)
    buf = pool.allocate(4096)
    view_parent = pool.allocate(8192)
    objs = [buf, view_parent, cucore.Event(dev, ipc=True), cucore.Stream(dev), pool]
    assert cucore.current_device() is dev
    return objs


def test_operations_make_their_device_current():
    d = cucore.devices()[-1]
    s = cucore.Stream(d)
    assert cucore.current_device() is d
    cucore.devices()[0].set_current()
    s.synchronize()
    assert cucore.current_device() is d


def test_collected_in_a_thread_with_no_context():
    """A new thread has no context current; dropping objects there (one by
    one, then a cycle that the collector breaks in that thread) leaves it
    with none. One GPU is enough for this."""
    d = cucore.devices()[0]
    seen = {}
    objs = objects_of(d)

    def drop():
        seen["start"] = cucore.current_device()
        after = []
        while objs:
            objs.pop()
            after.append(cucore.current_device())
        seen["after"] = after
        seen["collected"] = gc.collect()
        seen["end"] = cucore.current_device()

    gc.disable()  # the cycle waits for the thread's collection
    try:
        cycle = objects_of(d)
        cycle.append(cycle)
        del cycle
        t = threading.Thread(target=drop)
        t.start()
        t.join()
    finally:
        gc.enable()
    assert seen["start"] is None
    assert seen["after"] == [None] * 5
    assert seen["collected"] > 0
    assert seen["end"] is None


def test_collected_with_another_device_current():
    devs = cucore.devices()
    if len(devs) < 2:
        pytest.skip("needs two GPUs")
    objs = objects_of(devs[0])
    devs[1].set_current()
    while objs:
        objs.pop()
        assert cucore.current_device() is devs[1]
    objs = objects_of(devs[0])
    objs.append(objs)
    devs[1].set_current()
    del objs
    assert gc.collect() > 0
    assert cucore.current_device() is devs[1]


def test_with_device_puts_back_what_it_found():
    """`with device:` makes it current and puts back what the thread had,
    nested, after an exception too, and none in a thread that had none."""
    devs = cucore.devices()
    outer, inner = devs[0], devs[-1]
    outer.set_current()
    with inner as d:
        assert d is inner and cucore.current_device() is inner
        with outer:
            assert cucore.current_device() is outer
        assert cucore.current_device() is inner
        try:
            with outer:
                raise KeyError("inside")
        except KeyError:
            pass
        assert cucore.current_device() is inner
    assert cucore.current_device() is outer
    seen = []

    def fresh():
        seen.append(cucore.current_device())
        with outer:
            seen.append(cucore.current_device())
        seen.append(cucore.current_device())

    t = threading.Thread(target=fresh)
    t.start()
    t.join()
    assert seen == [None, outer, None]
    with pytest.raises(RuntimeError, match="without __enter__"):
        outer.__exit__(None, None, None)
