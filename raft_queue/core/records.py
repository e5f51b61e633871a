"""Records: what producers append, what the log returns, and both byte forms.

In an Append command a record is: delay_ms varint, dedup_id, key, headers
(count, then name/value pairs), body, each length-prefixed. In the log (the
``records`` table value) it is: ``>QI`` timestamp_ms and delay_ms, then the
same dedup_id, key and headers, and the body as the rest of the value. The
fixed prefix and the short fields first let ``head`` read what delivery,
dedup expiry and retention need without copying the body. The value is a
pure function of the record and its timestamp, so replicas store identical
bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from raft_queue.core import validate as v
from raft_queue.core.wire import Reader, put_bytes, put_str, put_uvarint
from raft_queue.errors import InvalidArgument

Headers = tuple[tuple[str, bytes], ...]
_HEAD = struct.Struct(">QI")


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to append. ``key`` groups records for FIFO ordering ("" = no
    group); ``dedup_id`` ("" = none) makes retries idempotent within the
    dedup window; ``delay_ms`` keeps it invisible to Lease that long after
    its append (reads by offset see it at once).
    """

    body: bytes
    key: str = ""
    headers: Headers = ()
    dedup_id: str = ""
    delay_ms: int = 0

    def __post_init__(self) -> None:
        if type(self.body) is not bytes:
            raise InvalidArgument("body", "must be bytes")
        v.string("key", self.key)
        v.string("dedup_id", self.dedup_id)
        v.uint32("delay_ms", self.delay_ms)
        v.headers(self.headers)


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as read back: what ``read`` returns and a lease hands out."""

    offset: int
    body: bytes
    key: str
    headers: Headers
    timestamp_ms: int
    dedup_id: str


class Head(NamedTuple):
    """The fields of a stored record that scheduling decisions look at."""

    timestamp_ms: int
    delay_ms: int
    dedup_id: str
    key: str


def _put_fields(buf: bytearray, rec: NewRecord) -> None:
    put_str(buf, rec.dedup_id)
    put_str(buf, rec.key)
    put_uvarint(buf, len(rec.headers))
    for name, value in rec.headers:
        put_str(buf, name)
        put_bytes(buf, value)


def _read_fields(r: Reader) -> tuple[str, str, Headers]:
    dedup_id = r.str_()
    key = r.str_()
    return dedup_id, key, tuple((r.str_(), r.bytes_()) for _ in range(r.uvarint()))


def put_new_record(buf: bytearray, rec: NewRecord) -> None:
    """The record inside an Append command."""
    put_uvarint(buf, rec.delay_ms)
    _put_fields(buf, rec)
    put_bytes(buf, rec.body)


def read_new_record(r: Reader) -> NewRecord:
    delay_ms = r.uvarint()
    dedup_id, key, headers = _read_fields(r)
    return NewRecord(r.bytes_(), key, headers, dedup_id, delay_ms)


def encode_value(timestamp_ms: int, rec: NewRecord) -> bytes:
    """The record as stored in the log."""
    buf = bytearray(_HEAD.pack(timestamp_ms, rec.delay_ms))
    _put_fields(buf, rec)
    buf += rec.body
    return bytes(buf)


def head(value: bytes) -> Head:
    reader = Reader(value, _HEAD.size)
    timestamp_ms, delay_ms = _HEAD.unpack_from(value)
    return Head(timestamp_ms, delay_ms, reader.str_(), reader.str_())


def decode_value(offset: int, value: bytes) -> StoredRecord:
    reader = Reader(value, _HEAD.size)
    timestamp_ms, _delay = _HEAD.unpack_from(value)
    dedup_id, key, headers = _read_fields(reader)
    return StoredRecord(offset, reader.rest(), key, headers, timestamp_ms, dedup_id)


def payload_size(key: str, headers: Headers, body: bytes) -> int:
    """What ``retention_bytes`` and ``stats().bytes`` count: body, key and
    header names and values (not the fixed per-record overhead)."""
    size = len(body) + len(key.encode())
    for name, value in headers:
        size += len(name.encode()) + len(value)
    return size
