"""Segments: the log keeps one value per Append, not one per record.

The records an Append stores share one timestamp and go to the ``records``
table as one *segment*, keyed by the offset of its first record (its base).
A segment value is::

    >Q  timestamp_ms
    >I  count
    >B  flags           HAS_KEY | HAS_DEDUP | HAS_HEADERS: does any record have one;
                        SEALED: the bodies are one encrypted batch (``sealing``)
    >Q  max_delay_ms    the largest per-record delay_ms
    count x >I          end of each record's blob, from the start of the data
    data                the records' blobs (``records.to_blob``), back to back

Everything after the timestamp (the *body*) is exactly what an Append command
carries (``codec``), so a replica stores ``timestamp + command[at:]`` with
no per-record work. The flags and ``max_delay_ms`` let the scheduler treat a
whole segment at once unless it needs to (FIFO keys, delays beyond the
queue's); the end table is read with ``struct`` (in C) when one record is
needed.

Sizes: a record counts ``RECORD_OVERHEAD`` + its blob length toward
``retention_bytes`` and ``stats().bytes`` (its timestamp and blob, as when
each record had a value of its own), whatever segment it shares.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from operator import sub
from typing import NamedTuple

from raft_queue.core.kv import KVTxn
from raft_queue.core.records import (
    BLOB_HEADER_SIZE,
    Head,
    StoredRecord,
    blob_head,
    parse_blob,
)
from raft_queue.core.wire import U64, Malformed
from raft_queue.errors import InvalidArgument

HAS_KEY = 1
HAS_DEDUP = 2
HAS_HEADERS = 4
# The segment's headers and bodies are one AEAD-sealed batch (``sealing``):
# the blobs' bodies hold ciphertext. Data format 4; a reader of format 3
# refuses an Append entry with this flag ("unknown record flags").
SEALED = 8
_ALL_FLAGS = HAS_KEY | HAS_DEDUP | HAS_HEADERS | SEALED
RECORD_OVERHEAD = 8

_TS = struct.Struct(">Q")
_BODY = struct.Struct(">IBQ")  # count, flags, max_delay_ms
_HEAD = struct.Struct(">QIBQ")  # timestamp_ms + _BODY
_U32 = struct.Struct(">I")
_BLOB = struct.Struct(">QHHH")  # records._BLOB: delay_ms, len(dedup_id), len(key), headers
# The body header of data format 2 (Append entries with codec tag 12): a
# 32-bit max_delay_ms, and blobs with a 32-bit delay (records.widen_blob).
BODY_U32 = struct.Struct(">IBI")


class Summary(NamedTuple):
    """What the body header says about its records."""

    records: int
    flags: int
    max_delay_ms: int


def summarize(blobs: Sequence[bytes]) -> Summary:
    """The summary of ``blobs`` (one unpack per blob: for the leader and the
    checked paths; the replica's path trusts the command's)."""
    flags = max_delay = 0
    unpack = _BLOB.unpack_from
    for blob in blobs:
        if len(blob) < BLOB_HEADER_SIZE:
            raise InvalidArgument("command", "malformed Append: record shorter than its header")
        delay, dedup_len, key_len, headers = unpack(blob)
        if delay > max_delay:
            max_delay = delay
        if key_len:
            flags |= HAS_KEY
        if dedup_len:
            flags |= HAS_DEDUP
        if headers:
            flags |= HAS_HEADERS
    return Summary(len(blobs), flags, max_delay)


def encode_body(blobs: Sequence[bytes], summary: Summary | None = None) -> bytes:
    """The body (count, flags, max delay, end table, data) of ``blobs``.
    ``summary``: when the caller computed it while building the blobs."""
    if summary is None:
        summary = summarize(blobs)
    ends, total = [], 0
    for blob in blobs:
        total += len(blob)
        ends.append(total)
    head = _BODY.pack(summary.records, summary.flags, summary.max_delay_ms)
    return b"".join((head, struct.pack(f">{len(ends)}I", *ends), *blobs))


class BodyParts(NamedTuple):
    """A body header as checked by ``check_body``."""

    summary: Summary
    table_at: int  # where the end table starts in the buffer
    data_at: int  # where the blobs start


def check_body(data: bytes, at: int) -> BodyParts:
    """Check the framing of the body at ``data[at:]`` (to the end): the table
    fits, every blob is at least a blob header long and the last ends at the
    end. The blobs' insides are not looked at (the leader built them);
    ``blobs`` does that. Malformed otherwise."""
    if len(data) < at + _BODY.size:
        raise Malformed("truncated Append header")
    count, flags, max_delay = _BODY.unpack_from(data, at)
    if flags & ~_ALL_FLAGS:
        raise Malformed(f"unknown record flags {flags:#x}")
    table_at = at + _BODY.size
    data_at = table_at + 4 * count
    if data_at > len(data):
        raise Malformed("truncated record table")
    if count:
        ends = struct.unpack_from(f">{count}I", data, table_at)
        if min(map(sub, ends, (0, *ends[:-1]))) < BLOB_HEADER_SIZE:
            raise Malformed("record shorter than its header")
        if data_at + ends[-1] != len(data):
            raise Malformed("record table does not match the data")
    elif data_at != len(data):
        raise Malformed(f"{len(data) - data_at} trailing bytes")
    return BodyParts(Summary(count, flags, max_delay), table_at, data_at)


def segment_blobs(data: bytes, parts: BodyParts) -> list[bytes]:
    """The blobs of a checked body, as separate byte strings."""
    count = parts.summary.records
    if not count:
        return []
    ends = struct.unpack_from(f">{count}I", data, parts.table_at)
    base = parts.data_at
    starts = (0, *ends[:-1])
    return [data[base + s : base + e] for s, e in zip(starts, ends, strict=True)]


def segment_value(timestamp_ms: int, data: bytes, body_at: int) -> bytes:
    """The stored segment: the timestamp and the body found at ``data[body_at:]``."""
    return b"".join((_TS.pack(timestamp_ms), memoryview(data)[body_at:]))


class Segment:
    """A read view of one stored segment (trusted: this code wrote it).

    Indexes ``i`` are positions in the segment (offset - base)."""

    __slots__ = ("base", "value", "timestamp_ms", "count", "flags", "max_delay_ms", "_data")

    def __init__(self, base: int, value: bytes) -> None:
        self.base = base
        self.value = value
        ts, count, flags, max_delay = _HEAD.unpack_from(value)
        self.timestamp_ms: int = ts
        self.count: int = count
        self.flags: int = flags
        self.max_delay_ms: int = max_delay
        self._data = _HEAD.size + 4 * count

    @property
    def end(self) -> int:
        """One past the offset of its last record."""
        return self.base + self.count

    def _end(self, i: int) -> int:
        """Where blob ``i`` ends (relative to the data); 0 for i == -1."""
        return int(_U32.unpack_from(self.value, _HEAD.size + 4 * i)[0]) if i >= 0 else 0

    def size(self, i: int, j: int) -> int:
        """Stored bytes of records [i, j) (see the module doc)."""
        if j <= i:
            return 0
        return RECORD_OVERHEAD * (j - i) + self._end(j - 1) - self._end(i - 1)

    def head(self, i: int) -> Head:
        return blob_head(self.value, self._data + self._end(i - 1))

    def record(self, i: int) -> StoredRecord:
        at = self._data
        return parse_blob(
            self.value, at + self._end(i - 1), at + self._end(i), self.base + i, self.timestamp_ms
        )

    def records(self, i: int, j: int) -> list[StoredRecord]:
        """Records [i, j), decoded: the bulk form of ``record``."""
        if j <= i:
            return []
        value, at, ts, base = self.value, self._data, self.timestamp_ms, self.base
        ends = struct.unpack_from(f">{j - i}I", value, _HEAD.size + 4 * i)
        start = self._end(i - 1)
        out = []
        for k, end in enumerate(ends, i):
            out.append(parse_blob(value, at + start, at + end, base + k, ts))
            start = end
        return out

    def bodies(self, i: int, j: int) -> list[bytes]:
        """The bodies of records [i, j) of a segment without keys, dedup ids
        and headers (``flags == 0``): sliced, nothing else parsed."""
        if j <= i:
            return []
        value, at = self.value, self._data + BLOB_HEADER_SIZE
        ends = struct.unpack_from(f">{j - i}I", value, _HEAD.size + 4 * i)
        starts = (self._end(i - 1), *ends[:-1])
        return [
            value[at + s : at + e - BLOB_HEADER_SIZE] for s, e in zip(starts, ends, strict=True)
        ]


def segment_at(txn: KVTxn, table: str, offset: int) -> Segment | None:
    """The segment holding ``offset`` (None if no segment starts at or below it;
    the caller checks ``offset < seg.end`` where it may be past the log)."""
    item = txn.floor(table, U64.pack(offset))
    return None if item is None else Segment(int.from_bytes(item[0], "big"), item[1])


def segments_from(txn: KVTxn, table: str, offset: int) -> Iterator[Segment]:
    """Segments in offset order, from the one holding ``offset``. The caller
    must not write ``table`` while iterating."""
    first = segment_at(txn, table, offset)
    start = offset
    if first is not None:
        if offset < first.end:
            yield first
        start = first.end
    for key, value in txn.scan(table, U64.pack(start)):
        yield Segment(int.from_bytes(key, "big"), value)
