"""cucore's exceptions: one class per status callers catch.

Every error carries ``code`` (the ``CUC_E_*`` name) and ``message`` (what
``cuc_errmsg()`` said: the object involved and what to do). They pickle,
so a worker's error reaches the parent intact.
"""
import builtins
import errno
import pickle


class Error(Exception):
    """A cucore call failed; ``code`` is the CUC_E_* name."""

    def __init__(self, code, message):
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self):
        return "%s: %s" % (self.code, self.message)


class NotVisibleError(Error):
    """The device (named by UUID in the message) is not visible here."""


class PoolNotImportedError(Error):
    """A buffer arrived before its pool."""


class NeedsChannelError(Error):
    """The object carries file descriptors: send it on a channel."""


class NotSerializableError(Error, pickle.PicklingError):
    """The object means nothing in another process."""


class PeerClosedError(Error):
    """The other process closed its end or died."""


class TimeoutError(Error, builtins.TimeoutError):
    """Nothing came in time. As every OSError, ``errno`` is a number
    (ETIMEDOUT); ``code`` is the CUC_E_* name."""

    def __init__(self, code, message):
        super().__init__(code, message)
        # OSError took the two arguments as (errno, strerror).
        self.errno = errno.ETIMEDOUT
        self.strerror = message


class ForeignHostError(Error):
    """An object that names memory was unpickled on another machine (or
    after the machine rebooted)."""


class ExporterGoneError(PeerClosedError):
    """The process that pickled an object with memory is gone (its share
    point accepts no more)."""


BY_CODE = {
    "CUC_E_NOT_VISIBLE": NotVisibleError,
    "CUC_E_POOL_NOT_IMPORTED": PoolNotImportedError,
    "CUC_E_NEEDS_CHANNEL": NeedsChannelError,
    "CUC_E_NOT_SERIALIZABLE": NotSerializableError,
    "CUC_E_PEER_CLOSED": PeerClosedError,
    "CUC_E_TIMEOUT": TimeoutError,
    "CUC_E_FOREIGN_HOST": ForeignHostError,
    "CUC_E_EXPORTER_GONE": ExporterGoneError,
}
