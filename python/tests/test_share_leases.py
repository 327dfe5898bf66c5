"""Leases of buffers shared through pickle (python/src/hold.c, claim.c,
park.c): the same pickle loaded by two processes, a claim that comes too
late, and a buffer received by pickle and sent on through a cucore
Channel."""
import io
import os
import pickle
import tempfile
import time

import pytest

import cucore
import workers
from conftest import fd_count
from test_multiproc import Child, Raw, exporter_child, wait_claimed

N = len(cucore.devices())


def settle_fds(base, timeout=10):
    deadline = time.time() + timeout
    while fd_count() != base and time.time() < deadline:
        time.sleep(0.05)  # the share point's threads close their channels
    return fd_count()


def token_of(data):
    """The hold token a buffer pickle's record carries (its lease id: after
    the message header, the record header and 32 bytes of a buffer
    record; docs/wire-format.md)."""
    class Args(pickle.Unpickler):
        def find_class(self, module, name):
            return lambda *args: args

    kind, host, path, pid, record = Args(io.BytesIO(data)).load()
    assert kind == "buffer" and pid == os.getpid()
    return int.from_bytes(record[72:80], "little")


def reused_pool_reads(pool, size, fill, n=8):
    """Buffers allocated and written now: memory freed under a receiver
    would be handed out (and overwritten) here."""
    bufs = [pool.allocate(size) for _ in range(n)]
    for b in bufs:
        b.copy_from(fill * size)
    return bufs


def test_same_pickle_two_receivers():
    """One pickle's bytes loaded by two spawned children: each gets a lease
    of its own, and the exporter's free waits for both."""
    pool = cucore.Pool(0)
    cucore.share_point()
    warm = Child("spawn", None)  # multiprocessing's machinery starts with the first
    warm.close()
    base = fd_count()
    first, second = Child("spawn", None), Child("spawn", None)
    try:
        buf = pool.allocate(96)
        buf.copy_from(b"twice!" * 16)
        data = pickle.dumps(buf)
        buf.close()  # the hold keeps it
        assert first.call("hold", Raw(data)) == 1
        assert second.call("hold", Raw(data)) == 1
        wait_claimed(2)  # two leases of one token
        assert pool.lease_count() == 2
        expect = [("buffer", cucore.Device(0).uuid, 96, True, b"twice!" * 16)]
        assert first.call("describe_held") == expect
        assert second.call("describe_held") == expect
        first.call("drop")
        deadline = time.time() + 10
        while pool.lease_count() > 1 and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert pool.lease_count() == 1  # the second's lease keeps the memory
        others = reused_pool_reads(pool, 96, b"\xee")
        assert second.call("describe_held") == expect
        second.call("drop")
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0 and cucore._core._share_stats()["leases"] == 0
        for b in others:
            b.close()
    finally:
        first.close()
        second.close()
    assert settle_fds(base) == base


def test_claim_after_every_lease_ended_is_stale():
    """The same bytes loaded once the first receiver's lease (the only one)
    ended: the exporter had nothing to lease, says so, and the receiver's
    buffer raises naming the token and the exporter's pid."""
    pool = cucore.Pool(0)
    buf = pool.allocate(32)  # still ours: the import itself succeeds
    buf.copy_from(b"s" * 32)
    data = pickle.dumps(buf)
    first, late = Child("spawn", None), Child("spawn", None)
    try:
        assert first.call("hold", Raw(data)) == 1
        wait_claimed(1)
        first.call("drop")
        deadline = time.time() + 10
        while buf.lease_count() and time.time() < deadline:
            time.sleep(0.01)
        assert buf.lease_count() == 0
        got = late.call("flush_describe", Raw(data))
        assert got[0] == "error" and got[2] == "CUC_E_NOT_FOUND", got
        assert "token %016x" % token_of(data) in got[3]
        assert "process %d" % os.getpid() in got[3]
        assert buf.lease_count() == 0  # the late claim leased nothing
        late.call("drop")
        assert late.call("fds") > 0  # it goes on
        # without a flush: the notice is read after a later round of lease ops
        fresh = [Raw(pickle.dumps(pool.allocate(32))) for _ in range(50)]  # 50 objects there
        got = late.call("until_stale", Raw(data), *fresh)
        assert got[0] == "error" and "token %016x" % token_of(data) in got[3], got
    finally:
        first.close()
        late.close()
    buf.close()


