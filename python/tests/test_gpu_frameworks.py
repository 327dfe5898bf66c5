"""On a real GPU only, with the frameworks installed (each test skips,
saying why, without its framework): their own objects cross as
themselves, to a child that sees the GPUs in reverse order, and the child
checks the bytes and the GPU's UUID.

- PyTorch through torch.multiprocessing's spawn Queue after
  cucore.install("torch"): float32, bfloat16 and int64 tensors, a
  non-contiguous and an offset view, a Parameter, an empty tensor and a
  CPU one (left to torch), with expandable segments off (legacy IPC) and
  on (VMM chunks by fd), in a fresh producer process each;
- CuPy arrays (and a MemoryAsyncPool array refused by name), numba device
  arrays, through share();
- Kernel.from_numba launched in a child on memory we sent;
- cuda.core with install("cuda.core"): Device by UUID, LaunchConfig, a
  created Stream refused, a Buffer of an IPC-enabled DeviceMemoryResource
  (and the default, non-IPC resource's refused by name);
- README.md's PyTorch snippet."""
import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import cucore

pytestmark = pytest.mark.skipif(cucore.driver()["simulated"],
                                reason="GPU-only: the frameworks need a real GPU")
N = len(cucore.devices())
REVERSED = ",".join(map(str, reversed(range(N))))


def need(module):
    try:
        __import__(module)
    except Exception as e:  # ImportError, or a framework failing at import
        pytest.skip("%s not importable: %s: %s" % (module, type(e).__name__, e))


# ---- a child that sees the GPUs in reverse order and runs what we send ----

def child_main(conn):
    while True:
        try:
            item = conn.recv()  # unpickles what came, as cucore rebuilds it
        except Exception as e:
            conn.send(("error", type(e).__name__, str(e)))
            continue
        if item is None:
            return
        fn, args = item
        try:
            conn.send(globals()[fn](*args))
        except Exception as e:
            conn.send(("error", type(e).__name__, str(e)))
        del item, args


def start_reversed(ctx, target, args):
    """A spawned child that sees the GPUs in reverse order (its
    environment is the parent's when it starts, before it imports CUDA)."""
    p = ctx.Process(target=target, args=args)
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = REVERSED
    try:
        p.start()
    finally:
        if old is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    return p


@pytest.fixture(scope="module")
def child():
    ctx = multiprocessing.get_context("spawn")
    conn, theirs = ctx.Pipe()
    p = start_reversed(ctx, child_main, (theirs,))
    yield conn
    conn.send(None)
    p.join(60)


def call(child, fn, *args):
    child.send((fn, args))
    got = child.recv()
    if isinstance(got, tuple) and got and got[0] == "error":
        raise AssertionError("the child: %s: %s" % got[1:])
    return got


def uuid_of_ordinal(i):
    return cucore.Device(i).uuid


# ---- PyTorch ----

TORCH_PRODUCER = """
import json, os, sys, time
import torch, torch.multiprocessing as mp
import cucore
import test_gpu_frameworks as t

def cases(dev):
    base = torch.arange(4096, dtype=torch.float32, device=dev)
    grid = torch.arange(64 * 32, dtype=torch.int64, device=dev).reshape(64, 32)
    p = torch.nn.Parameter(torch.full((7,), 3.0, device=dev))
    return {"float32": base, "bfloat16": base.to(torch.bfloat16) / 7,
            "int64": grid, "strided": grid[:, ::3], "offset": base[100:900],
            "param": p, "empty": torch.empty(0, 5, device=dev),
            "cpu": torch.arange(5, dtype=torch.int32)}

if __name__ == "__main__":
    cucore.install("torch")
    dev = torch.device("cuda", int(sys.argv[1]))
    ts = cases(dev)
    torch.cuda.synchronize()
    base = cucore._core.adopted_count()
    kinds = {k: type(cucore.share(v).mem).__name__ for k, v in ts.items()
             if v.is_cuda and v.numel()}
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = t.start_reversed(ctx, t.torch_consumer, (q_in, q_out))
    q_in.put(ts)
    got = q_out.get(timeout=120)
    q_in.put(None)
    p.join(60)
    deadline = time.time() + 30
    while cucore._core.adopted_count() > base and time.time() < deadline:
        time.sleep(0.05)
    want = {k: t.torch_describe(v) for k, v in ts.items()}
    want["one storage"] = t.one_storage(ts)
    print(json.dumps({"got": got, "want": want, "kinds": kinds,
                      "uuid": cucore.Device(dev).uuid,
                      "left": cucore._core.adopted_count() - base}))
"""


