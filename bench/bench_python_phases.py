#!/usr/bin/env python3
"""Where a round of bench_python.py's pipe figure goes, phase by phase:
n pool buffers (4096 B) pickled here as a Pipe pickles them
(ForkingPickler.dumps: the buffers of the list detached together, the
driver's exports), sent through a multiprocessing Pipe to a spawned
child, unpickled there (the attach: imports and the claim), closed (each
left to the share point's thread to free, its release sent after), the
answer back; then the lease end (the share point here
reads the releases, lease_wait returns). Each phase is timed on the
host's monotonic clock, in whichever process it happens, and printed in
µs a buffer, the mean over the rounds after one untimed:

  dumps        ForkingPickler.dumps of the list, here
  send->child  from the end of dumps to the child holding the bytes
  loads        ForkingPickler.loads in the child
  closes       the child's close() of each buffer (with --many one
               Buffer.close_many of the list: freed and synchronized there)
  answer       the child's answer reaching this process
  lease end    from the closes to this process's lease_wait(0) returning
  total        from dumps to the lease end: bench_python's cucore+leases

Run with PYTHONPATH=build/python [--many] (CUCORE_DRIVER=sim anywhere; the figures
that matter are the GPU machine's)."""
import multiprocessing as mp
from multiprocessing.reduction import ForkingPickler
import sys
import time

import cucore

now = time.perf_counter_ns
SIZES = [64, 256, 1024, 4096]
PHASES = ["dumps", "send->child", "loads", "closes", "answer", "lease end", "total"]


def child(conn, many):
    import cucore
    while True:
        blob = conn.recv_bytes()
        got = now()
        if blob == b"end":
            return
        objs = ForkingPickler.loads(blob)
        loaded = now()
        if many:
            cucore.Buffer.close_many(objs)
        else:
            for b in objs:
                b.close()
        closed = now()
        objs = None
        conn.send((got, loaded, closed))


def one_round(conn, pool, n):
    bufs = [pool.allocate(4096) for _ in range(n)]  # bench_python's size
    t0 = now()
    blob = bytes(ForkingPickler.dumps(bufs))
    t1 = now()
    conn.send_bytes(blob)
    got, loaded, closed = conn.recv()
    answered = now()
    pool.lease_wait(0, timeout=60)
    ended = now()
    return [t1 - t0, got - t1, loaded - got, closed - loaded, answered - closed,
            ended - closed, ended - t0]


def main():
    ctx = mp.get_context("spawn")
    conn, theirs = ctx.Pipe()
    many = "--many" in sys.argv[1:]
    p = ctx.Process(target=child, args=(theirs, many))
    p.start()
    theirs.close()
    pool = cucore.Pool(0)
    one_round(conn, pool, 64)  # the child's driver, share point and pool import
    for n in SIZES:
        rounds = max(3, min(64, 4096 // n))
        acc = [0] * len(PHASES)
        for r in range(rounds + 1):
            t = one_round(conn, pool, n)
            if r:
                acc = [a + v for a, v in zip(acc, t)]
        print("n=%d%s, us a buffer: " % (n, " (close_many)" if many else "") + "  ".join(
            "%s %.2f" % (k, v / rounds / n / 1000) for k, v in zip(PHASES, acc)), flush=True)
    conn.send_bytes(b"end")
    p.join()


if __name__ == "__main__":
    main()
