"""The partition commands' byte codec: the Raft wire format.

One Raft entry is ``encode(cmd)``; every replica runs ``decode`` and then
``PartitionMachine.apply`` (or ``apply_encoded`` on the bytes). The first
byte is the command tag, which doubles as the format version (a changed
layout gets a new tag, old tags stay decodable). Small commands are varints
and length-prefixed UTF-8 (see ``wire``); Append and Batch, the hot path,
use fixed-width lengths, and an Append's records are a segment body
(``segments``: end table + blobs) that replicas store as it is. Receipts
travel as runs (start, count, epoch). No pickle, no JSON.
``decode(encode(c)) == c`` for every valid command, and ``decode`` of
anything else raises ``InvalidArgument("command")``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from raft_queue.core.commands import (
    MAX_REQUEST_ID_BYTES,
    ORDERINGS,
    Ack,
    Append,
    AppendBlobs,
    Batch,
    ChangeVisibility,
    Command,
    CommitOffset,
    Configure,
    Expire,
    ForgetDead,
    Lease,
    Nack,
    PartitionConfig,
    Purge,
    ReceiptRef,
    ReceiptRun,
    Release,
    receipt_runs,
)
from raft_queue.core.dedup_carry import SeedDedup, decode_seed, encode_seed
from raft_queue.core.lease_carry import CarryLeases, decode_carry, encode_carry
from raft_queue.core.records import from_blob, to_blob, widen_blob
from raft_queue.core.segments import (
    BODY_U32,
    SEALED,
    BodyParts,
    check_body,
    encode_body,
    segment_blobs,
    summarize,
)
from raft_queue.core.wire import Malformed, Reader, put_str, put_uvarint
from raft_queue.errors import InvalidArgument

_SEALED_BIT = 8  # in the ordering varint (ORDERINGS has fewer than 8 entries)
_FENCED_BIT = 16  # likewise: a queue being moved (unfenced configs encode as before)


def put_config(buf: bytearray, c: PartitionConfig) -> None:
    """Also the format of the partition's stored config (meta table). The
    ``sealed`` flag rides in the ordering varint (``_SEALED_BIT``), so an
    unsealed config encodes exactly as before splits existed."""
    flags = (_SEALED_BIT if c.sealed else 0) | (_FENCED_BIT if c.fenced else 0)
    put_uvarint(buf, ORDERINGS.index(c.ordering) | flags)
    for n in (c.visibility_timeout_ms, c.max_receives, c.dedup_window_ms):
        put_uvarint(buf, n)
    for n in (c.retention_ms, c.retention_bytes, c.delay_ms):
        put_uvarint(buf, n)


def read_config(r: Reader) -> PartitionConfig:
    head = r.uvarint()
    ordering = head & ~(_SEALED_BIT | _FENCED_BIT)
    sealed, fenced = bool(head & _SEALED_BIT), bool(head & _FENCED_BIT)
    if ordering >= len(ORDERINGS):
        raise Malformed(f"unknown ordering {ordering}")
    vis, receives, dedup, retention, retention_bytes, delay = (r.uvarint() for _ in range(6))
    return PartitionConfig(
        ORDERINGS[ordering], vis, receives, dedup, retention, retention_bytes, delay, sealed, fenced
    )


def _put_receipts(buf: bytearray, runs: tuple[ReceiptRun, ...]) -> None:
    put_uvarint(buf, len(runs))
    for run in runs:
        put_uvarint(buf, run.start)
        put_uvarint(buf, run.count)
        put_uvarint(buf, run.epoch)


def _read_receipts(r: Reader) -> tuple[ReceiptRun, ...]:
    return tuple(ReceiptRun(r.uvarint(), r.uvarint(), r.uvarint()) for _ in range(r.uvarint()))


def _read_receipt_refs(r: Reader) -> tuple[ReceiptRun, ...]:
    """Tags 4-6 (decode only): one (offset, epoch) per receipt."""
    return receipt_runs(tuple(ReceiptRef(r.uvarint(), r.uvarint()) for _ in range(r.uvarint())))


def _put_ints(buf: bytearray, *ints: int) -> None:
    for n in ints:
        put_uvarint(buf, n)


# Append and Batch, the hot path, use fixed-width integers: struct is cheaper
# than varints in Python, and a few bytes per record do not matter.
_U32 = struct.Struct(">I")
_U64_U32 = struct.Struct(">QI")


def _put_parts(buf: bytearray, parts: Sequence[bytes]) -> None:
    pack = _U32.pack
    for part in parts:
        buf += pack(len(part))
        buf += part


def _parts_at(data: bytes, pos: int, count: int) -> tuple[list[bytes], int]:
    """``count`` u32-length-prefixed byte strings from ``pos``; and the end."""
    parts, size, unpack = [], len(data), _U32.unpack_from
    for _ in range(count):
        if pos + 4 > size:
            raise Malformed("truncated length")
        end = pos + 4 + unpack(data, pos)[0]
        if end > size:
            raise Malformed("truncated part")
        parts.append(data[pos + 4 : end])
        pos = end
    return parts, pos


def _read_parts(r: Reader, count: int) -> list[bytes]:
    parts, r.pos = _parts_at(r.data, r.pos, count)
    return parts


_APPEND_HEAD = struct.Struct(">QB")  # now_ms, len(request_id); then it, then the body


def _enc_append(buf: bytearray, c: Append) -> None:
    _put_append(buf, c.now_ms, c.request_id, encode_body([to_blob(rec) for rec in c.records]))


def _enc_append_blobs(buf: bytearray, c: AppendBlobs) -> None:
    _put_append(buf, c.now_ms, c.request_id, encode_body(c.blobs, c.summary))


def _put_append(buf: bytearray, now_ms: int, request_id: bytes, body: bytes) -> None:
    buf += _APPEND_HEAD.pack(now_ms, len(request_id))
    buf += request_id
    buf += body


def _dec_append(r: Reader) -> Append:
    parts = _split_append(r.data)
    records = segment_blobs(r.data, parts.body)
    summary = summarize(records)
    if summary != parts.body.summary._replace(flags=parts.body.summary.flags & ~SEALED):
        raise Malformed(f"record summary {parts.body.summary} is not the records' {summary}")
    r.pos = len(r.data)
    return Append(tuple(from_blob(blob) for blob in records), parts.now_ms, parts.request_id)


def _dec_append_v1(r: Reader) -> Append:
    """Tag 2 (decode only): ``>QI`` now_ms, count, then u32-prefixed blobs
    (32-bit delays)."""
    now_ms, count = _U64_U32.unpack(r.take(_U64_U32.size))
    blobs = _read_parts(r, count)
    return Append(tuple(from_blob(widen_blob(blob)) for blob in blobs), now_ms)


def _dec_append_v2(r: Reader) -> Append:
    """Tag 12 (decode only): today's layout before delays were 64-bit: a
    ``BODY_U32`` body header and blobs with a 32-bit delay."""
    data = r.data
    at = 1 + _APPEND_HEAD.size
    if len(data) < at + BODY_U32.size:
        raise Malformed("truncated Append header")
    now_ms, id_len = _APPEND_HEAD.unpack_from(data, 1)
    body_at = at + id_len
    if id_len > MAX_REQUEST_ID_BYTES or len(data) < body_at + BODY_U32.size:
        raise Malformed("truncated Append header")
    count = BODY_U32.unpack_from(data, body_at)[0]
    table_at = body_at + BODY_U32.size
    if len(data) < table_at + 4 * count:
        raise Malformed("truncated record table")
    ends = struct.unpack_from(f">{count}I", data, table_at)
    base = table_at + 4 * count
    if count and base + ends[-1] != len(data) or not count and base != len(data):
        raise Malformed("record table does not match the data")
    starts = (0, *ends[:-1])
    blobs = [widen_blob(data[base + s : base + e]) for s, e in zip(starts, ends, strict=True)]
    r.pos = len(data)
    return Append(tuple(from_blob(b) for b in blobs), now_ms, data[at:body_at])


def _enc_lease(buf: bytearray, c: Lease) -> None:
    put_str(buf, c.consumer)
    _put_ints(buf, c.max_records, c.visibility_ms, c.now_ms)


def _dec_lease(r: Reader) -> Lease:
    return Lease(r.str_(), r.uvarint(), r.uvarint(), r.uvarint())


def _enc_ack(buf: bytearray, c: Ack | Release) -> None:
    _put_receipts(buf, c.receipts)
    put_uvarint(buf, c.now_ms)


def _dec_ack(r: Reader) -> Ack:
    return Ack(_read_receipts(r), r.uvarint())


def _dec_ack_v1(r: Reader) -> Ack:
    return Ack(_read_receipt_refs(r), r.uvarint())


def _enc_nack(buf: bytearray, c: Nack) -> None:
    _put_receipts(buf, c.receipts)
    _put_ints(buf, c.delay_ms, c.now_ms)


def _dec_nack(r: Reader) -> Nack:
    return Nack(_read_receipts(r), r.uvarint(), r.uvarint())


def _dec_nack_v1(r: Reader) -> Nack:
    return Nack(_read_receipt_refs(r), r.uvarint(), r.uvarint())


def _enc_change(buf: bytearray, c: ChangeVisibility) -> None:
    _put_receipts(buf, c.receipts)
    _put_ints(buf, c.visibility_ms, c.now_ms)


def _dec_change(r: Reader) -> ChangeVisibility:
    return ChangeVisibility(_read_receipts(r), r.uvarint(), r.uvarint())


def _dec_change_v1(r: Reader) -> ChangeVisibility:
    return ChangeVisibility(_read_receipt_refs(r), r.uvarint(), r.uvarint())


def _enc_commit(buf: bytearray, c: CommitOffset) -> None:
    put_str(buf, c.group)
    _put_ints(buf, c.offset, int(c.reset))


def _dec_commit(r: Reader) -> CommitOffset:
    return CommitOffset(r.str_(), r.uvarint(), r.flag())


def _enc_now(buf: bytearray, c: Expire | Purge) -> None:
    put_uvarint(buf, c.now_ms)


def _enc_forget(buf: bytearray, c: ForgetDead) -> None:
    _put_ints(buf, len(c.offsets), *c.offsets)


def _dec_forget(r: Reader) -> ForgetDead:
    return ForgetDead(tuple(r.uvarint() for _ in range(r.uvarint())))


def _enc_batch(buf: bytearray, c: Batch) -> None:
    buf += _U32.pack(len(c.commands))
    _put_parts(buf, [encode(sub) for sub in c.commands])


def _read_batch(r: Reader) -> list[bytes]:
    return _read_parts(r, _U32.unpack(r.take(_U32.size))[0])


def _dec_batch(r: Reader) -> Batch:
    return Batch(tuple(_decode(part, nested=True) for part in _read_batch(r)))


# tag -> (class, encoder, decoder). Tags are the wire format: never reuse one.
# Tags 2, 4, 5 and 6 are the layouts before segments and receipt runs, and
# 12 the Append of 32-bit delays: they still decode (a mixed-version cluster,
# an old journal), but nothing encodes them.
TAG_APPEND = 17  # 12 until delays became 64-bit (data format 3)
TAG_BATCH = 11
_Enc = Callable[[bytearray, Any], None]
_Dec = Callable[[Reader], Any]
_CODECS: dict[int, tuple[type, _Enc, _Dec]] = {
    1: (Configure, lambda b, c: put_config(b, c.config), lambda r: Configure(read_config(r))),
    3: (Lease, _enc_lease, _dec_lease),
    7: (CommitOffset, _enc_commit, _dec_commit),
    8: (Expire, _enc_now, lambda r: Expire(r.uvarint())),
    9: (Purge, _enc_now, lambda r: Purge(r.uvarint())),
    10: (ForgetDead, _enc_forget, _dec_forget),
    TAG_BATCH: (Batch, _enc_batch, _dec_batch),
    TAG_APPEND: (Append, _enc_append, _dec_append),
    13: (Ack, _enc_ack, _dec_ack),
    14: (Nack, _enc_nack, _dec_nack),
    15: (ChangeVisibility, _enc_change, _dec_change),
    16: (Release, _enc_ack, lambda r: Release(_read_receipts(r), r.uvarint())),
    18: (SeedDedup, encode_seed, decode_seed),  # a move's dedup windows (dedup_carry)
    19: (CarryLeases, encode_carry, decode_carry),  # a move's leases (lease_carry)
}
_TAGS: dict[type, tuple[int, _Enc]] = {cls: (tag, enc) for tag, (cls, enc, _) in _CODECS.items()}
_CODECS.update(
    {
        2: (Append, _enc_append, _dec_append_v1),
        12: (Append, _enc_append, _dec_append_v2),
        4: (Ack, _enc_ack, _dec_ack_v1),
        5: (Nack, _enc_nack, _dec_nack_v1),
        6: (ChangeVisibility, _enc_change, _dec_change_v1),
    }
)
# Encode-only: the same bytes as the Append of the same records.
_TAGS[AppendBlobs] = (TAG_APPEND, _enc_append_blobs)


def tag_of(cls: type) -> int:
    """The wire tag (first byte of an encoded entry) of command class ``cls``."""
    return _TAGS[cls][0]


def encode(cmd: Command) -> bytes:
    """The Raft entry for ``cmd``: tag byte, then its fields."""
    try:
        tag, enc = _TAGS[type(cmd)]
    except KeyError:
        raise InvalidArgument("command", f"not a command: {type(cmd).__name__}") from None
    buf = bytearray((tag,))
    enc(buf, cmd)
    return bytes(buf)


def decode(data: bytes) -> Command:
    """Inverse of ``encode``; any other input raises InvalidArgument("command")."""
    return _decode(data, nested=False)


def _decode(data: bytes, nested: bool) -> Command:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidArgument("command", f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise InvalidArgument("command", "empty")
    codec = _CODECS.get(data[0])
    if codec is None or (nested and codec[0] is Batch):
        raise InvalidArgument("command", f"unknown command tag {data[0]}")
    reader = Reader(data, 1)
    try:
        cmd: Command = codec[2](reader)
        reader.end()
    except (Malformed, InvalidArgument) as exc:
        raise InvalidArgument("command", f"malformed {codec[0].__name__}: {exc}") from exc
    return cmd


# --- the apply fast path: Append records stay bytes ------------------------


class AppendParts(NamedTuple):
    """An encoded Append, its framing checked (``split_append``)."""

    now_ms: int
    request_id: bytes
    body_at: int  # where the segment body starts: ``segments.segment_value(ts, data, body_at)``
    body: BodyParts


def split_append(data: bytes) -> AppendParts:
    """The parts of an encoded Append (tag ``TAG_APPEND``), framing checked
    (``segments.check_body``) but not the blobs inside: the replicas' path."""
    try:
        return _split_append(data)
    except Malformed as exc:
        raise InvalidArgument("command", f"malformed Append: {exc}") from exc


def _split_append(data: bytes) -> AppendParts:
    at = 1 + _APPEND_HEAD.size
    if len(data) < at:
        raise Malformed("truncated Append header")
    now_ms, id_len = _APPEND_HEAD.unpack_from(data, 1)
    if id_len > MAX_REQUEST_ID_BYTES:
        raise Malformed(f"request id of {id_len} bytes")
    body_at = at + id_len
    body = check_body(data, body_at)
    return AppendParts(now_ms, data[at:body_at], body_at, body)


def split_batch(data: bytes) -> list[bytes]:
    """An encoded Batch as the encoded commands it holds."""
    reader = Reader(data, 1)
    try:
        parts = _read_batch(reader)
        reader.end()
    except Malformed as exc:
        raise InvalidArgument("command", f"malformed Batch: {exc}") from exc
    return parts