@pytest.mark.parametrize("b_reads", ["close_channel", "pump_channel"])
def test_sent_on_through_a_channel_waits_for_its_receiver(b_reads):
    """A pickles a buffer to B; B sends it on through a cucore Channel to C
    and drops its object: A's free waits until C released it (B's claim
    on A is parked until the channel's lease ended: B reads C's release
    from the closed channel's lingering link, or by pumping it), and C
    reads A's bytes meanwhile."""
    pool = cucore.Pool(1 % N)
    b_child, c_child = Child("spawn", None), Child("spawn", None)
    path = os.path.join(tempfile.mkdtemp(prefix="cucore-test-"), "c.sock")
    try:
        buf = pool.allocate(128)
        buf.copy_from(b"on!" * 42 + b"..")
        assert c_child.call("listen", path) is True
        assert b_child.call("hold", buf) == 1
        wait_claimed(1)
        assert b_child.call("send_on", path) == [1]  # the channel's lease on B's import
        expect = [("buffer", cucore.Device(1 % N).uuid, 128, True, b"on!" * 42 + b"..")]
        assert c_child.call("accept_recv") == expect
        buf.close()
        b_child.call("drop")  # B's object goes; C still maps B's import
        time.sleep(0.3)  # B's release, were it sent, would have arrived
        assert pool.lease_count() == 1  # B's lease on A is still there
        others = reused_pool_reads(pool, 128, b"\xdd")
        assert c_child.call("describe_held") == expect
        assert b_child.call("parked", 1) == 1  # B keeps it for the channel's lease
        c_child.call("drop")  # C's release reaches B's channel
        time.sleep(0.2)
        assert pool.lease_count() == 1  # until B has read it
        if b_reads == "close_channel":
            assert b_child.call("close_channel") is True  # lingers: the wait reads it
            assert b_child.call("parked", 0) == 0
        else:
            assert b_child.call("pump_channel") == 0
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0
        for b in others:
            b.close()
    finally:
        c_child.close()
        b_child.close()
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(os.path.dirname(path))


def test_view_outlives_its_pickled_parent():
    """B makes a view of a buffer it got by pickle and drops the parent: the
    view still maps A's memory, so B's lease on A lasts until the view
    goes."""
    pool = cucore.Pool(0)
    child = Child("spawn", None)
    try:
        buf = pool.allocate(64)
        buf.copy_from(bytes(range(64)))
        assert child.call("hold", buf) == 1
        wait_claimed(1)
        buf.close()
        assert child.call("view_drop_parent") == 1  # HELD: the view alone
        time.sleep(0.3)  # a release sent at the parent's drop would be here now
        assert pool.lease_count() == 1
        others = reused_pool_reads(pool, 64, b"\xcc")
        assert child.call("describe_held") == [("buffer", cucore.Device(0).uuid, 63, True,
                                                bytes(range(1, 64)))]
        child.call("drop")
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0
        for b in others:
            b.close()
    finally:
        child.close()


def test_lease_waits_wake_at_their_own_count():
    """Lease waits on one pool with different counts to wait for, and one
    on another pool, while two receivers drop their buffers in turn: each
    returns once its own pool is down to its count (hold.c wakes waiters at
    the count, not at each release), and the counts are the pools' own."""
    import threading

    a, b = cucore.Pool(0), cucore.Pool(1 % N)
    cucore.share_point()
    first, second = Child("spawn", None), Child("spawn", None)
    done = {}

    def wait(name, pool, left):
        pool.lease_wait(left, timeout=30)
        done[name] = (time.time(), pool.lease_count())

    try:
        assert first.call("hold", *[a.allocate(64) for _ in range(3)]) == 3
        assert second.call("hold", a.allocate(64), a.allocate(64), b.allocate(64)) == 3
        wait_claimed(6)
        assert (a.lease_count(), b.lease_count()) == (5, 1)
        waits = [threading.Thread(target=wait, args=args)
                 for args in (("a<=2", a, 2), ("a<=0", a, 0), ("b<=0", b, 0))]
        for t in waits:
            t.start()
        time.sleep(0.1)
        assert done == {}  # nothing released yet: nobody returned
        first.call("drop")
        waits[0].join(30)
        assert done["a<=2"][1] == 2
        time.sleep(0.1)
        assert sorted(done) == ["a<=2"]  # the others wait on
        assert (a.lease_count(), b.lease_count()) == (2, 1)
        second.call("drop")
        for t in waits[1:]:
            t.join(30)
        assert done["a<=0"][1] == 0 and done["b<=0"][1] == 0
        assert (a.lease_count(), b.lease_count()) == (0, 0)
    finally:
        first.close()
        second.close()


