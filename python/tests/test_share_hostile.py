"""Hostile lease ops at the share point (python/src/share.c, hold.c):
claims and releases (tag 3) and synchronous claims (tag 4) that are
truncated, of lying lengths, of unknown tokens or tokens near UINT64_MAX,
of the wrong fd kind or count, and releases of another connection's lease.
The share point must refuse or ignore each, keep serving the connection,
and end nothing it should not. The messages are made with libcucore
itself (ctypes): Channel.send carries tag 0 only."""
import ctypes
import os
import pickle

import pytest

import cucore
from test_multiproc import Child, wait_claimed

REQ_LEASES, REQ_CLAIM, REPLY_OK, NOTICE_STALE, REQ_SYNC = 3, 4, 5, 6, 7
REPLY_ERROR = 0x80000000
RELEASE = 1 << 63
MAX_OPS = 65536


def libcucore():
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "/libcucore.so" in path:
                return ctypes.CDLL(path)
    pytest.skip("libcucore.so is not a shared library here (compiled into the module)")


class Raw3:
    """A channel to our own share point through libcucore's C API."""

    def __init__(self, path):
        self.c = libcucore()
        p = ctypes.c_void_p
        for name, args in [("cuc_channel_connect", [ctypes.c_char_p, ctypes.c_int,
                                                    ctypes.POINTER(p)]),
                           ("cuc_channel_send", [p, p]),
                           ("cuc_channel_recv", [p, ctypes.c_int, ctypes.POINTER(p)]),
                           ("cuc_channel_destroy", [p]), ("cuc_msg_create", [ctypes.POINTER(p)]),
                           ("cuc_msg_destroy", [p]),
                           ("cuc_msg_add_fd", [p, ctypes.c_int, ctypes.c_uint32]),
                           ("cuc_msg_take_fd", [p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int),
                                                ctypes.POINTER(ctypes.c_uint32)]),
                           ("cuc_msg_record_count", [p])]:
            getattr(self.c, name).argtypes = args
        self.c.cuc_msg_record_count.restype = ctypes.c_size_t
        self.ch = p()
        assert self.c.cuc_channel_connect(path.encode(), 5000, ctypes.byref(self.ch)) == 0

    def send(self, *fds_tags):
        m = ctypes.c_void_p()
        assert self.c.cuc_msg_create(ctypes.byref(m)) == 0
        for fd, tag in fds_tags:
            assert self.c.cuc_msg_add_fd(m, fd, tag) == 0
        assert self.c.cuc_channel_send(self.ch, m) == 0
        self.c.cuc_msg_destroy(m)

    def recv(self, timeout_ms=10000):
        """(tag, data) of a one-fd-record message."""
        m = ctypes.c_void_p()
        assert self.c.cuc_channel_recv(self.ch, timeout_ms, ctypes.byref(m)) == 0
        try:
            assert self.c.cuc_msg_record_count(m) == 1
            fd, tag = ctypes.c_int(), ctypes.c_uint32()
            assert self.c.cuc_msg_take_fd(m, 0, ctypes.byref(fd), ctypes.byref(tag)) == 0
            data = os.pread(fd.value, 1 << 20, 0)
            os.close(fd.value)
            return tag.value, data
        finally:
            self.c.cuc_msg_destroy(m)

    def request(self, tag, data=b"", size=None, fd=None):
        """Sends one record, then a sync: what came back before its OK."""
        own = fd is None
        if own:
            fd = os.memfd_create("hostile")
            os.write(fd, data)
            if size is not None:
                os.ftruncate(fd, size)
        self.send((fd, tag))
        if own:
            os.close(fd)
        return self.sync()

    def sync(self):
        sync = os.memfd_create("sync")
        self.send((sync, REQ_SYNC))
        os.close(sync)
        got = []
        while True:
            tag, data = self.recv()
            if tag == REPLY_OK and data == b"":
                return got
            got.append((tag, data))

    def close(self):
        self.c.cuc_channel_destroy(self.ch)


def ops(*tokens):
    return b"".join(t.to_bytes(8, "little") for t in tokens)


def token_of(data):
    from test_share_leases import token_of as t
    return t(data)


def refused(got):
    return len(got) == 1 and got[0][0] & REPLY_ERROR


