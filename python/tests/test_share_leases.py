"""Leases of objects shared through pickle (the library's share point,
include/cucore/share.h): the same pickle loaded by two processes, a
receiver that loads it after the others released it, a buffer received by
pickle and sent on through a cucore Channel, lease waits, failed frees,
the share point at exit, fd starvation, timeouts, fork children, and
receivers in other PID, mount and time namespaces."""
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import cucore
import workers
from conftest import fd_count, require_unshare
from test_multiproc import (Child, Raw, exit_with_a_lease, token_of, wait_claimed,
                            warm_share_point)

N = len(cucore.devices())


def settle_fds(base, timeout=10):
    deadline = time.time() + timeout
    while fd_count() != base and time.time() < deadline:
        time.sleep(0.05)  # the share point's thread closes the connections
    return fd_count()


def reused_pool_reads(pool, size, fill, n=8):
    """Buffers allocated and written now: memory freed under a receiver
    would be handed out (and overwritten) here."""
    bufs = [pool.allocate(size) for _ in range(n)]
    for b in bufs:
        b.copy_from(fill * size)
    return bufs


def wait_leases(pool, n, timeout=10):
    deadline = time.time() + timeout
    while pool.lease_count() != n and time.time() < deadline:
        time.sleep(0.01)
    return pool.lease_count()


def test_same_pickle_two_receivers():
    """One pickle's bytes loaded by two spawned children: each gets a lease
    of its own, and the exporter's free waits for both."""
    pool = cucore.Pool(0)
    warm_share_point()
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
        assert wait_leases(pool, 2) == 2  # two leases of one hold
        expect = [("buffer", cucore.Device(0).uuid, 96, True, b"twice!" * 16)]
        assert first.call("describe_held") == expect
        assert second.call("describe_held") == expect
        first.call("drop")
        assert wait_leases(pool, 1) == 1
        time.sleep(0.1)
        assert pool.lease_count() == 1  # the second's lease keeps the memory
        others = reused_pool_reads(pool, 96, b"\xee")
        assert second.call("describe_held") == expect
        second.call("drop")
        pool.lease_wait(0, timeout=10)
        assert pool.lease_count() == 0
        for b in others:
            b.close()
    finally:
        first.close()
        second.close()
    assert settle_fds(base) == base


def test_a_list_of_buffers_detaches_once():
    """multiprocessing's pickler (Pipe, Queue) sends a list of Buffers as
    one detach: one hold, one claim; the receiver gets the list, each
    buffer with its bytes and a lease of its own (closing one ends that
    one). A list led by something else pickles buffer by buffer; a closed
    buffer in a list is refused as alone."""
    from multiprocessing.reduction import ForkingPickler

    pool = cucore.Pool(0)
    child = Child("spawn", None)
    try:
        bufs = [pool.allocate(64 + i) for i in range(5)]
        for i, b in enumerate(bufs):
            b.copy_from(bytes([i + 1]) * (64 + i))
        holds = cucore._core._share_stats()["holds"]
        data = bytes(ForkingPickler.dumps(bufs + [bufs[2]]))  # a repeat is one buffer
        assert cucore._core._share_stats()["holds"] == holds + 1
        assert child.call("load", data) == 1
        assert wait_leases(pool, 5) == 5
        child.call("close_first")
        assert wait_leases(pool, 4) == 4
        got = child.call("describe", Raw(data))  # the same bytes again: leases of its own
        assert got == [("buffer", cucore.Device(0).uuid, 64 + i, True, bytes([i + 1]) * (64 + i))
                       for i in (0, 1, 2, 3, 4, 2)]
        child.call("drop")
        assert wait_leases(pool, 0) == 0
        holds = cucore._core._share_stats()["holds"]
        ForkingPickler.dumps(["led by a string"] + bufs)
        assert cucore._core._share_stats()["holds"] == holds + 5
        with pytest.raises(TypeError, match="takes a list of Buffers"):
            cucore.Buffer._detach_many(tuple(bufs))
        with pytest.raises(TypeError, match="item 1 is a int, not a Buffer"):
            cucore.Buffer._detach_many([bufs[0], 7])
        bufs[3].close()
        with pytest.raises(ValueError, match="closed"):
            ForkingPickler.dumps(bufs)
    finally:
        child.close()
        for b in bufs:
            b.close()


