"""Pickle is cucore's wire format: the C command line tool reads what
Python pickled, and Python unpickles what C packed."""
import json
import os
import pickle
import subprocess

import pytest

import cucore
from test_objects import PTX

CLI = os.environ.get("CUCORE_CLI")
needs_cli = pytest.mark.skipif(not CLI or not os.access(CLI, os.X_OK),
                                reason="CUCORE_CLI (build/tools/cucore) not set")

N = len(cucore.devices())


def record_bytes(obj):
    fn, args = obj.__reduce__()
    return args[0]  # _load's message, or _attach's detached message


def inspect(data):
    out = subprocess.run([CLI, "inspect", "-", "--json"], input=data, capture_output=True,
                         check=True)
    return json.loads(out.stdout)["records"]


def pack(*words):
    return subprocess.run([CLI, "pack", *words], capture_output=True, check=True).stdout


@needs_cli
def test_c_reads_python_pickles():
    for d in cucore.devices():
        (rec,) = inspect(record_bytes(d))
        assert rec["type"] == "device" and rec["uuid"] == d.uuid and rec["resolved"]
    (rec,) = inspect(record_bytes(cucore.Stream.per_thread(2 % N)))
    assert rec["type"] == "stream" and cucore.Device(2 % N).uuid in json.dumps(rec)
    (rec,) = inspect(record_bytes(cucore.LaunchConfig((6, 2), 96, shared_mem=64)))
    assert rec["type"] == "launch_config" and rec["resolved"]
    assert "96" in json.dumps(rec)
    (rec,) = inspect(record_bytes(cucore.Kernel(PTX, "twice")))
    assert rec["type"] == "kernel" and "twice" in json.dumps(rec)
    # a buffer's pickle is a detached message: C reads its share record and the
    # buffer's (attaching is cuc_share_attach's)
    buf = cucore.Pool(1 % N).allocate(300)
    share, rec = inspect(record_bytes(buf))
    assert share["type"] == "share" and share["path"] == cucore.share_point()
    assert len(share["token"]) == 32 and not share["resolved"]
    assert rec["type"] == "buffer" and rec["fds"] == 0 and rec["payload_bytes"] > 0
    assert rec["size"] == 300 and rec["lease_id"] != 0 and not rec["resolved"]


@needs_cli
def test_python_reads_c_packs(uuids):
    for i, u in enumerate(uuids):
        d = pickle.loads(pickle.dumps(Raw(pack("device", str(i)))))
        assert d is cucore.Device(i) and d.uuid == u
    s = cucore._core._load(pack("stream", "legacy", str(3 % N)))
    assert s is cucore.Stream.legacy(3 % N)
    c = cucore._core._load(pack("launch-config", "8,2", "128", "512"))
    assert c == cucore.LaunchConfig((8, 2), 128, shared_mem=512)


def test_hostile_bytes_refused():
    good = record_bytes(cucore.Device(0))
    for bad in (b"", good[:-1], good[:8] + b"\xff" * (len(good) - 8), b"\x00" * 64):
        with pytest.raises(cucore.Error) as e:
            cucore._core._load(bad)
        assert e.value.code in ("CUC_E_BADMSG", "CUC_E_VERSION")


class Raw:
    """Pickles as cucore's own loader over bytes C wrote."""

    def __init__(self, data):
        self.data = data

    def __reduce__(self):
        return (cucore._core._load, (self.data,))
