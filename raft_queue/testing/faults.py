"""Storage faults injected into one replica of this process (tests).

- ``FailingStore``: wraps a replica's LmdbStore; once ``arm()``-ed, its write
  transactions raise the error a failing disk gives LMDB (the apply path's
  ``run_write``, and the leader's apply ahead: ``hold_write`` and its
  commit), while reads keep working.
- ``FailingSync``: the fdatasync of one journal (``SyncedJournal.fdatasync``,
  the seam); fails the next ``failures`` calls with ``errno`` and succeeds
  afterwards, as Linux does after it dropped the pages it could not write
  ("fsyncgate"): a caller that retries sees success for data that is gone.
  ``calls`` counts every call, so a test can tell whether a retry happened.

    store = install_failing_store(replica)   # on the replica's driver thread or before load
    store.arm()
    sync = install_failing_sync(replica)
"""

from __future__ import annotations

import errno as errno_codes
import os
import threading
from typing import Any

from raft_queue import errors


class FailingStore:
    """Delegates everything to ``inner``; ``run_write`` raises once armed."""

    def __init__(self, inner: Any, error: BaseException | None = None) -> None:
        self._inner = inner
        self._armed = threading.Event()
        self.error = error or errors.Internal("LMDB: DiskError: Input/output error (injected)")
        self.failed_writes = 0

    def arm(self) -> None:
        self._armed.set()

    def disarm(self) -> None:
        self._armed.clear()

    def run_write(self, fn: Any, size_hint: int = 0) -> Any:
        self._check()
        return self._inner.run_write(fn, size_hint)

    def hold_write(self, size_hint: int = 0) -> Any:
        """The leader's apply ahead (partition.py): refused once armed, and its
        commit fails if armed meanwhile, as any write transaction does."""
        self._check()
        return _FailingHeld(self._inner.hold_write(size_hint), self)

    def _check(self) -> None:
        if self._armed.is_set():
            self.failed_writes += 1
            raise self.error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _FailingHeld:
    """A held write transaction of a FailingStore (see ``hold_write``)."""

    def __init__(self, inner: Any, store: FailingStore) -> None:
        self._inner = inner
        self._store = store
        self.txn = inner.txn

    def commit(self) -> None:
        try:
            self._store._check()
        except BaseException:
            self._inner.abort()
            raise
        self._inner.commit()

    def abort(self) -> None:
        self._inner.abort()


def install_failing_store(replica: Any, error: BaseException | None = None) -> FailingStore:
    store = FailingStore(replica.store, error)
    replica.store = store
    return store


class FailingSync:
    """An fdatasync that fails ``failures`` times (once armed), then succeeds."""

    def __init__(self, failures: int = 1, code: int = errno_codes.EIO) -> None:
        self.failures = failures
        self.code = code
        self.calls = 0
        self.failed = 0
        self.after_failure = 0  # calls after the first failure (a retry)
        self._armed = threading.Event()
        self._lock = threading.Lock()

    def arm(self) -> None:
        self._armed.set()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
            if self.failed:
                self.after_failure += 1
            fail = self._armed.is_set() and self.failed < self.failures
            if fail:
                self.failed += 1
        if fail:
            raise OSError(self.code, f"{os.strerror(self.code)} (injected fdatasync failure)")
        os.fdatasync(fd)


def install_failing_sync(
    replica: Any, failures: int = 1, code: int = errno_codes.EIO
) -> FailingSync:
    sync = FailingSync(failures, code)
    replica._SyncObj__raftLog.fdatasync = sync
    return sync
