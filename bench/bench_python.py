#!/usr/bin/env python3
"""cucore's Python objects beside cuda.core's, same process, same n.
Prints one machine-readable line per figure:

    BENCH name=NAME impl=cucore|cuda.core|pickle n=N value=X unit=UNIT

  device_pickle   pickle.loads(pickle.dumps(device)), per round trip;
                  impl=pickle is pickle's own floor for the same shape: a
                  tuple (builtin, (bytes of the same length,)) through
                  dumps + loads (a global and a bytes object, no call);
                  impl=pickle-global the least any object that is not a
                  builtin costs: a module-level function (json.loads)
                  pickled as a bare global (no call, no argument), which
                  pickle imports on both sides
  pipe_buffers    N pool buffers (4096 B, bench_pool's size, so that the C
                  and Python figures are the same work; allocated before the clock starts)
                  as one plain list through a multiprocessing Pipe to a
                  spawned child that unpickles them (imports), closes them
                  and answers; per buffer, N = 1 .. 4096, the clock stops
                  at the answer (impl=cucore and impl=cuda.core: the same
                  work), the mean over the rounds (as bench_pool's C
                  figures); impl=cucore+leases stops when the exporter has
                  seen every lease end (the receiver's releases processed;
                  the child's answer is read after the clock), its own
                  buffers kept until the clock stops: bench_pool's C
                  figure, which has no answer and frees them outside the
                  clock;
                  impl=cucore+leases+frees drops them before the lease wait,
                  so that the clock also covers the exporter's deferred
                  frees (more work than the C figure); impl=cucore-many and
                  impl=cucore-many+leases: the same two with a child that
                  closes each list with one Buffer.close_many (as C's
                  importer, cuc_buffer_unref_many_async) instead of
                  close() a buffer; impl=cucore-slab: buffers
                  carved from a cucore.Slab whose slab the receiver has
                  imported, impl=cucore-view: views of a buffer it holds
                  (no export, no import a buffer)
  share_first     (the least of 5 fresh children; share_first_median their
                  median) in a fresh child whose driver is already initialised
                  (devices listed, a pool made on the device: that is the
                  driver's cost, not the share point's), unpickling the
                  first buffer (connect to the share point + the pool's fd
                  + its import + the buffer's import) and a second one
                  (share_second, the median: no round trip)

Run with PYTHONPATH=build/python (on the simulator: CUCORE_DRIVER=sim: the
figures then show the shape only), --quick for a few rounds a figure.
scripts/bench.sh runs it with CUCORE_BENCH_JSONL=FILE: every figure is also
a JSON line there (bench/bench_report.h's keys; "figure" is "NAME, IMPL",
with ", N/message" for pipe_buffers; the value in ns under "python" for
cucore's impls, "cuda_core" for cuda.core's, "raw" for pickle's floors),
which bench/make_performance.py reads. cuda.core's side (1.2: an IPC-enabled
DeviceMemoryResource, buffers pickled through multiprocessing) is skipped,
saying why, where cuda.core is missing or its API differs. Children are
spawned (never forked) and warmed up before the clock runs.
"""
import json
import multiprocessing as mp
import os
import pickle
import sys
import time

import cucore

SIZES = [1, 4, 16, 64, 256, 1024, 4096]
BUF = 4096  # bytes a pool buffer: bench_pool's BUF_BYTES (the driver's export costs more
            # for larger blocks: sim/FACTS.md F32)


# The results.jsonl column of each impl (bench/make_performance.py's
# columns): cucore's Python objects, cuda.core's, and pickle's own floors
# in the column of the least a program must do.
COLUMN = {"cuda.core": "cuda_core", "pickle": "raw", "pickle-global": "raw"}
TO_NS = {"ns": 1.0, "us": 1e3, "us_per_buffer": 1e3}
DRIVER = "cuda"
QUICK = False  # --quick: a few rounds a figure (checks that the bench runs)


def line(name, impl, n, value, unit):
    print("BENCH name=%s impl=%s n=%d value=%.3f unit=%s" % (name, impl, n, value, unit),
          flush=True)
    jsonl(name, impl, n, value * TO_NS[unit])