def torch_describe(x):
    """What a tensor is, as a child reports it: its class, device (the
    GPU's UUID), dtype, shape, strides, storage offset, requires_grad and
    values (floats, as lists)."""
    dev = cucore.Device(x.device).uuid if x.is_cuda else "cpu"
    return [type(x).__name__, dev, str(x.dtype), list(x.shape), list(x.stride()),
            x.storage_offset(), x.requires_grad, x.detach().float().cpu().tolist()]


def one_storage(ts):
    """Whether the views of one storage (the float32 base and its offset
    slice) are over one storage (one StorageImpl) here, as the sender's."""
    return ts["float32"].untyped_storage()._cdata == ts["offset"].untyped_storage()._cdata


def torch_consumer(q_in, q_out):
    while True:
        ts = q_in.get()
        if ts is None:
            return
        got = {k: torch_describe(v) for k, v in ts.items()}
        got["one storage"] = one_storage(ts)
        q_out.put(got)
        del ts


@pytest.mark.parametrize("expandable", [False, True])
def test_torch_tensors_through_a_spawn_queue(expandable):
    need("torch")
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if expandable:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    dev = 1 % N
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(TORCH_PRODUCER), str(dev)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["got"] == out["want"]  # class, UUID, dtype, shape, strides, offset, values
    assert out["got"]["float32"][1] == out["uuid"] == uuid_of_ordinal(dev)
    assert out["got"]["param"][0] == "Parameter" and out["got"]["param"][6] is True
    assert out["got"]["cpu"][1] == "cpu"
    assert set(out["kinds"].values()) == {"VMM" if expandable else "Buffer"}
    assert out["left"] <= 0  # every lease ended once the consumer dropped them


def test_hostile_tensor_records():
    """A tensor's record as a peer sends it (_load_tensor's arguments):
    a range outside its memory, a layout outside its storage, a negative
    stride or a dtype that is not one is refused (CUC_E_BADMSG); a true
    one loads as the tensor, over the bytes sent."""
    need("torch")
    import torch
    from cucore import _frameworks as fw
    buf = cucore.Pool(0).allocate(4096)
    buf.copy_from(bytes(range(256)) * 16)
    ok = ("uint8", (4, 8), (8, 1), 2, False, False)
    t = fw._load_tensor(buf, 1024, 64, ok)
    assert t.dtype == torch.uint8 and t.shape == (4, 8) and t.storage_offset() == 2
    assert t.untyped_storage().nbytes() == 64 and t.data_ptr() == buf.ptr + 1026
    assert bytes(t.cpu().flatten().tolist()) == bytes(range(2, 34))
    bad = [((buf, 4090, 64), ok), ((buf, -1, 64), ok), ((buf, 0, 0), ok),
           (("buf", 0, 64), ok), ((buf, 0, 64), ("float32", (32,), (1,), 0, False, False)),
           ((buf, 0, 64), ("uint8", (8,), (-1,), 7, False, False)),
           ((buf, 0, 64), ("uint8", (8,), (1,), 60, False, False)),
           ((buf, 0, 64), ("Tensor", (8,), (1,), 0, False, False)),
           ((buf, 0, 64), ("uint8", [8], (1,), 0, False, False)), ((buf, 0, 64), None)]
    for args, meta in bad:
        with pytest.raises(cucore.Error) as e:
            fw._load_tensor(*args, meta)
        assert e.value.code == "CUC_E_BADMSG", (args, meta)


# ---- CuPy and numba through share() ----

def cupy_describe(a):
    return (type(a).__module__.split(".")[0], uuid_of_ordinal(a.device.id), str(a.dtype),
            a.shape, a.strides, a.get().tobytes())


def numba_describe(a):
    # the memory it arrived as (share() finds it: received memory is sent
    # on as itself) names its GPU
    return (type(a).__module__.split(".")[0], cucore.share(a).mem.device.uuid,
            str(a.dtype), a.shape, a.strides, a.copy_to_host().tobytes())


def test_cupy_arrays(child):
    need("cupy")
    import cupy
    dev = 1 % N
    with cupy.cuda.Device(dev):
        a = cupy.arange(3000, dtype=cupy.float32).reshape(30, 100)
        views = [a, a[:, ::4], a[7:]]
        for v in views:
            got = call(child, "cupy_describe", cucore.share(v))
            assert got[0] == "cupy" and got[1] == uuid_of_ordinal(dev)
            assert (got[2], got[3], got[4]) == (str(v.dtype), v.shape, v.strides)
            assert got[5] == v.get().tobytes()
        pool = cupy.cuda.MemoryAsyncPool()
        with cupy.cuda.using_allocator(pool.malloc):
            b = cupy.ones(100, dtype=cupy.int32)
        with pytest.raises(cucore.Error) as e:
            cucore.share(b)
        assert '"pool"' in e.value.message and "IPC" in e.value.message


