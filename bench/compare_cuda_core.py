#!/usr/bin/env python3
"""The cucore benchmarks' work, done through cuda.core (1.2), in one command.

Figures, printed in the layout of the C benchmarks (bench/bench_report.h),
with cuda.core in the second column:

  Device pickle         pickle.dumps(Device(0)), pickle.loads of the bytes,
                        and both in a row (what bench_device's one round
                        does through cucore's wire format). cuda.core
                        pickles the device *ordinal*: the receiver gets
                        whatever GPU has that ordinal there.
  pool buffers, batched n buffers of an IPC-enabled DeviceMemoryResource
                        sent as one list through a multiprocessing Pipe to a
                        spawned process, which unpickles them (each one a
                        cuMemPoolImportPointer) and acknowledges; per buffer,
                        for n = 1 .. 4096. The pool itself is sent once
                        before (not timed), as cucore sends a pool once.
                        Each send still carries the pool's fd again: that is
                        how cuda.core pickles a buffer's memory resource for
                        multiprocessing.
  pool buffers, one a message
                        the same, one buffer per message, each acknowledged.

Timing starts with the send (the buffers are allocated before; the export,
cuMemPoolExportPointer, happens while pickling) and ends when the receiver
acknowledges. Freeing is not timed: the receiver closes its buffers, syncs,
and acknowledges again before the sender frees its own (importers must free
first).

  python3 bench/compare_cuda_core.py                # all figures
  python3 bench/compare_cuda_core.py --quick        # fewer iterations

Exit status: 0 done, 1 a figure failed, 77 cuda.core not importable or no
usable CUDA device (nothing measured).
"""

import argparse
import json
import multiprocessing as mp
import os
import pickle
import sys
import time

SKIP = 77
WANT_VERSION = "1.2"


def line(figure, ns, note):
    """One figure, in bench_line's layout: no raw column here. With
    CUCORE_BENCH_JSONL=FILE also one JSON line appended there, cuda.core's
    figure under "cuda_core" (bench/bench_report.h has the other keys)."""
    print(f"{figure:<46} raw {'-':>12} ns   cuda.core {ns:12.1f} ns   {'':7}  {note}", flush=True)
    path = os.environ.get("CUCORE_BENCH_JSONL")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"bench": "compare_cuda_core", "driver": "cuda",
                                "figure": figure, "unit": "ns", "raw": None,
                                "cuda_core": round(ns, 3), "note": note}) + "\n")


def import_cuda_core():
    """(version, Device, DeviceMemoryResource, DeviceMemoryResourceOptions)
    or exit 77 with the reason."""
    try:
        import cuda.core as cc
    except Exception as e:  # ImportError, or a broken install raising anything
        print(f"compare_cuda_core: cannot import cuda.core ({type(e).__name__}: {e}); "
              f"install cuda-core {WANT_VERSION} (pip install 'cuda-core[cu13]') and run on "
              "a GPU machine", file=sys.stderr)
        sys.exit(SKIP)
    mod = cc
    names = ("Device", "DeviceMemoryResource", "DeviceMemoryResourceOptions")
    if not all(hasattr(mod, n) for n in names):
        try:  # releases before 0.4 kept the API under cuda.core.experimental
            import cuda.core.experimental as mod
        except Exception:
            mod = None
    if mod is None or not all(hasattr(mod, n) for n in names):
        print("compare_cuda_core: this cuda.core has no Device / DeviceMemoryResource / "
              f"DeviceMemoryResourceOptions; install cuda-core {WANT_VERSION}", file=sys.stderr)
        sys.exit(SKIP)
    version = getattr(cc, "__version__", "unknown")
    return version, mod.Device, mod.DeviceMemoryResource, mod.DeviceMemoryResourceOptions


def open_device(Device, ordinal):
    try:
        dev = Device(ordinal)
        dev.set_current()
    except Exception as e:
        print(f"compare_cuda_core: no usable CUDA device {ordinal} "
              f"({type(e).__name__}: {e})", file=sys.stderr)
        sys.exit(SKIP)
    return dev


def per_op_ns(fn, iters):
    t0 = time.perf_counter_ns()
    for _ in range(iters):
        fn()
    return (time.perf_counter_ns() - t0) / iters


