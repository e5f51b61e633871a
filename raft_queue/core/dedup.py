"""Deduplication within ``dedup_window_ms``: per record by ``dedup_id`` (as
SQS FIFO's MessageDeduplicationId) and per Append by request id (as Kafka's
idempotent producer, simplified: the SDK's id of one Send RPC).

A record's entry ``dedup[id] = (offset, timestamp_ms)`` is written by the
append it protects: that is the only extra put an append with a dedup id
pays. A lookup treats an entry older than the window as absent, so the
answer never depends on when Expire last ran. Expiry needs no index of its
own while the record is still in the log: ``expire`` walks the log from
``dedup_cursor`` (timestamps never decrease), looking inside only the
segments that hold dedup ids, and drops the entries of records past the
window. A record that leaves the log earlier (ack compaction, retention,
purge) hands its live entry to ``dedup_exp``, ordered by timestamp.

A request's entry ``dedup[0xfe + id] = (first offset, timestamp_ms, its
offsets)`` is one row per Append, whatever its size, and goes to
``dedup_exp`` at once (it is not tied to any one record). UTF-8 never holds
0xfe, so the two kinds of keys cannot meet.

A queue move carries the live entries of both kinds to the target
(``live_entries`` on the source, ``seed`` on the target, entries and
command in ``dedup_carry``): a seeded entry keeps its original timestamp and
gets a ``dedup_exp`` row (its time, its offset or ``MOVED_OFFSET``, its key),
so it ends when it would have ended on the source.
"""

from __future__ import annotations

import struct
from itertools import islice
from typing import NamedTuple

from raft_queue.core.dedup_carry import MOVED_OFFSET, DedupEntry
from raft_queue.core.results import AppendItem, AppendResult
from raft_queue.core.segments import HAS_DEDUP, segments_from
from raft_queue.core.state import (
    DEDUP,
    DEDUP_EXP,
    RECORDS,
    View,
    pair_key,
    table_key,
    unpack_pair,
)

# Bound on records walked / entries dropped per Expire, to bound its latency;
# the rest waits for the next Expire (lookups already ignore stale entries).
EXPIRE_LIMIT = 100_000
REQUEST_PREFIX = b"\xfe"
_COUNT = struct.Struct(">I")


def lookup_or_record(view: View, dedup_id: bytes, offset: int, ts: int) -> int | None:
    """The original offset if ``dedup_id`` was appended within the window
    (before ``clock``); otherwise record it for ``offset`` at ``ts``."""
    key = table_key(dedup_id)
    raw = view.txn.get(DEDUP, key)
    if raw is not None:
        original, original_ts = unpack_pair(raw)
        if view.c.clock - original_ts < view.cfg.dedup_window_ms:
            return original
    view.txn.put(DEDUP, key, pair_key(offset, ts))
    return None


def seen_request(view: View, request_id: bytes) -> AppendResult | None:
    """The result of the Append that carried ``request_id`` within the
    window, all its items marked duplicate; None if there was none."""
    raw = view.txn.get(DEDUP, REQUEST_PREFIX + request_id)
    if raw is None:
        return None
    first, ts = unpack_pair(raw[:16])
    if view.c.clock - ts >= view.cfg.dedup_window_ms:
        return None
    (count,) = _COUNT.unpack_from(raw, 16)
    if len(raw) == 20:
        return AppendResult(first, count, duplicate=True)
    offsets = struct.unpack_from(f">{count}Q", raw, 20)
    return AppendResult(0, count, False, tuple(AppendItem(o, True) for o in offsets))


def record_request(
    view: View, request_id: bytes, first: int, ts: int, result: AppendResult
) -> None:
    """Remember ``result`` (the Append's, stored from offset ``first`` at
    ``ts``) under ``request_id`` until the window ends."""
    key = REQUEST_PREFIX + request_id
    value = pair_key(first, ts) + _COUNT.pack(result.count)
    if result.listed is not None or result.duplicate:
        offsets = [item.offset for item in result.items]
        value += struct.pack(f">{len(offsets)}Q", *offsets)
    view.txn.put(DEDUP, key, value)
    view.txn.put(DEDUP_EXP, pair_key(ts, first) + key, key)


def preserve(view: View, dedup_id: bytes, offset: int, ts: int) -> None:
    """``offset`` is leaving the log: keep its dedup entry alive until the
    window ends (if it still belongs to this record and has not ended)."""
    if offset < view.c.dedup_cursor or not dedup_id:
        return
    key = table_key(dedup_id)
    raw = view.txn.get(DEDUP, key)
    if raw is None or unpack_pair(raw)[0] != offset:
        return
    if view.c.clock - ts >= view.cfg.dedup_window_ms:
        view.txn.delete(DEDUP, key)
    else:
        view.txn.put(DEDUP_EXP, pair_key(ts, offset), key)