def sim_calls(name):
    """The simulator's count of NAME's calls in this process."""
    n = workers.sim_count(name)
    if n is None:
        pytest.skip("counts the simulator's driver calls")
    return n


def test_close_many_unmaps_before_it_returns():
    """A child holding imported buffers closes them with Buffer.close_many:
    every import is unmapped (the simulator's cuMemFreeAsync counted in
    the child) and their stream waited for once before the call returns,
    where close() leaves that to the background thread; their releases
    follow and the exporter's leases end."""
    k = 64
    pool = cucore.Pool(0)
    child = Child("spawn", None)
    try:
        bufs = [pool.allocate(64) for _ in range(k)]
        assert child.call("hold", *bufs) == k
        wait_claimed(k)
        closed, (frees, syncs) = child.call("close_many")
        assert closed == [True] * k
        if frees is not None:
            assert (frees, syncs) == (k, 1)
        pool.lease_wait(0, timeout=30)
        assert pool.lease_count() == 0
    finally:
        child.close()


@pytest.mark.parametrize("how", ["close_many", "stream", "background"])
def test_failed_free_keeps_the_exporters_lease(how):
    """A child whose synchronize after freeing imported buffers fails
    (the simulator's fault injection) sends no release for them: the
    memory may still be in use there, so the exporter keeps it until the
    child's connection closes, as the C library keeps a channel's leases.
    Closed by close_many (the error raised), by close(stream) (each
    raised) or by close() (the background thread's batch fails, nothing
    raised); one more buffer closed afterwards is released."""
    if workers.sim_lib() is None:
        pytest.skip("injects a fault into the simulator")
    k = 8
    pool = cucore.Pool(0)
    child = Child("spawn", None)
    try:
        bufs = [pool.allocate(64) for _ in range(k)]
        assert child.call("hold", *bufs) == k
        wait_claimed(k)
        closed, codes = child.call("close_failing", how, "cuStreamSynchronize:1+")
        assert closed == [True] * k
        assert codes == {"close_many": ["CUC_E_DRIVER"], "stream": ["CUC_E_DRIVER"] * k,
                         "background": []}[how]
        assert pool.lease_count() == k
        more = pool.allocate(64)
        assert child.call("hold", more) == 1
        wait_claimed(k + 1)
        assert child.call("close_failing", how, "")[0] == [True]
        assert pool.lease_count() == k  # the later release went through
    finally:
        child.close()
    pool.lease_wait(0, timeout=30)  # the child's connection closed: its leases end


def test_close_many_beside_the_background_thread():
    """Rounds in which a child closes some buffers with close() (dropped
    and released by its background thread) and the others with close_many
    (dropped and released by the caller, unless the thread is sending):
    every lease ends, round after round, and the exporter's frees run."""
    pool = cucore.Pool(0)
    child = Child("spawn", None)
    try:
        for _ in range(20):
            bufs = [pool.allocate(64) for _ in range(64)]
            assert child.call("hold", *bufs) == 64
            bufs = None  # the exporter's frees wait for the leases
            assert child.call("close_mixed") == 64
            pool.lease_wait(0, timeout=30)
        assert pool.lease_count() == 0  # its holds too (the pool's count has them)
    finally:
        child.close()