def jsonl(name, impl, n, ns):
    """With CUCORE_BENCH_JSONL=FILE, the figure as a JSON line there
    (bench/bench_report.h's keys): figure "NAME, IMPL" (", N/message" for
    the pipe), its value in ns under the impl's column."""
    path = os.environ.get("CUCORE_BENCH_JSONL")
    if not path:
        return
    figure = "%s, %s" % (name, impl) + (", %d/message" % n if name == "pipe_buffers" else "")
    with open(path, "a") as f:
        f.write(json.dumps({"bench": "bench_python", "driver": DRIVER, "figure": figure,
                            "unit": "ns", COLUMN.get(impl, "python"): round(ns, 3),
                            "note": "bench/bench_python.py"}) + "\n")


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
    blob = pickle.dumps(d)
    line("device_pickle", "cucore", 1, per_op_ns(lambda: pickle.loads(pickle.dumps(d)), 20000),
         "ns")
    floor = (len, (b"x" * len(blob),))
    line("device_pickle", "pickle", 1,
         per_op_ns(lambda: pickle.loads(pickle.dumps(floor)), 20000), "ns")
    line("device_pickle", "pickle-global", 1,
         per_op_ns(lambda: pickle.loads(pickle.dumps(json.loads)), 20000), "ns")
    try:
        from cuda.core import Device
        cd = Device(0)
        cd.set_current()
        line("device_pickle", "cuda.core", 1,
             per_op_ns(lambda: pickle.loads(pickle.dumps(cd)), 20000), "ns")
    except Exception as e:  # noqa: BLE001 (reported, not hidden)
        skip("device_pickle", "cuda.core", "%s: %s" % (type(e).__name__, e))


def child_loop(conn, impl):
    """("keep", objs): hold them (cuda.core's memory resource); a list:
    buffers to import (unpickling them), close, and count."""
    kept = []
    if impl == "cuda.core":
        from cuda.core import Device
        dev = Device(0)
        dev.set_current()
    else:
        import cucore  # the unpickler needs it
    while True:
        msg = conn.recv()
        if msg is None:
            return
        if isinstance(msg, tuple):
            kept.extend(msg[1])
            conn.send(len(msg[1]))
            continue
        if impl == "cucore-many":
            cucore.Buffer.close_many(msg)
        else:
            for b in msg:
                b.close()
        if impl == "cuda.core":
            dev.sync()
        conn.send(len(msg))


def child_first(conn):
    import cucore
    dev = cucore.devices()[0]
    warm = cucore.Pool(dev)  # the driver's context and pool machinery, untimed
    warm.allocate(BUF).close()
    a, b = conn.recv_bytes(), conn.recv_bytes()
    t0 = time.perf_counter_ns()
    x = pickle.loads(a)
    t1 = time.perf_counter_ns()
    y = pickle.loads(b)
    t2 = time.perf_counter_ns()
    conn.send((t1 - t0, t2 - t1))
    x.close()
    y.close()
    conn.recv()


def spawn(target, *args):
    ctx = mp.get_context("spawn")
    conn, theirs = ctx.Pipe()
    p = ctx.Process(target=target, args=(theirs,) + args)
    p.start()
    theirs.close()
    return conn, p


def pipe_rounds(conn, make, n, rounds, after=None, free_in_clock=False):
    """The mean per buffer over ROUNDS timed rounds, after one untimed: the
    statistic bench_pool's C figures give, so that the two compare. Without
    AFTER the clock stops at the child's answer. With AFTER it stops when
    AFTER returns (the lease end), and the answer, which the child sends
    before its releases, is read after the clock (bench_pool's C figure
    has no answer): with FREE_IN_CLOCK this process drops the buffers
    first (their frees deferred to their leases' end, in the clock), else
    it holds them until the clock has stopped."""
    total = 0
    for r in range(rounds + 1):
        bufs = make(n)
        t = time.perf_counter_ns()
        conn.send(bufs)
        if after:
            if free_in_clock:
                bufs = None
            after()
        else:
            assert conn.recv() == n
        dt = time.perf_counter_ns() - t
        if after:
            assert conn.recv() == n
        bufs = None
        if r:
            total += dt
    return total / rounds / n


