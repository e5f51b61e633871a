"""Read-only questions about a partition, answered from one read txn.

They run on any thread (the server's read path), never change the tables,
and take time only as an argument, like ``apply``.
"""

from __future__ import annotations

from itertools import islice

from raft_queue.core.commands import PartitionConfig
from raft_queue.core.kv import KVTxn
from raft_queue.core.records import StoredRecord
from raft_queue.core.results import History, LeaseEvent, PartitionStats, ReadResult
from raft_queue.core.segments import Segment, segment_at, segments_from
from raft_queue.core.state import (
    DELIVERY,
    RECORDS,
    TIMERS,
    Counters,
    Run,
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
# Dead runs ahead of the oldest unfinished record that ``stats`` will skip.
_DEAD_SKIP_LIMIT = 1_000


def read(txn: KVTxn, offset: int, max_records: int, max_bytes: int | None = None) -> ReadResult:
    """Retained records from ``offset`` on (see ``PartitionMachine.read``)."""
    c = load_counters(txn)
    records: list[StoredRecord] = []
    if c.earliest <= offset < c.next_offset and max_records > 0:
        _collect(txn, offset, max_records, max_bytes, records)
    next_offset = records[-1].offset + 1 if records else offset
    return ReadResult(tuple(records), next_offset, c.earliest, c.next_offset)


def _collect(
    txn: KVTxn, offset: int, max_records: int, max_bytes: int | None, out: list[StoredRecord]
) -> None:
    total = 0
    for seg in segments_from(txn, RECORDS, offset):
        i = max(offset, seg.base) - seg.base
        for rec in seg.records(i, min(seg.count, i + max_records - len(out))):
            total += len(rec.body)
            if out and max_bytes is not None and total > max_bytes:
                return
            out.append(rec)
        if len(out) >= max_records:
            return


def segments(txn: KVTxn, offset: int, end: int) -> list[Segment]:
    """The segments holding offsets [offset, end), in order (see ``read``)."""
    out = []
    for seg in segments_from(txn, RECORDS, offset):
        if seg.base >= end:
            break
        out.append(seg)
    return out


def stats(txn: KVTxn, now_ms: int) -> PartitionStats:
    """Counters as of ``now_ms`` (leases and waits already due count as ended;
    records Lease has not reached count as messages, not delayed, even if
    their delay has not passed)."""
    c = load_counters(txn)
    cfg = load_config(txn)
    ended, waited, died = _due_timers(txn, cfg, now_ms)
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
        sealed=cfg.sealed,
        fenced=cfg.fenced,
    )


def _due_timers(txn: KVTxn, cfg: PartitionConfig, now_ms: int) -> tuple[int, int, int]:
    """Timers due by ``now_ms`` that no command has processed yet: (leases
    ended, waits ended, leases ended that kill their record)."""
    ended = waited = died = 0
    stop = None if now_ms >= U64_MAX else pair_key(now_ms + 1, 0)
    for key, status in txn.scan(TIMERS, b"", stop):
        raw = txn.get(DELIVERY, key[8:])
        if raw is None:
            continue
        run = Run.unpack(raw)
        if status[0] != Status.LEASED:
            waited += run.length
            continue
        ended += run.length
        if cfg.max_receives and run.receive_count >= cfg.max_receives:
            died += run.length
    return ended, waited, died


def _oldest_timestamp(txn: KVTxn, c: Counters) -> int:
    """Timestamp of the lowest offset neither finished nor dead: the start of
    the first run that is not DEAD, or else the cursor's record."""
    oldest = c.cursor if c.cursor < c.next_offset else None
    for key, value in islice(txn.scan(DELIVERY), _DEAD_SKIP_LIMIT):
        if value[0] != Status.DEAD:
            oldest = int_of(key)
            break
    seg = None if oldest is None else segment_at(txn, RECORDS, oldest)
    return 0 if seg is None else seg.timestamp_ms


def history(txn: KVTxn, offset: int) -> History | None:
    """State, receive count and recent leases of a retained record; None if
    ``offset`` is not retained. A finished record has no history left."""
    c = load_counters(txn)
    if not c.earliest <= offset < c.next_offset:
        return None
    if offset >= c.cursor:  # not reached by Lease yet: its own send delay may be pending
        seg = segment_at(txn, RECORDS, offset)
        own = seg.head(offset - seg.base).delay_ms if seg is not None else 0
        return History("queued", 0, (), at_ms=seg.timestamp_ms + own if own and seg else 0)
    item = txn.floor(DELIVERY, u64(offset))
    run = Run.unpack(item[1]) if item is not None else None
    if item is None or run is None or offset >= int_of(item[0]) + run.length:
        return History("done", 0, ())  # in no run: finished
    events = tuple(LeaseEvent(*event) for event in lease_events(run.history))
    return History(_STATE_NAMES[run.status], run.receive_count, events, run.epoch, run.at_ms)


def next_due_ms(txn: KVTxn) -> int | None:
    """When something next becomes visible (a lease ends, a wait ends, or the
    delay of the record Lease stopped at passes), so a long poll can sleep
    until then; None if nothing is scheduled."""
    first = next(txn.scan(TIMERS), None)
    due = None if first is None else int_of(first[0][:8])
    c = load_counters(txn)
    seg = segment_at(txn, RECORDS, c.cursor) if c.cursor < c.next_offset else None
    if seg is not None:
        delay = max(seg.head(c.cursor - seg.base).delay_ms, load_config(txn).delay_ms)
        if delay:
            at = seg.timestamp_ms + delay
            due = at if due is None else min(due, at)
    return due
