"""The partition's tables, their key/value formats, and the per-apply view.

Tables (all keys compare as bytes; integers are big-endian fixed width so
they sort numerically):

``records``   base offset -> segment (``segments``): the records of one
              Append. The log is retained densely in ``[earliest,
              next_offset)``; the front segment may hold trimmed records
              below ``earliest``.
``delivery``  start offset -> ``Run``: ``length`` consecutive records with one
              delivery state. Records at or after the cursor were never
              touched and have none; a record before the cursor in no run is
              finished (acked, or dead and forgotten). So Append writes
              nothing here, and a Lease of N records writes one run.
``timers``    (at_ms, start) -> status byte: LEASED deadlines and WAITING
              visible-at times of runs, earliest first.
``ready``     start -> b"": runs visible again (lease expired, nacked, delay over).
``blocked``   (key, offset) -> b"": FIFO records waiting for their key's head
              (always runs of one).
``fifo``      key -> offset of the key's head (the one record of the key that
              may be in flight).
``dead``      start -> b"": dead runs not yet forgotten (ForgetDead).
``dedup``     dedup_id -> (offset, timestamp_ms) of the original append; and
              0xfe + request id -> (first offset, timestamp_ms, the Append's
              offsets) for whole Appends (``dedup``).
``dedup_exp`` (timestamp_ms, offset)[+ key] -> dedup key: live entries to drop
              when their window ends (request ids always; dedup ids whose
              record left the log early).
``groups``    consumer group -> committed offset.
``meta``      b"config" -> PartitionConfig, b"counters" -> ``Counters``
              (which starts with the data format version).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import NamedTuple

from raft_queue.core.codec import put_config, read_config
from raft_queue.core.commands import PartitionConfig
from raft_queue.core.kv import KVTxn
from raft_queue.core.wire import U64, Reader, put_uvarint
from raft_queue.errors import Internal

RECORDS = "records"
DELIVERY = "delivery"
TIMERS = "timers"
READY = "ready"
BLOCKED = "blocked"
FIFO = "fifo"
DEAD = "dead"
DEDUP = "dedup"
DEDUP_EXP = "dedup_exp"
GROUPS = "groups"
META = "meta"
TABLES = (RECORDS, DELIVERY, TIMERS, READY, BLOCKED, FIFO, DEAD, DEDUP, DEDUP_EXP, GROUPS, META)

_CONFIG_KEY = b"config"
_COUNTERS_KEY = b"counters"
_PAIR = struct.Struct(">QQ")
_RUN = struct.Struct(">BIIQQ")  # status, epoch, receive_count, at_ms, count

# Version of the table layout above, stored with the counters. Version 1 (no
# number stored) had one ``records`` value and one ``delivery`` value per
# record; version 2 stored delays in 32 bits (segments' max_delay_ms and each
# record blob's delay_ms, so at most ~49.7 days); 3 stores them in 64.
DATA_FORMAT = 4
# Format 4 added sealed segments (segments.SEALED, core/sealing.py) and
# nothing else: format 3 data holds none, so it is read as is (and stamped 4
# at its next apply); a format-3 reader refuses format 4.
_READABLE_FORMATS = (b"\x00\x00\x00\x03", DATA_FORMAT.to_bytes(4, "big"))


class Status:
    """Run.status values (plain ints: they are stored bytes)."""

    LEASED = 1  # in flight until at_ms (the lease deadline)
    WAITING = 2  # invisible until at_ms (nack delay, or a record's own delay)
    READY = 3  # visible now, listed in ``ready``
    BLOCKED = 4  # FIFO: another record of its key is the head
    DEAD = 5  # out of delivery, listed in ``dead`` until forgotten


u64 = U64.pack


def int_of(key: bytes) -> int:
    """Inverse of ``u64`` (for offset keys)."""
    return int.from_bytes(key, "big")


def pair_key(first: int, second: int) -> bytes:
    """(at_ms, offset) and (timestamp_ms, offset) keys: time order, then offset."""
    return _PAIR.pack(first, second)


def unpack_pair(key: bytes) -> tuple[int, int]:
    first, second = _PAIR.unpack(key)
    return first, second


# Longest user string stored verbatim in a table key (LMDB allows 511 bytes).
MAX_RAW_KEY = 400


def table_key(raw: bytes) -> bytes:
    """Table key for a message key or dedup id (UTF-8): itself, or for a long
    one 0xff + its SHA-256 (UTF-8 never contains 0xff, so the forms cannot meet)."""
    return raw if len(raw) <= MAX_RAW_KEY else b"\xff" + hashlib.sha256(raw).digest()


def blocked_prefix(key: bytes) -> bytes:
    """Length-prefixed, so one key's prefix never matches another key."""
    buf = bytearray()
    raw = table_key(key)
    put_uvarint(buf, len(raw))
    return bytes(buf + raw)


