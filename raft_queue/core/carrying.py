"""Apply a move's CarryLeases (``core/lease_carry.py`` says what it means)."""

from __future__ import annotations

from raft_queue.core import runs
from raft_queue.core.delivery import mature
from raft_queue.core.lease_carry import CARRIED_BY, CARRIED_EPOCH, CarriedLease
from raft_queue.core.segments import segments_from
from raft_queue.core.state import FIFO, RECORDS, Run, Status, View, lease_event, table_key, u64


def carry(view: View, leases: tuple[CarriedLease, ...]) -> int:
    """Apply CarryLeases; how many leases were placed."""
    mature(view)
    c = view.c
    wanted = {x.offset: x for x in leases if c.cursor <= x.offset < c.next_offset}
    if not wanted:
        return 0
    end = max(wanted) + 1
    for seg in segments_from(view.txn, RECORDS, c.cursor):
        if seg.base >= end:
            break
        for offset in range(max(c.cursor, seg.base), min(seg.end, end)):
            head = seg.head(offset - seg.base)
            lease = wanted.get(offset)
            if lease is not None:
                _lease(view, offset, lease, head.key)
            else:
                delay = max(head.delay_ms, view.cfg.delay_ms)
                _set_aside(view, offset, head.key, seg.timestamp_ms + delay if delay else 0)
        c.cursor = min(seg.end, end)
    return len(wanted)


def _lease(view: View, offset: int, lease: CarriedLease, key: bytes) -> None:
    event = lease_event(view.now, CARRIED_BY, lease.deadline_ms)
    run = Run(Status.LEASED, CARRIED_EPOCH, lease.receive_count, lease.deadline_ms, 1, event)
    runs.place(view, offset, run)
    if view.fifo and key and view.txn.get(FIFO, table_key(key)) is None:
        view.txn.put(FIFO, table_key(key), u64(offset))


def _set_aside(view: View, offset: int, key: bytes, visible_at: int) -> None:
    """As a Lease walk leaves a record it does not lease (``delivery``);
    ``visible_at``: 0 when the record has no delay."""
    grouped = view.fifo and key != b""
    if grouped and view.txn.get(FIFO, table_key(key)) is not None:
        runs.put(view, offset, Run(Status.BLOCKED, 0, 0, 0, 1), key)
        return
    if visible_at > view.c.clock:
        runs.place(view, offset, Run(Status.WAITING, 0, 0, visible_at, 1))
    else:
        runs.place(view, offset, Run(Status.READY, 0, 0, 0, 1))
    if grouped:
        view.txn.put(FIFO, table_key(key), u64(offset))
