"""The share point against processes that were never given a pickle's
bytes (the raw protocol is tests/test_share_hostile.c's; here, what a
Python user's objects go through): an unrelated same-uid process claims,
fetches, gives back and releases at our share point, and loads bytes
forged with a guessed token; the loader refuses arguments of its own
making. Nothing it does ends a receiver's lease or an unclaimed hold,
and it maps nothing."""
import os
import pickle

import pytest

import cucore
from test_multiproc import Child, Raw, detached, token_of, wait_claimed


def lease_id_of(data):
    """The lease id of the buffer record of a buffer's pickle (record 1,
    after the share record: docs/wire-format.md)."""
    return int.from_bytes(detached(data)[264:272], "little")


class ForgedPickle:
    """Pickles as the loader of detached bytes on DATA."""

    def __init__(self, data):
        self.data = data

    def __reduce__(self):
        return (cucore._core._attach, (self.data,))


def test_guesser_gets_nothing_and_changes_nothing():
    pool = cucore.Pool(0)
    leased = pool.allocate(64)
    leased.copy_from(b"L" * 64)
    held = pool.allocate(64)
    held.copy_from(b"H" * 64)
    receiver, guesser, late = (Child("spawn", None) for _ in range(3))
    try:
        leased_pickle = pickle.dumps(leased)
        assert receiver.call("hold", Raw(leased_pickle)) == 1  # a real receiver's lease
        wait_claimed(1)
        held_pickle = pickle.dumps(held)  # an unclaimed hold
        assert (leased.lease_count(), held.lease_count()) == (1, 1)
        statuses = guesser.call("guess", cucore.share_point(),
                                [token_of(held_pickle), token_of(leased_pickle)],
                                [lease_id_of(leased_pickle), lease_id_of(held_pickle)], 200)
        if statuses is None:
            pytest.skip("libcucore is compiled into the extension (no ctypes handle)")
        assert statuses == ["CUC_E_NOT_FOUND"] * 401
        # bytes of the held buffer with a guessed token: nothing is mapped
        data = detached(held_pickle)
        forged = data[:72] + os.urandom(16) + data[88:]
        got = guesser.call("describe", ForgedPickle(forged))
        assert got[:3] == ("error", "Error", "CUC_E_NOT_FOUND"), got
        assert (leased.lease_count(), held.lease_count()) == (1, 1)
        assert receiver.call("describe_held")[0][4] == b"L" * 64
        assert late.call("hold", Raw(held_pickle)) == 1  # the hold was there
        assert late.call("describe_held")[0][4] == b"H" * 64
        late.call("drop")
        receiver.call("drop")
        pool.lease_wait(0, timeout=10)
        assert (leased.lease_count(), held.lease_count()) == (0, 0)
    finally:
        receiver.close()
        guesser.close()
        late.close()


def test_hostile_attach_arguments():
    """A pickle names cucore's loader with arguments of its own making:
    each wrong count, type or byte string is refused with an exception
    that says which, and the pool's leases are untouched."""
    attach = cucore._core._attach
    pool = cucore.Pool(0)
    buf = pool.allocate(16)
    data = detached(pickle.dumps(buf))
    plain = cucore.Device(0).__reduce__()[1][0]  # a message, not a detached one
    cases = [
        ((), TypeError, "takes exactly one argument"),
        ((data, data), TypeError, "takes exactly one argument"),
        (("00" * 16,), TypeError, "bytes, not str"),
        ((5,), TypeError, ""),
        ((b"",), cucore.Error, ""),
        ((b"CUCM" + b"\xff" * 20,), cucore.Error, ""),
        ((data[:-8],), cucore.Error, ""),
        ((plain,), cucore.Error, "not a detached one"),
    ]
    for args, exc, text in cases:
        with pytest.raises(exc) as e:
            attach(*args)
        assert text in str(e.value), (args, str(e.value))
    # another share point (the share record's point, path_len and path) that nothing serves
    assert data[96:96 + len(cucore.share_point())] == cucore.share_point().encode()
    elsewhere = b"/tmp/cucore-nowhere-0123.sock"
    forged = data[:40] + os.urandom(16) + data[56:92] + len(elsewhere).to_bytes(4, "little") + \
        elsewhere.ljust(120, b"\0") + data[216:]
    with pytest.raises(cucore.ExporterGoneError, match="cucore-nowhere"):
        attach(forged)
    e = None  # its traceback holds this frame, and so the pool, in a cycle
    assert buf.lease_count() == 1  # the hold
    assert attach(data) is buf
    assert buf.lease_count() == 0
