"""The storage seam the pure state machines are written against.

``core/`` never imports lmdb: it reads and writes through ``KVTxn``, an
ordered key/value transaction over named tables. ``storage/`` implements it
twice (LMDB, memory) and one contract suite tests both. Keys compare as raw
bytes (big-endian integers therefore sort numerically).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol


class KVTxn(Protocol):
    """One transaction. Writes are visible to later reads of the same txn and
    become durable (for the store's durability level) atomically on commit.

    Tables are named at store open; an unknown table name is a programming
    error (KeyError).
    """

    def get(self, table: str, key: bytes) -> bytes | None: ...

    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def put_many(self, table: str, items: Sequence[tuple[bytes, bytes]]) -> None:
        """``put`` each (key, value) in order, in one call (LMDB: one cursor
        ``putmulti``, about 2x cheaper per item than separate puts)."""
        ...

    def floor(self, table: str, key: bytes) -> tuple[bytes, bytes] | None:
        """The item with the greatest key ``<= key``, or None (the segment or
        run holding an offset is the one keyed by the greatest start at or
        below it)."""
        ...

    def delete(self, table: str, key: bytes) -> bool:
        """Remove ``key``; True if it existed."""
        ...

    def scan(
        self,
        table: str,
        start: bytes = b"",
        stop: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with ``start <= key < stop`` (``stop=None``: to the end), in key
        order (descending with ``reverse``). The caller must not write to
        ``table`` while iterating; collect keys first.
        """
        ...

    def count(self, table: str) -> int:
        """Number of keys in ``table``."""
        ...
