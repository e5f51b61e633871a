"""Removing records: retention, ack compaction, purge, and dead letters.

Records only ever leave from the front of the log, so the retained records
are always the dense range ``[earliest, next_offset)`` and offsets are never
reused (as Kafka's log start offset). The front record goes when:

- ``retention_ms > 0`` and it is at least that old (acked or not, as SQS's
  retention period and Kafka's retention.ms);
- ``retention_bytes > 0`` and the retained payload exceeds it;
- ``retention_ms == 0`` and it is finished (acked, or dead and forgotten):
  the log is then a queue that compacts itself as consumers ack.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

from raft_queue.core import dedup
from raft_queue.core.delivery import mature, release_group
from raft_queue.core.records import Head, head
from raft_queue.core.results import ExpireResult
from raft_queue.core.state import DEAD, RECORDS, Status, View, int_of, u64

# Records one Expire removes at most (bounds its latency; the next Expire
# continues), and dead offsets one Expire lists at most.
TRIM_LIMIT = 100_000
DEAD_LIST_LIMIT = 1_000

Doomed = Callable[[View, int, Head, int], bool]


def expire(view: View) -> ExpireResult:
    """End due leases, trim the front by policy, expire dedup entries, and
    list dead records (repeatedly, until ForgetDead: at-least-once to the DLQ)."""
    mature(view)
    removed = _trim(view, _by_policy, TRIM_LIMIT)
    dedup.expire(view)
    dead = tuple(int_of(k) for k, _ in islice(view.txn.scan(DEAD), DEAD_LIST_LIMIT))
    return ExpireResult(removed, dead)


def purge(view: View) -> int:
    """Remove every record (dead ones too); dedup entries stay for their window."""
    return _trim(view, lambda _view, _offset, _head, _size: True, None)


def forget_dead(view: View, offsets: tuple[int, ...]) -> int:
    """The leader forwarded these dead records; they become finished."""
    c, forgotten = view.c, 0
    for offset in offsets:
        d = view.delivery(offset) if c.earliest <= offset < c.cursor else None
        if d is not None and d.status == Status.DEAD:
            view.set_delivery(offset, None, d)
            c.done += 1
            forgotten += 1
    return forgotten


def _by_policy(view: View, offset: int, rec: Head, retained_bytes: int) -> bool:
    cfg = view.cfg
    if cfg.retention_ms and view.now - rec.timestamp_ms >= cfg.retention_ms:
        return True
    if cfg.retention_bytes and retained_bytes > cfg.retention_bytes:
        return True
    return cfg.retention_ms == 0 and offset < view.c.cursor and view.delivery(offset) is None


def _trim(view: View, doomed: Doomed, limit: int | None) -> int:
    """Remove records from the front while ``doomed`` says so; the count."""
    retained = view.c.stored_bytes
    victims: list[tuple[int, Head, int]] = []
    for raw_key, value in islice(view.txn.scan(RECORDS, u64(view.c.earliest)), limit):
        offset, rec = int_of(raw_key), head(value)
        if not doomed(view, offset, rec, retained):
            break
        victims.append((offset, rec, len(value)))
        retained -= len(value)
    for offset, rec, size in victims:
        _remove(view, offset, rec, size)
    return len(victims)


def _remove(view: View, offset: int, rec: Head, size: int) -> None:
    """Drop the front record with its delivery state, keeping its dedup entry."""
    c = view.c
    if offset < c.cursor:
        old = view.delivery(offset)
        if old is None:
            c.done -= 1
        else:
            view.set_delivery(offset, None, old, rec.key)
            release_group(view, offset, rec.key)
    dedup.preserve(view, rec.dedup_id, offset, rec.timestamp_ms)
    c.stored_bytes -= size
    view.txn.delete(RECORDS, u64(offset))
    c.earliest = offset + 1
    c.cursor = max(c.cursor, c.earliest)
