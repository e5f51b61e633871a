"""The LogStore protocol: where one replica's state machine keeps its tables.

A store holds a fixed set of named tables (given at open) plus the Raft index
of the last applied entry, written in the same transaction as the data it
describes, so a restart replays exactly the entries after it (idempotent
journal replay). ``core/`` only sees the ``KVTxn`` a transaction yields;
``replication/`` also uses ``last_applied``, ``sync``, ``snapshot_to`` and
``restore_from``.

Threading: one writer thread (the Raft apply thread) opens write
transactions; any number of reader threads (gRPC handlers) open read
transactions concurrently. At most one write transaction is open at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import BinaryIO, Protocol, TypeVar

from raft_queue.core.kv import KVTxn

StrPath = str | os.PathLike[str]
T = TypeVar("T")


class LogStore(Protocol):
    """A transactional ordered KV store of named tables plus ``last_applied``."""

    def begin(self, write: bool = False) -> AbstractContextManager[KVTxn]:
        """Open a transaction. Commit on clean exit of the ``with`` block; on an
        exception nothing the block wrote is kept. A read transaction sees one
        consistent state; writing in it raises ``errors.Internal``. Keys are 1
        to 511 bytes (LMDB's limit; Internal otherwise). A write txn that
        fills the store raises ResourceExhausted (retryable: see run_write).
        """
        ...

    def run_write(self, fn: Callable[[KVTxn], T], size_hint: int = 0) -> T:
        """Run ``fn`` in a write transaction, commit, return its result. If the
        store ran out of space and could grow (LMDB's map), ``fn`` is run again
        from scratch, so it must act only through the txn. The Raft apply
        path uses this rather than ``begin(write=True)``, with the entry's
        length as ``size_hint`` (bytes it is about to write; 0: unknown), so
        a store that allocates its disk ahead allocates enough.
        """
        ...

    def last_applied(self) -> int:
        """Raft index stored with the data by ``set_last_applied`` (0 if none)."""
        ...

    def set_last_applied(self, txn: KVTxn, index: int) -> None:
        """Record ``index`` inside write txn ``txn`` (atomic with its data)."""
        ...

    def sync(self) -> None:
        """Force committed data to disk (before snapshots and on close)."""
        ...

    def snapshot_to(self, fileobj: BinaryIO) -> None:
        """Write a consistent image of the whole store (tables and last_applied)
        to ``fileobj`` (a real file: LMDB writes through its descriptor).
        """
        ...

    def restore_from(self, path: StrPath) -> None:
        """Replace the whole contents with the image at ``path`` (made by
        ``snapshot_to`` of the same store type). Atomic: on failure the old
        contents remain. No transaction may be open.
        """
        ...

    def close(self) -> None:
        """Sync and release resources; the store is unusable afterwards."""
        ...