def test_numba_device_arrays(child):
    need("numba.cuda")
    import numpy as np
    from numba import cuda
    dev = 1 % N
    with cuda.gpus[dev]:
        host = np.arange(512, dtype=np.int64).reshape(16, 32)
        a = cuda.to_device(host)
        got = call(child, "numba_describe", cucore.share(a))
        assert got[0] in ("numba", "numba_cuda") and got[1] == uuid_of_ordinal(dev)
        assert (got[2], tuple(got[3])) == ("int64", (16, 32))
        assert got[5] == host.tobytes()


# ---- Kernel.from_numba ----

def launch_twice(k, buf, n):
    """In the child: the numba kernel on memory we sent, its array
    argument as numba passes it (meminfo, parent, nitems, itemsize, data,
    shape, strides)."""
    s = cucore.Stream.legacy(buf.device)
    cucore.launch(s, cucore.LaunchConfig((n + 127) // 128, 128), k, 0, 0, n, 4, buf, n, 4)
    s.synchronize()
    return (len(k.params), buf.to_bytes())


def test_kernel_from_numba_in_a_child(child):
    need("numba.cuda")
    from numba import cuda

    @cuda.jit
    def twice(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= 2

    try:
        k = cucore.Kernel.from_numba(twice, "void(float32[::1])")
    except AttributeError as e:
        if "row_stack" in str(e):
            pytest.skip("numba cannot compile here (numba 0.68 with numpy 2.5: %s)" % e)
        raise
    import struct
    n = 1000
    buf = cucore.Pool(1 % N).allocate(4 * n)
    buf.copy_from(struct.pack("%df" % n, *range(n)))
    nparams, out = call(child, "launch_twice", k, buf, n)
    assert nparams == 7
    assert out == struct.pack("%df" % n, *(2.0 * i for i in range(n)))
    assert buf.to_bytes() == out  # the child wrote our memory


# ---- cuda.core ----

def cc_describe(*objs):
    out = []
    for o in objs:
        name = type(o).__name__
        if name == "Device":
            out.append(("Device", "GPU-" + str(o.uuid).replace("GPU-", ""), o.device_id))
        elif name == "LaunchConfig":
            out.append(("LaunchConfig", tuple(o.grid), tuple(o.block), o.shmem_size))
        elif name == "Buffer":
            dev = cucore.Device(o.device_id)
            dev.set_current()
            tmp = cucore.Pool(dev).allocate(o.size)
            tmp.copy_from(o)
            out.append(("Buffer", dev.uuid, o.size, tmp.to_bytes()))
        else:
            out.append(("other", name))
    return out


def test_cuda_core_objects(child):
    need("cuda.core")
    from cucore._frameworks import _cc_module
    cc = _cc_module()
    cucore.install("cuda.core")
    dev = cc.Device(1 % N)
    dev.set_current()
    cfg = cc.LaunchConfig(grid=(4, 2), block=128, shmem_size=64)
    opts = cc.DeviceMemoryResourceOptions(ipc_enabled=True, max_size=1 << 26)
    mr = cc.DeviceMemoryResource(dev, options=opts)
    stream = dev.create_stream()
    buf = mr.allocate(4096, stream=stream)
    stream.sync()  # the allocation was ordered on that stream
    tmp = cucore.Pool(1 % N).allocate(4096)
    tmp.copy_from(bytes(range(256)) * 16)
    tmp.copy_to(buf)
    got = call(child, "cc_describe", dev, cfg, buf)
    uuid = uuid_of_ordinal(1 % N)
    assert got[0] == ("Device", uuid, N - 1 - (1 % N))
    assert got[1] == ("LaunchConfig", (4, 2, 1), (128, 1, 1), 64)
    assert got[2] == ("Buffer", uuid, 4096, bytes(range(256)) * 16)
    with pytest.raises(cucore.NotSerializableError):
        pickle.dumps(stream)
    plain = dev.memory_resource.allocate(64, stream=stream)
    with pytest.raises(cucore.Error) as e:
        pickle.dumps(plain)
    assert '"pool"' in e.value.message and "ipc_enabled=True" in e.value.message


def test_readme_torch_snippet(tmp_path):
    """README.md's PyTorch snippet (its ```py block) runs as it stands."""
    need("torch")
    readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
    text = open(readme).read()
    block = text.split("\n```py\n", 1)[1].split("\n```\n", 1)[0]
    script = tmp_path / "tensors.py"
    script.write_text(block + "\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ("consumer: cuda torch.float32 (4, 2) "
                        "[[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]]\n"), p.stdout
