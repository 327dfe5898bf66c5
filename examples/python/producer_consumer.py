"""A producer fills buffers of one GPU's pool and hands them to consumer
processes through a multiprocessing queue: plain pickle, no channel code.
Items go round-robin, one queue per consumer. Each consumer sees the GPUs in reverse order (CUDA_VISIBLE_DEVICES), yet
the buffers it gets are on the producer's GPU, named by UUID; it checks
every byte, writes its answer into the same memory, and drops the buffer,
which releases the producer's lease.

Run it with the interpreter the package was built for (the build uses
Debian's /usr/bin/python3) and the built package on its path;
CUCORE_DRIVER=sim without a GPU:

    CUCORE_DRIVER=sim PYTHONPATH=build/python /usr/bin/python3 examples/python/producer_consumer.py [CONSUMERS] [ITEMS_EACH]
"""
import multiprocessing as mp
import os
import sys

import cucore


def consumer(index, visible, jobs, done):
    os.environ["CUDA_VISIBLE_DEVICES"] = visible  # before cucore loads the driver
    count = 0
    while True:
        item = jobs.get()  # unpickling imports the buffer (and its pool)
        if item is None:
            break
        seq, buf = item
        data = buf.to_bytes()
        ok = data == bytes([seq % 251]) * buf.size
        buf.copy_from(bytes([255 - seq % 251]) * buf.size)  # the answer, in place
        done.put((index, seq, buf.device.uuid, buf.device.ordinal, ok))
        buf.close()  # our lease on the producer's memory ends here
        count += 1
    print("consumer %d: %d items, every byte checked" % (index, count), flush=True)


def main():
    consumers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    items = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    ctx = mp.get_context("spawn")
    devs = cucore.devices()
    dev = devs[-1]
    visible = ",".join(str(d.ordinal) for d in reversed(devs))
    pool = cucore.Pool(dev)
    jobs = [ctx.Queue() for _ in range(consumers)]
    done = ctx.Queue()
    procs = [ctx.Process(target=consumer, args=(i, visible, jobs[i], done))
             for i in range(consumers)]
    for p in procs:
        p.start()
    bufs = {}
    for seq in range(consumers * items):
        buf = pool.allocate(4096)
        buf.copy_from(bytes([seq % 251]) * buf.size)
        bufs[seq] = buf  # keep it until its consumer answered
        jobs[seq % consumers].put((seq, buf))
    good = 0
    for _ in range(consumers * items):
        index, seq, uuid, ordinal, ok = done.get(timeout=60)
        answer = bufs.pop(seq).to_bytes()
        ok = ok and uuid == dev.uuid and answer == bytes([255 - seq % 251]) * 4096
        good += ok
        if not ok:
            print("item %d: WRONG (consumer %d, %s)" % (seq, index, uuid))
    for q in jobs:
        q.put(None)
    for p in procs:
        p.join(60)
    pool.lease_wait(0, timeout=30)
    print("producer: GPU %s, ordinal %d here and %d in the consumers" %
          (dev.uuid, dev.ordinal, len(devs) - 1 - dev.ordinal))
    print("producer: %d of %d items verified both ways, %d leases left" %
          (good, consumers * items, pool.lease_count()))
    ok = good == consumers * items and all(p.exitcode == 0 for p in procs)
    print("producer_consumer %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
