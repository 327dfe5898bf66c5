"""What the children run: they receive cucore objects by pickle (through a
multiprocessing Pipe, a ProcessPoolExecutor or Dask) and report what each
resolved to here, by UUID, and the bytes they read."""
import os
import pickle

HELD = []  # objects a child keeps (the leases stay while they live)


def set_visible(visible):
    """Before cucore loads the driver in this process."""
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible


def describe(o):
    import cucore
    if isinstance(o, cucore.Device):
        return ("device", o.uuid, o.ordinal)
    if isinstance(o, cucore.Stream):
        return ("stream", o.kind, o.device.uuid)
    if isinstance(o, cucore.Event):
        return ("event", o.device.uuid, o.is_imported, o.query())
    if isinstance(o, cucore.Kernel):
        return ("kernel", o.name, o.kind, o.hash)
    if isinstance(o, cucore.LaunchConfig):
        return ("config", o.grid, o.block, o.shared_mem, o.cluster, o.cooperative)
    if isinstance(o, cucore.Pool):
        return ("pool", o.device.uuid, o.id, o.is_imported, o.kind)
    if isinstance(o, cucore.Buffer):
        return ("buffer", o.device.uuid, o.size, o.is_imported, o.to_bytes())
    if isinstance(o, cucore.VMM):
        return ("vmm", o.device.uuid, tuple(p.uuid for p in o.peers),
                tuple(o.access(p) for p in o.peers), o.is_imported, o.to_bytes(size=64))
    return ("other", repr(o))


def error_of(e):
    return ("error", type(e).__name__, getattr(e, "code", None), str(e))


def flat(objs):
    """A BufferBatch arrives as a list: its buffers in place."""
    out = []
    for o in objs:
        out.extend(o if isinstance(o, list) else [o])
    return out


def handle(op, objs):
    import cucore
    if op == "describe":
        return [describe(o) for o in flat(objs)]
    if op == "batch_identity":  # (batch, one of its buffers pickled alone)
        HELD.extend(flat(objs))
        return objs[1] is objs[0][0]
    if op == "write":  # (buffer, data): write into memory the parent allocated
        objs[0].copy_from(objs[1])
        return describe(objs[0])
    if op == "same":  # the objects of separate pickles
        HELD.extend(objs)
        return [o is objs[0] for o in objs]
    if op == "hold":
        HELD.extend(objs)
        return len(HELD)
    if op == "repickle":  # keep it, and pickle it on (A -> B -> C)
        HELD.extend(objs)
        return [pickle.dumps(o) for o in objs]
    if op == "drop":
        for o in flat(HELD):
            if hasattr(o, "close"):
                o.close()
        HELD.clear()
        return 0
    if op == "inherited":  # objects this process inherited through fork
        out = []
        for o in HELD:
            try:
                describe(o)
                out.append("usable")
            except cucore.Error as e:
                out.append(error_of(e))
        return out
    if op == "export":  # allocate here and hand back a pickle, then exit
        dev = cucore.Device(objs[0])
        pool = cucore.Pool(dev)
        buf = pool.allocate(64)
        buf.copy_from(b"\x11" * 64)
        HELD.extend([pool, buf])
        return pickle.dumps(buf)
    if op == "export_n":  # (ordinal, n): n pickled buffers; our own references dropped
        pool = cucore.Pool(cucore.Device(objs[0]))
        bufs = [pool.allocate(32) for _ in range(objs[1])]
        for i, b in enumerate(bufs):
            b.copy_from(bytes([0x30 + i]) * 32)
        data = [pickle.dumps(b) for b in bufs]
        for b in bufs:
            b.close()  # the holds keep the memory
        HELD.append(pool)
        return data
    if op == "describe_held":
        return [describe(o) for o in HELD]
    if op == "share_stats":  # our holds and leases, and the pools' lease counts
        pools = [o for o in HELD if isinstance(o, cucore.Pool)]
        return (cucore._core._share_stats(), [p.lease_count() for p in pools])
    if op == "lease_wait":  # every pool of ours: all its leases ended within objs[0] s
        try:
            for o in HELD:
                if isinstance(o, cucore.Pool):
                    o.lease_wait(0, timeout=objs[0])
            return True
        except cucore.TimeoutError:
            return False
    if op == "fds":
        return len(os.listdir("/proc/self/fd"))
    raise ValueError(op)


def child_main(visible, conn):
    """A multiprocessing.Process target: (op, objects) in, result out."""
    set_visible(visible)
    import cucore
    while True:
        try:
            item = conn.recv()  # unpickles the objects
        except EOFError:
            return
        except cucore.Error as e:
            conn.send(error_of(e))
            continue
        if item is None:
            return
        try:
            conn.send(handle(*item))
        except cucore.Error as e:
            conn.send(error_of(e))


def pool_task(op, *objs):
    """A ProcessPoolExecutor task (the initializer set the visibility)."""
    import cucore
    try:
        return handle(op, objs)
    except cucore.Error as e:
        return error_of(e)