def test_lease_wait_returns_after_the_frees_its_ends_allowed():
    """The exporter drops its own references to buffers a child holds
    (their frees deferred to the leases' end) and waits, in a thread that
    starts waiting before the child releases: lease_wait returns only once
    every free those ends allowed has run, though for its first 10 ms it
    looks at the count in a loop (hold.c counts the holds ended whose
    buffers are not yet dropped; without that the loop returned while the
    last release message's frees were still running)."""
    import threading

    k = 1024
    pool = cucore.Pool(0)
    child = Child("spawn", None)
    seen = {}

    def wait():
        pool.lease_wait(0, timeout=30)
        seen["frees"] = sim_calls("cuMemFreeAsync")

    try:
        bufs = [pool.allocate(64) for _ in range(k)]
        assert child.call("hold", *bufs) == k
        wait_claimed(k)
        bufs = None  # the last reference here: each free waits for its lease's end
        before = sim_calls("cuMemFreeAsync")
        waiter = threading.Thread(target=wait)
        waiter.start()
        assert child.call("drop") == 0
        waiter.join(30)
        assert seen["frees"] - before == k
        assert pool.lease_count() == 0
    finally:
        child.close()


def test_exit_while_a_thread_pickles():
    """A daemon thread pickling (which starts the share point) while the
    main thread stops it, again and again, then exits (atexit stops it
    once more): the stop runs without the GIL under its lock, so neither
    waits for the other. It hung every time when the stop took the GIL
    back under that lock."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import pickle, threading, time, cucore
        from cucore import _core
        pool = cucore.Pool(0)
        buf = pool.allocate(64)
        def worker():
            while True:
                pickle.dumps(buf)
        threading.Thread(target=worker, daemon=True).start()
        time.sleep(0.05)
        for _ in range(50):
            _core._share_close()
        print("exiting", flush=True)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "exiting\n"


def test_no_share_point_starts_after_exit():
    """A pickle after cucore's atexit stop (an atexit handler that runs
    later, or a daemon thread) is refused, naming the pid: a share point
    started then would leave its socket file behind. Before, it started
    one, and the file stayed after the process had gone."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import atexit, os, pickle
        def late():  # registered first: runs after cucore's own handler
            try:
                pickle.dumps(buf)
                print("pickled", flush=True)
            except cucore.Error as e:
                print(e.code, str(os.getpid()) in e.message, flush=True)
        atexit.register(late)
        import cucore
        buf = cucore.Pool(0).allocate(64)
        print(os.getpid(), cucore.share_point(), flush=True)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    first, outcome = p.stdout.splitlines()
    pid, path = first.split(" ", 1)
    assert outcome == "CUC_E_INVALID True"
    assert not [f for f in os.listdir(os.path.dirname(path))
                if f.startswith("cucore-share-%s-" % pid)]


def load_while_starved(child, pickles):
    """Loads the pickles one at a time with the exporter (child) starved of
    fds, until one's claim meets it there (the library drops that message:
    CUC_E_LIMIT): (its index, its buffer)."""
    for i, data in enumerate(pickles):
        assert child.call("starve_fds") is True
        b = pickle.loads(data)  # its claim finds no fd free there, or one came free
        if child.call("feed_fds", 3) >= 1:
            return i, b
        b.close()
        cucore._core._share_flush()
    raise AssertionError("no claim met the starved exporter")


def test_exporter_short_of_fds_keeps_serving_the_importer():
    """The exporter (a child) has no fd free for a moment when our claim
    arrives (a message with a memfd, which the library drops: CUC_E_LIMIT).
    Its share point goes on serving our connection, where it used to end
    it with every lease on it: the buffer we loaded before stays leased,
    and one pickled after loads and reads."""
    child = Child("spawn", None)
    try:
        first, *tries, third = child.call("export_n", 0, 7)
        a = pickle.loads(first)
        cucore._core._share_flush()  # our claim served
        assert child.call("share_stats")[0]["leases"] == 1
        _, b = load_while_starved(child, tries)
        assert child.call("share_stats")[0]["leases"] == 1  # a's
        c = pickle.loads(third)
        cucore._core._share_flush()
        assert c.to_bytes() == b"\x36" * 32 and a.to_bytes() == b"\x30" * 32
        assert child.call("share_stats")[0]["leases"] == 2  # a's and c's
        for o in (a, b, c):
            o.close()
    finally:
        child.close()


