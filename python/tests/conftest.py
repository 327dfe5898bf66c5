"""Shared fixtures: the devices' UUIDs (the simulator has 4), fd counts,
and children that receive cucore objects through multiprocessing."""
import gc
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# Children (spawn, forkserver, Dask's nannies) import workers.py from here.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [HERE, os.environ.get("PYTHONPATH", "")] if p)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import cucore  # noqa: E402


@pytest.fixture(scope="session")
def uuids():
    return [d.uuid for d in cucore.devices()]


@pytest.fixture(scope="session")
def simulated():
    return cucore.driver()["simulated"]


def require_unshare(how):
    """Skips the calling test where the unshare(1) command line how (a
    tuple, run on `true`) is missing or refused."""
    if not shutil.which(how[0]):
        pytest.skip("no %s(1) here" % how[0])
    probe = subprocess.run([*how, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("%s refused: %s" % (how[0], probe.stderr.strip()))


def fd_count():
    """This process's open fds, after a collection: an earlier test's
    garbage (a pool kept by a traceback's frame) would otherwise close its
    fds in the middle of the count's test."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))
