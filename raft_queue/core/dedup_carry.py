"""Dedup windows carried across a queue move (docs/operations.md "Moving a
queue between clusters"): the entries the source exports and the
``SeedDedup`` command that plants them in the target's table.

An entry is one row of a partition's ``dedup`` table (``core/dedup.py``),
named by exactly one of:

- ``dedup_id``: a record's dedup id as the table keys it (the id itself, or
  0xff + its SHA-256 when it is longer than ``state.MAX_RAW_KEY``);
- ``request_id``: the SDK's id of one Send RPC (Append).

``timestamp_ms`` is the ORIGINAL append's time, so a seeded entry ends when
it would have ended on the source. ``offsets``: for a request entry, what a
retry of it is answered with (the mover translates each source offset to its
copy's target offset, or ``MOVED_OFFSET`` when the record was not copied);
a record entry carries none on the way in (its record is not on the target:
a copied record's entry is the copy's own) and its source offset on the way
out. Pure: codec and validation only; ``dedup.seed`` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass

from raft_queue.core import validate as v
from raft_queue.core.wire import Reader, put_bytes, put_uvarint
from raft_queue.errors import InvalidArgument

#: The offset a duplicate answer gives for a record stored (and acked, or
#: dead-lettered) on the source cluster before a move: it has no offset on
#: the target. 2**64 - 1, never a real offset.
MOVED_OFFSET = (1 << 64) - 1
#: Entries in one SeedDedup (one Raft entry) and offsets in one request entry.
MAX_SEED_ENTRIES = 10_000
MAX_ENTRY_OFFSETS = 1_000_000  # a Send holds at most limits.max_batch_messages (<= 10**6)
_MAX_RAW_KEY = 400  # state.MAX_RAW_KEY (state imports commands: no import back)
_MAX_REQUEST_ID = 64  # commands.MAX_REQUEST_ID_BYTES


@dataclass(frozen=True, slots=True)
class DedupEntry:
    dedup_id: bytes
    request_id: bytes
    timestamp_ms: int
    offsets: tuple[int, ...] = ()

    @property
    def is_request(self) -> bool:
        return bool(self.request_id)


def check_entry(field: str, e: DedupEntry, seeding: bool) -> None:
    """InvalidArgument naming ``field`` (e.g. ``entries[3].dedup_id``)."""
    if type(e.dedup_id) is not bytes or type(e.request_id) is not bytes:
        raise InvalidArgument(field, "dedup_id and request_id must be bytes")
    if bool(e.dedup_id) == bool(e.request_id):
        raise InvalidArgument(field, "exactly one of dedup_id and request_id must be set")
    if e.dedup_id:
        _check_dedup_key(f"{field}.dedup_id", e.dedup_id)
    elif len(e.request_id) > _MAX_REQUEST_ID:
        raise InvalidArgument(f"{field}.request_id", f"at most {_MAX_REQUEST_ID} bytes")
    v.uint64(f"{field}.timestamp_ms", e.timestamp_ms)
    v.tuple_of(f"{field}.offsets", e.offsets, int)
    if seeding and e.dedup_id and e.offsets:
        raise InvalidArgument(
            f"{field}.offsets", "a dedup_id entry is seeded without offsets (its record is "
            "not on this partition: it answers MOVED_OFFSET)",
        )  # fmt: skip
    if len(e.offsets) > MAX_ENTRY_OFFSETS:
        raise InvalidArgument(f"{field}.offsets", f"at most {MAX_ENTRY_OFFSETS}")
    for offset in e.offsets:
        v.uint64(f"{field}.offsets", offset)


def _check_dedup_key(field: str, key: bytes) -> None:
    if key[:1] == b"\xff":
        if len(key) != 33:
            raise InvalidArgument(field, "a hashed dedup id is 0xff + 32 bytes of SHA-256")
        return
    if len(key) > _MAX_RAW_KEY:
        raise InvalidArgument(field, f"at most {_MAX_RAW_KEY} bytes (longer ones are hashed)")
    try:
        key.decode()
    except UnicodeDecodeError:
        raise InvalidArgument(field, "must be UTF-8 (or 0xff + SHA-256)") from None


@dataclass(frozen=True, slots=True)
class SeedDedup:
    """Plant ``entries`` in the partition's dedup table (the target of a
    move), each unless the table holds a live entry of that key (a copied
    record's, or an earlier seed's) or its window has ended by ``now_ms``."""

    entries: tuple[DedupEntry, ...]
    now_ms: int

    def __post_init__(self) -> None:
        v.tuple_of("entries", self.entries, DedupEntry)
        if len(self.entries) > MAX_SEED_ENTRIES:
            raise InvalidArgument("entries", f"at most {MAX_SEED_ENTRIES} per command")
        for i, e in enumerate(self.entries):
            check_entry(f"entries[{i}]", e, seeding=True)
        v.uint64("now_ms", self.now_ms)


def encode_seed(buf: bytearray, c: SeedDedup) -> None:
    put_uvarint(buf, c.now_ms)
    put_uvarint(buf, len(c.entries))
    for e in c.entries:
        put_bytes(buf, e.dedup_id)
        put_bytes(buf, e.request_id)
        put_uvarint(buf, e.timestamp_ms)
        put_uvarint(buf, len(e.offsets))
        for offset in e.offsets:
            put_uvarint(buf, offset)


def decode_seed(r: Reader) -> SeedDedup:
    now_ms, count = r.uvarint(), r.uvarint()
    if count > MAX_SEED_ENTRIES:
        raise InvalidArgument("entries", f"at most {MAX_SEED_ENTRIES} per command")
    entries = []
    for _ in range(count):
        dedup_id, request_id, ts, n = r.bytes_(), r.bytes_(), r.uvarint(), r.uvarint()
        if n > MAX_ENTRY_OFFSETS:
            raise InvalidArgument("offsets", f"at most {MAX_ENTRY_OFFSETS}")
        offsets = tuple(r.uvarint() for _ in range(n))
        entries.append(DedupEntry(dedup_id, request_id, ts, offsets))
    return SeedDedup(tuple(entries), now_ms)