@pytest.mark.parametrize("first", ["cucore", "multiprocessing"])
def test_multiprocessing_pickler_wrapped_in_either_import_order(first):
    """import cucore does not import multiprocessing; its pickler is
    wrapped (the list batching above) whichever of the two comes first."""
    code = textwrap.dedent("""
        import sys
        if %r == "multiprocessing":
            import multiprocessing.reduction
        import cucore
        print("multiprocessing" in sys.modules)
        import multiprocessing.reduction as r
        print(getattr(r.ForkingPickler.dumps, "_cucore", False),
              r.ForkingPickler._extra_reducers.get(cucore.Buffer) is not None)
    """ % first)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(first == "multiprocessing"), "True", "True"]


def test_late_second_receiver_gets_an_error():
    """A pickle loaded by receiver A, which released it, and then loaded by
    receiver B: no lease of it lives, so B gets a clear error naming the
    token, never memory that was freed and reused (the exporter's memory
    is rewritten with another pattern in between). B that has the pool
    maps at once and its first use raises; B that must fetch the pool is
    refused by the load."""
    pool = cucore.Pool(0)
    buf = pool.allocate(32)
    buf.copy_from(b"s" * 32)
    data = pickle.dumps(buf)
    token = token_of(data)
    buf.close()  # the hold keeps it: then A's lease
    first, late, fresh = (Child("spawn", None) for _ in range(3))
    try:
        assert first.call("hold", Raw(data)) == 1
        assert first.call("describe_held")[0][4] == b"s" * 32
        first.call("drop")
        pool.lease_wait(0, timeout=10)  # A's lease ended: the memory is freed
        others = reused_pool_reads(pool, 32, b"\xee")
        keep = pool.allocate(32)
        assert late.call("hold", keep) == 1  # late has the pool now
        got = late.call("describe", Raw(data))
        assert got[:3] == ("error", "Error", "CUC_E_NOT_FOUND"), got
        assert token in got[3] and "every receiver's lease of it ended" in got[3]
        got = fresh.call("describe", Raw(data))
        assert got[:3] == ("error", "Error", "CUC_E_NOT_FOUND") and token in got[3], got
        assert pool.lease_count() == 1  # keep's; the late claims leased nothing
        assert late.call("describe_held")[0][3:] == (True, bytes(32))  # it goes on
        late.call("drop")
        for b in others + [keep]:
            b.close()
        pool.lease_wait(0, timeout=10)
    finally:
        first.close()
        late.close()
        fresh.close()


@pytest.mark.parametrize("b_reads", ["close_channel", "pump_channel"])
def test_sent_on_through_a_channel_waits_for_its_receiver(b_reads):
    """A pickles a buffer to B; B sends it on through a cucore Channel to C
    and drops its object: A's free waits until C released it (the
    channel's lease keeps B's import, and so B's lease on A: B reads C's
    release by pumping the channel, or, once it closed the channel, in a
    lease wait, which reads the lingering link), and C reads A's bytes
    meanwhile."""
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
        c_child.call("drop")  # C's release reaches B's channel
        time.sleep(0.2)
        assert pool.lease_count() == 1  # until B has read it
        if b_reads == "close_channel":
            assert b_child.call("close_channel") is True  # lingers: B's lease wait reads it
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
    returns once its own pool is down to its count, and the counts are the
    pools' own."""
    import threading

    a, b = cucore.Pool(0), cucore.Pool(1 % N)
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


def held_by_child(k):
    """(pool, child): a spawned child that holds k buffers of 64 bytes of
    the pool, its claims of them seen here."""
    pool = cucore.Pool(0)
    child = Child("spawn", None)
    try:
        assert child.call("hold", *[pool.allocate(64) for _ in range(k)]) == k
        wait_claimed(k)
    except BaseException:
        child.close()
        raise
    return pool, child


@pytest.mark.parametrize("on_stream", [False, True])
def test_close_many(on_stream):
    """A child holding imported buffers closes them with Buffer.close_many.
    On a stream of its own: every import is unmapped (the simulator's
    cuMemFreeAsync counted in the child) and the stream waited for once
    before the call returns. On the legacy stream (no stream given): the
    call does not wait, the share point's thread frees them all (as after
    close()) behind an event. Either way their releases follow and the
    exporter's leases end."""
    k = 64
    pool, child = held_by_child(k)
    try:
        closed, (frees, syncs) = child.call("close_many", on_stream)
        assert closed == [True] * k
        if frees is not None and on_stream:
            assert (frees, syncs) == (k, 1)
        elif frees is not None:  # the frees are the share point thread's (counts are per process)
            assert syncs == 0
        pool.lease_wait(0, timeout=30)
        assert pool.lease_count() == 0
        if frees is not None and not on_stream:
            assert child.call("count", "cuMemFreeAsync") >= k
    finally:
        child.close()


