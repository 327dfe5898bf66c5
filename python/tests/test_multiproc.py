"""cucore objects through multiprocessing (spawn, forkserver, fork) and
ProcessPoolExecutor, to children that see the GPUs in another order."""
import concurrent.futures
import io
import itertools
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import cucore
import workers
from conftest import fd_count
from test_objects import PTX

N = len(cucore.devices())
PERMS = [",".join(map(str, p)) for p in itertools.permutations(range(N))]
# Buffers cost more: the identity, the reverse and one rotation.
SOME = sorted({",".join(map(str, range(N))), ",".join(map(str, reversed(range(N)))),
               ",".join(map(str, list(range(1, N)) + [0]))})


class Child:
    """A child process that receives (op, objects) through a Pipe."""

    def __init__(self, method, visible):
        ctx = multiprocessing.get_context(method)
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=workers.child_main, args=(visible, theirs))
        self.proc.start()
        theirs.close()

    def call(self, op, *objs):
        self.conn.send((op, objs))
        return self.conn.recv()

    def close(self):
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(30)
        self.conn.close()
        self.proc.close()


def ordinal_in(visible, uuids, uuid):
    """The ordinal the child should give the GPU with this UUID."""
    return [uuids[int(i)] for i in visible.split(",")].index(uuid)


def value_objects():
    devs = cucore.devices()
    objs = list(devs)
    objs += [cucore.Stream.legacy(d) for d in devs]
    objs += [cucore.Stream.per_thread(d) for d in devs]
    objs += [cucore.Kernel(PTX, "twice"), cucore.LaunchConfig((4, 2), 64, shared_mem=128)]
    return objs


def check_values(got, visible, uuids):
    devs = cucore.devices()
    for i, d in enumerate(devs):
        assert got[i] == ("device", d.uuid, ordinal_in(visible, uuids, d.uuid))
        assert got[N + i] == ("stream", "legacy", d.uuid)
        assert got[2 * N + i] == ("stream", "per-thread", d.uuid)
    k = cucore.Kernel(PTX, "twice")
    assert got[3 * N] == ("kernel", "twice", "ptx", k.hash)
    assert got[3 * N + 1] == ("config", (4, 2, 1), (64, 1, 1), 128, None, False)


@pytest.mark.parametrize("visible", PERMS)
def test_values_every_permutation(visible, uuids):
    child = Child("spawn", visible)
    try:
        check_values(child.call("describe", *value_objects()), visible, uuids)
    finally:
        child.close()


def test_visible_by_uuid(uuids):
    visible = ",".join(reversed(uuids))
    child = Child("spawn", visible)
    try:
        got = child.call("describe", *cucore.devices())
        assert [g[1:] for g in got] == [(u, N - 1 - i) for i, u in enumerate(uuids)]
    finally:
        child.close()


@pytest.mark.skipif(N < 2, reason="needs a second GPU to leave one out")
def test_not_visible_named(uuids):
    """A receiver that cannot see a buffer's GPU fails to import it
    (NotVisibleError naming the UUID) and ends nothing but its own claim:
    the hold stays for the pickle's other receivers, one of which then
    reads the buffer."""
    blind = Child("spawn", ",".join(map(str, range(1, N))))
    other = Child("spawn", None)
    try:
        got = blind.call("describe", cucore.Device(0))
        assert got[0] == "error" and got[1] == "NotVisibleError"
        assert got[2] == "CUC_E_NOT_VISIBLE" and uuids[0] in got[3]
        pool = cucore.Pool(0)
        buf = pool.allocate(8)
        buf.copy_from(b"visible!")
        data = pickle.dumps(buf)
        buf.close()  # the hold keeps it
        got = blind.call("describe", Raw(data))
        assert got[0] == "error" and got[1] == "NotVisibleError" and uuids[0] in got[3]
        time.sleep(0.2)  # a claim given back, or ended, would have arrived
        assert pool.lease_count() == 1  # the hold, for the others
        assert other.call("hold", Raw(data)) == 1
        assert other.call("describe_held") == [("buffer", uuids[0], 8, True, b"visible!")]
        other.call("drop")
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0
        # the blind child goes on: a visible device still resolves
        assert blind.call("describe", cucore.Device(1 % N))[0][1] == uuids[1 % N]
    finally:
        blind.close()
        other.close()