def rounds_for(n):
    """bench_pool's C rounds (16384 buffers a figure, at least 3 rounds) from
    64 on, where the targets hold Python to C's figure: the same number of
    buffers behind each mean (with 4096 a figure until 2026-12-04, the
    Python figure at 4096 was the mean of 3 rounds, C's of 4). Below 64 at
    most 1024 rounds, to keep the run short (C runs 16384 at n = 1). With
    --quick 512 buffers a figure, as scripts/bench.sh's quick bench_pool."""
    if QUICK:
        return max(3, min(64, 512 // n))
    return max(3, min(1024, 16384 // n))


def bench_pipe_cucore():
    pool = cucore.Pool(0)
    conn, p = spawn(child_loop, "cucore")

    def make(k):
        return [pool.allocate(BUF) for _ in range(k)]

    def leases_end(kept=0):
        pool.lease_wait(kept, timeout=60)

    pipe_rounds(conn, make, 64, 3, leases_end)  # warm: the pool's import, the threads
    answer_and_lease_end(conn, make, leases_end, "cucore")
    close_many_rounds(make, leases_end)
    for n in SIZES:
        line("pipe_buffers", "cucore+leases+frees", n,
             pipe_rounds(conn, make, n, rounds_for(n), leases_end, free_in_clock=True) / 1000,
             "us_per_buffer")
    # Buffers the receiver's mapping already covers: carved from a slab it
    # imported (cucore.Slab), and views of a buffer it holds.
    slab = cucore.Slab(pool, 2 * BUF * max(SIZES))
    whole = pool.allocate(BUF * max(SIZES))
    conn.send(("keep", [slab.allocate(BUF), whole]))  # the slab's and the parent's import
    conn.recv()
    for n in SIZES:
        line("pipe_buffers", "cucore-slab", n,
             pipe_rounds(conn, lambda k: [slab.allocate(BUF) for _ in range(k)], n,
                         rounds_for(n)) / 1000, "us_per_buffer")
        leases_end(2)  # the child keeps its two
    for n in SIZES:
        line("pipe_buffers", "cucore-view", n,
             pipe_rounds(conn, lambda k: [whole.view(BUF * i, BUF) for i in range(k)], n,
                         rounds_for(n)) / 1000, "us_per_buffer")
        leases_end(2)
    conn.send(None)
    p.join()


def answer_and_lease_end(conn, make, leases_end, impl):
    """IMPL's rounds at every n with the clock stopped at the answer, then
    at the lease end (IMPL+leases)."""
    for n in SIZES:
        line("pipe_buffers", impl, n, pipe_rounds(conn, make, n, rounds_for(n)) / 1000,
             "us_per_buffer")
        leases_end()
    for n in SIZES:
        line("pipe_buffers", impl + "+leases", n,
             pipe_rounds(conn, make, n, rounds_for(n), leases_end) / 1000, "us_per_buffer")


def close_many_rounds(make, leases_end):
    """The same rounds with a child that closes each list with one
    Buffer.close_many (its frees and their synchronize on its own thread,
    as C's importer does with cuc_buffer_unref_many_async), not close()
    a buffer (the frees left to its background thread)."""
    conn, p = spawn(child_loop, "cucore-many")
    pipe_rounds(conn, make, 64, 3, leases_end)  # warm
    answer_and_lease_end(conn, make, leases_end, "cucore-many")
    conn.send(None)
    p.join()


def bench_pipe_cuda_core():
    try:
        from cuda.core import Device, DeviceMemoryResource, DeviceMemoryResourceOptions
        dev = Device(0)
        dev.set_current()
        stream = dev.create_stream()
        mr = DeviceMemoryResource(dev, DeviceMemoryResourceOptions(
            ipc_enabled=True, max_size=max(64 << 20, 2 * max(SIZES) * 512)))
        conn, p = spawn(child_loop, "cuda.core")
        conn.send(("keep", [mr]))  # the receiver maps the resource before its buffers
        conn.recv()

        def make(k):
            bufs = [mr.allocate(BUF, stream=stream) for _ in range(k)]
            stream.sync()
            return bufs

        pipe_rounds(conn, make, 64, 3)  # warm
    except Exception as e:  # noqa: BLE001
        skip("pipe_buffers", "cuda.core", "%s: %s" % (type(e).__name__, e))
        return
    for n in SIZES:
        line("pipe_buffers", "cuda.core", n, pipe_rounds(conn, make, n, rounds_for(n)) / 1000,
             "us_per_buffer")
    conn.send(None)
    p.join()


def share_first_once(pool):
    a, b = pool.allocate(BUF), pool.allocate(BUF)
    conn, p = spawn(child_first)
    conn.send_bytes(pickle.dumps(a))
    conn.send_bytes(pickle.dumps(b))
    first, second = conn.recv()
    conn.send(None)
    p.join()
    return first, second


def bench_share_first(children=5):
    """Each in a fresh child; the least and the median of the children."""
    pool = cucore.Pool(0)
    pickle.loads(pickle.dumps(pool))  # the share point started, its socket made
    got = sorted(share_first_once(pool) for _ in range(children))
    firsts = sorted(g[0] for g in got)
    seconds = sorted(g[1] for g in got)
    line("share_first", "cucore", 1, firsts[0] / 1000, "us")
    line("share_first_median", "cucore", 1, firsts[len(firsts) // 2] / 1000, "us")
    line("share_second", "cucore", 1, seconds[len(seconds) // 2] / 1000, "us")


def main():
    global DRIVER, QUICK
    QUICK = "--quick" in sys.argv[1:]
    mp.set_start_method("spawn", force=True)  # cuda.core warns about fork otherwise
    info = cucore.driver()
    DRIVER = "sim" if info.get("simulated") else "cuda"
    print("# cucore %s, driver %s (%s), %d device(s), python %s" % (
        cucore.__version__, info["path"], info["version"], len(cucore.devices()),
        sys.version.split()[0]), flush=True)
    bench_device_pickle()
    bench_share_first()
    bench_pipe_cucore()
    bench_pipe_cuda_core()


if __name__ == "__main__":
    main()