def test_claim_lost_for_want_of_fds_keeps_the_hold():
    """Our claim reaches the exporter (a child) when it has no fd free: the
    message is dropped unread (CUC_E_LIMIT). The hold it claimed used to end
    at its time while we still mapped the buffer, and the exporter freed
    the memory under our mapping. Now every hold unclaimed at the drop is
    kept past its time, and our release ends ours (python/src/hold.c);
    those of pickles never loaded stay until the exporter exits."""
    hold_s = 8.0
    child = exporter_child(int(hold_s * 1000))
    try:
        start = time.monotonic()
        first, *tries = child.call("export_n", 0, 4)
        a = pickle.loads(first)  # the connection and the pool, while fds are there
        cucore._core._share_flush()
        i, b = load_while_starved(child, tries)
        time.sleep(max(0.0, start + hold_s + 0.3 - time.monotonic()))
        held = child.call("share_stats")[0]
        assert held["leases"] == 1 and held["holds"] >= 1  # a's; ours among them, past its time
        assert b.to_bytes() == bytes([0x31 + i]) * 32
        a.close()
        b.close()
        cucore._core._share_flush()
        deadline = time.monotonic() + 10
        while child.call("share_stats")[0]["holds"] != held["holds"] - 1:
            assert time.monotonic() < deadline, child.call("share_stats")
            time.sleep(0.02)
    finally:
        child.close()