def buffers_both_ways(child, visible, uuids):
    devs = cucore.devices()
    pools = [cucore.Pool(d) for d in devs]
    bufs = []
    for i, p in enumerate(pools):
        b = p.allocate(256 + i)
        b.copy_from(bytes([i + 1]) * b.size)
        bufs.append(b)
    got = child.call("describe", *pools, *bufs)
    for i, d in enumerate(devs):
        assert got[i] == ("pool", d.uuid, pools[i].id, True, "device")
        assert got[N + i] == ("buffer", d.uuid, 256 + i, True, bytes([i + 1]) * (256 + i))
    # the other way: the child writes into our memory
    for i, b in enumerate(bufs):
        got = child.call("write", b, bytes([0xA0 + i]) * b.size)
        assert got[0] == "buffer" and got[1] == devs[i].uuid
        assert b.to_bytes() == bytes([0xA0 + i]) * b.size
    child.call("drop")
    for b in bufs:
        b.close()
    for p in pools:  # the child's releases came back: no lease, frees ran
        p.lease_wait(0, timeout=10)
        assert p.lease_count() == 0


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("visible", SOME)
def test_events_pools_buffers_vmm(method, visible, uuids):
    child = Child(method, visible)
    try:
        check_values(child.call("describe", *value_objects()), visible, uuids)
        ev = cucore.Event(0, ipc=True)
        ev.record()
        ev.synchronize()
        assert child.call("describe", ev) == [("event", uuids[0], True, True)]
        buffers_both_ways(child, visible, uuids)
        devs = cucore.devices()
        vmm = cucore.VMM(devs[-1], 4096, peers=devs[:-1])
        vmm.copy_from(b"\x5a" * 64)
        got = child.call("describe", vmm)[0]
        assert got == ("vmm", devs[-1].uuid, tuple(d.uuid for d in devs[:-1]),
                       ("rw",) * (N - 1), True, b"\x5a" * 64)
        child.call("drop")
    finally:
        child.close()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_process_pool_executor(method, uuids):
    visible = ",".join(map(str, reversed(range(N))))
    with concurrent.futures.ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context(method),
            initializer=workers.set_visible, initargs=(visible,)) as ex:
        got = ex.submit(workers.pool_task, "describe", *value_objects()).result(60)
        check_values(got, visible, uuids)
        pool = cucore.Pool(1 % N)
        buf = pool.allocate(100)
        buf.copy_from(b"e" * 100)
        got = ex.submit(workers.pool_task, "describe", pool, buf).result(60)
        assert got[1] == ("buffer", uuids[1 % N], 100, True, b"e" * 100)
        ex.submit(workers.pool_task, "write", buf, b"E" * 100).result(60)
        assert buf.to_bytes() == b"E" * 100
        results = list(ex.map(workers.pool_task, ["describe"] * 8, [buf] * 8))
        assert all(r[0][4] == b"E" * 100 for r in results)
        ev = cucore.Event(0, ipc=True)
        ev.record()
        devs = cucore.devices()
        vmm = cucore.VMM(devs[-1], 4096, peers=devs[:-1])
        vmm.copy_from(b"\x77" * 64)
        got = ex.submit(workers.pool_task, "describe", ev, vmm).result(60)
        assert got[0][:3] == ("event", uuids[0], True)
        assert got[1] == ("vmm", devs[-1].uuid, tuple(d.uuid for d in devs[:-1]),
                          ("rw",) * (N - 1), True, b"\x77" * 64)


