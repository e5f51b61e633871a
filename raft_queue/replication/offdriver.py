"""Big-file work of a Raft group, off the driver thread.

One driver thread runs every group of the node (host.py): whatever a group
does in its tick, every other group waits for. A partition's snapshot (log
compaction, every ``log_compaction_min_time_s`` = 300 s or
``log_compaction_min_entries``) copies its whole LMDB, reads the copy back
for its CRC and fsyncs it, and the journal compaction after it closes the
old journal, whose blocks ext4 frees on that last close. With 1.2-1.8 million
records (W2's queue) that was 377-683 ms, then 202-277 ms, on the driver: every
group of the node stalled (W4's ~270 ms producer stall, issue 17;
docs/benchmarks.md, "W4's producer stall").

Here that work runs off the driver:

- ``BackgroundSerializer``: pysyncobj's Serializer whose snapshot file is
  written on a ``raft-snapshot`` thread of its own (one file written at a
  time per process, so snapshots of several groups do not compete for the
  disk; pinning never waits for another's). The image stays exactly the
  state pysyncobj names
  in the snapshot (its last applied entry): the driver waits until the
  thread has begun the LMDB read transaction the copy is taken from (``pin``,
  microseconds; applies run only on the driver, so none slips in between).
  pysyncobj asks ``checkSerializing`` on later ticks and compacts the
  journal only once the file is durable and renamed, as before; while the
  file is being written no snapshot is sent to a lagging follower
  (``getTransmissionData`` waits for the state to settle, as with a fork).
- ``close_later``: closing a replaced journal file, on one
  ``raft-offdriver`` thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

from pysyncobj.atomic_replace import atomicReplace
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer

log = logging.getLogger(__name__)

PIN_TIMEOUT_S = 5.0  # the driver waits this long for the copy's read transaction
TURN_POLL_S = 0.05  # a snapshot waiting for its turn checks this often for a close
CLOSE_WAIT_S = 60.0  # a group closing waits this long for its snapshot being written
LOG_OVER_S = 0.1  # a snapshot that took longer is logged at INFO (else DEBUG)
_RUNNING = -3  # Serializer.__pid while the thread writes (pysyncobj uses 0, >0, -1, -2)

_lock = threading.Lock()
_writing = threading.Lock()  # held while a snapshot file is written
_executor: ThreadPoolExecutor | None = None


def submit(fn: Callable[[], Any]) -> Future[Any]:
    """Run ``fn`` on the off-driver thread (started on first use)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(1, thread_name_prefix="raft-offdriver")
        return _executor.submit(fn)


def close_later(fn: Callable[[], None]) -> None:
    """Run ``fn`` (closing files) off the driver thread; errors are logged."""

    def run() -> None:
        try:
            fn()
        except Exception:
            log.exception("closing off the driver failed")

    submit(run)


def _run_into(future: Future[Any], fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except BaseException as exc:  # handed to checkSerializing through the future
        future.set_exception(exc)


def _take_turn(job: _Job) -> None:
    """Wait for ``_writing``; raise if the job's group closes meanwhile."""
    while not _writing.acquire(timeout=TURN_POLL_S):
        if job.cancelled:
            raise RuntimeError("snapshot cancelled: its group closed")
    if job.cancelled:
        _writing.release()
        raise RuntimeError("snapshot cancelled: its group closed")


class _Job:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pinned = threading.Event()
        self.abandoned = False
        self.cancelled = False  # the group closed: not written if not begun
        self.future: Future[Any] | None = None


class BackgroundSerializer(Serializer):
    """Installed by ``write_snapshots_off_driver`` on a group's Serializer
    (its class is swapped: pysyncobj keeps its private state in it)."""

    _pin: Callable[[], AbstractContextManager[Any]]
    _job: _Job | None

    def serialize(self, data: Any, id: Any) -> None:  # noqa: A002 (pysyncobj's name)
        """Driver thread (pysyncobj's log compaction)."""
        if self._Serializer__pid != 0:
            return
        self._Serializer__currentID = id
        self._Serializer__pid = _RUNNING
        job = self._job = _Job()
        job.future = Future()
        # A thread of its own, so that pinning never waits for another
        # group's snapshot; the writes themselves go one at a time (_writing).
        threading.Thread(
            target=_run_into, args=(job.future, lambda: self._write(job, data)),
            name="raft-snapshot", daemon=True,
        ).start()  # fmt: skip
        if not job.pinned.wait(PIN_TIMEOUT_S):
            with job.lock:
                job.abandoned = not job.pinned.is_set()
            if job.abandoned:
                log.warning("snapshot to %s: not begun in %.0f s", self._name(), PIN_TIMEOUT_S)

    def _write(self, job: _Job, data: Any) -> None:
        """The off-driver thread: copy the pinned state, then rename."""
        tmp = self._name() + ".tmp"
        start = time.monotonic()
        with self._pin():
            with job.lock:
                if job.abandoned:  # the driver moved on: the state is not the one named
                    raise RuntimeError("snapshot abandoned")
                job.pinned.set()
            _take_turn(job)  # one snapshot written at a time per process
            try:
                self._Serializer__serializer(tmp, data[1:])
            finally:
                _writing.release()
        atomicReplace(tmp, self._name())
        took = time.monotonic() - start
        log.log(
            logging.INFO if took >= LOG_OVER_S else logging.DEBUG,
            "snapshot %s written in %.0f ms, off the driver", self._name(), took * 1e3,
        )  # fmt: skip

    def checkSerializing(self) -> tuple[int, Any]:  # noqa: N802 (pysyncobj's name)
        job = self._job
        if self._Serializer__pid != _RUNNING or job is None or job.future is None:
            state: tuple[int, Any] = super().checkSerializing()
            return state
        current = self._Serializer__currentID
        if not job.future.done():
            return SERIALIZER_STATE.SERIALIZING, current
        self._Serializer__pid = 0
        self._Serializer__transmissions: dict[Any, Any] = {}
        self._job = None
        ok = job.future.exception() is None
        return (SERIALIZER_STATE.SUCCESS if ok else SERIALIZER_STATE.FAILED), current

    def wait_written(self) -> None:
        """A closing group: the snapshot being written is finished (or
        failed) before its files go (reconcile removes the directory next)."""
        job = self._job
        if job is None or job.future is None:
            return
        job.cancelled = True  # a write waiting its turn is dropped; one begun ends
        with job.lock:
            job.abandoned = job.abandoned or not job.pinned.is_set()
        # A failed or abandoned snapshot is only not there.
        with contextlib.suppress(Exception):
            job.future.result(CLOSE_WAIT_S)

    def _name(self) -> str:
        return str(self._Serializer__fileName)


def write_snapshots_off_driver(
    serializer: Serializer, pin: Callable[[], AbstractContextManager[Any]]
) -> BackgroundSerializer:
    """Make pysyncobj's ``serializer`` (a file serializer with our write
    function) write on the off-driver thread. ``pin()``: a context manager
    that begins the read transaction the image is copied from, entered on
    that thread while the driver waits."""
    serializer.__class__ = BackgroundSerializer
    bg: BackgroundSerializer = serializer
    bg._pin = pin
    bg._job = None
    return bg
