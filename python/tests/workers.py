"""What the children run: they receive cucore objects by pickle (through a
multiprocessing Pipe, a ProcessPoolExecutor or Dask) and report what each
resolved to here, by UUID, and the bytes they read."""
import os
import pickle
import time

HELD = []  # objects a child keeps (the leases stay while they live)
KEPT = {}  # a listener, a channel: what the cucore Channel ops keep


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
    if isinstance(o, cucore.ArrayView):  # what share() sent: the bytes of its extent
        data = o.mem.to_bytes(size=o.nbytes, offset=o.offset) if o.nbytes else b""
        return ("array", o.device.uuid, o.shape, o.strides, o.dtype, data)
    return ("other", repr(o))


def error_of(e):
    return ("error", type(e).__name__, getattr(e, "code", None), str(e))


def flat(objs):
    """A BufferBatch arrives as a list: its buffers in place."""
    out = []
    for o in objs:
        out.extend(o if isinstance(o, list) else [o])
    return out


def sim_lib():
    """The simulator cucore loaded in this process, for its test controls
    (sim/cucore_sim.h), or None on a real driver."""
    import ctypes
    import cucore

    info = cucore.driver()
    if not info["simulated"]:
        return None
    return ctypes.CDLL(info["path"], mode=os.RTLD_NOW | os.RTLD_NOLOAD)


def sim_count(name):
    """The simulator's count of NAME's calls in this process, or None on
    a real driver."""
    import ctypes

    lib = sim_lib()
    if lib is None:
        return None
    out = ctypes.c_ulonglong()
    assert lib.cucore_sim_calls(name.encode(), ctypes.byref(out)) == 0
    return out.value


def close_many_frees(ordinal):
    """The simulator's cuMemFreeAsync calls of one Buffer.close_many of
    four buffers of a new pool, one closed before and each named twice (3
    frees, all before it returns); None off the simulator. Run in a fresh
    process, where no other test's frees can land in the count."""
    import cucore

    dev = cucore.Device(ordinal)
    pool = cucore.Pool(dev)
    bufs = [pool.allocate(32) for _ in range(4)]
    bufs[1].close()
    before = sim_count("cuMemFreeAsync")
    cucore.Buffer.close_many((b for b in bufs + bufs), stream=cucore.Stream(dev))
    assert all(b.closed for b in bufs)
    return None if before is None else sim_count("cuMemFreeAsync") - before


def libcucore():
    """libcucore as loaded in this process (ctypes), or None when it is
    compiled into the extension (the pip package)."""
    import ctypes
    import cucore  # noqa: F401 (loads it)

    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "/libcucore.so" in path:
                lib = ctypes.CDLL(path)
                p = ctypes.c_void_p
                for name, args in [
                        ("cuc_channel_connect", [ctypes.c_char_p, ctypes.c_int,
                                                 ctypes.POINTER(p)]),
                        ("cuc_channel_send", [p, p]),
                        ("cuc_channel_recv", [p, ctypes.c_int, ctypes.POINTER(p)]),
                        ("cuc_channel_release", [p, ctypes.POINTER(ctypes.c_uint64),
                                                 ctypes.c_size_t]),
                        ("cuc_channel_destroy", [p]), ("cuc_msg_destroy", [p]),
                        ("cuc_msg_from_bytes", [ctypes.c_char_p, ctypes.c_size_t,
                                                ctypes.POINTER(p)]),
                        ("cuc_msg_to_bytes", [p, ctypes.POINTER(p),
                                              ctypes.POINTER(ctypes.c_size_t)]),
                        ("cuc_errname", [ctypes.c_int])]:
                    getattr(lib, name).argtypes = args
                lib.cuc_errname.restype = ctypes.c_char_p
                return lib
    return None


CLAIM, CONFIRM = 18, 19


def claims_message(tokens, flags):
    """A message of claim records (docs/wire-format.md), as bytes."""
    import struct

    recs = b"".join(struct.pack("<HHIII", CLAIM, 1, 24, 0, 0) + t + struct.pack("<II", flags, 0)
                    for t in tokens)
    return struct.pack("<IHHIIII", 0x4d435543, 1, 0, len(tokens), 0, 24 + len(recs), 0) + recs


def confirms_of(data):
    """(token, status) of each confirm record of a message's bytes."""
    import struct

    out, at = [], 24
    for _ in range(struct.unpack_from("<I", data, 8)[0]):
        rtype, _, n = struct.unpack_from("<HHI", data, at)
        if rtype == CONFIRM:
            out.append((data[at + 16:at + 32], struct.unpack_from("<i", data, at + 32)[0]))
        at += 16 + (n + 7) // 8 * 8
    return out


