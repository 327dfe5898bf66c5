"""cucore objects as Dask task arguments: a distributed cluster of two
worker processes (each spawned by a Nanny) that see the GPUs differently."""

import pytest

import cucore
from test_objects import PTX

distributed = pytest.importorskip("distributed")

N = len(cucore.devices())
VISIBLE = {"rev": ",".join(map(str, reversed(range(N)))),
           "part": ",".join(map(str, range(1, N))) if N > 1 else "0"}


def task_device(dev):
    return (dev.uuid, dev.ordinal)


def task_kernel(kernel, config):
    return (kernel.name, kernel.hash, config.grid, config.block)


def task_buffer(buf):
    data = buf.to_bytes()
    buf.copy_from(bytes(reversed(data)))  # the client reads this back
    return (buf.device.uuid, data)


@pytest.fixture(scope="module")
def client():
    import dask
    from distributed import Client, Nanny, Scheduler, SpecCluster
    # Dask's GPU diagnostics (pynvml) are not what is tested, and Debian's
    # distributed 2022.12 breaks on a newer pynvml (its names are str, not
    # bytes), as on the GPU machine: off, here and in the workers.
    dask.config.set({"distributed.diagnostics.nvml": False})
    workers = {name: {"cls": Nanny, "options": {"nthreads": 1, "env": {
        "CUDA_VISIBLE_DEVICES": vis, "DASK_DISTRIBUTED__DIAGNOSTICS__NVML": "False"}}}
        for name, vis in VISIBLE.items()}
    # No dashboard, and the scheduler's HTTP server on a free port: the
    # default, 8787, is taken when ctest runs the Dask example meanwhile.
    cluster = SpecCluster(workers=workers, scheduler={
        "cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0"}})
    c = Client(cluster)
    c.wait_for_workers(2, timeout=120)
    yield c
    c.close()
    cluster.close()


def run(client, worker, fn, *args):
    return client.submit(fn, *args, workers=[worker], allow_other_workers=False,
                         pure=False).result(timeout=120)


def expect_ordinal(worker, ordinal):
    return [int(i) for i in VISIBLE[worker].split(",")].index(ordinal)


def test_devices_on_workers(client, uuids):
    for worker in VISIBLE:
        for d in cucore.devices():
            if worker == "part" and d.ordinal == 0 and N > 1:
                continue
            assert run(client, worker, task_device, d) == \
                (d.uuid, expect_ordinal(worker, d.ordinal))


@pytest.mark.skipif(N < 2, reason="needs a second GPU to leave one out")
def test_not_visible_on_worker(client, uuids):
    with pytest.raises(cucore.NotVisibleError) as e:
        run(client, "part", task_device, cucore.Device(0))
    assert uuids[0] in str(e.value)


def test_kernel_and_config(client):
    k = cucore.Kernel(PTX, "twice")
    c = cucore.LaunchConfig((16, 2), 64)
    for worker in VISIBLE:
        assert run(client, worker, task_kernel, k, c) == ("twice", k.hash, (16, 2, 1),
                                                         (64, 1, 1))


def test_pool_buffer(client, uuids):
    pool = cucore.Pool(N - 1)
    for worker in VISIBLE:
        buf = pool.allocate(200)
        data = bytes(range(200))
        buf.copy_from(data)
        assert run(client, worker, task_buffer, buf) == (uuids[N - 1], data)
        assert buf.to_bytes() == bytes(reversed(data))
        buf.close()
    pool.lease_wait(0, timeout=30)


def test_foreign_host_refused(client):
    """A buffer pickle whose share record names another boot id (another
    machine) is refused on the worker with ForeignHostError."""
    buf = cucore.Pool(1 % N).allocate(8)
    fn, (data,) = buf.__reduce__()
    forged = data[:56] + bytes(b ^ 0xff for b in data[56:72]) + data[72:]

    class Forged:
        def __reduce__(self):
            return (fn, (forged,))
    with pytest.raises(cucore.ForeignHostError) as e:
        run(client, "rev", task_buffer, Forged())
    assert forged[56:72].hex() in str(e.value)
