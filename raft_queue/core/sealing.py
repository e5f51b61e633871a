"""Sealed segments: the framing of encryption at rest (pure; no cipher here).

The records of one Append (one partition of one Send) are sealed as ONE
AEAD message: what the state machine must see stays in the clear in each
blob's head (delay_ms, dedup_id, key: FIFO, dedup and timers need them),
and what it never looks at (each record's headers and body, its *secret*)
is encrypted together. A sealed blob is::

    >QHHH delay_ms, len(dedup_id), len(key), 0   (headers are inside the seal)
    dedup_id, key                                (clear)
    body: [ENVELOPE if first record] + ciphertext piece

where the pieces, in record order, are the ciphertext of the concatenated
secrets (GCM is a counter mode, so each piece is exactly as long as its
record's secret: ``>H`` header count, the headers as in ``records``, the
body). ENVELOPE is ``>BI12s16s``: version, data-key id, nonce, tag. The
segment carries the SEALED flag. The associated data binds the batch to
its place and its clear parts: queue uid, partition, key id, record count,
every record's secret length and clear head; moving a piece, a record or a
whole batch to another queue or partition fails the tag.

The cipher itself (``security/encryption.py``) is passed in as functions,
so this module stays free of I/O and of outside libraries.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from operator import sub
from typing import NamedTuple

from raft_queue.core.records import BARE_HEAD, BLOB_HEADER_SIZE, Headers
from raft_queue.core.segments import HAS_DEDUP, HAS_HEADERS, HAS_KEY, SEALED, Segment, Summary
from raft_queue.core.wire import Malformed, Reader

ENVELOPE = struct.Struct(">BI12s16s")  # version, key id, nonce, tag
SEAL_VERSION = 1
_BLOB = struct.Struct(">QHHH")
_COUNT = struct.Struct(">H")
_AAD = struct.Struct(">QIII")  # uid, partition, key id, records
_AAD_TAG = b"raftq/sealed-batch/v1"

#: ``encrypt(plaintext, aad) -> (nonce, ciphertext, tag)``
Encrypt = Callable[[bytes, bytes], tuple[bytes, bytes | memoryview, bytes]]
#: ``decrypt(key_id, nonce, ciphertext_and_tag, aad) -> plaintext`` (raises on a bad tag)
Decrypt = Callable[[int, bytes, bytes, bytes], bytes]


def associated_data(
    uid: int, partition: int, key_id: int, heads: Sequence[bytes], lengths: Sequence[int]
) -> bytes:
    n = len(lengths)
    return b"".join(
        (_AAD_TAG, _AAD.pack(uid, partition, key_id, n), struct.pack(f">{n}I", *lengths), *heads)
    )


def seal_blobs(
    blobs: Sequence[bytes],
    summary: Summary,
    uid: int,
    partition: int,
    key_id: int,
    encrypt: Encrypt,
) -> tuple[tuple[bytes, ...], Summary]:
    """The sealed blobs of ``blobs`` (``records.to_blob`` form) and their summary."""
    if not summary.flags and not summary.max_delay_ms:
        return _seal_bare(blobs, summary, uid, partition, key_id, encrypt)
    if summary.flags & HAS_DEDUP:
        return _seal_each(blobs, summary, uid, partition, key_id, encrypt)
    heads: list[bytes] = []
    secrets: list[bytes] = []
    unpack = _BLOB.unpack_from
    for blob in blobs:
        delay, dedup_len, key_len, count = unpack(blob)
        cut = BLOB_HEADER_SIZE + dedup_len + key_len
        if count:
            heads.append(_BLOB.pack(delay, dedup_len, key_len, 0) + blob[BLOB_HEADER_SIZE:cut])
        else:
            heads.append(blob[:cut])
        secrets.append(_COUNT.pack(count) + blob[cut:])
    lengths = [len(s) for s in secrets]
    aad = associated_data(uid, partition, key_id, heads, lengths)
    nonce, ciphertext, tag = encrypt(b"".join(secrets), aad)
    if len(ciphertext) != sum(lengths):
        raise ValueError("the cipher must keep the plaintext's length")
    envelope = ENVELOPE.pack(SEAL_VERSION, key_id, nonce, tag)
    out = []
    pos = 0
    for head, n in zip(heads, lengths, strict=True):
        out.append(b"".join((head, envelope, ciphertext[pos : pos + n])))
        envelope = b""
        pos += n
    flags = (summary.flags & ~HAS_HEADERS) | SEALED
    return tuple(out), Summary(summary.records, flags, summary.max_delay_ms)


def _split(blob: bytes) -> tuple[bytes, bytes]:
    """(clear head with header count 0, secret) of one blob."""
    delay, dedup_len, key_len, count = _BLOB.unpack_from(blob)
    cut = BLOB_HEADER_SIZE + dedup_len + key_len
    head = _BLOB.pack(delay, dedup_len, key_len, 0) + blob[BLOB_HEADER_SIZE:cut]
    return head, _COUNT.pack(count) + blob[cut:]


def _seal_each(
    blobs: Sequence[bytes],
    summary: Summary,
    uid: int,
    partition: int,
    key_id: int,
    encrypt: Encrypt,
) -> tuple[tuple[bytes, ...], Summary]:
    """A batch with dedup ids: one seal PER RECORD, each with its envelope.
    The Append drops the records whose dedup id it has seen (``appends``),
    and what it keeps must still open: a batch seal would not."""
    out = []
    for blob in blobs:
        head, secret = _split(blob)
        aad = associated_data(uid, partition, key_id, (head,), (len(secret),))
        nonce, ciphertext, tag = encrypt(secret, aad)
        out.append(b"".join((head, ENVELOPE.pack(SEAL_VERSION, key_id, nonce, tag), ciphertext)))
    flags = (summary.flags & ~HAS_HEADERS) | SEALED
    return tuple(out), Summary(summary.records, flags, summary.max_delay_ms)


_COUNT_AT = BLOB_HEADER_SIZE - _COUNT.size  # the header count ends the blob header


def _seal_bare(
    blobs: Sequence[bytes],
    summary: Summary,
    uid: int,
    partition: int,
    key_id: int,
    encrypt: Encrypt,
) -> tuple[tuple[bytes, ...], Summary]:
    """``seal_blobs`` of blobs without keys, dedup ids, headers and delays
    (the SDK's bulk sends): every head is ``BARE_HEAD``, and a record's
    secret (header count 0, body) is its blob from the count on, so no
    per-record parsing."""
    n = len(blobs)
    lengths = [len(b) - _COUNT_AT for b in blobs]
    aad = associated_data(uid, partition, key_id, [BARE_HEAD] * n, lengths)
    nonce, ciphertext, tag = encrypt(b"".join([b[_COUNT_AT:] for b in blobs]), aad)
    if len(ciphertext) != sum(lengths):
        raise ValueError("the cipher must keep the plaintext's length")
    ct = memoryview(ciphertext)
    out: list[bytes] = []
    add = out.append
    pos = lengths[0]
    add(b"".join((BARE_HEAD, ENVELOPE.pack(SEAL_VERSION, key_id, nonce, tag), ct[:pos])))
    head = BARE_HEAD
    for length in lengths[1:]:
        add(head + ct[pos : pos + length])
        pos += length
    return tuple(out), Summary(summary.records, SEALED, 0)


class Batch(NamedTuple):
    """A sealed segment taken apart for ``decrypt``."""

    key_id: int
    nonce: bytes
    sealed: bytes  # ciphertext || tag
    aad: bytes
    lengths: tuple[int, ...]
    heads: list[bytes]  # each record's clear head (blob header, dedup_id, key)


class OpenedRecord(NamedTuple):
    """A record of an opened batch: the fields of ``records.StoredRecord``
    (a tuple: thousands are built per lease of a large batch)."""

    offset: int
    body: bytes
    key: str
    headers: Headers
    timestamp_ms: int
    dedup_id: str


def batch_of(seg: Segment, uid: int, partition: int) -> Batch:
    """The sealed batch of ``seg`` (whose flags have SEALED). Malformed if
    the first record has no envelope of a known version."""
    value, data, count = seg.value, seg._data, seg.count
    ends = struct.unpack_from(f">{count}I", value, data - 4 * count)
    unpack = _BLOB.unpack_from
    heads: list[bytes] = []
    pieces: list[bytes] = []
    start = 0
    at = data
    _d, dedup_len, key_len, _c = unpack(value, at)
    cut = at + BLOB_HEADER_SIZE + dedup_len + key_len
    if data + ends[0] - cut < ENVELOPE.size:
        raise Malformed("sealed segment without its envelope")
    version, key_id, nonce, tag = ENVELOPE.unpack_from(value, cut)
    if version != SEAL_VERSION:
        raise Malformed(f"sealed segment of unknown version {version}")
    heads.append(value[at:cut])
    pieces.append(value[cut + ENVELOPE.size : data + ends[0]])
    start = ends[0]
    for end in ends[1:]:
        at = data + start
        _d, dedup_len, key_len, _c = unpack(value, at)
        cut = at + BLOB_HEADER_SIZE + dedup_len + key_len
        heads.append(value[at:cut])
        pieces.append(value[cut : data + end])
        start = end
    lengths = tuple(map(len, pieces))
    aad = associated_data(uid, partition, key_id, heads, lengths)
    pieces.append(tag)
    return Batch(key_id, nonce, b"".join(pieces), aad, lengths, heads)


def open_records(seg: Segment, uid: int, partition: int, decrypt: Decrypt) -> list[OpenedRecord]:
    """Every record of the sealed segment ``seg``, decrypted: the whole batch
    is opened even when one record is wanted (one tag covers it)."""
    if seg.flags & HAS_DEDUP:
        return _open_each(seg, uid, partition, decrypt)
    if not seg.flags & HAS_KEY and not seg.max_delay_ms:
        return _open_bare(seg, uid, partition, decrypt)
    batch = batch_of(seg, uid, partition)
    plain = decrypt(batch.key_id, batch.nonce, batch.sealed, batch.aad)
    out: list[OpenedRecord] = []
    add = out.append
    pos = 0
    ts = seg.timestamp_ms
    offset = seg.base
    for head, n in zip(batch.heads, batch.lengths, strict=True):
        if len(head) == BLOB_HEADER_SIZE:  # no dedup_id, no key: the bulk case
            dedup_id = key = ""
        else:
            _d, dedup_len, _k, _c = _BLOB.unpack(head[:BLOB_HEADER_SIZE])
            dedup_id = head[BLOB_HEADER_SIZE : BLOB_HEADER_SIZE + dedup_len].decode()
            key = head[BLOB_HEADER_SIZE + dedup_len :].decode()
        if plain[pos] == 0 and plain[pos + 1] == 0:  # no headers
            add(OpenedRecord(offset, plain[pos + 2 : pos + n], key, (), ts, dedup_id))
        else:
            reader = Reader(plain, pos + _COUNT.size)
            count = _COUNT.unpack_from(plain, pos)[0]
            headers = tuple((reader.str_(), reader.bytes_()) for _ in range(count))
            add(OpenedRecord(offset, plain[reader.pos : pos + n], key, headers, ts, dedup_id))
        pos += n
        offset += 1
    return out


def _open_each(seg: Segment, uid: int, partition: int, decrypt: Decrypt) -> list[OpenedRecord]:
    """``open_records`` of a segment sealed record by record (``_seal_each``)."""
    value, data, count = seg.value, seg._data, seg.count
    ends = struct.unpack_from(f">{count}I", value, data - 4 * count)
    out: list[OpenedRecord] = []
    start = 0
    for k, end in enumerate(ends):
        at = data + start
        _d, dedup_len, key_len, _c = _BLOB.unpack_from(value, at)
        cut = at + BLOB_HEADER_SIZE + dedup_len + key_len
        if data + end - cut < ENVELOPE.size:
            raise Malformed("sealed record without its envelope")
        version, key_id, nonce, tag = ENVELOPE.unpack_from(value, cut)
        if version != SEAL_VERSION:
            raise Malformed(f"sealed record of unknown version {version}")
        head, piece = value[at:cut], value[cut + ENVELOPE.size : data + end]
        aad = associated_data(uid, partition, key_id, (head,), (len(piece),))
        plain = decrypt(key_id, nonce, piece + tag, aad)
        dedup_id = head[BLOB_HEADER_SIZE : BLOB_HEADER_SIZE + dedup_len].decode()
        key = head[BLOB_HEADER_SIZE + dedup_len :].decode()
        reader = Reader(plain, _COUNT.size)
        headers = tuple(
            (reader.str_(), reader.bytes_()) for _ in range(_COUNT.unpack_from(plain)[0])
        )
        out.append(
            OpenedRecord(
                seg.base + k, plain[reader.pos :], key, headers, seg.timestamp_ms, dedup_id
            )
        )
        start = end
    return out


_new_tuple = tuple.__new__


def _open_bare(seg: Segment, uid: int, partition: int, decrypt: Decrypt) -> list[OpenedRecord]:
    """``open_records`` of a segment whose records have no key, dedup id or
    delay (the flags and ``max_delay_ms`` say so), the bulk of a drain: every
    clear head is ``BARE_HEAD``, so the pieces are cut from the end table
    alone (no per-record unpack), and a record without headers is built
    without parsing. The heads are not read but they are authenticated: the
    associated data says every head is ``BARE_HEAD``, so a segment whose
    flags lie fails the tag."""
    value, data, count = seg.value, seg._data, seg.count
    ends = struct.unpack_from(f">{count}I", value, data - 4 * count)
    first = data + BLOB_HEADER_SIZE
    if data + ends[0] - first < ENVELOPE.size:
        raise Malformed("sealed segment without its envelope")
    version, key_id, nonce, tag = ENVELOPE.unpack_from(value, first)
    if version != SEAL_VERSION:
        raise Malformed(f"sealed segment of unknown version {version}")
    starts = [first + ENVELOPE.size, *(data + e + BLOB_HEADER_SIZE for e in ends[:-1])]
    stops = [data + e for e in ends]
    view = memoryview(value)
    sealed = b"".join([*map(view.__getitem__, map(slice, starts, stops)), tag])
    lengths = list(map(sub, stops, starts))
    plain = decrypt(key_id, nonce, sealed, associated_data_bare(uid, partition, key_id, lengths))
    out: list[OpenedRecord] = []
    add = out.append
    pos = 0
    ts = seg.timestamp_ms
    offset = seg.base
    for n in lengths:
        if plain[pos] == 0 and plain[pos + 1] == 0:  # no headers
            add(_new_tuple(OpenedRecord, (offset, plain[pos + 2 : pos + n], "", (), ts, "")))
        else:
            reader = Reader(plain, pos + _COUNT.size)
            headers = tuple(
                (reader.str_(), reader.bytes_()) for _ in range(_COUNT.unpack_from(plain, pos)[0])
            )
            add(OpenedRecord(offset, plain[reader.pos : pos + n], "", headers, ts, ""))
        pos += n
        offset += 1
    return out


def associated_data_bare(uid: int, partition: int, key_id: int, lengths: Sequence[int]) -> bytes:
    """``associated_data`` of records whose heads are all ``BARE_HEAD``."""
    n = len(lengths)
    return b"".join(
        (_AAD_TAG, _AAD.pack(uid, partition, key_id, n), struct.pack(f">{n}I", *lengths),
         BARE_HEAD * n)
    )  # fmt: skip