def test_pickled_twice_is_one_object():
    child = Child("spawn", None)
    try:
        pool = cucore.Pool(0)
        buf = pool.allocate(40)
        buf.copy_from(b"t" * 40)
        # two pickles (two records, two leases) and the same bytes loaded twice
        first, second = pickle.dumps(buf), pickle.dumps(buf)
        assert first != second
        assert child.call("same", Raw(first), Raw(second), Raw(first)) == [True] * 3
        assert child.call("describe", buf)[0][4] == b"t" * 40
        assert buf.lease_count() >= 1
        child.call("drop")
        pool.lease_wait(0, timeout=10)
        assert buf.lease_count() == 0
    finally:
        child.close()


def test_a_b_c(uuids):
    b_child = Child("spawn", ",".join(map(str, reversed(range(N)))))
    c_child = Child("spawn", ",".join(map(str, list(range(1, N)) + [0])))
    try:
        pool = cucore.Pool(2 % N)
        buf = pool.allocate(128)
        buf.copy_from(b"abc" * 42 + b"!!")
        (again,) = b_child.call("repickle", buf)  # B holds it and pickles it on
        assert b_child.call("share_point").encode() in again  # B's share point
        got = c_child.call("describe", Raw(again))
        assert got == [("buffer", uuids[2 % N], 128, True, b"abc" * 42 + b"!!")]
        c_child.call("drop")
        b_child.call("drop")
        pool.lease_wait(0, timeout=10)
    finally:
        c_child.close()
        b_child.close()


class Raw:
    """Pickles as bytes that already are a pickle (C unpickles them)."""

    def __init__(self, data):
        self.data = data

    def __reduce__(self):
        return (pickle.loads, (self.data,))


def detached(data):
    """The detached message a pickle of a pool, buffer or VMM carries."""
    class Args(pickle.Unpickler):
        def find_class(self, module, name):
            assert (module, name) == ("cucore", "_attach")
            return lambda b: b
    return Args(io.BytesIO(data)).load()


def token_of(data):
    """The hold's token in a pickle's share record (docs/wire-format.md:
    after the message header, the record header, the point and the boot
    id), as its messages name it."""
    return detached(data)[72:88].hex()


def claimed():
    """Holds of ours that receivers claimed and still hold."""
    stats = cucore._core._share_stats()
    return stats["holds"] - stats["unclaimed"]


def wait_claimed(n, timeout=10):
    """Until n of our holds are claimed (the importers' claims arrived; an
    earlier test's receiver may still be closing its own)."""
    deadline = time.time() + timeout
    while claimed() < n and time.time() < deadline:
        time.sleep(0.01)
    assert claimed() >= n


def exit_with_a_lease(child, script, releases, env=None):
    """SCRIPT, run in a new process, prints one pickle as hex, then exits
    at a line on stdin. CHILD holds what it pickled; the exporter is told
    to exit and, with RELEASES, CHILD drops it half a second later, while
    the exporter must still wait for the lease. Returns (CHILD's hold
    count, what it describes of the object, the exporter's stderr, seconds
    from the exit line to the end)."""
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    data = bytes.fromhex(p.stdout.readline().decode())
    held = child.call("hold", Raw(data))
    described = child.call("describe_held")[-1]
    p.stdin.write(b"exit\n")
    p.stdin.flush()
    start = time.monotonic()
    if releases:
        time.sleep(0.5)
        assert p.poll() is None  # it waits for the lease
        child.call("drop")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return held, described, err, time.monotonic() - start


def warm_share_point():
    """This process's share point started and its socket made, as a pickle
    of a pool, buffer or VMM does (loaded here: no hold is left)."""
    pool = cucore.Pool(0)
    assert pickle.loads(pickle.dumps(pool)) is pool
    return cucore.share_point()