def bench_device_pickle(dev, Device, iters):
    blob = pickle.dumps(dev)
    back = pickle.loads(blob)
    if not isinstance(back, Device) or back.device_id != dev.device_id:
        print("compare_cuda_core: Device did not survive a pickle round trip", file=sys.stderr)
        return 1
    for _ in range(iters // 10 + 1):  # warm-up
        pickle.loads(pickle.dumps(dev))
    dumps = per_op_ns(lambda: pickle.dumps(dev), iters)
    loads = per_op_ns(lambda: pickle.loads(blob), iters)
    both = per_op_ns(lambda: pickle.loads(pickle.dumps(dev)), iters)
    note = f"{iters} iterations, {len(blob)} bytes: the ordinal {dev.device_id}, not the UUID"
    line("Device pickle.dumps", dumps, note)
    line("Device pickle.loads", loads, note)
    line("Device pickle round trip (dumps + loads)", both, note)
    return 0


# ---- the receiving process (spawned: must be importable at top level) ----

def receiver(conn, ordinal):
    """Imports what arrives and acknowledges each message:
         ("pool", mr)          keep the mapped pool (the registry holds it weakly)
         ("buffers", [bufs])   unpickling imported them; hold them
         ("release",)          close every held buffer, sync, acknowledge
         ("exit",)             done"""
    _, Device, _, _ = import_cuda_core()
    dev = open_device(Device, ordinal)
    pools, held = [], []
    while True:
        msg = conn.recv()  # unpickling the buffers is their import
        kind = msg[0]
        if kind == "pool":
            pools.append(msg[1])
            conn.send(("ok", str(getattr(msg[1], "uuid", ""))))
        elif kind == "buffers":
            held.extend(msg[1])
            conn.send(("ok", len(msg[1])))
        elif kind == "release":
            for b in held:
                b.close()
            held = []
            dev.sync()
            conn.send(("ok", 0))
        elif kind == "exit":
            break
    for mr in pools:
        mr.close()


class Sender:
    def __init__(self, dev, DMR, DMROptions, ordinal, buffer_bytes, max_buffers):
        self.dev = dev
        self.buffer_bytes = buffer_bytes
        # Room for the largest batch, with slack for the pool's granularity.
        pool_bytes = max(64 << 20, 2 * max_buffers * max(buffer_bytes, 512))
        self.mr = DMR(dev, DMROptions(ipc_enabled=True, max_size=pool_bytes))
        self.stream = dev.create_stream()
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(target=receiver, args=(child, ordinal))
        self.proc.start()
        child.close()
        self.call(("pool", self.mr))  # the pool import, once, untimed

    def call(self, msg):
        self.conn.send(msg)
        kind, value = self.conn.recv()
        if kind != "ok":
            raise RuntimeError(f"receiver answered {kind!r}")
        return value

    def allocate(self, n):
        bufs = [self.mr.allocate(self.buffer_bytes, stream=self.stream) for _ in range(n)]
        self.stream.sync()
        return bufs

    def release(self, bufs):
        self.call(("release",))  # the importer frees first
        for b in bufs:
            b.close(self.stream)
        self.stream.sync()

    def batched_ns(self, n):
        """ns to share n buffers in one message."""
        bufs = self.allocate(n)
        t0 = time.perf_counter_ns()
        got = self.call(("buffers", bufs))
        ns = time.perf_counter_ns() - t0
        if got != n:
            raise RuntimeError(f"receiver imported {got} of {n} buffers")
        self.release(bufs)
        return ns

    def one_by_one_ns(self, n):
        """ns to share n buffers, one message each."""
        bufs = self.allocate(n)
        t0 = time.perf_counter_ns()
        for b in bufs:
            if self.call(("buffers", [b])) != 1:
                raise RuntimeError("receiver did not import the buffer")
        ns = time.perf_counter_ns() - t0
        self.release(bufs)
        return ns

    def close(self):
        try:
            self.conn.send(("exit",))
        finally:
            self.proc.join(60)
            if self.proc.exitcode is None:
                self.proc.kill()
            self.mr.close()


def bench_buffers(dev, DMR, DMROptions, ordinal, batches, buffer_bytes, min_buffers):
    if not getattr(dev.properties, "memory_pools_supported", True):
        print("compare_cuda_core: device has no memory pools; buffer figures skipped",
              file=sys.stderr)
        return 0
    s = Sender(dev, DMR, DMROptions, ordinal, buffer_bytes, max(batches))
    try:
        s.batched_ns(1)  # warm-up: first use of the resource sharer, the pool's chunks
        for n in batches:
            reps = max(1, min_buffers // n)
            total = sum(s.batched_ns(n) for _ in range(reps))
            line(f"pool buffer share, batched {n}/message", total / (reps * n),
                 f"per buffer, {reps} message(s) of {n} x {buffer_bytes} B, "
                 "multiprocessing Pipe (spawn)")
        n = min(256, max(batches))
        line("pool buffer share, one buffer a message", s.one_by_one_ns(n) / n,
             f"per buffer, {n} messages of 1 x {buffer_bytes} B, each acknowledged")
    finally:
        s.close()
    if s.proc.exitcode != 0:
        print(f"compare_cuda_core: receiver exited with {s.proc.exitcode}", file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", type=int, default=0, help="ordinal (default 0)")
    ap.add_argument("--iters", type=int, default=200000, help="Device pickle iterations")
    ap.add_argument("--batches", default="1,4,16,64,256,1024,4096",
                    help="buffers per message, comma-separated")
    ap.add_argument("--buffer-bytes", type=int, default=4096)
    ap.add_argument("--min-buffers", type=int, default=4096,
                    help="buffers shared per batch size (messages = this / batch)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--skip-buffers", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.iters, args.min_buffers = 20000, 512
    batches = sorted({int(x) for x in args.batches.split(",") if x.strip()})
    if not batches or batches[0] < 1:
        ap.error("--batches wants positive integers")

    # Spawn, not fork: a forked child must not use the parent's CUDA state,
    # and cuda.core warns about fork when it pickles IPC objects.
    mp.set_start_method("spawn", force=True)
    version, Device, DMR, DMROptions = import_cuda_core()
    dev = open_device(Device, args.device)
    print(f"compare_cuda_core: cuda.core {version}, {dev.name} "
          f"(ordinal {dev.device_id}, {dev.uuid}), pid {os.getpid()}", flush=True)
    if not version.startswith(WANT_VERSION):
        print(f"compare_cuda_core: note: the reference figures are of cuda.core "
              f"{WANT_VERSION}; this is {version}", flush=True)
    bad = bench_device_pickle(dev, Device, args.iters)
    if not args.skip_buffers:
        try:
            bad |= bench_buffers(dev, DMR, DMROptions, args.device, batches,
                                 args.buffer_bytes, args.min_buffers)
        except Exception as e:
            print(f"compare_cuda_core: buffer figures failed: {type(e).__name__}: {e}",
                  file=sys.stderr)
            bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
