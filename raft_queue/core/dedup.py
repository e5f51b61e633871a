"""Deduplication by ``dedup_id`` within ``dedup_window_ms`` (as SQS FIFO's
MessageDeduplicationId, or Kafka's idempotent producer at queue level).

An entry ``dedup[id] = (offset, timestamp_ms)`` is written by the append it
protects: that is the only extra put an append with a dedup id pays. A
lookup treats an entry older than the window as absent, so the answer never
depends on when Expire last ran. Expiry needs no index of its own while the
record is still in the log: ``expire`` walks the log from ``dedup_cursor``
(timestamps never decrease) and drops the entries of records past the window.
A record that leaves the log earlier (ack compaction, retention, purge)
hands its live entry to ``dedup_exp``, ordered by timestamp.
"""

from __future__ import annotations

from itertools import islice

from raft_queue.core.records import head
from raft_queue.core.state import (
    DEDUP,
    DEDUP_EXP,
    RECORDS,
    View,
    int_of,
    pair_key,
    table_key,
    u64,
    unpack_pair,
)

# Bound on records walked / entries dropped per Expire, to bound its latency;
# the rest waits for the next Expire (lookups already ignore stale entries).
EXPIRE_LIMIT = 100_000


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
    window = view.cfg.dedup_window_ms
    for raw_key, value in islice(view.txn.scan(RECORDS, u64(c.dedup_cursor)), EXPIRE_LIMIT):
        rec = head(value)
        if c.clock - rec.timestamp_ms < window:
            break
        offset = int_of(raw_key)
        if rec.dedup_id:
            _drop(view, table_key(rec.dedup_id), offset)
        c.dedup_cursor = offset + 1
    if c.clock < window:
        return
    stop = pair_key(c.clock - window + 1, 0)
    due = list(islice(view.txn.scan(DEDUP_EXP, b"", stop), EXPIRE_LIMIT))
    for exp_key, dedup_key in due:
        _drop(view, dedup_key, unpack_pair(exp_key)[1])
        view.txn.delete(DEDUP_EXP, exp_key)


def _drop(view: View, dedup_key: bytes, offset: int) -> None:
    """Delete the entry unless a later append of the same id took it over."""
    raw = view.txn.get(DEDUP, dedup_key)
    if raw is not None and unpack_pair(raw)[0] == offset:
        view.txn.delete(DEDUP, dedup_key)
