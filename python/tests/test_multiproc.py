"""cucore objects through multiprocessing (spawn, forkserver, fork) and
ProcessPoolExecutor, to children that see the GPUs in another order."""
import concurrent.futures
import itertools
import multiprocessing
import os
import pickle
import signal
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
    child = Child("spawn", ",".join(map(str, range(1, N))))
    try:
        got = child.call("describe", cucore.Device(0))
        assert got[0] == "error" and got[1] == "NotVisibleError"
        assert got[2] == "CUC_E_NOT_VISIBLE" and uuids[0] in got[3]
        pool = cucore.Pool(0)
        buf = pool.allocate(8)
        got = child.call("describe", buf)
        assert got[0] == "error" and uuids[0] in got[3]
        # the child could not take it: the lease came back at once
        buf.close()
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0
        # the child goes on: a visible device still resolves
        assert child.call("describe", cucore.Device(1 % N))[0][1] == uuids[1 % N]
    finally:
        child.close()


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
        assert b"cucore-share-%d-" % b_child.proc.pid in again  # B's share point
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


def wait_claimed(n, timeout=10):
    """Until n of our holds are leases (the importers' claims arrived)."""
    deadline = time.time() + timeout
    while cucore._core._share_stats()["leases"] < n and time.time() < deadline:
        time.sleep(0.01)
    assert cucore._core._share_stats()["leases"] == n


def test_killed_child_frees_run_and_fds_back(uuids):
    pool = cucore.Pool(1 % N)
    cucore.share_point()
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


def test_exporter_gone_names_pid():
    child = Child("spawn", None)
    data = child.call("export", 0)
    pid = child.proc.pid
    child.close()
    with pytest.raises(cucore.ExporterGoneError) as e:
        pickle.loads(data)
    assert str(pid) in str(e.value) and "is gone" in str(e.value)


def test_foreign_host_refused():
    pool = cucore.Pool(0)
    buf = pool.allocate(8)
    fn, (kind, host, path, pid, payload) = buf.__reduce__()
    assert fn is cucore._core._load_shared and host == cucore.host_id()

    class Forged:
        def __reduce__(self):
            return (fn, (kind, "elsewhere/0123456789abcdef", path, pid, payload))
    with pytest.raises(cucore.ForeignHostError) as e:
        pickle.loads(pickle.dumps(Forged()))
    assert "elsewhere/0123456789abcdef" in str(e.value) and cucore.host_id() in str(e.value)
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
        assert len(data) < 100 + 200 * len(bufs)  # the list's own bytes, then each record's
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
    """A pickle never loaded keeps its buffer for the hold time only: then
    the exporter's frees run (the policy of python/src/hold.c)."""
    child = exporter_child(400)
    try:
        child.call("export_n", 0, 3)  # never loaded
        stats, counts = child.call("share_stats")
        assert stats == {"holds": 3, "leases": 0} and counts == [3]
        time.sleep(0.5)
        assert child.call("lease_wait", 5) is True
        stats, counts = child.call("share_stats")
        assert stats == {"holds": 0, "leases": 0} and counts == [0]
    finally:
        child.close()


def test_late_load_claims_synchronously():
    """Loaded past half its hold time, a pickle's claim is a round trip (the
    hold cannot end under the import); past the whole time it is refused,
    saying why, and nothing is imported."""
    child = exporter_child(1000)
    try:
        early, late, too_late = child.call("export_n", N - 1, 3)
        b0 = pickle.loads(early)  # claimed without waiting
        time.sleep(0.6)
        b1 = pickle.loads(late)  # past 500 ms: claimed before it returns
        stats, _ = child.call("share_stats")
        assert stats["leases"] >= 1 and stats["holds"] <= 2
        assert b1.to_bytes() == bytes([0x31]) * 32 and b0.to_bytes() == bytes([0x30]) * 32
        time.sleep(0.5)
        with pytest.raises(cucore.Error) as e:
            pickle.loads(too_late)
        assert "CUCORE_SHARE_HOLD_MS" in str(e.value) and str(child.proc.pid) in str(e.value)
        b0.close()
        b1.close()
        assert child.call("lease_wait", 10) is True
        assert child.call("share_stats") == ({"holds": 0, "leases": 0}, [0])
    finally:
        child.close()


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


def test_share_point_refuses_junk_and_goes_on():
    """Requests that are not what the share point serves (no fd record, an
    fd of an unknown tag, a memfd past the size limit) are refused one by
    one, and the connection and the holds are unchanged."""
    pool = cucore.Pool(0)
    buf = pool.allocate(16)
    held = pickle.dumps(buf)  # a hold that junk must not end
    before = cucore._core._share_stats()
    ch = cucore.Channel.connect(cucore.share_point())
    try:
        junk = os.memfd_create("junk")
        os.write(junk, b"\xff" * 24)
        big = os.memfd_create("big")
        os.ftruncate(big, 1 << 20)
        for request in ([cucore.Device(0)], [junk], [big], [junk, junk]):
            ch.send(*request)
            (fd,) = ch.recv(timeout=10)  # a refusal: one fd record, its text in a memfd
            assert isinstance(fd, int)
            os.close(fd)
        os.close(junk)
        os.close(big)
    finally:
        ch.close()
    assert cucore._core._share_stats() == before
    assert pickle.loads(held) is buf  # the hold was still there


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
