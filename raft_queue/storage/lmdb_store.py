"""LmdbStore: the LogStore on LMDB, one environment per partition replica.

The only importer of ``lmdb``. One named DB per table plus ``_meta``, which
holds ``last_applied`` (8-byte big-endian) written in the same transaction as
the data. The environment is opened with ``sync=False, metasync=False``: a
commit reaches the OS page cache, not the disk; durability comes from the
synced Raft journal (an entry lost from LMDB in a crash is replayed because
``last_applied`` is lost with it). ``sync()`` forces the data to disk before a
snapshot and on close.

It is also opened with ``writemap=True``: a commit writes its pages through
the map instead of one ``pwrite`` per dirty page (~6.7 per applied entry on
W1; issue 17). LMDB then sizes ``data.mdb`` to the whole map as a sparse
file, and a write into a hole of a full disk would be a SIGBUS that kills
the node. So the file is backed ahead: before every write transaction,
``_back_ahead`` allocates the blocks (storage/space.py) from the
high-water page up to twice ``headroom`` bytes past it, where headroom
bounds what one transaction can add (at least HEADROOM_MIN_BYTES, 4x the
entry about to be applied, 2x the largest growth of one transaction seen):
4-8 MiB of disk per replica beyond its data in the common case. A full disk is
then ResourceExhausted before the transaction begins: the Raft apply path
stops the replica (fail-stop), never skips the entry.

Threads: one writer (the Raft apply thread) and many readers (gRPC handlers)
run concurrently, as LMDB's MVCC allows. Growing the map (``set_mapsize``)
and swapping in a snapshot need every transaction of this process closed, so
all transactions pass a gate: shared for transactions, exclusive for those
two. Keep read transactions short, or a growth waits for them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import lmdb

from raft_queue import errors
from raft_queue.core.kv import KVTxn
from raft_queue.storage.base import StrPath
from raft_queue.storage.space import reserve

T = TypeVar("T")

META_TABLE = "_meta"
_LAST_APPLIED = b"last_applied"
_U64 = struct.Struct(">Q")
_GROW_ATTEMPTS = 8
_DEFAULT_MAX_MAP_BYTES = 1 << 40
_COMPLETE = "RESTORE_COMPLETE"
_DATA_FILE = "data.mdb"
# Test and benchmark switch (read once): RAFTQ_LMDB_WRITEMAP=0 writes pages
# with pwrite as before writemap was adopted (docs/benchmarks.md).
WRITEMAP = os.environ.get("RAFTQ_LMDB_WRITEMAP", "1") != "0"
HEADROOM_MIN_BYTES = 4 << 20
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _translate(exc: lmdb.Error) -> errors.QueueError:
    """Map an lmdb exception to our tree: capacity problems are retryable."""
    if isinstance(exc, lmdb.MapFullError | lmdb.ReadersFullError | lmdb.DiskError):
        return errors.ResourceExhausted(f"LMDB: {exc}")
    return errors.Internal(f"LMDB: {type(exc).__name__}: {exc}")


class _LmdbErrors:
    """``with _LMDB_ERRORS:`` translates lmdb exceptions raised in the block
    (a class, not @contextmanager: it wraps every get and put).
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, lmdb.Error):
            raise _translate(exc) from exc


_LMDB_ERRORS = _LmdbErrors()