def test_killed_child_frees_run_and_fds_back(uuids):
    pool = cucore.Pool(1 % N)
    warm_share_point()
    warm = Child("spawn", None)  # the first child starts multiprocessing's machinery
    warm.close()
    base = fd_count()
    child = Child("spawn", None)
    bufs = [pool.allocate(1 << 12) for _ in range(8)]
    assert child.call("hold", *bufs) == 8
    wait_claimed(8)  # the child's claims (sent without waiting) made them leases
    for b in bufs:
        b.close()  # our last reference: the frees wait for the child's leases
    assert pool.lease_count() == 8
    os.kill(child.proc.pid, signal.SIGKILL)
    child.proc.join(10)
    pool.lease_wait(0, timeout=10)
    assert pool.lease_count() == 0
    child.conn.close()
    child.proc.close()
    deadline = time.time() + 10
    while fd_count() != base and time.time() < deadline:
        time.sleep(0.05)  # the share point's thread closes the channel
    assert fd_count() == base


def test_exporter_gone_names_its_share_point():
    """The process that pickled a buffer exited (its share point stopped,
    its socket removed): loading the pickle raises ExporterGoneError naming
    the share point, and imports nothing."""
    child = Child("spawn", None)
    data = child.call("export", 0)
    path = child.call("share_point")
    child.close()
    with pytest.raises(cucore.ExporterGoneError) as e:
        pickle.loads(data)
    assert path in str(e.value) and "is gone" in str(e.value)


def test_foreign_host_refused():
    """Bytes whose share record names another boot id (another machine, or
    this one before a reboot) are refused before anything is tried."""
    pool = cucore.Pool(0)
    buf = pool.allocate(8)
    fn, (data,) = buf.__reduce__()
    assert fn is cucore._core._attach
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = bytes.fromhex(f.read().strip().replace("-", ""))
    # the message header, the share record's header, its point: then the boot id
    assert data[56:72] == boot
    forged = data[:56] + bytes(b ^ 0x5a for b in boot) + data[72:]

    class Forged:
        def __reduce__(self):
            return (fn, (forged,))
    with pytest.raises(cucore.ForeignHostError) as e:
        pickle.loads(pickle.dumps(Forged()))
    assert e.value.code == "CUC_E_FOREIGN_HOST" and boot.hex() in str(e.value).replace("-", "")
    assert buf.lease_count() == 1  # the hold, untouched
    assert fn(data) is buf  # the real bytes: ours, and the hold ends
    assert buf.lease_count() == 0
    # fd-free objects resolve on any host: their pickles carry no host
    assert pickle.loads(pickle.dumps(cucore.Device(0))) is cucore.Device(0)


@pytest.mark.skipif(bool(os.environ.get("CUCORE_TEST_TSAN")),
                    reason="ThreadSanitizer cannot start threads in the fork child of a "
                    "threaded process (the plain and ASan suites run it)")
def test_fork_children(uuids):
    """A fork child inherits our objects inert (CUDA state does not survive
    fork); what it receives by pickle resolves by UUID where that needs no
    driver call, and what needs the driver fails with a cucore.Error."""
    pool = cucore.Pool(0)
    buf = pool.allocate(16)
    workers.HELD[:] = [buf, pool]
    try:
        child = Child("fork", None)
    finally:
        workers.HELD.clear()
    try:
        got = child.call("inherited")
        assert len(got) == 2
        for g in got:
            assert g[0] == "error" and "inherited through fork" in g[3]
        assert child.call("describe", cucore.Device(1 % N)) == [("device", uuids[1 % N], 1 % N)]
        got = child.call("describe", buf)
        assert got[0] == "error", got
    finally:
        child.close()
    assert buf.to_bytes() is not None  # ours still works


