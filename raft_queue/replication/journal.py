"""The Raft journal made durable (hazard 3 of shared/PYSYNCOBJ.md): syncs,
term and vote on disk before use, crash-safe compaction.

``SyncedJournal`` wraps pysyncobj's FileJournal; ``DurableMetaStorer`` keeps
term and vote; ``_write_journal`` writes a journal file in pysyncobj's
format (compaction). Which thread syncs, and when acks may follow, is
``raft.py``'s business.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shutil
import struct
import time
import zlib
from functools import partial
from typing import Any

from pysyncobj import journal as journal_format
from pysyncobj.journal import FileJournal, MetaStorer

from raft_queue.observability.metrics import NULL_PROBE
from raft_queue.replication import offdriver
from raft_queue.replication.diskfiles import PreallocatedFile

log = logging.getLogger(__name__)

# Test-only: with RAFTQ_POWERLOSS_COPY=1 every journal sync also leaves
# "<journal>.synced", the journal exactly as synced, before any ack that sync
# allows; tests/chaos/test_durability.py simulates power loss by SIGKILL and
# putting back only that copy. Read once at import: free when unset.
POWERLOSS_COPY = os.environ.get("RAFTQ_POWERLOSS_COPY") == "1"


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` (a rename into it) durable."""
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _close_replaced(old: Any, fd: int) -> None:
    """Close a journal file replaced by compaction (its map, file and our descriptor)."""
    try:
        old._ResizableFile__mm.close()
        old._ResizableFile__f.close()
    finally:
        os.close(fd)


class DurableMetaStorer(MetaStorer):
    """Term and vote (pysyncobj's meta dict), durable with ONE fdatasync per
    change and no rename: ``<journal>.vote`` holds two fixed slots, written
    alternately in place (``>QII`` sequence, length, crc32, then the pickled
    dict); the valid slot with the highest sequence wins, so a torn write
    leaves the previous state. pysyncobj's ``<journal>.meta`` (tmp + rename,
    never synced) could come back old after a power loss (a node voting twice
    in a term); a tmp-fsync, rename, directory-fsync fix costs two fsyncs per
    change, four per vote, all on the driver thread, and made election storms
    self-sustaining with hundreds of groups on a busy disk. The old file is
    read once if no slot is valid (upgrade)."""

    SLOT = 4096
    _HEAD = struct.Struct(">QII")

    def __init__(self, journal_path: str) -> None:
        super().__init__(f"{journal_path}.meta")
        path = f"{journal_path}.vote"
        fresh = not os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if fresh:
            os.ftruncate(self._fd, 2 * self.SLOT)
            os.fsync(self._fd)
            fsync_dir(os.path.dirname(path))
        self._seq, self._meta = self._read()
        self.failure = ""  # a failed write or sync: the replica must stop (fail-stop)

    def _read(self) -> tuple[int, dict[str, Any] | None]:
        best: tuple[int, dict[str, Any] | None] = (0, None)
        for slot in (0, 1):
            raw = os.pread(self._fd, self.SLOT, slot * self.SLOT)
            if len(raw) < self._HEAD.size:
                continue
            seq, size, crc = self._HEAD.unpack_from(raw)
            body = raw[self._HEAD.size : self._HEAD.size + size]
            if seq > best[0] and len(body) == size and zlib.crc32(body) == crc:
                best = (seq, pickle.loads(body))  # noqa: S301 (our own file)
        return best

    def getMeta(self) -> dict[str, Any]:  # noqa: N802
        return dict(self._meta) if self._meta is not None else super().getMeta()

    def storeMeta(self, meta: dict[str, Any]) -> None:  # noqa: N802
        body = pickle.dumps(meta, protocol=5)
        if self._HEAD.size + len(body) > self.SLOT:
            raise ValueError(f"raft meta of {len(body)} bytes does not fit a slot")
        if self.failure:  # never retried after a failure (fsyncgate)
            raise OSError(f"raft meta store failed earlier: {self.failure}")
        self._seq += 1
        head = self._HEAD.pack(self._seq, len(body), zlib.crc32(body))
        try:
            os.pwrite(self._fd, head + body, (self._seq % 2) * self.SLOT)
            os.fdatasync(self._fd)
        except OSError as exc:
            self.failure = f"term/vote sync failed: {exc}"
            raise
        self._meta = dict(meta)

    def close(self) -> None:
        os.close(self._fd)