class _Gate:
    """Shared/exclusive gate over this process's LMDB transactions.

    Shared entries by a thread already inside are always admitted (a nested
    read must not wait for a pending exclusive that waits for it); asking for
    exclusive while inside is a bug reported as Internal, not a deadlock.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._exclusive = False
        self._local = threading.local()

    def _depth(self) -> int:
        return int(getattr(self._local, "depth", 0))

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive and self._depth() == 0:
                self._cond.wait()
            self._active += 1
        self._local.depth = self._depth() + 1
        try:
            yield
        finally:
            self._local.depth = self._depth() - 1
            with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._cond.notify_all()

    def check_outside(self) -> None:
        """Internal if this thread is inside a transaction (exclusive would hang)."""
        if self._depth():
            raise errors.Internal("store maintenance requested inside an open transaction")

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        self.check_outside()
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True
            while self._active:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class _LmdbTxn:
    """KVTxn over one lmdb.Transaction; valid only inside its ``with`` block."""

    def __init__(self, txn: Any, dbs: dict[str, Any], meta_db: Any, write: bool) -> None:
        self.txn = txn
        self._dbs = dbs
        self.meta_db = meta_db
        self.write = write
        self.open = True

    def _db(self, table: str) -> Any:
        if not self.open:
            raise errors.Internal("transaction used after it ended")
        return self._dbs[table]  # KeyError for an unknown table

    def _writable(self, table: str) -> Any:
        db = self._db(table)
        if not self.write:
            raise errors.Internal("write in a read-only transaction")
        return db

    # get/put/delete run per record on the apply path: a plain try (free in
    # CPython 3.11) instead of ``with _LMDB_ERRORS``, and the checks of
    # ``_db``/``_writable`` only re-run (to raise) when one would fail.
    def get(self, table: str, key: bytes) -> bytes | None:
        if not self.open:
            self._db(table)
        try:
            value: bytes | None = self.txn.get(key, db=self._dbs[table])
        except lmdb.Error as exc:
            raise _translate(exc) from exc
        return value

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if not (self.open and self.write):
            self._writable(table)
        try:
            self.txn.put(key, value, db=self._dbs[table])
        except lmdb.Error as exc:
            raise _translate(exc) from exc

    def put_many(self, table: str, items: Sequence[tuple[bytes, bytes]]) -> None:
        if not (self.open and self.write):
            self._writable(table)
        if not items:
            return
        try:
            with self.txn.cursor(db=self._dbs[table]) as cursor:
                consumed, _added = cursor.putmulti(items)
        except lmdb.Error as exc:
            raise _translate(exc) from exc
        if consumed != len(items):
            raise errors.Internal(f"put_many stored {consumed} of {len(items)} items")

    def floor(self, table: str, key: bytes) -> tuple[bytes, bytes] | None:
        db = self._db(table)
        try:
            with self.txn.cursor(db=db) as cursor:
                if cursor.set_range(key):
                    if cursor.key() == key:
                        return key, cursor.value()
                    found = cursor.prev()
                else:
                    found = cursor.last()
                return (cursor.key(), cursor.value()) if found else None
        except lmdb.Error as exc:
            raise _translate(exc) from exc

    def delete(self, table: str, key: bytes) -> bool:
        if not (self.open and self.write):
            self._writable(table)
        try:
            return bool(self.txn.delete(key, db=self._dbs[table]))
        except lmdb.Error as exc:
            raise _translate(exc) from exc

    def scan(
        self,
        table: str,
        start: bytes = b"",
        stop: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        cursor = self.txn.cursor(db=self._db(table))
        return (
            self._backward(cursor, start, stop) if reverse else self._forward(cursor, start, stop)
        )

    @staticmethod
    def _forward(cursor: Any, start: bytes, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        with _LMDB_ERRORS:
            found = cursor.set_range(start) if start else cursor.first()
            while found:
                key: bytes = cursor.key()
                if stop is not None and key >= stop:
                    return
                yield key, cursor.value()
                found = cursor.next()

    @staticmethod
    def _backward(cursor: Any, start: bytes, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        with _LMDB_ERRORS:
            if stop == b"":
                return
            # Start at the last key below stop: before the first key >= stop,
            # or the table's last key when every key is below stop.
            at_or_above = stop is not None and cursor.set_range(stop)
            found = cursor.prev() if at_or_above else cursor.last()
            while found:
                key: bytes = cursor.key()
                if key < start:
                    return
                yield key, cursor.value()
                found = cursor.prev()

    def count(self, table: str) -> int:
        with _LMDB_ERRORS:
            return int(self.txn.stat(self._db(table))["entries"])


class LmdbStore:
    """LogStore on one LMDB environment in directory ``path``.

    ``map_size`` is the initial map (virtual address space, not disk); it
    doubles when full, up to ``max_map_size``. ``max_readers`` bounds
    concurrent read transactions (size it above the gRPC thread pool).
    """

    def __init__(
        self,
        path: StrPath,
        tables: Iterable[str],
        map_size: int = 1 << 30,
        max_map_size: int = _DEFAULT_MAX_MAP_BYTES,
        max_readers: int = 256,
    ) -> None:
        self._path = Path(path)
        self._names = tuple(dict.fromkeys(tables))
        if META_TABLE in self._names:
            raise errors.Internal(f"table name {META_TABLE!r} is reserved")
        self._map_size = map_size
        self._max_map_size = max(max_map_size, map_size)
        self._max_readers = max_readers
        self._gate = _Gate()
        self._local = threading.local()  # .writing: this thread has a write txn open
        self._closed = False
        self._data_fd = -1  # our descriptor of data.mdb, for reserve() (writemap)
        self._backed = 0  # bytes of data.mdb from 0 known to have disk blocks
        self._last_used = 0  # bytes used before the last write transaction
        self._max_growth = 0  # the most one write transaction has added
        _recover_swap(self._path)
        self._open()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    def _open(self) -> None:
        self._path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with _LMDB_ERRORS:
            self._env = lmdb.open(
                str(self._path),
                map_size=self._map_size,
                max_dbs=len(self._names) + 1,
                max_readers=self._max_readers,
                sync=False,
                metasync=False,
                writemap=WRITEMAP,
                lock=True,
                mode=0o600,  # data.mdb / lock.mdb readable by the node's user only
            )
            dbs = {name: self._env.open_db(name.encode()) for name in self._names}
            self._meta_db = self._env.open_db(META_TABLE.encode())
            self._map_size = int(self._env.info()["map_size"])
            self._psize = int(self._env.stat()["psize"])  # fixed for the file's life
        self._dbs = dbs
        if WRITEMAP:
            self._data_fd = os.open(self._path / _DATA_FILE, os.O_RDWR)
            # What is below the high-water page was written (pwrite, a
            # restored image, or through the map after a reserve): backed.
            self._last_used = self._used()
            self._backed = self._last_used
            with contextlib.suppress(errors.ResourceExhausted):  # full: the first write refuses
                self._back(self._last_used + HEADROOM_MIN_BYTES)

    def _close_data_fd(self) -> None:
        fd, self._data_fd = self._data_fd, -1
        if fd >= 0:
            os.close(fd)

    @contextmanager
    def begin(self, write: bool = False, size_hint: int = 0) -> Iterator[KVTxn]:
        """See LogStore.begin. If the map fills up, it is doubled and
        ResourceExhausted raised: re-run the transaction (``run_write`` does).
        ``size_hint``: bytes the transaction is about to write, if known.
        """
        if write:
            self._claim_writer()
        try:
            if write:
                env, used = self._env, self._ensure_headroom()
            with self._gate.shared():
                if write:  # under the gate: a restore or close cannot swap the fd meanwhile
                    # One writer thread: only a restore (a new env) can have
                    # moved the high-water page since it was read.
                    self._back_ahead(size_hint, used if env is self._env else self._used())
                with self._transaction(write) as txn:
                    yield txn
        except errors.ResourceExhausted as exc:
            if _map_full(exc):
                self._grow()
            raise
        finally:
            if write:
                self._local.writing = False

    def run_write(self, fn: Callable[[KVTxn], T], size_hint: int = 0) -> T:
        """Run ``fn`` in a write transaction and commit; if the map fills up,
        grow it and run ``fn`` again from scratch (so ``fn`` must only act
        through the txn). The Raft apply path uses this, with the entry's
        length as ``size_hint``.
        """
        for _ in range(_GROW_ATTEMPTS):
            try:
                with self.begin(write=True, size_hint=size_hint) as txn:
                    return fn(txn)
            except errors.ResourceExhausted as exc:
                if not _map_full(exc):
                    raise
        raise errors.ResourceExhausted(f"LMDB map still full at {self._map_size} bytes")

    def hold_write(self, size_hint: int = 0) -> HeldWrite:
        """A write transaction left open past this call: ``commit()`` or
        ``abort()`` it later, on this same thread (LMDB's writer lock is the
        thread's). Until then this thread can open no other write
        transaction (Internal), readers see none of its writes, and no map
        growth, restore or close can run (they wait for the gate): the caller
        ends it before any of them. For the leader's apply ahead of commit
        (replication/partition.py). A full map raises ResourceExhausted here,
        as ``begin`` does (the map has grown; ``run_write`` would re-run)."""
        stack = ExitStack()
        txn = stack.enter_context(self.begin(write=True, size_hint=size_hint))
        return HeldWrite(txn, stack)

    def _claim_writer(self) -> None:
        """A second write txn in one thread would deadlock on LMDB's writer
        lock; another thread's writer simply waits on that lock.
        """
        if getattr(self._local, "writing", False):
            raise errors.Internal("a write transaction is already open in this thread")
        self._local.writing = True

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[_LmdbTxn]:
        self._check_open()
        with _LMDB_ERRORS:
            raw = self._env.begin(write=write, buffers=False)
        txn = _LmdbTxn(raw, self._dbs, self._meta_db, write)
        try:
            yield txn
        except BaseException:
            raw.abort()
            raise
        else:
            try:
                raw.commit()
            except lmdb.Error as exc:
                raw.abort()
                raise _translate(exc) from exc
        finally:
            txn.open = False

    def _used(self) -> int:
        """Bytes of data.mdb up to the high-water page."""
        with _LMDB_ERRORS:
            return (int(self._env.info()["last_pgno"]) + 1) * self._psize

    def _ensure_headroom(self) -> int:
        """Grow before a write when over half the map is used, so the common
        case never hits MapFull mid-transaction. The bytes used (a growth
        does not move them).
        """
        used = self._used()
        if used * 2 > self._map_size:
            self._grow()
        return used

    def _back_ahead(self, size_hint: int, used: int) -> None:
        """With writemap, before a write: back the file ahead of what this
        transaction can add (module docstring), ``used`` being the bytes up
        to the high-water page now. Inside the shared gate."""
        if self._data_fd < 0:
            return
        # One writer thread: what the high-water page rose by since the last
        # write began is what that transaction (or an aborted one) added.
        self._max_growth = max(self._max_growth, used - self._last_used)
        self._last_used = used
        headroom = max(HEADROOM_MIN_BYTES, 4 * size_hint, 2 * self._max_growth)
        if used + headroom > self._backed:
            self._back(used + 2 * headroom)  # ahead: not a reserve per transaction

    def _back(self, end: int) -> None:
        """Allocate data.mdb's blocks up to ``end`` (at most the map; beyond
        the high-water page, so nothing else writes there meanwhile)."""
        end = min(end, self._map_size)
        if end <= self._backed:
            return
        try:
            reserve(self._data_fd, self._backed, end - self._backed)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise errors.ResourceExhausted(
                    f"no disk space for {self._path / _DATA_FILE}: "
                    f"{end - self._backed} bytes ahead of its {self._backed}: {exc.strerror}"
                ) from exc
            raise
        self._backed = end

    def _grow(self) -> None:
        with self._gate.exclusive():
            new_size = self._map_size * 2
            if new_size > self._max_map_size:
                raise errors.ResourceExhausted(
                    f"LMDB map would exceed max_map_size={self._max_map_size}"
                )
            try:
                self._env.set_mapsize(new_size)
            except lmdb.Error as exc:
                raise errors.ResourceExhausted(f"LMDB set_mapsize({new_size}): {exc}") from exc
            self._map_size = new_size

    def last_applied(self) -> int:
        with self._gate.shared(), self._transaction(write=False) as txn, _LMDB_ERRORS:
            raw = txn.txn.get(_LAST_APPLIED, db=txn.meta_db)
        return 0 if raw is None else int(_U64.unpack(raw)[0])

    def set_last_applied(self, txn: KVTxn, index: int) -> None:
        """Write ``index`` into ``_meta`` inside this store's write txn."""
        if (
            not isinstance(txn, _LmdbTxn)
            or not txn.write
            or not txn.open
            or txn.meta_db is not self._meta_db
        ):
            raise errors.Internal("set_last_applied needs this store's open write transaction")
        if index < 0:
            raise errors.Internal(f"negative last_applied {index}")
        with _LMDB_ERRORS:
            txn.txn.put(_LAST_APPLIED, _U64.pack(index), db=txn.meta_db)

    def sync(self) -> None:
        self._check_open()
        with _LMDB_ERRORS:
            self._env.sync(True)

    def snapshot_to(self, fileobj: BinaryIO) -> None:
        """Append a compacted, consistent image at ``fileobj``'s position
        (written through its descriptor; buffered data is flushed first).
        """
        self._check_open()
        fileobj.flush()
        with self._gate.shared(), _LMDB_ERRORS:
            self._env.copyfd(fileobj.fileno(), compact=True)

    @contextmanager
    def pinned_image(self) -> Iterator[Callable[[BinaryIO], None]]:
        """The state as of entry, to write later: yields ``write_image(fileobj)``
        (as ``snapshot_to``) copying from a read transaction begun on entry
        and held until exit (any thread; replication/offdriver.py)."""
        self._check_open()
        with self._gate.shared():
            with _LMDB_ERRORS:
                raw = self._env.begin(buffers=False)
            try:

                def write_image(fileobj: BinaryIO) -> None:
                    fileobj.flush()
                    with _LMDB_ERRORS:
                        self._env.copyfd(fileobj.fileno(), compact=True, txn=raw)

                yield write_image
            finally:
                raw.abort()

    def restore_from(self, path: StrPath) -> None:
        """Stage the image in ``<path>.restore``, check it, fsync, then swap
        directories and reopen. A crash mid-swap is repaired at next open.
        """
        self._check_open()
        self._gate.check_outside()
        staging = _sibling(self._path, ".restore")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with open(path, "rb") as src, open(staging / "data.mdb", "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        try:
            _check_image(staging, self._names)
        except errors.QueueError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        (staging / _COMPLETE).touch()
        _fsync_dir(staging)
        with self._gate.exclusive():
            self._env.close()
            self._close_data_fd()
            _swap_in(self._path, staging)
            self._open()

    def close(self) -> None:
        """Sync and close; idempotent."""
        if self._closed:
            return
        with self._gate.exclusive():
            try:
                with _LMDB_ERRORS:
                    self._env.sync(True)
            finally:
                self._env.close()
                self._close_data_fd()
                self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise errors.Internal("store is closed")


class _Abandoned(Exception):
    """Thrown into a held transaction's block to abort it."""


class HeldWrite:
    """``LmdbStore.hold_write``'s open transaction; ended exactly once."""

    __slots__ = ("_stack", "txn")

    def __init__(self, txn: KVTxn, stack: ExitStack) -> None:
        self.txn = txn
        self._stack: ExitStack | None = stack

    def commit(self) -> None:
        """Commit what was written (its errors raise, as ``begin``'s do)."""
        stack, self._stack = self._stack, None
        if stack is None:
            raise errors.Internal("held write transaction already ended")
        stack.close()

    def abort(self) -> None:
        """Drop what was written; idempotent, never raises for the abort."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        with contextlib.suppress(_Abandoned):
            stack.__exit__(_Abandoned, _Abandoned(), None)

    @property
    def open(self) -> bool:
        return self._stack is not None


def _map_full(exc: errors.ResourceExhausted) -> bool:
    """The store's own map filled up (it grows; the txn can be re-run)."""
    return isinstance(exc.__cause__, lmdb.MapFullError)


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_image(directory: Path, tables: tuple[str, ...]) -> None:
    """Open a staged image read-only; every table must exist (Internal if not)."""
    try:
        env = lmdb.open(str(directory), readonly=True, lock=False, max_dbs=len(tables) + 1)
    except lmdb.Error as exc:
        raise errors.Internal(f"snapshot image is not an LMDB environment: {exc}") from exc
    try:
        with env.begin() as txn:
            for name in (*tables, META_TABLE):
                env.open_db(name.encode(), txn=txn, create=False)
    except lmdb.Error as exc:
        raise errors.Internal(f"snapshot image lacks a table: {exc}") from exc
    finally:
        env.close()
    with contextlib.suppress(FileNotFoundError):
        (directory / "lock.mdb").unlink()


def _swap_in(path: Path, staging: Path) -> None:
    """Replace directory ``path`` by ``staging`` (two renames, then cleanup)."""
    old = _sibling(path, ".old")
    shutil.rmtree(old, ignore_errors=True)
    path.rename(old)
    staging.rename(path)
    _fsync_dir(path.parent)
    (path / _COMPLETE).unlink()
    shutil.rmtree(old, ignore_errors=True)


def _recover_swap(path: Path) -> None:
    """Finish or roll back a restore interrupted by a crash."""
    staging, old = _sibling(path, ".restore"), _sibling(path, ".old")
    if not path.exists():
        if (staging / _COMPLETE).exists():
            staging.rename(path)
            (path / _COMPLETE).unlink()
        elif old.exists():
            old.rename(path)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