@pytest.mark.parametrize("how", ["close_many_stream", "stream", "close", "close_many"])
def test_failed_free_keeps_the_exporters_lease(how):
    """A child whose wait for its frees of imported buffers fails (the
    simulator's fault injection) sends no release for them: the memory may
    still be in use there, so the exporter keeps it until the child's
    connection closes, as the C library keeps a channel's leases. Closed
    by close_many on a stream (its synchronize fails: the error raised
    once), by close(stream) (each synchronize fails, each raised) or by
    close() or close_many() on the legacy stream (they do not wait: the
    share point's thread does, and its event and the synchronize it falls
    back to fail; nothing raised); one more buffer closed afterwards is
    released."""
    if workers.sim_lib() is None:
        pytest.skip("injects a fault into the simulator")
    k = 8
    settled = how in ("close", "close_many")
    spec = "cuEventRecord:1+,cuStreamSynchronize:1+" if settled else "cuStreamSynchronize:1+"
    pool, child = held_by_child(k)
    try:
        closed, codes, faults = child.call("close_failing", how, spec)
        assert closed == [True] * k and faults > 0
        assert codes == {"close_many_stream": ["CUC_E_DRIVER"], "stream": ["CUC_E_DRIVER"] * k,
                         "close": [], "close_many": []}[how]
        time.sleep(0.2)  # releases, had they been sent, would have arrived
        assert pool.lease_count() == k
        more = pool.allocate(64)
        assert child.call("hold", more) == 1
        assert wait_leases(pool, k + 1) == k + 1
        assert child.call("close_failing", how, "")[:2] == ([True], [])
        assert wait_leases(pool, k) == k  # the later release went through
    finally:
        child.close()
    pool.lease_wait(0, timeout=30)  # the child's connection closed: its leases end


def test_close_without_events_synchronizes():
    """A child whose close() of received buffers cannot record the share
    point thread's event (the simulator's fault) has that thread
    synchronize instead: nothing raised, and every lease ends."""
    if workers.sim_lib() is None:
        pytest.skip("injects a fault into the simulator")
    k = 8
    pool, child = held_by_child(k)
    try:
        closed, codes, faults = child.call("close_failing", "close", "cuEventRecord:1+")
        assert closed == [True] * k and codes == [] and faults > 0  # the event failed
        assert wait_leases(pool, 0) == 0
    finally:
        child.close()