def test_buffer_batch_is_a_list(uuids):
    """A BufferBatch arrives as a list of imported buffers, their pools
    fetched once; a buffer of it pickled alone is the same object there."""
    child = Child("spawn", ",".join(map(str, reversed(range(N)))))
    try:
        devs = cucore.devices()
        pools = [cucore.Pool(d) for d in devs]
        bufs = [pools[i % N].allocate(64 + i) for i in range(3 * N)]
        for i, b in enumerate(bufs):
            b.copy_from(bytes([i]) * b.size)
        held = cucore._core._share_stats()["holds"]  # earlier tests' pickles never loaded
        data = pickle.dumps(cucore.BufferBatch(bufs))
        assert len(data) < 100 + 400 * len(bufs)  # the list's own bytes, then each message's
        assert cucore._core._share_stats()["holds"] == held + len(bufs)  # one a buffer
        assert pickle.loads(data) == bufs  # loaded here: the same objects, the holds end
        assert cucore._core._share_stats()["holds"] == held
        got = child.call("describe", *child_list(cucore.BufferBatch(bufs)))
        assert got == [("buffer", devs[i % N].uuid, 64 + i, True, bytes([i]) * (64 + i))
                       for i in range(3 * N)]
        assert child.call("batch_identity", cucore.BufferBatch(bufs[:2]), bufs[0]) is True
        child.call("drop")
        for b in bufs:
            b.close()
        for p in pools:
            p.lease_wait(0, timeout=10)
            assert p.lease_count() == 0
    finally:
        child.close()
    assert pickle.loads(pickle.dumps(cucore.BufferBatch([]))) == []


def child_list(batch):
    """Objects for Child.call: the batch's buffers as separate arguments
    would pickle one by one, so the batch travels whole and unpacks there."""
    return [batch]


def exporter_child(hold_ms):
    """A child that exports, with its holds lasting hold_ms."""
    old = os.environ.get("CUCORE_SHARE_HOLD_MS")
    os.environ["CUCORE_SHARE_HOLD_MS"] = str(hold_ms)
    try:
        return Child("spawn", None)
    finally:
        if old is None:
            del os.environ["CUCORE_SHARE_HOLD_MS"]
        else:
            os.environ["CUCORE_SHARE_HOLD_MS"] = old


def test_unclaimed_holds_end_after_their_time():
    """A pickle never loaded keeps its buffer for the hold time only
    (CUCORE_SHARE_HOLD_MS): then the exporter's frees run."""
    child = exporter_child(400)
    try:
        child.call("export_n", 0, 3)  # never loaded
        stats, counts = child.call("share_stats")
        assert stats == {"holds": 3, "unclaimed": 3} and counts == [3]
        time.sleep(0.5)
        assert child.call("lease_wait", 5) is True
        stats, counts = child.call("share_stats")
        assert stats == {"holds": 0, "unclaimed": 0} and counts == [0]
    finally:
        child.close()


def test_load_after_the_hold_time_is_refused():
    """A pickle loaded within its hold time reads; one loaded past it is
    refused with CUC_E_NOT_FOUND naming its token and CUCORE_SHARE_HOLD_MS,
    and hands out no memory: the load raises (a receiver that must fetch
    the pool) or the first use does (one that has it), never the bytes."""
    child = exporter_child(1000)
    fresh = Child("spawn", None)
    try:
        early, late = child.call("export_n", N - 1, 2)
        b0 = pickle.loads(early)
        assert b0.to_bytes() == bytes([0x30]) * 32
        time.sleep(1.3)
        token = token_of(late)
        b1 = pickle.loads(late)  # the pool is here: mapped, its claim refused
        with pytest.raises(cucore.Error) as e:
            b1.to_bytes()
        assert e.value.code == "CUC_E_NOT_FOUND"
        assert token in str(e.value) and "CUCORE_SHARE_HOLD_MS" in str(e.value)
        with pytest.raises(cucore.Error):
            b1.ptr
        b1.close()
        got = fresh.call("describe", Raw(late))  # no pool there: the fetch is refused
        assert got[:3] == ("error", "Error", "CUC_E_NOT_FOUND") and token in got[3], got
        b0.close()
        assert child.call("lease_wait", 10) is True
        deadline = time.time() + 10  # a hold goes right after its last lease's end
        while child.call("share_stats") != ({"holds": 0, "unclaimed": 0}, [0]):
            assert time.time() < deadline
            time.sleep(0.02)
    finally:
        child.close()
        fresh.close()


