"""The partition's tables, their key/value formats, and the per-apply view.

Tables (all keys compare as bytes; integers are big-endian fixed width so
they sort numerically):

``records``   offset -> stored record (``records.stored_value``); the log,
              retained densely in ``[earliest, next_offset)``.
``delivery``  offset -> ``Delivery``: per-record delivery state. Records at or
              after the cursor were never touched and have none; a record
              before the cursor without one is finished (acked, or dead and
              forgotten). So Append writes nothing here.
``timers``    (at_ms, offset) -> status byte: LEASED deadlines and WAITING
              visible-at times, earliest first.
``ready``     offset -> b"": visible again (lease expired, nacked, delay over).
``blocked``   (key, offset) -> b"": FIFO records waiting for their key's head.
``fifo``      key -> offset of the key's head (the one record of the key that
              may be in flight).
``dead``      offset -> b"": dead records not yet forgotten (ForgetDead).
``dedup``     dedup_id -> (offset, timestamp_ms) of the original append.
``dedup_exp`` (timestamp_ms, offset) -> dedup_id: live dedup entries whose
              record left the log before its dedup window ended.
``groups``    consumer group -> committed offset.
``meta``      b"config" -> PartitionConfig, b"counters" -> ``Counters``.
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
_DELIVERY = struct.Struct(">BIIQ")


class Status:
    """Delivery.status values (plain ints: they are stored bytes)."""

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


class Delivery(NamedTuple):
    status: int
    epoch: int  # 0 until first leased
    receive_count: int
    at_ms: int  # LEASED: deadline; WAITING: visible-at; otherwise 0
    history: bytes = b""  # the last HISTORY_LIMIT leases (``lease_event``s)

    def pack(self) -> bytes:
        return _DELIVERY.pack(self.status, self.epoch, self.receive_count, self.at_ms) + (
            self.history
        )

    @classmethod
    def unpack(cls, value: bytes) -> Delivery:
        status, epoch, receive_count, at_ms = _DELIVERY.unpack_from(value)
        return cls(status, epoch, receive_count, at_ms, value[_DELIVERY.size :])

    def leased(self, deadline_ms: int, event: bytes) -> Delivery:
        """The next lease: epoch and receive count bumped, ``event`` recorded.
        History rides in the delivery value, so it costs no extra put."""
        history = self.history
        if self.receive_count >= HISTORY_LIMIT:  # drop the oldest event
            history = history[_EVENT.size + history[_EVENT.size - 1] :]
        return Delivery(
            Status.LEASED, self.epoch + 1, self.receive_count + 1, deadline_ms, history + event
        )


NEVER_LEASED = Delivery(0, 0, 0, 0)
HISTORY_LIMIT = 16
_EVENT = struct.Struct(">QQB")  # time_ms, deadline_ms, len(consumer); then consumer


def lease_event(time_ms: int, consumer: str, deadline_ms: int) -> bytes:
    raw = consumer.encode()
    return _EVENT.pack(time_ms, deadline_ms, len(raw)) + raw


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
    stored_bytes: int = 0  # sum of retained record values' lengths
    done: int = 0  # retained records that are finished (acked, dead and forgotten)
    leased: int = 0  # LEASED deliveries
    waiting: int = 0  # WAITING deliveries
    dead: int = 0  # DEAD deliveries

    _FORMAT = struct.Struct(">11Q")

    def pack(self) -> bytes:
        return self._FORMAT.pack(*[getattr(self, name) for name in self.__slots__])

    @classmethod
    def unpack(cls, value: bytes) -> Counters:
        return cls(*cls._FORMAT.unpack(value))


_STATUS_COUNTER = {Status.LEASED: "leased", Status.WAITING: "waiting", Status.DEAD: "dead"}


def load_config(txn: KVTxn) -> PartitionConfig:
    raw = txn.get(META, _CONFIG_KEY)
    return PartitionConfig() if raw is None else read_config(Reader(raw))


def store_config(txn: KVTxn, config: PartitionConfig) -> None:
    buf = bytearray()
    put_config(buf, config)
    txn.put(META, _CONFIG_KEY, bytes(buf))


def load_counters(txn: KVTxn) -> Counters:
    raw = txn.get(META, _COUNTERS_KEY)
    return Counters() if raw is None else Counters.unpack(raw)


class View:
    """One apply's working set: the txn, the config, the counters and now.

    Every change to a record's delivery state goes through ``set_delivery``,
    which keeps the index tables and counters in step; ``flush`` writes the
    counters once at the end of the apply.
    """

    __slots__ = ("txn", "cfg", "c", "now", "_loaded")

    def __init__(self, txn: KVTxn) -> None:
        self.txn = txn
        self.cfg = load_config(txn)
        self.c = load_counters(txn)
        self._loaded: bytes = self.c.pack()
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

    def delivery(self, offset: int) -> Delivery | None:
        raw = self.txn.get(DELIVERY, u64(offset))
        return None if raw is None else Delivery.unpack(raw)

    def set_delivery(
        self, offset: int, new: Delivery | None, old: Delivery | None, key: bytes = b""
    ) -> None:
        """Move ``offset`` from ``old`` to ``new`` (None: no state). ``key`` is
        the record's key (UTF-8), needed only to enter or leave BLOCKED."""
        if old is not None:
            self._unindex(offset, old, key)
        if new is None:
            if old is not None:
                self.txn.delete(DELIVERY, u64(offset))
            return
        self._index(offset, new, key)
        self.txn.put(DELIVERY, u64(offset), new.pack())

    def _unindex(self, offset: int, old: Delivery, key: bytes) -> None:
        status = old.status
        if status in (Status.LEASED, Status.WAITING):
            self.txn.delete(TIMERS, pair_key(old.at_ms, offset))
        elif status == Status.READY:
            self.txn.delete(READY, u64(offset))
        elif status == Status.BLOCKED:
            self.txn.delete(BLOCKED, blocked_prefix(key) + u64(offset))
        elif status == Status.DEAD:
            self.txn.delete(DEAD, u64(offset))
        name = _STATUS_COUNTER.get(status)
        if name is not None:
            setattr(self.c, name, getattr(self.c, name) - 1)

    def _index(self, offset: int, new: Delivery, key: bytes) -> None:
        status = new.status
        if status in (Status.LEASED, Status.WAITING):
            self.txn.put(TIMERS, pair_key(new.at_ms, offset), bytes((status,)))
        elif status == Status.READY:
            self.txn.put(READY, u64(offset), b"")
        elif status == Status.BLOCKED:
            self.txn.put(BLOCKED, blocked_prefix(key) + u64(offset), b"")
        elif status == Status.DEAD:
            self.txn.put(DEAD, u64(offset), b"")
        name = _STATUS_COUNTER.get(status)
        if name is not None:
            setattr(self.c, name, getattr(self.c, name) + 1)
