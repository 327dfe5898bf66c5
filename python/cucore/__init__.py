"""cucore: CUDA devices, streams, events, pools, buffers, VMM, kernels and
launch configurations that cross process boundaries with their physical
meaning: pickle them (multiprocessing, concurrent.futures, Dask) or send
them on a Channel.

A device pickles as its UUID and resolves to whatever ordinal that GPU has
in the receiving process (NotVisibleError there names it if it cannot see
it); default streams, IPC events, kernels and launch configs pickle as
cucore message bytes (what a C program reads); pools, buffers and VMM
resources pickle through this process's share point, a Unix socket only
this user can connect to, from which the receiver fetches the fds.

Other frameworks' objects cross as themselves: share(x) of any CUDA array
(a torch tensor, CuPy or numba array, cuda.core Buffer), install("torch")
for torch.multiprocessing, install("cuda.core"), Kernel.from_numba.
"""
import atexit
import os
import sys

from ._errors import (Error, NotVisibleError, PoolNotImportedError, NeedsChannelError,
                      NotSerializableError, PeerClosedError, TimeoutError,
                      ForeignHostError, ExporterGoneError)
from ._core import (Device, Stream, Event, Kernel, LaunchConfig, Pool, Buffer, VMM,
                    Channel, Listener, Slab, devices, current_device, launch, listen,
                    driver, share_point, version)
from . import _core
from ._frameworks import share, install, wrap, Shared, ArrayView
from . import _frameworks

# multiprocessing (Pipe, Queue, Pool) sends a list of Buffers as one
# detach: its pickler is wrapped once it is imported (only programs that
# use it pay for its import)
_frameworks.after_import("multiprocessing.reduction",
                         lambda m: _frameworks._wrap_dumps(m.ForkingPickler))

__version__ = version


# pickle writes a loader as module + name and, pickling, imports the module
# to check it: "cucore" (a package) costs that check half of what
# "cucore._core" does (bench/bench_python.py, device_pickle).
_load = _core._load
_attach = _core._attach
_load.__module__ = _attach.__module__ = "cucore"


class BufferBatch(list):
    """A list of buffers; it pickles as a plain list (the receiver gets a
    list), through multiprocessing as one detach, as any list of Buffers
    does: kept for older callers."""

    def __reduce__(self):
        return (list, (list(self),))


__all__ = [
    "Error", "NotVisibleError", "PoolNotImportedError", "NeedsChannelError",
    "NotSerializableError", "PeerClosedError", "TimeoutError", "ForeignHostError",
    "ExporterGoneError", "Device", "Stream", "Event", "Kernel", "LaunchConfig", "Pool",
    "Buffer", "BufferBatch", "Slab", "VMM", "Channel", "Listener", "devices",
    "current_device", "launch", "listen", "driver",
    "share_point", "wrap", "share", "install", "Shared", "ArrayView",
]

def _exit():
    """The share point stops at exit (its socket file removed), waiting
    install()'s time, else $CUCORE_SHARE_EXIT_WAIT_MS (default 0), for its
    leases; what it gave up is written to stderr. A pickle of an object
    with memory after this (a daemon thread, a later atexit handler) raises
    instead of starting another."""
    ms = _frameworks.exit_wait_ms()
    if ms and _core._share_stats()["holds"]:
        sys.stderr.write("cucore: process %d is exiting: waiting up to %d ms for other "
                         "processes to release its memory\n" % (os.getpid(), ms))
    _core._share_exit(ms)


atexit.register(_exit)