def expire(view: View) -> None:
    """Drop dedup entries whose window has ended by ``clock``."""
    c = view.c
    c.dedup_cursor = max(c.dedup_cursor, c.earliest)
    window, budget = view.cfg.dedup_window_ms, EXPIRE_LIMIT
    for seg in segments_from(view.txn, RECORDS, c.dedup_cursor):
        if budget <= 0 or c.clock - seg.timestamp_ms < window:
            break
        lo = max(c.dedup_cursor, seg.base)
        hi = min(seg.end, lo + budget) if seg.flags & HAS_DEDUP else seg.end
        if seg.flags & HAS_DEDUP:
            for offset in range(lo, hi):
                dedup_id = seg.head(offset - seg.base).dedup_id
                if dedup_id:
                    _drop(view, table_key(dedup_id), offset, seg.timestamp_ms)
        budget -= hi - lo
        c.dedup_cursor = hi
    if c.clock < window:
        return
    stop = pair_key(c.clock - window + 1, 0)
    due = list(islice(view.txn.scan(DEDUP_EXP, b"", stop), EXPIRE_LIMIT))
    for exp_key, dedup_key in due:
        ts, offset = unpack_pair(exp_key[:16])
        _drop(view, dedup_key, offset, ts)
        view.txn.delete(DEDUP_EXP, exp_key)


def _drop(view: View, dedup_key: bytes, offset: int, ts: int) -> None:
    """Delete the entry unless a later append of the same id took it over."""
    raw = view.txn.get(DEDUP, dedup_key)
    if raw is not None and raw[:16] == pair_key(offset, ts):
        view.txn.delete(DEDUP, dedup_key)


class DedupPage(NamedTuple):
    entries: list[DedupEntry]
    next_key: bytes  # the last key looked at: the next page starts after it
    done: bool  # no key after ``next_key``


def live_entries(
    view: View, after: bytes, max_entries: int, max_offsets: int, now_ms: int
) -> DedupPage:
    """The dedup entries whose window has not ended by ``max(clock, now_ms)``,
    in key order after ``after`` (b"": from the first): at most
    ``max_entries``, and past the first one at most ``max_offsets`` request
    offsets in all. Reads only."""
    window = view.cfg.dedup_window_ms
    clock = max(view.c.clock, now_ms)
    out: list[DedupEntry] = []
    offsets, last = 0, after
    start = after + b"\x00" if after else b""
    for key, raw in view.txn.scan(DEDUP, start):
        if len(out) >= max_entries or (out and offsets >= max_offsets):
            return DedupPage(out, last, False)
        last = key
        first, ts = unpack_pair(raw[:16])
        if not window or clock - ts >= window:
            continue
        if key[:1] != REQUEST_PREFIX:
            out.append(DedupEntry(key, b"", ts, (first,)))
            continue
        (count,) = _COUNT.unpack_from(raw, 16)
        listed = struct.unpack_from(f">{count}Q", raw, 20) if len(raw) > 20 else None
        out.append(DedupEntry(b"", key[1:], ts, listed or tuple(range(first, first + count))))
        offsets += count
    return DedupPage(out, last, True)


def seed(view: View, entries: tuple[DedupEntry, ...]) -> int:
    """Plant each entry with its original timestamp and a ``dedup_exp`` row,
    unless its window has ended by ``clock`` or the table holds a live entry
    of its key (a copied record's, or this seed's before: seeding twice
    changes nothing). How many were planted."""
    window, planted = view.cfg.dedup_window_ms, 0
    for e in entries:
        if not window or view.c.clock - e.timestamp_ms >= window:
            continue
        key = REQUEST_PREFIX + e.request_id if e.request_id else e.dedup_id
        raw = view.txn.get(DEDUP, key)
        if raw is not None and view.c.clock - unpack_pair(raw[:16])[1] < window:
            continue
        if e.request_id:
            first = e.offsets[0] if e.offsets else MOVED_OFFSET
            value = pair_key(first, e.timestamp_ms) + _COUNT.pack(len(e.offsets))
            value += struct.pack(f">{len(e.offsets)}Q", *e.offsets)
        else:
            first = MOVED_OFFSET
            value = pair_key(first, e.timestamp_ms)
        view.txn.put(DEDUP, key, value)
        view.txn.put(DEDUP_EXP, pair_key(e.timestamp_ms, first) + key, key)
        planted += 1
    return planted