def test_a_b_c_b_drops_first(uuids):
    """B closes its buffer while C still uses the one it got from B: B's
    lease on A lasts until C's ended, and A's free waits for both."""
    b_child = Child("spawn", None)
    c_child = Child("spawn", ",".join(map(str, reversed(range(N)))))
    try:
        pool = cucore.Pool(0)
        buf = pool.allocate(64)
        buf.copy_from(b"abc!" * 16)
        (again,) = b_child.call("repickle", buf)
        assert c_child.call("hold", Raw(again)) == 1
        buf.close()
        b_child.call("drop")  # B's object goes; C's lease keeps B's import and B's lease
        time.sleep(0.2)
        assert pool.lease_count() == 1
        got = c_child.call("describe_held")  # C still reads what A wrote
        assert got == [("buffer", uuids[0], 64, True, b"abc!" * 16)]
        c_child.call("drop")
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0
    finally:
        c_child.close()
        b_child.close()


def test_share_point_ignores_junk_and_goes_on():
    """A peer that sends the share point what it does not serve gets
    nothing back: messages of objects are dropped and the connection
    stays; a message with fds ends the connection. The holds are unchanged
    either way."""
    pool = cucore.Pool(0)
    buf = pool.allocate(16)
    held = pickle.dumps(buf)  # a hold that junk must not end
    ch = cucore.Channel.connect(cucore.share_point())
    try:
        with pytest.raises(cucore.Error, match="share record"):
            ch.recv(timeout=10)  # the share point's hello, which Python does not resolve
        for request in ([cucore.Device(0)], [cucore.Stream.legacy(0)],
                        [cucore.LaunchConfig(1, 1)] * 100, [cucore.Kernel(PTX, "twice")]):
            ch.send(*request)
        with pytest.raises(cucore.TimeoutError):  # no answer, and still connected
            ch.recv(timeout=0.5)
        junk = os.memfd_create("junk")
        ch.send(junk)
        os.close(junk)
        with pytest.raises(cucore.PeerClosedError):
            ch.recv(timeout=10)
    finally:
        ch.close()
    assert buf.lease_count() == 1
    assert pickle.loads(held) is buf  # the hold was still there
    assert buf.lease_count() == 0


def test_failed_recv_leaves_no_fd(tmp_path):
    """Messages of an fd and a device the receiver cannot see: each recv
    raises NotVisibleError and the fd goes with the message (taken only
    once every other record resolved), so a peer cannot fill the
    receiver's fd table with messages that fail."""
    if N < 2:
        pytest.skip("needs a device the child cannot see")
    path = str(tmp_path / "r.sock")
    child = Child("spawn", "0")
    try:
        assert child.call("listen", path) is True
        ch = cucore.Channel.connect(path, timeout=10)
        with open("/dev/null") as f:
            for _ in range(20):
                ch.send(f.fileno(), cucore.Device(N - 1))
        before, after, errors = child.call("recv_failing", 20)
        assert errors == ["NotVisibleError"] * 20
        assert after == before
        ch.close()
    finally:
        child.close()


@pytest.mark.skipif(bool(os.environ.get("CUCORE_TEST_TSAN")),
                    reason="ThreadSanitizer and fork in a threaded process (as "
                    "test_fork_children)")
def test_fork_child_closing_inherited_channels_closes_its_copies(tmp_path):
    """A fork child that closes the Channel and Listener it inherited
    closes its copies of their sockets (the handles stay the parent's): the
    parent's close then reaches the peer while the child lives on, and the
    parent's listener still accepts at its file."""
    a, b = cucore.Channel.pair()
    path = str(tmp_path / "l.sock")
    listener = cucore.listen(path)
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # no CUDA here: sockets only
        try:
            a.close()
            b.close()
            listener.close()
            os.write(ready_w, b"x")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"x"
        assert os.path.exists(path)
        peer = cucore.Channel.connect(path, timeout=5)
        listener.accept(timeout=5).close()
        peer.close()
        a.close()
        with pytest.raises(cucore.PeerClosedError):
            b.recv(timeout=10)
    finally:
        os.write(done_w, b"x")
        os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, done_r, done_w):
            os.close(fd)
        b.close()
        listener.close()