class Run(NamedTuple):
    """The delivery state shared by ``length`` consecutive records, from the
    offset that keys it. Records with equal state are kept in one run and a
    run splits when part of it changes (``runs``), so a Lease, Ack or Nack of
    a contiguous span costs O(1) rows, not one per record."""

    status: int
    epoch: int  # 0 until first leased
    receive_count: int
    at_ms: int  # LEASED: deadline; WAITING: visible-at; otherwise 0
    length: int  # how many records, from the start offset
    history: bytes = b""  # the last HISTORY_LIMIT leases (``lease_event``s)

    def pack(self) -> bytes:
        return (
            _RUN.pack(self.status, self.epoch, self.receive_count, self.at_ms, self.length)
            + self.history
        )

    @classmethod
    def unpack(cls, value: bytes) -> Run:
        status, epoch, receive_count, at_ms, length = _RUN.unpack_from(value)
        return cls(status, epoch, receive_count, at_ms, length, value[_RUN.size :])

    def same_state(self, other: Run) -> bool:
        """Equal but for ``length``: the two could be one run."""
        return self[:4] == other[:4] and self.history == other.history

    def leased(self, deadline_ms: int, event: bytes) -> Run:
        """The next lease: epoch and receive count bumped, ``event`` recorded.
        History rides in the run's value, so it costs no extra put."""
        history = self.history
        if self.receive_count >= HISTORY_LIMIT:  # drop the oldest event
            history = history[_EVENT.size + history[_EVENT.size - 1] :]
        return Run(
            Status.LEASED,
            self.epoch + 1,
            self.receive_count + 1,
            deadline_ms,
            self.length,
            history + event,
        )

    def becomes(self, status: int, at_ms: int = 0) -> Run:
        return self._replace(status=status, at_ms=at_ms)


NEVER_LEASED = Run(0, 0, 0, 0, 0)
# Leases kept in a run's history (docs/semantics.md, GetHistory): the
# history rides in the run row each lease writes anyway (17 bytes + the
# consumer id per lease); every lease, paged, would cost a row per record per
# lease (measured: +2.2 ms on a 0.13 ms lease of 1000 records).
HISTORY_LIMIT = 16
_EVENT = struct.Struct(">QQB")  # time_ms, deadline_ms, len(consumer); then consumer


def lease_event(time_ms: int, consumer: str, deadline_ms: int) -> bytes:
    raw = consumer.encode()
    return _EVENT.pack(time_ms, deadline_ms, len(raw)) + raw


def without_last_event(history: bytes) -> bytes:
    """``history`` without its newest event (the lease being undone)."""
    pos = last = 0
    while pos < len(history):
        last = pos
        pos += _EVENT.size + history[pos + _EVENT.size - 1]
    return history[:last]


def lease_events(history: bytes) -> list[tuple[int, str, int]]:
    """(time_ms, consumer, deadline_ms) of each recorded lease, oldest first."""
    events, pos = [], 0
    while pos < len(history):
        time_ms, deadline_ms, size = _EVENT.unpack_from(history, pos)
        pos += _EVENT.size + size
        events.append((time_ms, history[pos - size : pos].decode(), deadline_ms))
    return events


