"""Delivery runs: a range of records changes state as one row.

Every change of delivery state goes through here, which keeps ``delivery``
(start -> ``Run``), its index tables (``timers``, ``ready``, ``blocked``,
``dead``, one row per run) and the counters (records per status) in step.

Invariants: runs never overlap and lie in ``[earliest, cursor)``; a BLOCKED
run holds one record (its ``blocked`` row names its key). A run splits when
part of it changes (``reshape``), and a run that takes a new state merges
with neighbours of exactly that state (``place``), so a span leased together
and settled together stays one row. Offsets and states are all this looks
at: the same commands give the same runs on every replica.
"""

from __future__ import annotations

from raft_queue.core.segments import segment_at
from raft_queue.core.state import (
    BLOCKED,
    DEAD,
    DELIVERY,
    READY,
    RECORDS,
    STATUS_COUNTER,
    TIMERS,
    Run,
    Status,
    View,
    blocked_prefix,
    int_of,
    pair_key,
    u64,
)
from raft_queue.core.wire import U64_MAX

_TIMED = (Status.LEASED, Status.WAITING)


def at(view: View, offset: int) -> tuple[int, Run] | None:
    """(start, run) of the run holding ``offset``; None if no run does."""
    item = view.txn.floor(DELIVERY, u64(offset))
    if item is None:
        return None
    start, run = int_of(item[0]), Run.unpack(item[1])
    return (start, run) if offset < start + run.length else None


def overlapping(view: View, lo: int, hi: int) -> list[tuple[int, Run]]:
    """(start, run) of every run holding an offset of ``[lo, hi)``, ascending."""
    out = []
    first = at(view, lo)
    if first is not None and first[0] < lo:
        out.append(first)
    stop = u64(hi) if hi <= U64_MAX else None
    for key, value in view.txn.scan(DELIVERY, u64(lo), stop):
        out.append((int_of(key), Run.unpack(value)))
    return out


def record_key(view: View, offset: int) -> bytes:
    """The message key (UTF-8) of retained record ``offset``."""
    seg = segment_at(view.txn, RECORDS, offset)
    return b"" if seg is None or offset >= seg.end else seg.head(offset - seg.base).key


def put(view: View, start: int, run: Run, key: bytes | None = None) -> None:
    """Store ``run`` at ``start`` and index it (no merging). ``key``: the
    record's key, for a BLOCKED run (read from the log if not given)."""
    txn, status = view.txn, run.status
    if status in _TIMED:
        txn.put(TIMERS, pair_key(run.at_ms, start), bytes((status,)))
    elif status == Status.READY:
        txn.put(READY, u64(start), b"")
    elif status == Status.BLOCKED:
        txn.put(BLOCKED, _blocked_key(view, start, key), b"")
    elif status == Status.DEAD:
        txn.put(DEAD, u64(start), b"")
    name = STATUS_COUNTER.get(status)
    if name is not None:
        setattr(view.c, name, getattr(view.c, name) + run.length)
    txn.put(DELIVERY, u64(start), run.pack())


def drop(view: View, start: int, run: Run, key: bytes | None = None) -> None:
    """Remove the run at ``start`` and its index rows (``key`` as for ``put``)."""
    txn, status = view.txn, run.status
    if status in _TIMED:
        txn.delete(TIMERS, pair_key(run.at_ms, start))
    elif status == Status.READY:
        txn.delete(READY, u64(start))
    elif status == Status.BLOCKED:
        txn.delete(BLOCKED, _blocked_key(view, start, key))
    elif status == Status.DEAD:
        txn.delete(DEAD, u64(start))
    name = STATUS_COUNTER.get(status)
    if name is not None:
        setattr(view.c, name, getattr(view.c, name) - run.length)
    txn.delete(DELIVERY, u64(start))


def _blocked_key(view: View, offset: int, key: bytes | None) -> bytes:
    return blocked_prefix(record_key(view, offset) if key is None else key) + u64(offset)


def _mergeable(a: Run, b: Run) -> bool:
    return a.status != Status.BLOCKED and b.status != Status.BLOCKED and a.same_state(b)


def place(view: View, start: int, run: Run) -> None:
    """``put``, merged with a neighbour run that ends at ``start`` or begins
    right after, if it has the same state."""
    if run.status != Status.BLOCKED:
        end = start + run.length
        if start:
            left = view.txn.floor(DELIVERY, u64(start - 1))
            if left is not None:
                left_start, left_run = int_of(left[0]), Run.unpack(left[1])
                if left_start + left_run.length == start and _mergeable(left_run, run):
                    drop(view, left_start, left_run)
                    start, run = left_start, run._replace(length=run.length + left_run.length)
        raw = view.txn.get(DELIVERY, u64(end))
        if raw is not None:
            right = Run.unpack(raw)
            if _mergeable(right, run):
                drop(view, end, right)
                run = run._replace(length=run.length + right.length)
    put(view, start, run)


def reshape(view: View, start: int, run: Run, lo: int, hi: int, new: Run | None) -> None:
    """Records ``[lo, hi)`` of the run at ``start`` (inside it) take state
    ``new`` (its count is ignored; None: finished, in no run); the rest of
    the run keeps its state as up to two runs."""
    end = start + run.length
    drop(view, start, run)
    if start < lo:
        put(view, start, run._replace(length=lo - start))
    if hi < end:
        put(view, hi, run._replace(length=end - hi))
    if new is not None:
        place(view, lo, new._replace(length=hi - lo))
