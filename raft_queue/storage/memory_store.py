"""MemoryStore: the LogStore in plain Python, for unit tests and fakes.

Same contract as LmdbStore (one contract suite runs both), no durability.
Each table is a dict plus a sorted key list (bisect) so scans are ordered.
A write transaction changes the tables in place and keeps an undo log; an
exception inside the ``with`` block replays the log backwards. Transactions
are serialised by one re-entrant lock, so readers never see a half-written
transaction (simpler than LMDB's MVCC, and enough for tests).
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO, TypeVar

from raft_queue import errors
from raft_queue.core.kv import KVTxn
from raft_queue.storage.base import StrPath

T = TypeVar("T")

MAX_KEY_BYTES = 511  # LMDB's limit; enforced here too so both stores agree
_MAGIC = b"RQMEMv1\n"
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class _Table:
    """One ordered table: dict for lookups, sorted key list for ranges."""

    __slots__ = ("data", "keys")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []

    def put(self, key: bytes, value: bytes) -> bytes | None:
        """Store and return the previous value (None if new)."""
        old = self.data.get(key)
        if old is None:
            bisect.insort(self.keys, key)
        self.data[key] = value
        return old

    def delete(self, key: bytes) -> bytes | None:
        """Remove and return the previous value (None if absent)."""
        old = self.data.pop(key, None)
        if old is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]
        return old


class _MemoryTxn:
    """KVTxn over a MemoryStore; valid only inside its ``with`` block."""

    def __init__(self, store: MemoryStore, write: bool) -> None:
        self._store = store
        self._write = write
        self._open = True
        self.undo: list[tuple[str, bytes, bytes | None]] = []
        self.last_applied: int | None = None

    def _table(self, table: str) -> _Table:
        if not self._open:
            raise errors.Internal("transaction used after it ended")
        return self._store._tables[table]  # KeyError for an unknown table

    def _writable(self, table: str) -> _Table:
        tab = self._table(table)
        if not self._write:
            raise errors.Internal("write in a read-only transaction")
        return tab

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._table(table).data.get(_checked(key))

    def put(self, table: str, key: bytes, value: bytes) -> None:
        key = _checked(key)
        self.undo.append((table, key, self._writable(table).put(key, bytes(value))))

    def put_many(self, table: str, items: Sequence[tuple[bytes, bytes]]) -> None:
        for key, value in items:
            self.put(table, key, value)

    def floor(self, table: str, key: bytes) -> tuple[bytes, bytes] | None:
        tab = self._table(table)
        i = bisect.bisect_right(tab.keys, key)
        if i == 0:
            return None
        found = tab.keys[i - 1]
        return found, tab.data[found]

    def delete(self, table: str, key: bytes) -> bool:
        key = _checked(key)
        old = self._writable(table).delete(key)
        if old is None:
            return False
        self.undo.append((table, key, old))
        return True

    def scan(
        self,
        table: str,
        start: bytes = b"",
        stop: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        tab = self._table(table)
        lo = bisect.bisect_left(tab.keys, start)
        hi = len(tab.keys) if stop is None else bisect.bisect_left(tab.keys, stop)
        return self._iterate(tab, range(hi - 1, lo - 1, -1) if reverse else range(lo, hi))

    @staticmethod
    def _iterate(tab: _Table, positions: range) -> Iterator[tuple[bytes, bytes]]:
        for i in positions:
            key = tab.keys[i]
            yield key, tab.data[key]

    def count(self, table: str) -> int:
        return len(self._table(table).keys)

    def rollback(self) -> None:
        """Undo every write of this transaction, newest first."""
        for table, key, old in reversed(self.undo):
            tab = self._store._tables[table]
            if old is None:
                tab.delete(key)
            else:
                tab.put(key, old)
        self.undo.clear()


class MemoryStore:
    """LogStore in memory. ``tables``: the table names ``core`` will use."""

    def __init__(self, tables: Iterable[str]) -> None:
        self._names = tuple(dict.fromkeys(tables))
        self._tables: dict[str, _Table] = {name: _Table() for name in self._names}
        self._last_applied = 0
        self._lock = threading.RLock()
        self._writer: _MemoryTxn | None = None
        self._closed = False

    @contextmanager
    def begin(self, write: bool = False) -> Iterator[KVTxn]:
        """See LogStore.begin. Nested write transactions are a bug (Internal)."""
        with self._lock:
            self._check_open()
            if write and self._writer is not None:
                raise errors.Internal("a write transaction is already open")
            txn = _MemoryTxn(self, write)
            if write:
                self._writer = txn
            try:
                yield txn
            except BaseException:
                txn.rollback()
                raise
            else:
                if txn.last_applied is not None:
                    self._last_applied = txn.last_applied
            finally:
                txn._open = False
                if write:
                    self._writer = None

    def run_write(self, fn: Callable[[KVTxn], T], size_hint: int = 0) -> T:
        """Run ``fn`` in a write transaction and commit (see LogStore.run_write)."""
        with self.begin(write=True) as txn:
            return fn(txn)

    def last_applied(self) -> int:
        with self._lock:
            return self._last_applied

    def set_last_applied(self, txn: KVTxn, index: int) -> None:
        """Stage ``index``; it becomes visible when ``txn`` commits."""
        if not isinstance(txn, _MemoryTxn) or txn is not self._writer:
            raise errors.Internal("set_last_applied needs this store's open write transaction")
        if index < 0:
            raise errors.Internal(f"negative last_applied {index}")
        txn.last_applied = index

    def sync(self) -> None:
        """Nothing to do: memory is never durable."""

    def snapshot_to(self, fileobj: BinaryIO) -> None:
        """Write a length-prefixed image: magic, last_applied, then per table
        its name, entry count and (key, value) pairs in key order.
        """
        with self._lock:
            self._check_open()
            fileobj.write(_MAGIC + _U64.pack(self._last_applied) + _U32.pack(len(self._names)))
            for name in self._names:
                tab = self._tables[name]
                fileobj.write(_blob(name.encode()) + _U64.pack(len(tab.keys)))
                for key in tab.keys:
                    fileobj.write(_blob(key) + _blob(tab.data[key]))
            fileobj.flush()

    def restore_from(self, path: StrPath) -> None:
        """Parse the whole image first, then swap it in (atomic on failure)."""
        with open(path, "rb") as f:
            image = f.read()
        last_applied, tables = _parse_image(image)
        if set(tables) != set(self._names):
            raise errors.Internal(f"snapshot tables {sorted(tables)} != {sorted(self._names)}")
        with self._lock:
            self._check_open()
            if self._writer is not None:
                raise errors.Internal("restore_from during a write transaction")
            self._tables = tables
            self._last_applied = last_applied

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise errors.Internal("store is closed")


def _checked(key: bytes) -> bytes:
    """Keys are 1..MAX_KEY_BYTES bytes in both stores (Internal otherwise)."""
    if not 0 < len(key) <= MAX_KEY_BYTES:
        raise errors.Internal(f"key length {len(key)} outside 1..{MAX_KEY_BYTES}")
    return bytes(key)


def _blob(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _parse_image(image: bytes) -> tuple[int, dict[str, _Table]]:
    """Decode a snapshot_to image; a truncated or foreign file is Internal."""
    if not image.startswith(_MAGIC):
        raise errors.Internal("not a MemoryStore snapshot")
    pos = len(_MAGIC)

    def take(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(image):
            raise errors.Internal("truncated MemoryStore snapshot")
        pos += n
        return image[pos - n : pos]

    def blob() -> bytes:
        return take(_U32.unpack(take(4))[0])

    last_applied = _U64.unpack(take(8))[0]
    tables: dict[str, _Table] = {}
    for _ in range(_U32.unpack(take(4))[0]):
        tab = tables.setdefault(blob().decode(), _Table())
        for _ in range(_U64.unpack(take(8))[0]):
            key = blob()
            tab.keys.append(key)
            tab.data[key] = blob()
    if pos != len(image):
        raise errors.Internal("trailing bytes in MemoryStore snapshot")
    return last_applied, tables
