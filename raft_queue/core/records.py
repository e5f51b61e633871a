"""Records: what producers append, what the log returns, and their bytes.

A record's *blob* is a fixed ``>QHHH`` header (delay_ms, then the UTF-8
lengths of dedup_id and key, then the header count), the dedup_id and key,
the headers as length-prefixed name/value pairs, and the body as the rest.
An Append command carries its records' blobs back to back behind a table of
their end positions, and the log keeps them exactly so, one value per Append
(``segments``): a replica stores what it received without looking inside a
blob. The bytes are a pure function of the records, so replicas store
identical bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from raft_queue.core import validate as v
from raft_queue.core.wire import Malformed, Reader, put_bytes, put_str
from raft_queue.errors import InvalidArgument

Headers = tuple[tuple[str, bytes], ...]
_BLOB = struct.Struct(">QHHH")  # delay_ms, len(dedup_id), len(key), len(headers)
# Before data format 3 the delay was 32 bits (``>IHHH``, at most ~49.7 days);
# only Append entries of those versions (codec tags 2 and 12) still carry it.
_BLOB_U32 = struct.Struct(">IHHH")
BLOB_HEADER_SIZE = _BLOB.size
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
        v.delay("delay_ms", self.delay_ms, v.MAX_DELAY_MS)
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
    """The fields of a record that scheduling decisions look at (strings as
    their UTF-8: they are only compared and used as keys)."""

    delay_ms: int
    dedup_id: bytes
    key: bytes
    headers: int  # how many


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


BARE_HEAD = plain_blob(b"", "", "")  # the blob of a body-only record is this + its body


def from_blob(blob: bytes) -> NewRecord:
    """Inverse of ``to_blob``; Malformed if ``blob`` is not one."""
    delay_ms, dedup_id, key, headers, body = _parse(blob, 0)
    return NewRecord(body, key, headers, dedup_id, delay_ms)


def widen_blob(blob: bytes) -> bytes:
    """A blob of the 32-bit-delay layout (``_BLOB_U32``) in today's layout."""
    if len(blob) < _BLOB_U32.size:
        raise Malformed("record shorter than its header")
    return _BLOB.pack(*_BLOB_U32.unpack_from(blob)) + blob[_BLOB_U32.size :]


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


def blob_head(data: bytes, at: int) -> Head:
    """The head of the blob starting at ``data[at]`` (trusted: we stored it)."""
    delay_ms, dedup_len, key_len, count = _BLOB.unpack_from(data, at)
    start = at + _BLOB.size
    end = start + dedup_len
    return Head(delay_ms, data[start:end], data[end : end + key_len], count)


def parse_blob(data: bytes, at: int, stop: int, offset: int, timestamp_ms: int) -> StoredRecord:
    """The record whose blob is ``data[at:stop]`` (trusted: we stored it)."""
    _delay, dedup_len, key_len, count = _BLOB.unpack_from(data, at)
    start = at + _BLOB.size
    end = start + dedup_len
    key_end = end + key_len
    if not count:  # the common case, sliced directly
        dedup_id, key = data[start:end].decode(), data[end:key_end].decode()
        return StoredRecord(offset, data[key_end:stop], key, (), timestamp_ms, dedup_id)
    _delay, dedup_id, key, headers, body = _parse(data[at:stop], 0)
    return StoredRecord(offset, body, key, headers, timestamp_ms, dedup_id)