class SyncedJournal:
    """Wraps pysyncobj's journal: remembers whether anything was written since
    the last ``sync()`` so one sync covers a whole batch of entries; stores
    term/vote durably; compacts by writing a new file.

    Syncs use ``os.fdatasync`` on our own descriptor of the journal file, not
    ``mmap.flush()``: CPython 3.11 holds the GIL through msync (measured: a
    spinning thread ran 0.14 M iterations/s during a 256 MiB msync, 2.4 M/s
    during fdatasync), stalling gRPC and every other group. On Linux this
    syncs the same data: msync(MS_SYNC) of a shared file mapping is
    ``vfs_fsync_range`` on the file (mm/msync.c), and pages written through a
    MAP_SHARED mapping are the file's page-cache pages, marked dirty on the
    write fault, which fsync/fdatasync of any descriptor of the inode writes
    back (measured: /proc/meminfo Dirty fell by the 256 MiB written through
    the mapping after fdatasync of a separate O_RDONLY descriptor). fdatasync
    also persists the file size the mapping grew to (ftruncate)."""

    def __init__(self, inner: Any, path: str | None, enabled: bool) -> None:
        self._inner = inner
        self._path = path
        self._enabled = enabled and path is not None
        self._fd: int | None = None
        if path is not None and isinstance(inner, FileJournal):
            storer = DurableMetaStorer(path)
            inner._FileJournal__metaStorer = storer
            inner._FileJournal__meta = storer.getMeta()
            self._fd = os.open(path, os.O_RDONLY)
            old = inner._FileJournal__journalFile
            old._ResizableFile__mm.close()  # nothing written through it yet
            old._ResizableFile__f.close()
            inner._FileJournal__journalFile = PreallocatedFile(path)
        # Write sequence: every change of the file bumps ``written``; a sync
        # covers the sequence it started at (``synced``: the highest covered
        # by a completed sync). What the file held at open is not known to be
        # on disk (a kill keeps the page cache): the first sync covers it.
        self.written = 1
        self.synced = 0
        self.pending_bytes = 0  # commands added since the last sync began
        self.last_sync_s = 0.0  # how long the last completed fdatasync took
        # The last log index a completed sync covers (entries after a
        # truncation point are not covered, whatever their index).
        self.durable_index = 0
        self.inflight: SyncJob | None = None
        # The system call syncs run (a seam: raft_queue/testing/faults.py
        # injects failures), and the first failure, after which nothing
        # syncs again and nothing more counts as durable (fsyncgate: Linux
        # may have dropped the pages a failed fdatasync could not write, so
        # a later one that succeeds proves nothing).
        self.fdatasync: Any = None  # None: os.fdatasync, looked up at each sync
        self._failure = ""
        self.on_failure: Any = lambda: None  # the group's wake-up (it then stops)
        self._copied = 0  # POWERLOSS_COPY: the write sequence of "<journal>.synced"
        self.syncs = 0
        # Metrics (observability/metrics.py's RaftProbe), set by the group.
        self.probe: Any = NULL_PROBE

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __getitem__(self, idx: Any) -> Any:
        return self._inner[idx]

    def __len__(self) -> int:
        return len(self._inner)

    @property
    def entries(self) -> list[Any]:
        """The (command, index, term) list itself (driver thread; read only)."""
        inner = self._inner
        if isinstance(inner, FileJournal):
            return inner._FileJournal__journal  # type: ignore[no-any-return]
        return inner._MemoryJournal__journal  # type: ignore[no-any-return]

    @property
    def failure(self) -> str:
        """Why this journal can no longer be trusted ("" while it can)."""
        storer = getattr(self._inner, "_FileJournal__metaStorer", None)
        return self._failure or getattr(storer, "failure", "")

    @property
    def dirty(self) -> bool:
        """Written since the last completed sync began."""
        return self.written > self.synced

    def add(self, command: bytes, idx: int, term: int) -> None:
        try:
            self._inner.add(command, idx, term)
        except OSError as exc:  # disk full or I/O error: the entry is not in the file
            self._failure = f"journal write to {self._path} failed: {exc}"
            self.on_failure()
            raise
        self.written += 1
        self.pending_bytes += len(command)
        self.probe.appended(len(command))

    def clear(self) -> None:
        self._inner.clear()
        self._truncated()

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802,N803
        self._inner.deleteEntriesFrom(entryFrom)
        self._truncated()

    def _truncated(self) -> None:
        """Entries were cut from the end: neither a completed sync nor one in
        flight covers an index past the new end (a later entry at such an
        index is new data)."""
        self.written += 1
        last = self._inner[-1][1] if len(self._inner) else 0
        self.durable_index = min(self.durable_index, last)
        if self.inflight is not None:
            self.inflight.last_index = min(self.inflight.last_index, last)

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802,N803
        """Drop the first ``entryTo`` entries. pysyncobj rewrites the journal in
        place (clear, then re-add every kept entry through the mapping): a kill
        in the middle leaves a prefix of the kept entries, and after a power
        loss any mix of old and new pages. Instead write the kept entries to a
        new file, sync it, rename it over the journal and sync the directory:
        a crash leaves the old journal or the new one. A sync in flight holds
        its own descriptor of the old file: harmless, the new file is synced
        here with everything the old one had."""
        if self._fd is None:
            self._inner.deleteEntriesTo(entryTo)
            self.written += 1
            return
        assert self._path is not None
        inner = self._inner
        keep = inner._FileJournal__journal[entryTo:]
        tmp = f"{self._path}.compact"
        end = _write_journal(tmp, keep, self._enabled)
        old = inner._FileJournal__journalFile
        os.replace(tmp, self._path)
        if self._enabled:
            fsync_dir(os.path.dirname(self._path))
        inner._FileJournal__journalFile = PreallocatedFile(self._path)
        inner._FileJournal__journal = keep
        inner._FileJournal__currentOffset = end
        old_fd, self._fd = self._fd, os.open(self._path, os.O_RDONLY)
        # The old file's last close frees its blocks (a big journal: 100+ ms
        # in ext4): off the driver thread (offdriver.py, issue 17). Its map
        # is closed, not _destroy()ed: that would msync the old file.
        offdriver.close_later(partial(_close_replaced, old, old_fd))
        self.written += 1  # a sync (and POWERLOSS_COPY) sees the new file

    def onOneSecondTimer(self) -> None:  # noqa: N802
        """pysyncobj rewrites the meta file every second to store the commit
        index. Raft keeps commitIndex volatile (Figure 2): a stale one after a
        restart only delays applying until the leader's next AppendEntries, and
        LMDB's last_applied skips what was applied. Not storing it spares a
        write and an fdatasync per second per busy group; the meta is stored
        only when term or vote change."""

    # ---- syncs ----------------------------------------------------------------------
    # Inline (``sync``) or in two halves around an I/O thread (``begin_sync``
    # on the driver thread, ``SyncJob.run`` on the I/O thread, ``end_sync``
    # back on the driver thread). Either way ``synced`` and ``durable_index``
    # move only once the data is on disk, and POWERLOSS_COPY's file is in
    # place before they move (so before any ack they allow).

    def sync(self) -> bool:
        """fdatasync the journal now if written since the last sync; True if it did."""
        if self._failure:
            raise OSError(f"journal failed earlier: {self._failure}")
        if not self.dirty:
            return False
        job = self._job()
        if job is not None:
            job.run()
            self.probe.synced(job.seconds)
            if job.error is not None:
                self._failed(job)
                raise job.error
            self._finish(job)
        return True

    def begin_sync(self) -> SyncJob | None:
        """A sync of everything written so far to run on another thread, or
        None if there is nothing to sync, one is already in flight (its
        ``end_sync`` starts the next), or syncs are off (then what was
        written counts as synced at once)."""
        if self.inflight is not None or not self.dirty or self._failure:
            return None
        job = self._job()
        self.inflight = job
        return job

    def end_sync(self, job: SyncJob) -> None:
        """Driver thread, after ``job.run()`` returned on the I/O thread."""
        if self.inflight is job:
            self.inflight = None
        if job.error is None and not self._failure:
            self._finish(job)
        elif job.error is not None:
            self._failed(job)

    def _failed(self, job: SyncJob) -> None:
        """A sync failed: nothing it covered counts, and no sync runs again
        (the group stops: fail-stop)."""
        log.critical("journal sync of %s failed: %s", self._path, job.error)
        if not self._failure:
            self._failure = f"journal fdatasync of {self._path} failed: {job.error}"
        if job.copy is not None:
            _remove_quietly(job.copy)

    def _job(self) -> SyncJob | None:
        self.pending_bytes = 0
        last = self._inner[-1][1] if len(self._inner) else 0
        if not (self._enabled and self._fd is not None):
            self.synced = self.written
            self.durable_index = last
            return None
        copy = None
        if POWERLOSS_COPY and self._path:
            copy = f"{self._path}.synced.{self.written}.tmp"
            shutil.copyfile(self._path, copy)  # the journal exactly as this sync covers it
        return SyncJob(os.dup(self._fd), self.written, last, copy, self.fdatasync)

    def _finish(self, job: SyncJob) -> None:
        if job.copy is not None and self._path:
            if job.seq > self._copied:
                os.replace(job.copy, f"{self._path}.synced")  # atomic: old or new
                self._copied = job.seq
            else:
                _remove_quietly(job.copy)
        self.syncs += 1
        self.last_sync_s = job.seconds
        self.synced = max(self.synced, job.seq)
        self.durable_index = max(self.durable_index, job.last_index)

    def _destroy(self) -> None:
        if self.inflight is not None and self.inflight.copy is not None:
            _remove_quietly(self.inflight.copy)
        self._inner._destroy()
        storer = getattr(self._inner, "_FileJournal__metaStorer", None)
        if isinstance(storer, DurableMetaStorer):
            storer.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class SyncJob:
    """One fdatasync of a journal: ``seq`` and ``last_index`` are what it
    covers (the write sequence and last log index when it began; a
    truncation meanwhile lowers ``last_index``). It owns ``fd`` (a dup of
    the journal's descriptor, so compaction or close may replace or close
    the journal's own meanwhile). ``copy``: POWERLOSS_COPY's snapshot of the
    file taken when it began."""

    __slots__ = ("copy", "error", "fd", "fdatasync", "last_index", "seconds", "seq")

    def __init__(
        self,
        fd: int,
        seq: int,
        last_index: int,
        copy: str | None,
        fdatasync: Any = None,
    ) -> None:
        self.fd = fd
        self.fdatasync = fdatasync
        self.seq = seq
        self.last_index = last_index
        self.copy = copy
        self.error: OSError | None = None
        self.seconds = 0.0  # how long the fdatasync took (metrics)

    def run(self) -> None:
        """The sync itself (any thread; releases the GIL). An error is kept in
        ``error``: nothing it would have covered counts as synced."""
        start = time.monotonic()
        try:
            (self.fdatasync or os.fdatasync)(self.fd)
        except OSError as exc:
            self.error = exc
        finally:
            os.close(self.fd)
            self.seconds = time.monotonic() - start


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _write_journal(path: str, entries: list[Any], durable: bool) -> int:
    """Write ``entries`` to a new journal file in pysyncobj 0.3.17's format
    (journal.py: header, then per record ``<I`` size, ``<QQ`` index and term,
    command, ``<I`` size); returns the offset after the last record."""
    offset = int(journal_format.FIRST_RECORD_OFFSET)
    with open(path, "wb") as f:
        f.write(b"\0" * offset)
        for command, idx, term in entries:
            data = struct.pack("<QQ", idx, term) + bytes(command)
            size = struct.pack("<I", len(data))
            f.write(size + data + size)
            offset += len(data) + 8
        header = FileJournal._FileJournal__getDefaultHeader(None)  # constants only
        f.seek(0)
        f.write(header[: journal_format.LAST_RECORD_OFFSET_OFFSET] + struct.pack("<I", offset))
        f.flush()
        if durable:
            os.fsync(f.fileno())
    return offset