def guess(path, give_back, lease_ids, n):
    """An unrelated process at the share point at PATH: n claims of random
    tokens, n fetches of random tokens, give-backs of the tokens GIVE_BACK,
    releases of LEASE_IDS (and their neighbours): the statuses of the
    answers (errnames), or None without libcucore."""
    import ctypes

    lib = libcucore()
    if lib is None:
        return None
    ch, m = ctypes.c_void_p(), ctypes.c_void_p()

    def send(data):
        msg = ctypes.c_void_p()
        assert lib.cuc_msg_from_bytes(data, len(data), ctypes.byref(msg)) == 0
        assert lib.cuc_channel_send(ch, msg) == 0
        lib.cuc_msg_destroy(msg)

    def answers(k):
        got = []
        while len(got) < k:
            assert lib.cuc_channel_recv(ch, 10000, ctypes.byref(m)) == 0
            buf, size = ctypes.c_void_p(), ctypes.c_size_t()
            assert lib.cuc_msg_to_bytes(m, ctypes.byref(buf), ctypes.byref(size)) == 0
            got += confirms_of(ctypes.string_at(buf, size.value))
            ctypes.CDLL(None).free(buf)
            lib.cuc_msg_destroy(m)
        return got

    assert lib.cuc_channel_connect(path.encode(), 10000, ctypes.byref(ch)) == 0
    assert lib.cuc_channel_recv(ch, 10000, ctypes.byref(m)) == 0  # the hello
    lib.cuc_msg_destroy(m)
    statuses = []
    for flags in (0, 1):  # plain claims, fetches
        send(claims_message([os.urandom(16) for _ in range(n)], flags))
        statuses += [lib.cuc_errname(s).decode() for _, s in answers(n)]
    send(claims_message([bytes.fromhex(t) for t in give_back], 2))
    ids = [i + d for i in lease_ids for d in range(-2, 3)]
    assert lib.cuc_channel_release(ch, (ctypes.c_uint64 * len(ids))(*ids), len(ids)) == 0
    send(claims_message([os.urandom(16)], 0))  # answered after all of the above was read
    statuses += [lib.cuc_errname(s).decode() for _, s in answers(1)]
    lib.cuc_channel_destroy(ch)
    return statuses


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
    if op == "close_first":  # the first buffer we hold (a list's first too)
        flat(HELD)[0].close()
        return 0
    if op == "drop":
        for o in flat(HELD):
            if hasattr(o, "close"):
                o.close()
        HELD.clear()
        return 0
    if op == "close_many":  # (on_stream,): what we hold, together: the driver calls it made
        calls = ("cuMemFreeAsync", "cuStreamSynchronize")
        stream = cucore.Stream(HELD[0].device) if objs[0] else None
        before = [sim_count(c) for c in calls]
        cucore.Buffer.close_many(HELD, stream=stream)
        closed = [o.closed for o in HELD]
        HELD.clear()
        return closed, [None if b is None else sim_count(c) - b for c, b in zip(calls, before)]
    if op == "close_mixed":  # what we hold, in chunks of 8: close() and close_many by turns
        for i in range(0, len(HELD), 8):
            if i % 16:
                cucore.Buffer.close_many(HELD[i:i + 8])
            else:
                for o in HELD[i:i + 8]:
                    o.close()
        n = len(HELD)
        HELD.clear()
        return n
    if op == "close_failing":  # (how, spec): what we hold closed while SPEC fails calls
        import ctypes
        how, spec = objs
        lib = sim_lib()
        stream = cucore.Stream(HELD[0].device)
        codes = []
        assert lib.cucore_sim_fail(spec.encode(), None, 0) == 0
        try:
            if how in ("close_many", "close_many_stream"):
                try:
                    cucore.Buffer.close_many(HELD, stream=stream if how == "close_many_stream"
                                             else None)
                except cucore.Error as e:
                    codes.append(e.code)
            for o in HELD:
                try:
                    o.close(stream=stream if how == "stream" else None)
                except cucore.Error as e:
                    codes.append(e.code)
            if how in ("close", "close_many"):
                time.sleep(0.2)  # the share point's thread waits for the frees meanwhile
            lib.cucore_sim_faults.restype = ctypes.c_ulonglong
            faults = lib.cucore_sim_faults()
        finally:
            assert lib.cucore_sim_fail(b"", None, 0) == 0
        closed = [o.closed for o in HELD]
        HELD.clear()
        return closed, codes, faults
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
    if op == "export_pool":  # (ordinal,): a pool's pickle (its fd fetched from us when loaded)
        pool = cucore.Pool(cucore.Device(objs[0]))
        HELD.append(pool)
        return pickle.dumps(pool)
    if op == "fork_sleeper":  # a fork child that sleeps, holding what it inherited: its pid
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        return pid
    if op == "exit_now":  # no answer, no release: as if killed
        os._exit(0)
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
    if op == "starve_fds":  # until "feed_fds": no fd free here (RLIMIT_NOFILE), then ours back
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        KEPT["nofile"] = soft
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
        KEPT["starved"] = []
        try:
            while True:
                KEPT["starved"].append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        return True
    if op == "feed_fds":
        import resource
        for fd in KEPT.pop("starved"):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (KEPT.pop("nofile"), resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        return True
    if op == "load_starved":  # (data,): loaded with no fd free here: the error, or what it is
        handle("starve_fds", ())
        try:
            return describe(pickle.loads(objs[0]))
        except cucore.Error as e:
            return error_of(e)
        finally:
            handle("feed_fds", ())
    if op == "share_stats":  # our holds, unclaimed ones, and the pools' lease counts
        pools = [o for o in HELD if isinstance(o, cucore.Pool)]
        stats = cucore._core._share_stats()
        return ({k: stats[k] for k in ("holds", "unclaimed")}, [p.lease_count() for p in pools])
    if op == "share_point":
        return cucore.share_point()
    if op == "guess":
        return guess(*objs)
    if op == "lease_wait":  # every pool of ours: all its leases ended within objs[0] s
        try:
            for o in HELD:
                if isinstance(o, cucore.Pool):
                    o.lease_wait(0, timeout=objs[0])
            return True
        except cucore.TimeoutError:
            return False
    if op == "view_drop_parent":  # a view of what we hold kept, the parents dropped
        views = [o.view(0, o.size) if o.size == 1 else o.view(1, o.size - 1) for o in HELD]
        for o in HELD:
            o.close()
        HELD[:] = views
        return len(views)
    if op == "fds":
        return len(os.listdir("/proc/self/fd"))
    if op == "count":  # (name,): the simulator's count of a driver call here
        return sim_count(objs[0])
    if op == "reshare":  # what we hold, shared on as itself (A -> B -> A): the pickles
        return [pickle.dumps(cucore.share(o)) for o in HELD]
    if op == "load":  # (data, ...): pickles loaded and kept: the error, or how many
        try:
            HELD.extend(pickle.loads(d) for d in objs)
        except cucore.Error as e:
            return error_of(e)
        return len(HELD)
    if op == "listen":  # (path,): a listener for "accept_recv"
        KEPT["listener"] = cucore.listen(objs[0])
        return True
    if op == "accept_recv":  # one channel accepted, one message received and kept
        ch = KEPT["listener"].accept(timeout=10)
        got = ch.recv(timeout=10)
        KEPT["channel"] = ch
        HELD.extend(o for o in got if isinstance(o, cucore.Buffer))
        return [describe(o) for o in HELD]
    if op == "recv_failing":  # (k,): k messages that cannot resolve here: fds before, after
        ch = KEPT["listener"].accept(timeout=10)
        before = len(os.listdir("/proc/self/fd"))
        errors = []
        for _ in range(objs[0]):
            try:
                ch.recv(timeout=10)
            except cucore.Error as e:
                errors.append(type(e).__name__)
        after = len(os.listdir("/proc/self/fd"))
        ch.close()
        return before, after, errors
    if op == "send_on":  # (path,): what we hold, sent with its pool on a cucore Channel
        ch = cucore.Channel.connect(objs[0])
        bufs = [o for o in HELD if isinstance(o, cucore.Buffer)]
        ch.send(*[x for b in bufs for x in (b.pool, b)])
        KEPT["channel"] = ch
        KEPT["pools"] = [b.pool for b in bufs]
        return [b.lease_count() for b in bufs]
    if op == "close_channel":  # its leases linger: a lease wait reads their releases
        KEPT.pop("channel").close()
        for pool in KEPT.pop("pools"):
            pool.lease_wait(0, timeout=10)
        return True
    if op == "pump_channel":  # the channel kept open: its releases read by pumping it
        deadline = time.time() + 10
        while KEPT["channel"].lease_count() and time.time() < deadline:
            KEPT["channel"].pump(timeout=0.05)
        return KEPT["channel"].lease_count()
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
