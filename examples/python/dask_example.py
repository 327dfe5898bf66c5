"""cucore objects as Dask task arguments: two workers (each spawned by a
Nanny) that see the GPUs in different orders get a device, a kernel with
its launch configuration, and a buffer of the client's pool; each reports
the GPU it resolved (by UUID) and what it read. A worker that cannot see
a GPU says so, naming it: the one error this example expects.

Run it with an interpreter that has Dask's distributed (Debian's
/usr/bin/python3 with the python3-distributed package) and the built
package on its path; CUCORE_DRIVER=sim without a GPU:

    CUCORE_DRIVER=sim PYTHONPATH=build/python /usr/bin/python3 examples/python/dask_example.py
"""
import os
import sys

# distributed logs every task that fails on a worker, with its traceback,
# and its start-up at INFO: the failure this example provokes is expected
# and reported below in one line. Set before distributed is imported, in
# the environment that the workers' processes inherit.
os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")

from distributed import Client, Nanny, Scheduler, SpecCluster  # noqa: E402

import cucore  # noqa: E402

PTX = (b".version 7.0\n.target sm_70\n.address_size 64\n\n"
       b".visible .entry noop()\n{\n  ret;\n}\n")


def where(dev):
    return "%s is ordinal %d here" % (dev.uuid, dev.ordinal)


def kernel_info(kernel, config):
    return "kernel %s (%s) with grid %s" % (kernel.name, kernel.hash.hex()[:12], config.grid)


def read(buf):
    return "%d bytes on %s, sum %d" % (buf.size, buf.device.uuid, sum(buf.to_bytes()))


def main():
    devs = cucore.devices()
    n = len(devs)
    visible = {"reversed": ",".join(str(i) for i in reversed(range(n))),
               "without0": ",".join(str(i) for i in range(1, n)) or "0"}
    workers = {name: {"cls": Nanny, "options": {"nthreads": 1,
                                                "env": {"CUDA_VISIBLE_DEVICES": v}}}
               for name, v in visible.items()}
    with SpecCluster(workers=workers, scheduler={  # no dashboard; HTTP on a free port
            "cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0"}}) \
            as cluster, \
            Client(cluster) as client:
        pool = cucore.Pool(devs[n - 1])
        buf = pool.allocate(1000)
        buf.copy_from(bytes(range(200)) * 5)
        kernel, config = cucore.Kernel(PTX, "noop"), cucore.LaunchConfig((8, 2), 128)
        for w in visible:
            run = lambda fn, *a: client.submit(fn, *a, workers=[w], pure=False).result(60)
            print("%s: %s" % (w, run(where, devs[n - 1])))
            print("%s: %s" % (w, run(kernel_info, kernel, config)))
            print("%s: %s" % (w, run(read, buf)))
        if n < 2:
            print("one GPU: no worker can be left without it")
        else:
            not_visible(client, devs[0])
        buf.close()
        pool.lease_wait(0, timeout=30)
    print("dask_example OK")
    return 0


def not_visible(client, dev0):
    """The worker that cannot see GPU 0 says so, naming it (expected)."""
    try:
        client.submit(where, dev0, workers=["without0"], pure=False).result(60)
    except cucore.NotVisibleError as e:
        if dev0.uuid not in str(e):
            raise
        print("without0: NotVisibleError names %s, as expected: that worker cannot see it"
              % dev0.uuid)
        return
    raise SystemExit("without0: saw GPU 0, which it should not")


if __name__ == "__main__":
    sys.exit(main())
