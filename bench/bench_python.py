#!/usr/bin/env python3
"""cucore's Python objects beside cuda.core's, same process, same n
(issue 14's targets). Prints one machine-readable line per figure:

    BENCH name=NAME impl=cucore|cuda.core n=N value=X unit=UNIT

  device_pickle   pickle.loads(pickle.dumps(device)), per round trip
  pipe_buffers    N pool buffers through a multiprocessing Pipe to a spawned
                  child that imports them, drops them and answers; per
                  buffer, N = 1 .. 4096; impl=cucore pickles a list (one
                  share-point round trip per buffer), impl=cucore-batch a
                  cucore.BufferBatch (one round trip for the N)
  share_first     in a fresh child, unpickling the first buffer (connect to
                  the share point + fds + import) and a second one

Run with PYTHONPATH=build/python (on the simulator: CUCORE_DRIVER=sim; the
figures that matter are the H200's). cuda.core's side is skipped, saying
why, where cuda.core is missing or its IPC API differs.
"""
import multiprocessing as mp
import pickle
import sys
import time

import cucore

SIZES = [1, 4, 16, 64, 256, 1024, 4096]


def line(name, impl, n, value, unit):
    print("BENCH name=%s impl=%s n=%d value=%.3f unit=%s" % (name, impl, n, value, unit),
          flush=True)


def skip(name, impl, why):
    print("BENCH name=%s impl=%s skipped=%s" % (name, impl, why.replace(" ", "_")[:120]),
          flush=True)


def per_op_ns(fn, reps):
    best = None
    for _ in range(5):
        t = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        dt = (time.perf_counter_ns() - t) / reps
        best = dt if best is None else min(best, dt)
    return best


def bench_device_pickle():
    d = cucore.Device(0)
    line("device_pickle", "cucore", 1, per_op_ns(lambda: pickle.loads(pickle.dumps(d)), 20000),
         "ns")
    try:
        from cuda.core import Device
        cd = Device(0)
        cd.set_current()
        line("device_pickle", "cuda.core", 1,
             per_op_ns(lambda: pickle.loads(pickle.dumps(cd)), 20000), "ns")
    except Exception as e:  # noqa: BLE001 (reported, not hidden)
        skip("device_pickle", "cuda.core", "%s: %s" % (type(e).__name__, e))


def child_loop(conn):
    import cucore  # noqa: F401 (the unpickler needs it)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        for b in msg:
            if hasattr(b, "close"):
                b.close()
        conn.send(len(msg))


def child_first(conn):
    import cucore  # noqa: F401
    a, b = conn.recv_bytes(), conn.recv_bytes()
    t0 = time.perf_counter_ns()
    x = pickle.loads(a)
    t1 = time.perf_counter_ns()
    y = pickle.loads(b)
    t2 = time.perf_counter_ns()
    conn.send((t1 - t0, t2 - t1))
    x.close()
    y.close()


def spawn(target):
    ctx = mp.get_context("spawn")
    conn, theirs = ctx.Pipe()
    p = ctx.Process(target=target, args=(theirs,))
    p.start()
    theirs.close()
    return conn, p


def pipe_rounds(conn, make, n, rounds):
    best = None
    for _ in range(rounds):
        bufs = make(n)
        t = time.perf_counter_ns()
        conn.send(bufs)
        assert conn.recv() == n
        dt = (time.perf_counter_ns() - t) / n
        best = dt if best is None else min(best, dt)
    return best


def bench_pipe_cucore():
    pool = cucore.Pool(0)
    conn, p = spawn(child_loop)
    pipe_rounds(conn, lambda n: [pool.allocate(256) for _ in range(n)], 1, 3)  # warm
    for n in SIZES:
        line("pipe_buffers", "cucore", n,
             pipe_rounds(conn, lambda k: [pool.allocate(256) for _ in range(k)], n,
                         5 if n < 1024 else 2) / 1000, "us_per_buffer")
    for n in SIZES:
        line("pipe_buffers", "cucore-batch", n,
             pipe_rounds(conn, lambda k: cucore.BufferBatch(pool.allocate(256)
                                                            for _ in range(k)), n,
                         5 if n < 1024 else 2) / 1000, "us_per_buffer")
    conn.send(None)
    p.join()


def bench_pipe_cuda_core():
    try:
        from cuda.core import Device, DeviceMemoryResource, DeviceMemoryResourceOptions
        dev = Device(0)
        dev.set_current()
        mr = DeviceMemoryResource(dev, options=DeviceMemoryResourceOptions(ipc_enabled=True))
        conn, p = spawn(child_loop)
        conn.send([mr])  # the receiver needs the resource before its buffers
        conn.recv()
    except Exception as e:  # noqa: BLE001
        skip("pipe_buffers", "cuda.core", "%s: %s" % (type(e).__name__, e))
        return
    for n in SIZES:
        line("pipe_buffers", "cuda.core", n,
             pipe_rounds(conn, lambda k: [mr.allocate(256) for _ in range(k)], n,
                         5 if n < 1024 else 2) / 1000, "us_per_buffer")
    conn.send(None)
    p.join()


def bench_share_first():
    pool = cucore.Pool(0)
    a, b = pool.allocate(256), pool.allocate(256)
    cucore.share_point()
    conn, p = spawn(child_first)
    conn.send_bytes(pickle.dumps(a))
    conn.send_bytes(pickle.dumps(b))
    first, second = conn.recv()
    p.join()
    line("share_first", "cucore", 1, first / 1000, "us")
    line("share_second", "cucore", 1, second / 1000, "us")


def main():
    info = cucore.driver()
    print("# cucore %s, driver %s (%s), %d device(s), python %s" % (
        cucore.__version__, info["path"], info["version"], len(cucore.devices()),
        sys.version.split()[0]), flush=True)
    bench_device_pickle()
    bench_share_first()
    bench_pipe_cucore()
    bench_pipe_cuda_core()


if __name__ == "__main__":
    main()
