"""Records: what producers append, what the log returns, and their bytes.

A record's *blob* is a fixed ``>IHHH`` header (delay_ms, then the UTF-8
lengths of dedup_id and key, then the header count), the dedup_id and key,
the headers as length-prefixed name/value pairs, and the body as the rest.
An Append command carries each record as a length-prefixed blob, and the log
(the ``records`` table value) stores ``>Q`` timestamp_ms + the same blob: a
replica stores what it received without building a NewRecord
(``PartitionMachine.apply_encoded``), checking it with one struct unpack and
two slices. The value is a pure function of the record and its timestamp,
so replicas store identical bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from raft_queue.core import validate as v
from raft_queue.core.wire import Malformed, Reader, put_bytes, put_str
from raft_queue.errors import InvalidArgument

Headers = tuple[tuple[str, bytes], ...]
_BLOB = struct.Struct(">IHHH")  # delay_ms, len(dedup_id), len(key), len(headers)
_TS = struct.Struct(">Q")
_HEAD = struct.Struct(">QIHHH")  # a stored value starts with timestamp_ms + _BLOB
MAX_FIELD_BYTES = 0xFFFF  # dedup_id and key, as UTF-8; also the header count


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
        v.text("key", self.key, MAX_FIELD_BYTES)
        v.text("dedup_id", self.dedup_id, MAX_FIELD_BYTES)
        v.uint32("delay_ms", self.delay_ms)
        v.headers(self.headers, MAX_FIELD_BYTES)


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
    """The fields of a stored record that scheduling decisions look at
    (strings as their UTF-8: they are only compared and used as keys)."""

    timestamp_ms: int
    delay_ms: int
    dedup_id: bytes
    key: bytes


def to_blob(rec: NewRecord) -> bytes:
    dedup_id, key = rec.dedup_id.encode(), rec.key.encode()
    buf = bytearray(_BLOB.pack(rec.delay_ms, len(dedup_id), len(key), len(rec.headers)))
    buf += dedup_id
    buf += key
    for name, value in rec.headers:
        put_str(buf, name)
        put_bytes(buf, value)
    buf += rec.body
    return bytes(buf)


def plain_blob(body: bytes, key: str, dedup_id: str) -> bytes:
    """``to_blob(NewRecord(body, key, (), dedup_id, 0))`` without building the
    record: the send path's bulk case (no headers, no delay). Same checks."""
    dedup_raw, key_raw = dedup_id.encode(), key.encode()
    if type(body) is not bytes:
        raise InvalidArgument("body", "must be bytes")
    if len(key_raw) > MAX_FIELD_BYTES:
        raise InvalidArgument("key", f"longer than {MAX_FIELD_BYTES} bytes of UTF-8")
    if len(dedup_raw) > MAX_FIELD_BYTES:
        raise InvalidArgument("dedup_id", f"longer than {MAX_FIELD_BYTES} bytes of UTF-8")
    return _BLOB.pack(0, len(dedup_raw), len(key_raw), 0) + dedup_raw + key_raw + body


def from_blob(blob: bytes) -> NewRecord:
    """Inverse of ``to_blob``; Malformed if ``blob`` is not one."""
    delay_ms, dedup_id, key, headers, body = _parse(blob, 0)
    return NewRecord(body, key, headers, dedup_id, delay_ms)


def check_blob(blob: bytes) -> bytes:
    """Validate a blob as ``from_blob`` would, without building the record;
    return its dedup_id's UTF-8 (what Append needs besides the bytes)."""
    if len(blob) < _BLOB.size:
        raise Malformed("record shorter than its header")
    _delay, dedup_len, key_len, count = _BLOB.unpack_from(blob)
    start = _BLOB.size
    end = start + dedup_len + key_len
    if end > len(blob):
        raise Malformed("record shorter than its dedup_id and key")
    dedup_id = blob[start : start + dedup_len]
    if not blob[start:end].isascii():  # ASCII is valid UTF-8: the usual case needs no decode
        try:
            dedup_id.decode()
            blob[start + dedup_len : end].decode()
        except UnicodeDecodeError as exc:
            raise Malformed("invalid UTF-8") from exc
    if count:
        _read_headers(Reader(blob, end), count)
    return dedup_id


def _parse(data: bytes, at: int) -> tuple[int, str, str, Headers, bytes]:
    """(delay_ms, dedup_id, key, headers, body) of the blob at ``data[at:]``."""
    if len(data) < at + _BLOB.size:
        raise Malformed("record shorter than its header")
    delay_ms, dedup_len, key_len, count = _BLOB.unpack_from(data, at)
    reader = Reader(data, at + _BLOB.size)
    try:
        dedup_id = reader.take(dedup_len).decode()
        key = reader.take(key_len).decode()
    except UnicodeDecodeError as exc:
        raise Malformed("invalid UTF-8") from exc
    headers = _read_headers(reader, count) if count else ()
    return delay_ms, dedup_id, key, headers, reader.rest()


def _read_headers(reader: Reader, count: int) -> Headers:
    return tuple((reader.str_(), reader.bytes_()) for _ in range(count))


def stored_value(timestamp_ms: int, blob: bytes) -> bytes:
    """The log's value for a record; its length is what ``retention_bytes``
    and ``stats().bytes`` count (as Kafka's log size, framing included)."""
    return _TS.pack(timestamp_ms) + blob


def head(value: bytes) -> Head:
    """What scheduling needs from a stored value (trusted: we wrote it)."""
    timestamp_ms, delay_ms, dedup_len, key_len, _count = _HEAD.unpack_from(value)
    start = _HEAD.size
    end = start + dedup_len
    return Head(timestamp_ms, delay_ms, value[start:end], value[end : end + key_len])


def decode_value(offset: int, value: bytes) -> StoredRecord:
    timestamp_ms, _delay, dedup_len, key_len, count = _HEAD.unpack_from(value)
    if not count:  # the common case, sliced directly (values are ours: trusted)
        start = _HEAD.size
        end = start + dedup_len
        stop = end + key_len
        if stop <= len(value):
            dedup_id, key = value[start:end].decode(), value[end:stop].decode()
            return StoredRecord(offset, value[stop:], key, (), timestamp_ms, dedup_id)
    _delay, dedup_id, key, headers, body = _parse(value, _TS.size)
    return StoredRecord(offset, body, key, headers, timestamp_ms, dedup_id)
