"""CUDA tensors from a producer to a consumer through a spawn
torch.multiprocessing Queue, plain and with cucore.install("torch"), and
cucore's own Buffer path, at the same K in the same run (a GPU machine's
python3, which has PyTorch; exits 77 without it or without a GPU):

    python3 bench/bench_torch.py [--quick] [--ks 1,100,1000,10000,20000] [--rounds 3]

Per K: the producer makes K tensors of 4 KiB (1024 float32, each its own
torch allocation, as a model's small parameters are) filled with their
index, then the clock starts; it puts them as one list on the Queue; the
consumer gets them, checks every tensor's first value with one kernel
(torch.stack), drops them and answers on a second Queue; the clock stops
when the producer has the answer and its memory is free again: plain
torch, once torch.cuda.ipc_collect() has freed its blocks' IPC ref
counters (the consumer dropped them); cucore, once every tensor's lease
ended (cucore._core.adopted_count() back to what it was). "mix" is 20
tensors of 64 MiB and 20,000 of 4 KiB in one list. K = 1 is one tensor's
round trip (best of 50 rounds): what share() of one tensor costs beside
one Buffer pickled. cucore's Buffer path:
K cucore.Buffers of 4 KiB from one IPC pool (allocated before the clock),
the same Queue, the consumer's one copy of each first word, to the pool's
lease wait.

Each figure is printed as bench_report.h's lines do, and, where
CUCORE_BENCH_JSONL names a file, one JSON line each: bench "bench_torch",
figure "tensors, K=...", unit "ns" per tensor, "torch" (plain
torch.multiprocessing), "python" (the same program with
cucore.install("torch"): cucore from Python), and "cucore_buffer"
(cucore's own Buffer path)."""
import argparse
import json
import os
import sys
import time


def _consumer(q_in, q_out, mode):
    import torch
    import cucore
    if mode == "cucore":
        cucore.install("torch")
    while True:
        item = q_in.get()
        if item is None:
            return
        if mode == "buffers":
            total = 0
            for b in item:
                total += b.to_bytes(4)[0]
            for b in item:
                b.close()
            q_out.put(total)
            continue
        firsts = torch.stack([t[0] for t in item]).sum().item()
        del item
        torch.cuda.synchronize()
        q_out.put(firsts)


def _tensors(k, big=0):
    import torch
    ts = [torch.full((1024,), float(i), device="cuda") for i in range(k)]
    ts += [torch.zeros(16 << 20, device="cuda") for _ in range(big)]
    torch.cuda.synchronize()
    return ts


def _round_torch(q_in, q_out, k, big, mode):
    import torch
    import cucore
    ts = _tensors(k, big)
    want = float(sum(range(k)))
    base = cucore._core.adopted_count() if mode == "cucore" else 0
    t0 = time.perf_counter()
    q_in.put(ts)
    got = q_out.get(timeout=600)
    del ts
    if mode == "cucore":
        while cucore._core.adopted_count() > base:  # every lease ended
            time.sleep(0)
    else:
        torch.cuda.ipc_collect()
    dt = time.perf_counter() - t0
    if abs(got - want) > 0.5:
        raise SystemExit("bench_torch: the consumer summed %r, want %r" % (got, want))
    return dt


def _round_buffers(q_in, q_out, pool, k):
    bufs = [pool.allocate(4096) for _ in range(k)]
    for b in bufs:
        b.fill(1)
    t0 = time.perf_counter()
    q_in.put(bufs)
    got = q_out.get(timeout=600)
    for b in bufs:
        b.close()
    pool.lease_wait(0, 60)
    dt = time.perf_counter() - t0
    if got != k:
        raise SystemExit("bench_torch: the buffer consumer read %r, want %r" % (got, k))
    return dt


def _line(figure, torch_ns, cuc_ns, buf_ns, note):
    print("%-34s torch %12.1f ns   cucore %12.1f ns   x%-6.3f  cucore Buffer %10.1f ns  %s" %
          (figure, torch_ns, cuc_ns, cuc_ns / torch_ns if torch_ns else 0, buf_ns, note))
    sys.stdout.flush()
    path = os.environ.get("CUCORE_BENCH_JSONL")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"bench": "bench_torch", "driver": "cuda", "figure": figure,
                                "unit": "ns", "torch": torch_ns, "python": cuc_ns,
                                "cucore_buffer": buf_ns, "note": note}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ks", default="1,100,1000,10000,20000")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("bench_torch: no PyTorch here", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("bench_torch: no GPU here", file=sys.stderr)
        return 77
    import cucore
    ks = [int(k) for k in a.ks.split(",")]
    if a.quick:
        ks, a.rounds = [k for k in ks if k <= 1000] or [100], 1
    ctx = mp.get_context("spawn")
    print("bench_torch: %s, torch %s, cucore %s" % (torch.cuda.get_device_name(0),
                                                    torch.__version__, cucore.version))
    results = {}
    for mode in ("torch", "cucore", "buffers"):
        if mode == "cucore":
            cucore.install("torch")
        q_in, q_out = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=_consumer, args=(q_in, q_out, mode))
        p.start()
        pool = cucore.Pool(cucore.Device(0)) if mode == "buffers" else None
        cases = [(k, 0) for k in ks] + ([(20000, 20)] if not a.quick else [])
        for k, big in cases:
            best = None
            for _ in range((a.rounds if k + big > 1 else 50) + 1):  # the first warms up
                if mode == "buffers":
                    dt = _round_buffers(q_in, q_out, pool, k + big)
                else:
                    dt = _round_torch(q_in, q_out, k, big, mode)
                best = dt if best is None or dt < best else best
            results[(mode, k, big)] = best * 1e9 / (k + big)
        q_in.put(None)
        p.join()
    for k, big in [(k, 0) for k in ks] + ([(20000, 20)] if not a.quick else []):
        fig = "tensors, K=%d%s (per tensor)" % (k, ", mix" if big else "")
        _line(fig, results[("torch", k, big)], results[("cucore", k, big)],
              results[("buffers", k, big)],
              "best of %d rounds; to the answer and the producer's memory free" %
              (a.rounds if k + big > 1 else 50))
    return 0


if __name__ == "__main__":
    sys.exit(main())
