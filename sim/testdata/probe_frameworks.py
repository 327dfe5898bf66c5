"""What the frameworks' allocations are, as the driver sees them, and the
parts of their APIs that cucore's framework support relies on. Run on a
GPU machine with the frameworks installed (not part of the test suite):

    python3 sim/testdata/probe_frameworks.py            # every case
    python3 sim/testdata/probe_frameworks.py torch-exp  # one case (a child)

One line per observation, "case.key value"; no absolute address is printed
(pointers relative to their range). Every call is guarded: a failure is
printed and the probe goes on."""
import os
import subprocess
import sys
import traceback


def out(key, val):
    print(f"{key} {val}", flush=True)


def guard(key, fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a probe reports everything
        out(key, f"EXC {type(e).__name__}: {str(e)[:300]}")
        return None


def drv():
    from cuda.bindings import driver
    return driver


ATTRS = [
    "MEMORY_TYPE", "DEVICE_ORDINAL", "IS_MANAGED", "IS_LEGACY_CUDA_IPC_CAPABLE",
    "MAPPED", "ALLOWED_HANDLE_TYPES", "MEMPOOL_HANDLE", "RANGE_START_ADDR",
    "RANGE_SIZE", "MAPPING_BASE_ADDR", "MAPPING_SIZE", "CONTEXT", "BUFFER_ID",
    "IS_GPU_DIRECT_RDMA_CAPABLE", "ACCESS_FLAGS",
]
RELATIVE = {"RANGE_START_ADDR", "MAPPING_BASE_ADDR"}


def describe(case, ptr, size):
    d = drv()
    out(f"{case}.size", size)
    for a in ATTRS:
        attr = getattr(d.CUpointer_attribute, "CU_POINTER_ATTRIBUTE_" + a, None)
        if attr is None:
            out(f"{case}.attr.{a}", "no-such-attribute")
            continue
        r = guard(f"{case}.attr.{a}", lambda: d.cuPointerGetAttribute(attr, ptr))
        if r is None:
            continue
        err, val = r[0], r[1] if len(r) > 1 else None
        if err != d.CUresult.CUDA_SUCCESS:
            out(f"{case}.attr.{a}", err.name)
            continue
        try:
            v = int(val)
        except Exception:  # noqa: BLE001
            v = repr(val)[:80]
        if a in RELATIVE and isinstance(v, int):
            out(f"{case}.attr.{a}", f"ptr-{ptr - v:#x}" if v else "0")
        elif a in ("MEMPOOL_HANDLE", "CONTEXT") and isinstance(v, int):
            out(f"{case}.attr.{a}", "nonzero" if v else "0")
        else:
            out(f"{case}.attr.{a}", v)
    r = guard(f"{case}.range", lambda: d.cuMemGetAddressRange(ptr))
    if r is not None:
        if r[0] == d.CUresult.CUDA_SUCCESS:
            out(f"{case}.range", f"base=ptr-{ptr - int(r[1]):#x} size={int(r[2]):#x}")
        else:
            out(f"{case}.range", r[0].name)
    r = guard(f"{case}.retain", lambda: d.cuMemRetainAllocationHandle(ptr))
    if r is not None:
        out(f"{case}.retain", r[0].name)
        if r[0] == d.CUresult.CUDA_SUCCESS:
            h = r[1]
            p = guard(f"{case}.retain.props",
                      lambda: d.cuMemGetAllocationPropertiesFromHandle(h))
            if p is not None and p[0] == d.CUresult.CUDA_SUCCESS:
                pr = p[1]
                out(f"{case}.retain.props", f"type={int(pr.type)} "
                    f"handletypes={int(pr.requestedHandleTypes)} "
                    f"loc={int(pr.location.type)}:{pr.location.id}")
            e = guard(f"{case}.retain.export", lambda: d.cuMemExportToShareableHandle(
                h, d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
            if e is not None:
                out(f"{case}.retain.export", e[0].name)
                if e[0] == d.CUresult.CUDA_SUCCESS:
                    os.close(int(e[1]))
            g = guard(f"{case}.granularity", lambda: d.cuMemGetAllocationGranularity(
                pr, d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
            if g is not None and g[0] == d.CUresult.CUDA_SUCCESS:
                out(f"{case}.granularity", int(g[1]))
            out(f"{case}.retain.release", d.cuMemRelease(h)[0].name)
    pool = guard(f"{case}.pool", lambda: d.cuPointerGetAttribute(
        d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr))
    if pool is not None and pool[0] == d.CUresult.CUDA_SUCCESS and int(pool[1]):
        ph = d.CUmemoryPool(int(pool[1]))
        e = guard(f"{case}.pool.export", lambda: d.cuMemPoolExportToShareableHandle(
            ph, d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
        if e is not None:
            out(f"{case}.pool.export", e[0].name)
            if e[0] == d.CUresult.CUDA_SUCCESS:
                os.close(int(e[1]))
        x = guard(f"{case}.pool.exportptr", lambda: d.cuMemPoolExportPointer(ptr))
        if x is not None:
            out(f"{case}.pool.exportptr", x[0].name)
        for a in ("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", "CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC"):
            at = getattr(d.CUmemPool_attribute, a)
            v = guard(f"{case}.pool.{a}", lambda: d.cuMemPoolGetAttribute(ph, at))
            if v is not None:
                out(f"{case}.pool.{a}", f"{v[0].name} {v[1] if v[0] == 0 else ''}")


def versions():
    for name in ("torch", "cupy", "numba", "numba.cuda", "cuda.core", "cuda.bindings",
                 "numpy"):
        def get(name=name):
            m = __import__(name, fromlist=["_"])
            return getattr(m, "__version__", "?")
        v = guard(f"version.{name}", get)
        if v is not None:
            out(f"version.{name}", v)
    try:
        import importlib.metadata as md
        for dist in ("numba-cuda", "cuda-core", "cuda-bindings", "cuda-python"):
            v = guard(f"dist.{dist}", lambda dist=dist: md.version(dist))
            if v is not None:
                out(f"dist.{dist}", v)
    except Exception:  # noqa: BLE001
        pass


def case_torch(tag):
    import torch
    t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    small = torch.empty(4096, dtype=torch.uint8, device="cuda")
    big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    describe(f"{tag}.1MiB", t.data_ptr(), t.numel())
    describe(f"{tag}.4KiB", small.data_ptr(), small.numel())
    describe(f"{tag}.64MiB", big.data_ptr(), big.numel())
    v = t[4096:8192]
    out(f"{tag}.view.offset", v.data_ptr() - t.data_ptr())
    out(f"{tag}.storage_offset", v.storage_offset())
    st = t.untyped_storage()
    r = guard(f"{tag}.share_cuda", lambda: st._share_cuda_())
    if r is not None:
        out(f"{tag}.share_cuda.len", len(r))
        out(f"{tag}.share_cuda.types", [type(x).__name__ for x in r])
    import torch.multiprocessing.reductions as red
    import inspect
    out(f"{tag}.rebuild_cuda_tensor.sig", guard(
        "sig", lambda: str(inspect.signature(red.rebuild_cuda_tensor))))
    out(f"{tag}.reduce_tensor.exists", hasattr(red, "reduce_tensor"))
    out(f"{tag}.reduce_storage.exists", hasattr(red, "reduce_storage"))
    out(f"{tag}.init_reductions.exists", hasattr(red, "init_reductions"))
    from multiprocessing.reduction import ForkingPickler
    out(f"{tag}.ForkingPickler.tensor", ForkingPickler._extra_reducers.get(torch.Tensor))
    out(f"{tag}.ForkingPickler.n", len(ForkingPickler._extra_reducers))
    out(f"{tag}.dlpack", guard("dlpack", lambda: hasattr(torch, "from_dlpack")))
    s = torch.cuda.Stream()
    out(f"{tag}.stream.cuda_stream", guard("cs", lambda: s.__cuda_stream__()
        if hasattr(s, "__cuda_stream__") else "none"))
    out(f"{tag}.cai", guard("cai", lambda: sorted(t.__cuda_array_interface__.keys())))
    out(f"{tag}.alloc_conf", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    out(f"{tag}.uuid", guard("uuid", lambda: str(torch.cuda.get_device_properties(0).uuid)[:8]))


def case_cupy(tag, use_async):
    import cupy
    if use_async:
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    a = cupy.empty(1 << 20, dtype=cupy.uint8)
    cupy.cuda.runtime.deviceSynchronize()
    describe(f"{tag}.1MiB", a.data.ptr, a.nbytes)
    out(f"{tag}.cai.keys", sorted(a.__cuda_array_interface__.keys()))
    out(f"{tag}.cai.version", a.__cuda_array_interface__.get("version"))
    out(f"{tag}.from_dlpack", hasattr(cupy, "from_dlpack"))
    out(f"{tag}.UnownedMemory", hasattr(cupy.cuda, "UnownedMemory"))
    s = cupy.cuda.Stream()
    out(f"{tag}.stream.cuda_stream", guard("cs", lambda: s.__cuda_stream__()
        if hasattr(s, "__cuda_stream__") else "none"))


def case_numba(tag):
    from numba import cuda
    import numpy as np
    a = cuda.device_array(1 << 18, dtype=np.float32)
    cuda.synchronize()
    cai = a.__cuda_array_interface__
    describe(f"{tag}.1MiB", cai["data"][0], a.nbytes)
    out(f"{tag}.cai.keys", sorted(cai.keys()))

    @cuda.jit
    def k(x, v):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = v
    sig = "void(float32[::1], float32)"
    kk = guard(f"{tag}.compile", lambda: k.compile(sig) if hasattr(k, "compile") else None)
    out(f"{tag}.dispatcher.attrs", sorted(x for x in dir(k) if not x.startswith("__"))[:80])
    out(f"{tag}.kernel.type", type(kk).__name__ if kk is not None else None)
    if kk is not None:
        out(f"{tag}.kernel.attrs", sorted(x for x in dir(kk) if not x.startswith("__"))[:80])
        ptx = guard(f"{tag}.inspect_asm", lambda: kk.inspect_asm() if hasattr(kk, "inspect_asm") else None)
        if ptx:
            out(f"{tag}.ptx.entry", [ln.strip()[:120] for ln in ptx.splitlines() if ".entry" in ln][:2])
            out(f"{tag}.ptx.params", [ln.strip()[:80] for ln in ptx.splitlines() if ".param" in ln][:12])
        lib = getattr(kk, "_codelibrary", None) or getattr(kk, "library", None)
        out(f"{tag}.library.type", type(lib).__name__ if lib is not None else None)
        if lib is not None:
            out(f"{tag}.library.attrs", sorted(x for x in dir(lib) if not x.startswith("__"))[:80])
            cub = guard(f"{tag}.get_cubin", lambda: lib.get_cubin())
            out(f"{tag}.cubin.len", len(cub) if cub else None)
            out(f"{tag}.entry_name", guard("name", lambda: kk.entry_name if hasattr(kk, "entry_name") else None))
    out(f"{tag}.compile_ptx", guard("cp", lambda: hasattr(cuda, "compile_ptx")))
    out(f"{tag}.overloads", guard("ov", lambda: list(map(str, k.overloads.keys()))))
    out(f"{tag}.as_cuda_array", hasattr(cuda, "as_cuda_array"))
    out(f"{tag}.from_cuda_array_interface", hasattr(cuda, "from_cuda_array_interface"))


def case_cudacore(tag):
    import cuda.core as cc
    import pickle
    names = sorted(x for x in dir(cc) if not x.startswith("_"))
    out(f"{tag}.names", names)
    dev = cc.Device(0)
    dev.set_current()
    out(f"{tag}.device.uuid", guard("uuid", lambda: str(dev.uuid)[:12]))
    out(f"{tag}.device.attrs", sorted(x for x in dir(dev) if not x.startswith("_"))[:90])
    out(f"{tag}.device.reduce", guard("red", lambda: repr(dev.__reduce__())[:200]))
    st = dev.create_stream()
    out(f"{tag}.stream.cuda_stream", guard("cs", lambda: st.__cuda_stream__()))
    out(f"{tag}.stream.attrs", sorted(x for x in dir(st) if not x.startswith("_")))
    out(f"{tag}.stream.pickle", guard("sp", lambda: len(pickle.dumps(st))))
    mr = dev.memory_resource
    out(f"{tag}.mr.type", type(mr).__name__)
    b = mr.allocate(1 << 20, stream=st)
    st.sync()
    out(f"{tag}.buffer.attrs", sorted(x for x in dir(b) if not x.startswith("_")))
    describe(f"{tag}.default-mr", int(b.handle), b.size)
    out(f"{tag}.buffer.pickle", guard("bp", lambda: len(pickle.dumps(b))))
    DMR = getattr(cc, "DeviceMemoryResource", None)
    Opt = getattr(cc, "DeviceMemoryResourceOptions", None)
    out(f"{tag}.DMR", DMR is not None)
    out(f"{tag}.DMROptions", Opt is not None)
    import inspect
    if DMR is not None:
        out(f"{tag}.DMR.sig", guard("sig", lambda: str(inspect.signature(DMR))))
        out(f"{tag}.DMR.attrs", sorted(x for x in dir(DMR) if not x.startswith("_")))
    if Opt is not None:
        out(f"{tag}.DMROptions.fields", guard("f", lambda: str(inspect.signature(Opt))))
        ipcmr = guard(f"{tag}.ipcmr", lambda: DMR(dev, options=Opt(ipc_enabled=True, max_size=1 << 28)))
        if ipcmr is not None:
            out(f"{tag}.ipcmr.is_ipc_enabled", getattr(ipcmr, "is_ipc_enabled", "?"))
            out(f"{tag}.ipcmr.handle", guard("h", lambda: "nonzero" if int(ipcmr.handle) else 0))
            b2 = ipcmr.allocate(1 << 20, stream=st)
            st.sync()
            describe(f"{tag}.ipc-mr", int(b2.handle), b2.size)
            out(f"{tag}.ipcbuf.pickle", guard("p", lambda: len(pickle.dumps(b2))))
    LC = getattr(cc, "LaunchConfig", None)
    if LC is not None:
        out(f"{tag}.LaunchConfig.sig", guard("s", lambda: str(inspect.signature(LC))))
        lc = guard("lc", lambda: LC(grid=4, block=32))
        if lc is not None:
            out(f"{tag}.LaunchConfig.attrs", sorted(x for x in dir(lc) if not x.startswith("_")))
    ev = guard("ev", lambda: st.record())
    if ev is not None:
        out(f"{tag}.event.attrs", sorted(x for x in dir(ev) if not x.startswith("_")))


def case_twoimports(tag):
    """Imports one pool pointer twice in a child (fork+exec'd) and
    reports; run from the parent, which exports."""
    out(tag, "see probe_ipc (C)")


CASES = {
    "torch": lambda: case_torch("torch"),
    "torch-exp": lambda: case_torch("torch-exp"),
    "cupy": lambda: case_cupy("cupy", False),
    "cupy-async": lambda: case_cupy("cupy-async", True),
    "numba": lambda: case_numba("numba"),
    "cudacore": lambda: case_cudacore("cudacore"),
}


def main():
    if len(sys.argv) > 1:
        name = sys.argv[1]
        try:
            CASES[name]()
        except Exception:  # noqa: BLE001
            out(f"{name}.failed", traceback.format_exc().replace("\n", " | ")[-600:])
        return
    versions()
    for name in CASES:
        env = dict(os.environ)
        if name == "torch-exp":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        r = subprocess.run([sys.executable, __file__, name], env=env, timeout=240,
                           capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        if r.returncode:
            out(f"{name}.exit", r.returncode)
            sys.stdout.write("".join(f"{name}.stderr {ln}\n" for ln in r.stderr.splitlines()[-8:]))


if __name__ == "__main__":
    main()
