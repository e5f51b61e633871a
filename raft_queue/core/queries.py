"""Read-only questions about a partition, answered from one read txn.

They run on any thread (the server's read path), never change the tables,
and take time only as an argument, like ``apply``.
"""

from __future__ import annotations

from itertools import islice

from raft_queue.core.commands import PartitionConfig
from raft_queue.core.kv import KVTxn
from raft_queue.core.records import head
from raft_queue.core.results import History, LeaseEvent, PartitionStats
from raft_queue.core.state import (
    DELIVERY,
    RECORDS,
    TIMERS,
    Counters,
    Delivery,
    Status,
    int_of,
    lease_events,
    load_config,
    load_counters,
    pair_key,
    u64,
)
from raft_queue.core.wire import U64_MAX

_STATE_NAMES = {
    Status.LEASED: "in_flight",
    Status.WAITING: "delayed",
    Status.READY: "queued",
    Status.BLOCKED: "blocked",
    Status.DEAD: "dead",
}
# Dead records ahead of the oldest unfinished one that ``stats`` will skip.
_DEAD_SKIP_LIMIT = 1_000


def stats(txn: KVTxn, now_ms: int) -> PartitionStats:
    """Counters as of ``now_ms`` (leases and waits already due count as ended;
    records Lease has not reached count as messages, not delayed, even if
    their delay has not passed)."""
    c = load_counters(txn)
    ended, waited, died = _due_timers(txn, load_config(txn), now_ms)
    dead = c.dead + died
    return PartitionStats(
        earliest_offset=c.earliest,
        latest_offset=c.next_offset,
        messages=c.next_offset - c.earliest - c.done - dead,
        in_flight=c.leased - ended,
        delayed=c.waiting - waited,
        dead=dead,
        bytes=c.stored_bytes,
        oldest_timestamp_ms=_oldest_timestamp(txn, c),
    )


def _due_timers(txn: KVTxn, cfg: PartitionConfig, now_ms: int) -> tuple[int, int, int]:
    """Timers due by ``now_ms`` that no command has processed yet: (leases
    ended, waits ended, leases ended that kill their record)."""
    ended = waited = died = 0
    stop = None if now_ms >= U64_MAX else pair_key(now_ms + 1, 0)
    for key, status in txn.scan(TIMERS, b"", stop):
        if status[0] != Status.LEASED:
            waited += 1
            continue
        ended += 1
        raw = txn.get(DELIVERY, key[8:])
        if cfg.max_receives and raw and Delivery.unpack(raw).receive_count >= cfg.max_receives:
            died += 1
    return ended, waited, died


def _oldest_timestamp(txn: KVTxn, c: Counters) -> int:
    """Timestamp of the lowest offset neither finished nor dead: the first
    delivery entry that is not DEAD, or else the cursor's record."""
    oldest = c.cursor if c.cursor < c.next_offset else None
    for key, value in islice(txn.scan(DELIVERY), _DEAD_SKIP_LIMIT):
        if value[0] != Status.DEAD:
            oldest = int_of(key)
            break
    raw = None if oldest is None else txn.get(RECORDS, u64(oldest))
    return 0 if raw is None else head(raw).timestamp_ms


def history(txn: KVTxn, offset: int) -> History | None:
    """State, receive count and recent leases of a retained record; None if
    ``offset`` is not retained. A finished record has no history left."""
    c = load_counters(txn)
    if not c.earliest <= offset < c.next_offset:
        return None
    if offset >= c.cursor:
        return History("queued", 0, ())
    raw = txn.get(DELIVERY, u64(offset))
    if raw is None:
        return History("done", 0, ())
    d = Delivery.unpack(raw)
    events = tuple(LeaseEvent(*event) for event in lease_events(d.history))
    return History(_STATE_NAMES[d.status], d.receive_count, events)


def next_due_ms(txn: KVTxn) -> int | None:
    """When something next becomes visible (a lease ends, a wait ends, or the
    delay of the record Lease stopped at passes), so a long poll can sleep
    until then; None if nothing is scheduled."""
    first = next(txn.scan(TIMERS), None)
    due = None if first is None else int_of(first[0][:8])
    c = load_counters(txn)
    raw = txn.get(RECORDS, u64(c.cursor)) if c.cursor < c.next_offset else None
    if raw is not None:
        rec = head(raw)
        delay = max(rec.delay_ms, load_config(txn).delay_ms)
        if delay:
            at = rec.timestamp_ms + delay
            due = at if due is None else min(due, at)
    return due