def test_hostile_lease_ops_refused_and_served_on():
    pool = cucore.Pool(0)
    leased = pool.allocate(64)
    leased.copy_from(b"L" * 64)
    held = pool.allocate(64)
    held.copy_from(b"H" * 64)
    def state():
        """Leases of this process (earlier tests' holds expire meanwhile: not
        counted), and the holds and leases of each of our two buffers."""
        return (cucore._core._share_stats()["leases"], held.lease_count(),
                leased.lease_count())

    child = Child("spawn", None)
    raw = None
    try:
        assert child.call("hold", leased) == 1  # a real receiver's lease
        wait_claimed(1)
        held_pickle = pickle.dumps(held)  # an unclaimed hold
        held_token = token_of(held_pickle)
        before = state()
        assert before == (1, 1, 1)
        raw = Raw3(cucore.share_point())
        near = [0, 1, (1 << 63) - 1, (1 << 64) - 1, 1 << 63, (1 << 63) | 1,
                held_token ^ 1, held_token + (1 << 20)]
        # tag 3: truncated, or lengths that are not a multiple of 8: whole ops only
        assert raw.request(REQ_LEASES, b"") == []
        assert raw.request(REQ_LEASES, b"\x01" * 7) == []
        # releases of tokens nobody here holds: ignored, never answered
        assert raw.request(REQ_LEASES, ops(*[t | RELEASE for t in near])) == []
        # a release of the unclaimed hold by a connection that never claimed it
        assert raw.request(REQ_LEASES, ops(held_token | RELEASE)) == []
        assert state() == before
        # claims of unknown tokens (near 0 and UINT64_MAX, bit 63 is a release):
        # one stale notice with exactly the claims
        claims = [t for t in near if not t & RELEASE]
        got = raw.request(REQ_LEASES, ops(*claims) + b"\xff\xff\xff")
        assert got == [(NOTICE_STALE, ops(*claims))]
        # lying lengths: past the limit (a sparse memfd of UINT32_MAX bytes), not a file
        assert raw.request(REQ_LEASES, size=MAX_OPS * 8 + 8) == []
        assert raw.request(REQ_LEASES, size=(1 << 32) - 1) == []
        r, w = os.pipe()
        os.write(w, ops(held_token))
        assert raw.request(REQ_LEASES, fd=r) == []
        # wrong fd counts: two records, or none
        a, b = os.memfd_create("a"), os.memfd_create("b")
        os.write(a, ops(held_token))
        raw.send((a, REQ_LEASES), (b, REQ_LEASES))
        assert refused(raw.sync())
        raw.send()
        assert refused(raw.sync())
        # tag 4: only 8 bytes is a claim; unknown tokens refused naming them
        for data in (b"", b"\x00" * 7, b"\x00" * 9, ops(held_token, held_token)):
            got = raw.request(REQ_CLAIM, data)
            assert refused(got), (data, got)
        for t in ((1 << 64) - 1, (1 << 63) - 1, 0):
            (got,) = raw.request(REQ_CLAIM, ops(t))
            assert got[0] & REPLY_ERROR and ("%016x" % t).encode() in got[1]
        got = raw.request(REQ_CLAIM, size=(1 << 32) - 1)
        assert refused(got)
        assert refused(raw.request(REQ_CLAIM, fd=r))
        # replies and notices are not requests; a sync holds nothing or a nonce
        for tag in (REPLY_OK, NOTICE_STALE):
            assert refused(raw.request(tag, ops(held_token)))
        assert refused(raw.request(REQ_SYNC, ops(held_token, held_token)))
        assert raw.request(REQ_SYNC, ops(held_token)) == [(REPLY_OK, ops(held_token))]
        for fd in (r, w, a, b):
            os.close(fd)
        assert state() == before  # nothing ended, nothing leased
        # the connection still serves: a real claim of the hold is a lease of it
        claim = os.memfd_create("claim")
        os.write(claim, ops(held_token))
        raw.send((claim, REQ_CLAIM))
        os.close(claim)
        assert raw.recv() == (REPLY_OK, b"")
        assert raw.sync() == []
        assert state() == (2, 1, 1)
        assert raw.request(REQ_LEASES, ops(held_token | RELEASE)) == []
        assert state() == (1, 0, 1)
        assert child.call("describe_held")[0][4] == b"L" * 64
        child.call("drop")
        pool.lease_wait(0, timeout=10)
        assert state() == (0, 0, 0)
    finally:
        if raw:
            raw.close()
        child.close()


def test_hostile_load_shared_arguments():
    """A pickle names cucore's loader with arguments of its own making: each
    wrong count, type, text, pid or payload is refused with an exception
    that says which (a pid of 0 or below, which kill() would take for a
    process group, among them), and the pool's leases are untouched."""
    load = cucore._core._load_shared
    host, path, pid = cucore.host_id(), cucore.share_point(), os.getpid()
    good_pool = cucore.Pool(0)
    pool_id = pickle.loads(pickle.dumps(good_pool)).id
    assert load("pool", host, path, pid, pool_id) is good_pool
    cases = [
        ((), TypeError, "takes 5 arguments"),
        (("pool", host, path, pid), TypeError, "takes 5 arguments"),
        (("pool", host, path, pid, b"", b""), TypeError, "takes 5 arguments"),
        ((b"pool", host, path, pid, b""), TypeError, "kind must be str"),
        (("pool", None, path, pid, b""), TypeError, "host must be str"),
        (("pool", host, 7, pid, b""), TypeError, "path must be str"),
        (("po\0ol", host, path, pid, b""), ValueError, "kind holds a NUL"),
        (("pool", host + "\0x", path, pid, b""), ValueError, "host holds a NUL"),
        (("pool", host, path, "1", b""), ValueError, "positive int"),
        (("pool", host, path, 0, b""), ValueError, "positive int"),
        (("pool", host, path, -1, b""), ValueError, "positive int"),
        (("pool", host, path, 2 ** 31, b""), ValueError, "positive int"),
        (("pool", host, path, 2 ** 80, b""), OverflowError, ""),
        (("pool", host, path, pid, "00" * 16), TypeError, "bytes-like, not str"),
        (("pool", host, path, pid, 5), TypeError, ""),
        (("nope", host, path, pid, b""), cucore.Error, "kind \"nope\""),
        (("pool", "elsewhere/0", path, pid, b""), cucore.ForeignHostError, "elsewhere/0"),
        (("pool", host, path, pid, b"\0" * 15), cucore.Error, "16 bytes"),
        (("vmm", host, path, pid, b"\0" * 9), cucore.Error, "8 bytes"),
        (("buffer", host, path, pid, b"CUCM" + b"\xff" * 20), cucore.Error, ""),
        (("buffer", host, path, 2 ** 31 - 1, b"CUCM\x01"), cucore.Error, ""),
    ]
    for args, exc, text in cases:
        with pytest.raises(exc) as e:
            load(*args)
        assert text in str(e.value), (args, str(e.value))
    e = None  # its traceback holds this frame, and so the pool, in a cycle
    assert good_pool.lease_count() == 0