def test_late_answer_is_not_taken_for_the_next():
    """The exporter (a child) is stopped while we fetch a pool: the load
    raises cucore.TimeoutError after CUCORE_SHARE_TIMEOUT_MS. Once it runs
    again it answers that request late; the next request on the
    connection (another pool) reads past that answer to its own, where it
    used to take the late one for its answer."""
    import signal

    if N < 2:
        pytest.skip("needs two devices: a pool on each")
    child = Child("spawn", None)
    try:
        (on0,) = child.call("export_n", 0, 1)
        (on1,) = child.call("export_n", 1, 1)
        os.environ["CUCORE_SHARE_TIMEOUT_MS"] = "300"
        os.kill(child.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(cucore.TimeoutError):
                pickle.loads(on0)
        finally:
            os.kill(child.proc.pid, signal.SIGCONT)
            del os.environ["CUCORE_SHARE_TIMEOUT_MS"]
        b = pickle.loads(on1)
        assert b.device is cucore.Device(1) and b.to_bytes() == b"\x30" * 32
        b.close()
    finally:
        child.close()


def test_full_listen_backlog_is_not_a_gone_exporter():
    """The exporter's listen backlog is full (it is stopped while other
    connections queue: a burst of workers) when we first load one of its
    buffers: the connect waits for room, and the load goes through once
    the exporter runs again. A connect that failed at once used to mark
    the live exporter gone for the rest of the process."""
    import signal
    import threading

    class Args(pickle.Unpickler):
        def find_class(self, module, name):
            return lambda *args: args

    child = Child("spawn", None)
    fillers = []
    try:
        (data,) = child.call("export_n", 0, 1)
        path = Args(io.BytesIO(data)).load()[2]
        os.kill(child.proc.pid, signal.SIGSTOP)
        try:
            while len(fillers) < 4096:
                fillers.append(cucore.Channel.connect(path, timeout=0))
        except cucore.Error as e:
            assert e.code == "CUC_E_BUSY", e
        finally:
            threading.Timer(0.3, os.kill, (child.proc.pid, signal.SIGCONT)).start()
        assert 0 < len(fillers) < 4096
        b = pickle.loads(data)
        assert b.to_bytes() == b"\x30" * 32
        b.close()
    finally:
        os.kill(child.proc.pid, signal.SIGCONT)
        for f in fillers:
            f.close()
        child.close()


def exit_leaving_a_fork_child(child):
    """CHILD forks a sleeper (which inherits its sockets), then exits without
    a word: the sleeper's pid, to kill."""
    sleeper = child.call("fork_sleeper")
    child.conn.send(("exit_now", ()))
    deadline = time.time() + 30
    while child.proc.exitcode is None and time.time() < deadline:
        time.sleep(0.01)  # not join(): the sleeper holds multiprocessing's sentinel pipe
    assert child.proc.exitcode == 0
    return sleeper


def test_importers_fork_child_does_not_keep_its_leases():
    """An importer forks (the child sleeps on) and dies: its leases end then,
    not when its fork child exits: the child closed its copy of the
    importer's connection to us."""
    import signal

    pool = cucore.Pool(0)
    child = Child("spawn", None)
    sleeper = None
    try:
        bufs = [pool.allocate(64) for _ in range(2)]
        assert child.call("hold", *bufs) == 2
        wait_claimed(2)
        bufs = None
        sleeper = exit_leaving_a_fork_child(child)
        pool.lease_wait(0, timeout=30)  # the sleeper sleeps 120 s
        assert cucore._core._share_stats()["leases"] == 0
    finally:
        if sleeper:
            os.kill(sleeper, signal.SIGKILL)
        child.conn.close()


def test_exporters_fork_child_does_not_keep_its_share_point():
    """An exporter forks (the child sleeps on) and dies: loading its pool's
    pickle then finds nobody listening and names the exporter gone, where
    the fork child's copy of the listening socket took the connection and
    the request waited for an answer that never came."""
    import signal

    child = Child("spawn", None)
    sleeper = None
    try:
        data = child.call("export_pool", 0)
        sleeper = exit_leaving_a_fork_child(child)
        os.environ["CUCORE_SHARE_TIMEOUT_MS"] = "20000"
        try:
            with pytest.raises(cucore.ExporterGoneError, match="is gone"):
                pickle.loads(data)
        finally:
            del os.environ["CUCORE_SHARE_TIMEOUT_MS"]
    finally:
        if sleeper:
            os.kill(sleeper, signal.SIGKILL)
        child.conn.close()


def test_request_the_exporter_dropped_does_not_jam_the_connection():
    """The exporter, short of fds, drops our pool request (CUC_E_LIMIT): no
    answer ever comes and the load times out. Once it has fds again, the
    next request on the connection resynchronizes (a REQ_SYNC whose nonce
    comes back after everything before it) and goes through, where it
    used to wait for the missing answer, and time out, every time."""
    if N < 2:
        pytest.skip("needs two devices: a pool on each")
    child = Child("spawn", None)
    try:
        (on0,) = child.call("export_n", 0, 1)
        a = pickle.loads(on0)  # the connection up
        cucore._core._share_flush()
        os.environ["CUCORE_SHARE_TIMEOUT_MS"] = "1000"
        try:
            for _ in range(5):  # until the request meets the starved exporter
                (on1,) = child.call("export_n", 1, 1)
                assert child.call("starve_fds") is True
                try:
                    pickle.loads(on1).close()  # an fd came free there meanwhile
                except cucore.TimeoutError:
                    break
                finally:
                    child.call("feed_fds")
            else:
                raise AssertionError("no request met the starved exporter")
        finally:
            del os.environ["CUCORE_SHARE_TIMEOUT_MS"]
        b = pickle.loads(on1)
        assert b.device is cucore.Device(1) and b.to_bytes() == b"\x30" * 32
        for o in (a, b):
            o.close()
    finally:
        child.close()


def test_dead_unreaped_exporter_is_gone_at_once():
    """An exporter that died and is not yet reaped (a zombie: kill(pid, 0)
    still finds it) has nobody listening: loading its pool names it gone
    at once, where the connect was retried for 10 s each time."""
    child = Child("spawn", None)
    data = child.call("export_pool", 0)
    pid = child.proc.pid
    child.conn.send(("exit_now", ()))
    deadline = time.time() + 30
    while time.time() < deadline:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    try:
        for _ in range(2):
            with pytest.raises(cucore.ExporterGoneError):
                pickle.loads(data)
    finally:
        child.proc.join(30)
        child.conn.close()