def test_close_and_close_many_mixed():
    """Rounds in which a child closes some buffers with close() and the
    others with close_many: every lease ends, round after round, and the
    exporter's frees run."""
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
    every free those ends allowed has run."""
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


def run_python(code, timeout=120, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout)


def test_exit_while_a_thread_pickles():
    """A daemon thread pickling (which starts the share point) while the
    main thread stops it, again and again, then exits (atexit stops it
    once more, and the thread's pickles are refused from then on): neither
    waits for the other, and the process exits."""
    p = run_python("""
        import pickle, threading, time, cucore
        from cucore import _core
        pool = cucore.Pool(0)
        buf = pool.allocate(64)
        def worker():
            while True:
                try:
                    pickle.dumps(buf)
                except cucore.Error:
                    pass
        threading.Thread(target=worker, daemon=True).start()
        time.sleep(0.05)
        for _ in range(50):
            _core._share_close()
        print("exiting", flush=True)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "exiting\n"


def test_no_share_point_starts_after_exit():
    """A pickle after cucore's atexit stop (an atexit handler that runs
    later, or a daemon thread) is refused, naming the pid: a share point
    started then would hold memory for a process that is going. The socket
    file is gone once the process is."""
    p = run_python("""
        import atexit, os, pickle
        def late():  # registered first: runs after cucore's own handler
            try:
                pickle.dumps(buf)
                print("pickled", flush=True)
            except cucore.Error as e:
                print(e.code, str(os.getpid()) in e.message, cucore.share_point(), flush=True)
        atexit.register(late)
        import cucore
        buf = cucore.Pool(0).allocate(64)
        assert cucore.share_point() is None
        pickle.dumps(buf)
        print(cucore.share_point(), flush=True)
    """)
    assert p.returncode == 0, p.stderr
    path, outcome = p.stdout.splitlines()
    assert outcome == "CUC_E_INVALID True None"
    assert path.endswith(".sock") and not os.path.exists(path)


def test_exit_waits_for_leases_as_told():
    """An exporter whose receiver still holds a lease at its exit stops its
    share point at once by default (saying on stderr that the lease
    ended), or waits up to CUCORE_SHARE_EXIT_WAIT_MS for the receiver to
    release it."""
    child = Child("spawn", None)
    try:
        for wait_ms, releases in ((0, False), (20000, True)):
            env = dict(os.environ, CUCORE_SHARE_EXIT_WAIT_MS=str(wait_ms))
            held, described, err, took = exit_with_a_lease(child, """
                import pickle, sys, cucore
                buf = cucore.Pool(0).allocate(16)
                buf.copy_from(b"exit-wait-bytes!")
                sys.stdout.buffer.write(pickle.dumps(buf).hex().encode() + b"\\n")
                sys.stdout.flush()
                sys.stdin.readline()
            """, releases, env)
            assert held == 1
            assert described[4] == b"exit-wait-bytes!"  # confirmed
            if releases:
                assert b"still held" not in err and took < 15
            else:
                assert b"1 leases of 1 processes still held" in err, err
                child.call("drop")
    finally:
        child.close()


def test_receiver_without_fds_fails_cleanly_and_the_hold_stays():
    """A receiver at its RLIMIT_NOFILE loads a buffer whose pool it must
    fetch (the answer's fd has no room): the load raises a cucore.Error
    saying so, and the hold stays: the same bytes load there once it has
    fds again, and in another receiver."""
    a, b = cucore.Pool(0), cucore.Pool(1 % N)
    child, other = Child("spawn", None), Child("spawn", None)
    try:
        first = a.allocate(32)
        assert child.call("hold", first) == 1  # its connection to us is up
        buf = b.allocate(32)
        buf.copy_from(b"F" * 32)
        data = pickle.dumps(buf)
        buf.close()
        got = child.call("load_starved", data)
        assert got[:3] == ("error", "Error", "CUC_E_LIMIT") and "RLIMIT_NOFILE" in got[3], got
        assert child.call("load", data) == 2  # fds again: the same bytes
        assert child.call("describe_held")[1][4] == b"F" * 32
        assert other.call("load", data) == 1
        assert other.call("describe_held")[0][4] == b"F" * 32
        other.call("drop")
        child.call("drop")
        first.close()
        a.lease_wait(0, timeout=10)
        b.lease_wait(0, timeout=10)
    finally:
        child.close()
        other.close()


def wait_state(pid, state, timeout=10):
    """Until every thread of process pid is in state (/proc: T stopped, Z
    zombie)."""
    def states():
        out = set()
        for t in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                    out.add(f.read().rsplit(")", 1)[1].split()[0])
            except (FileNotFoundError, ProcessLookupError):  # a thread that ended
                pass  # (ESRCH: it ended between the listing and the read)
        return out

    deadline = time.time() + timeout
    while states() != {state}:
        assert time.time() < deadline, "process %d: %s, not %s" % (pid, states(), state)
        time.sleep(0.01)


def test_timed_out_fetch_does_not_jam_the_connection():
    """The exporter (a child) is stopped while a receiver (with
    CUCORE_SHARE_TIMEOUT_MS=1000) fetches a pool: the load raises
    cucore.TimeoutError. Loaded again while the answer is still to come,
    the bytes take the first load's wait over: one answer, one lease, which
    the receiver holds until it drops the buffer (a claim of its own would
    be answered twice, and the give-back of the extra answer ended the
    lease it used). An answer nobody waits for any more is given back: the
    hold is unclaimed again, for the next receiver."""
    import signal
    import threading

    exporter = Child("spawn", None)
    old = os.environ.get("CUCORE_SHARE_TIMEOUT_MS")
    os.environ["CUCORE_SHARE_TIMEOUT_MS"] = "1000"
    try:
        receiver = Child("spawn", None)
    finally:
        if old is None:
            del os.environ["CUCORE_SHARE_TIMEOUT_MS"]
        else:
            os.environ["CUCORE_SHARE_TIMEOUT_MS"] = old
    other = Child("spawn", None)
    pid = exporter.proc.pid

    def stopped(fn):
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_state(pid, "T")  # every thread of it stopped
            return fn()
        finally:
            os.kill(pid, signal.SIGCONT)

    try:
        on0, on1, on2 = (exporter.call("export_n", i % N, 1)[0] for i in range(3))
        assert receiver.call("load", on0) == 1  # the connection up
        assert exporter.call("share_stats")[0] == {"holds": 3, "unclaimed": 2}

        def twice():
            got = receiver.call("load", on1)
            threading.Timer(0.1, os.kill, (pid, signal.SIGCONT)).start()
            return got, receiver.call("load", on1)  # answered once the exporter runs
        got, again = stopped(twice)
        assert got[:2] == ("error", "TimeoutError") and "CUCORE_SHARE_TIMEOUT_MS" in got[3]
        assert again == 2
        time.sleep(0.3)  # a second answer, and its give-back, would have come by now
        assert exporter.call("share_stats")[0] == {"holds": 3, "unclaimed": 1}
        assert [d[1:] for d in receiver.call("describe_held")] == [
            (cucore.Device(0).uuid, 32, True, b"\x30" * 32),
            (cucore.Device(1 % N).uuid, 32, True, b"\x30" * 32)]
        got = stopped(lambda: receiver.call("load", on2))  # its answer comes after
        assert got[:2] == ("error", "TimeoutError")
        deadline = time.time() + 10
        while exporter.call("share_stats")[0] != {"holds": 3, "unclaimed": 1}:
            assert time.time() < deadline  # the late answer given back: unclaimed again
            time.sleep(0.02)
        assert other.call("load", on2) == 1
        assert other.call("describe_held")[0][1:] == (cucore.Device(2 % N).uuid, 32, True,
                                                      b"\x30" * 32)
        receiver.call("drop")
        other.call("drop")
        assert exporter.call("lease_wait", 10) is True
        deadline = time.time() + 10  # a hold goes right after its last lease's end
        while exporter.call("share_stats")[0] != {"holds": 0, "unclaimed": 0}:
            assert time.time() < deadline
            time.sleep(0.02)
    finally:
        receiver.close()
        other.close()
        exporter.close()


def test_full_listen_backlog_is_not_a_gone_exporter():
    """The exporter's listen backlog is full (it is stopped while other
    connections queue: a burst of workers) when we first load one of its
    buffers: the connect waits for room, and the load goes through once
    the exporter runs again."""
    import signal
    import threading

    child = Child("spawn", None)
    fillers = []
    try:
        (data,) = child.call("export_n", 0, 1)
        path = child.call("share_point")
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
        assert pool.lease_count() == 0
    finally:
        if sleeper:
            os.kill(sleeper, signal.SIGKILL)
        child.conn.close()


def test_exporters_fork_child_does_not_keep_its_share_point():
    """An exporter forks (the child sleeps on) and dies: loading its pool's
    pickle then finds nobody serving and names the exporter gone, not
    waiting for an answer the fork child's copy of the socket would never
    give."""
    import signal

    child = Child("spawn", None)
    sleeper = None
    try:
        data = child.call("export_pool", 0)
        sleeper = exit_leaving_a_fork_child(child)
        start = time.monotonic()
        with pytest.raises(cucore.ExporterGoneError, match="is gone"):
            pickle.loads(data)
        assert time.monotonic() - start < 10
    finally:
        if sleeper:
            os.kill(sleeper, signal.SIGKILL)
        child.conn.close()


def test_dead_unreaped_exporter_is_gone_at_once():
    """An exporter that died and is not yet reaped (a zombie: kill(pid, 0)
    still finds it, and its socket file is still there) has nobody
    accepting: loading its pool names it gone at once, every time."""
    child = Child("spawn", None)
    data = child.call("export_pool", 0)
    pid = child.proc.pid
    child.conn.send(("exit_now", ()))
    wait_state(pid, "Z", 30)
    try:
        for _ in range(2):
            start = time.monotonic()
            with pytest.raises(cucore.ExporterGoneError):
                pickle.loads(data)
            assert time.monotonic() - start < 5
    finally:
        child.proc.join(30)
        child.conn.close()


CONSUMER = """
import pickle, sys, cucore
b = pickle.loads(bytes.fromhex(sys.stdin.readline()))
print(b.to_bytes().hex(), b.device.uuid, b.is_imported, flush=True)
b.close()
"""


@pytest.mark.parametrize("how", [
    ("unshare", "--pid", "--fork", "--mount-proc"),
    ("unshare", "--time", "--fork", "--monotonic", "86400", "--boottime", "86400")],
    ids=["pid_mount_namespace", "time_namespace"])
def test_consumer_in_another_namespace(how):
    """A consumer in another PID namespace (with its own /proc: a mount
    namespace too), and one in a time namespace whose clocks run a day
    ahead, load a buffer pickled here and read its bytes; their leases end
    when they close it. Liveness is the socket's, never a pid or a clock
    (skipped where unshare is refused)."""
    require_unshare(how)
    pool = cucore.Pool(2 % N)
    buf = pool.allocate(48)
    buf.copy_from(bytes(range(48)))
    data = pickle.dumps(buf)
    p = subprocess.run([*how, sys.executable, "-c", CONSUMER], input=data.hex() + "\n",
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [bytes(range(48)).hex(), cucore.Device(2 % N).uuid, "True"]
    pool.lease_wait(0, timeout=10)
    assert buf.lease_count() == 0
    buf.close()