@dataclass(slots=True)
class Counters:
    """The O(1) summary kept in ``meta`` and rewritten once per apply."""

    next_offset: int = 0
    earliest: int = 0
    cursor: int = 0  # lowest offset Lease has not passed yet
    dedup_cursor: int = 0  # records below have had their dedup entry handled
    last_ts: int = 0  # newest record timestamp (timestamps never decrease)
    clock: int = 0  # highest now_ms any command carried: dedup's time
    stored_bytes: int = 0  # sum of retained records' sizes (``segments.Segment.size``)
    done: int = 0  # retained records that are finished (acked, dead and forgotten)
    leased: int = 0  # records in LEASED runs
    waiting: int = 0  # records in WAITING runs
    dead: int = 0  # records in DEAD runs

    _FORMAT = struct.Struct(">I11Q")  # DATA_FORMAT, then the fields

    def pack(self) -> bytes:
        return self._FORMAT.pack(DATA_FORMAT, *[getattr(self, name) for name in self.__slots__])

    @classmethod
    def unpack(cls, value: bytes) -> Counters:
        if len(value) != cls._FORMAT.size or value[:4] not in _READABLE_FORMATS:
            found = int.from_bytes(value[:4], "big") if len(value) == cls._FORMAT.size else 1
            raise Internal(
                f"partition data format {found}, but this version of raft_queue reads only "
                f"formats 3 and {DATA_FORMAT}: the replica's data was written by another version"
            )
        return cls(*cls._FORMAT.unpack(value)[1:])


STATUS_COUNTER = {Status.LEASED: "leased", Status.WAITING: "waiting", Status.DEAD: "dead"}


# Decoded configs by their stored bytes. Every apply reads its partition's
# config and a config changes rarely: decoding and validating it again cost
# 4.6 us of each apply on a quiet core (~11 us under load, py-spy), on every
# replica (docs/benchmarks.md). The value is
# frozen, so one decoded copy serves every reader; the bound only stops a
# process with very many distinct configs from growing the table.
_CONFIGS: dict[bytes, PartitionConfig] = {}
_CONFIGS_MAX = 1024
_DEFAULT_CONFIG = PartitionConfig()


def load_config(txn: KVTxn) -> PartitionConfig:
    raw = txn.get(META, _CONFIG_KEY)
    if raw is None:
        return _DEFAULT_CONFIG
    cfg = _CONFIGS.get(raw)
    if cfg is None:
        cfg = read_config(Reader(raw))
        if len(_CONFIGS) >= _CONFIGS_MAX:
            _CONFIGS.clear()
        _CONFIGS[raw] = cfg
    return cfg


def store_config(txn: KVTxn, config: PartitionConfig) -> None:
    buf = bytearray()
    put_config(buf, config)
    txn.put(META, _CONFIG_KEY, bytes(buf))


def load_counters(txn: KVTxn) -> Counters:
    """The counters; Internal if the partition was written in another data format."""
    raw = txn.get(META, _COUNTERS_KEY)
    return Counters() if raw is None else Counters.unpack(raw)


def check_format(txn: KVTxn) -> None:
    """Internal unless the tables are empty or in format ``DATA_FORMAT``."""
    if txn.get(META, _COUNTERS_KEY) is None:
        if txn.count(RECORDS) or txn.count(DELIVERY):  # format 1 wrote counters lazily
            raise Internal("partition data without a format version (format 1): unreadable")
        return
    load_counters(txn)


class View:
    """One apply's working set: the txn, the config, the counters and now.

    Run changes go through ``runs``, which keeps the index tables and the
    counters in step; ``flush`` writes the counters once at the end of the
    apply (and always on the first apply, which stamps the data format).
    """

    __slots__ = ("txn", "cfg", "c", "now", "_loaded")

    def __init__(self, txn: KVTxn) -> None:
        self.txn = txn
        self.cfg = load_config(txn)
        raw = txn.get(META, _COUNTERS_KEY)
        self.c = Counters() if raw is None else Counters.unpack(raw)
        self._loaded: bytes = b"" if raw is None else raw
        self.now = 0

    def at(self, now_ms: int) -> None:
        """The command's time. Dedup windows are measured on ``clock``, which
        never goes back, so an entry Expire dropped stays expired even if a
        new leader's clock lags."""
        self.now = now_ms
        if now_ms > self.c.clock:
            self.c.clock = now_ms

    @property
    def fifo(self) -> bool:
        return self.cfg.ordering == "fifo"

    def flush(self) -> None:
        packed = self.c.pack()
        if packed != self._loaded:
            self.txn.put(META, _COUNTERS_KEY, packed)
            self._loaded = packed
