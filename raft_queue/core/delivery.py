"""Leases: who may see which record when (SQS semantics on the log).

A record's life: untouched (at or after the cursor) -> LEASED -> finished
(acked), with detours through READY (lease expired or nacked), WAITING (nack
delay, or its own delay when Lease first reached it), BLOCKED (FIFO: its key
already has a head) and DEAD (its last allowed lease ended). Lease takes READY
records first, then advances the cursor; READY offsets are all below the
cursor, so that is offset order. States are kept per run of records
(``runs``): a Lease of a visible span from the cursor, and the Ack of its
receipts, are one row each.

FIFO (``ordering="fifo"``): each non-empty key has at most one head, the
lowest unfinished record of the key Lease has reached (table ``fifo``); only
the head is ever leased. Later records of the key wait in ``blocked`` and the
next one becomes head when the head is acked, dies or is removed. Only
segments holding keys (``segments.HAS_KEY``) are walked record by record.

Every command that carries time first runs ``mature``: deadlines at or before
``now`` end, so the outcome of a command depends only on the command sequence,
never on how often Expire ran.
"""

from __future__ import annotations

from itertools import islice

from raft_queue.core import runs
from raft_queue.core.results import LeasedSpan, LeaseResult
from raft_queue.core.segments import HAS_KEY, Segment, segments_from
from raft_queue.core.state import (
    BLOCKED,
    DELIVERY,
    FIFO,
    NEVER_LEASED,
    READY,
    RECORDS,
    TIMERS,
    Run,
    Status,
    View,
    blocked_prefix,
    int_of,
    lease_event,
    pair_key,
    table_key,
    u64,
    unpack_pair,
)
from raft_queue.core.wire import U64_MAX

# Records one Lease may set aside (delayed or blocked) before it gives up for
# this call: bounds the latency of a single apply.
SET_ASIDE_LIMIT = 10_000


def later(now: int, ms: int) -> int:
    return min(now + ms, U64_MAX)


def mature(view: View) -> None:
    """End every timer due: an expired lease (deadline <= ``now``) makes the
    run READY, or DEAD once it has used ``max_receives`` leases; a wait
    (visible-at <= ``clock``) ends READY.

    Waits and delays are measured on ``clock``, which never goes back: a
    record that became visible stays visible when a new leader's clock lags,
    whether or not a Lease had already set it aside. Leases use ``now``.
    """
    clock = view.c.clock
    stop = None if clock >= U64_MAX else pair_key(clock + 1, 0)
    for key, status in list(view.txn.scan(TIMERS, b"", stop)):
        at_ms, start = unpack_pair(key)
        leased = status[0] == Status.LEASED
        raw = view.txn.get(DELIVERY, u64(start))
        if raw is None or (leased and at_ms > view.now):
            continue
        run = Run.unpack(raw)
        end = start + run.length
        if leased and exhausted(view, run):
            kill(view, start, run, start, end)
        else:
            runs.reshape(view, start, run, start, end, run.becomes(Status.READY))


def exhausted(view: View, run: Run) -> bool:
    limit = view.cfg.max_receives
    return limit > 0 and run.receive_count >= limit


def kill(view: View, start: int, run: Run, lo: int, hi: int) -> None:
    """Records [lo, hi) of the run: out of delivery; listed by Expire until ForgetDead."""
    runs.reshape(view, start, run, lo, hi, run.becomes(Status.DEAD))
    release_range(view, lo, hi)


class _Grant:
    """What one Lease gives, and the spans it has leased so far."""

    __slots__ = ("deadline_ms", "event", "want", "spans")

    def __init__(self, deadline_ms: int, event: bytes, want: int) -> None:
        self.deadline_ms = deadline_ms
        self.event = event  # the history entry (now, consumer, deadline)
        self.want = want  # records still to lease
        self.spans: list[LeasedSpan] = []

    def take(self, seg: Segment, lo: int, hi: int, new: Run) -> None:
        """Records [lo, hi) of ``seg`` are leased with ``new``'s epoch."""
        if hi > lo:
            self.spans.append(
                LeasedSpan(
                    seg.value, seg.base, lo, hi - lo, new.epoch, new.receive_count, new.at_ms
                )
            )
            self.want -= hi - lo


def lease(view: View, max_records: int, visibility_ms: int, consumer: str) -> LeaseResult:
    """Up to ``max_records`` visible records in offset order, leased until
    ``now + visibility_ms`` (0: the partition's visibility timeout)."""
    mature(view)
    deadline = later(view.now, visibility_ms or view.cfg.visibility_timeout_ms)
    grant = _Grant(deadline, lease_event(view.now, consumer, deadline), max_records)
    _lease_ready(view, grant)
    if grant.want > 0:
        _lease_from_cursor(view, grant)
    return LeaseResult(tuple(grant.spans))


def _lease_ready(view: View, grant: _Grant) -> None:
    # Slack: in FIFO, READY records that are not their key's head (only after
    # a switch from "none") are skipped and stay READY.
    starts = [int_of(k) for k, _ in islice(view.txn.scan(READY), grant.want + 64)]
    for start in starts:
        if grant.want <= 0:
            return
        raw = view.txn.get(DELIVERY, u64(start))
        if raw is None:
            continue
        run = Run.unpack(raw)
        if run.status != Status.READY:
            continue
        new = run.leased(grant.deadline_ms, grant.event)
        for seg, lo, hi in _leasable(view, start, start + run.length, grant.want):
            held = runs.at(view, lo)
            if held is not None:  # always: [lo, hi) is still READY in one run
                runs.reshape(view, held[0], held[1], lo, hi, new)
                grant.take(seg, lo, hi, new)


def _leasable(view: View, lo: int, hi: int, want: int) -> list[tuple[Segment, int, int]]:
    """The first ``want`` records of READY [lo, hi) that may be leased, as
    (segment, lo, hi) pieces: all of them, except in FIFO the records that
    are not their key's head (a key without a head gets this one)."""
    out: list[tuple[Segment, int, int]] = []
    for seg in segments_from(view.txn, RECORDS, lo):
        if want <= 0 or seg.base >= hi:
            break
        a, b = max(lo, seg.base), min(hi, seg.end)
        if not (view.fifo and seg.flags & HAS_KEY):
            b = min(b, a + want)
            out.append((seg, a, b))
            want -= b - a
            continue
        piece = a
        for offset in range(a, b):
            if not _may_lead(view, seg.head(offset - seg.base).key, offset):
                if offset > piece:
                    out.append((seg, piece, offset))
                piece = offset + 1
                continue
            want -= 1
            if want == 0:
                out.append((seg, piece, offset + 1))
                return out
        if b > piece:
            out.append((seg, piece, b))
    return out


def _may_lead(view: View, key: bytes, offset: int) -> bool:
    """Whether READY ``offset`` may be leased in FIFO: it has no key, or it
    is its key's head, or the key has none (then it becomes the head)."""
    if not key:
        return True
    holder = view.txn.get(FIFO, table_key(key))
    if holder is None:
        view.txn.put(FIFO, table_key(key), u64(offset))
        return True
    return int_of(holder) == offset


class _Walk:
    """The cursor walk of one Lease: the span of first leases in progress."""

    __slots__ = ("view", "grant", "first", "span_lo", "span_hi", "set_aside")

    def __init__(self, view: View, grant: _Grant) -> None:
        self.view, self.grant = view, grant
        self.first = NEVER_LEASED.leased(grant.deadline_ms, grant.event)
        self.span_lo = self.span_hi = -1
        self.set_aside = 0

    def lease(self, seg: Segment, lo: int, hi: int) -> None:
        """First leases of [lo, hi): one run with the span before it."""
        if self.span_hi != lo:
            self.flush()
            self.span_lo = lo
        self.span_hi = hi
        self.grant.take(seg, lo, hi, self.first)

    def flush(self) -> None:
        if self.span_hi > self.span_lo:
            runs.place(
                self.view, self.span_lo, self.first._replace(length=self.span_hi - self.span_lo)
            )
        self.span_lo = self.span_hi = -1

    def busy(self) -> bool:
        return self.grant.want <= 0 or self.set_aside >= SET_ASIDE_LIMIT


def _lease_from_cursor(view: View, grant: _Grant) -> None:
    """Walk untouched records from the cursor: lease the visible ones, set
    aside the blocked and the individually delayed. A record held back only by
    the queue's delay stops the walk: timestamps never decrease, so no later
    record can be visible yet. A segment is taken whole (one step, however
    many records) unless it has FIFO keys or delays beyond the queue's."""
    c, queue_delay = view.c, view.cfg.delay_ms
    walk = _Walk(view, grant)
    for seg in segments_from(view.txn, RECORDS, c.cursor):
        if walk.busy():
            break
        if (view.fifo and seg.flags & HAS_KEY) or seg.max_delay_ms > queue_delay:
            if not _walk_records(view, walk, seg):
                break
            continue
        if queue_delay and seg.timestamp_ms + queue_delay > c.clock:
            break
        hi = min(seg.end, c.cursor + grant.want)
        walk.lease(seg, c.cursor, hi)
        c.cursor = hi
    walk.flush()


def _walk_records(view: View, walk: _Walk, seg: Segment) -> bool:
    """``_lease_from_cursor`` one record at a time through ``seg``; False
    when a record held back by the queue's delay stops the walk."""
    c, queue_delay = view.c, view.cfg.delay_ms
    for offset in range(c.cursor, seg.end):
        if walk.busy():
            return True
        head = seg.head(offset - seg.base)
        grouped = view.fifo and head.key != b""
        if grouped and view.txn.get(FIFO, table_key(head.key)) is not None:
            walk.flush()
            runs.put(view, offset, Run(Status.BLOCKED, 0, 0, 0, 1), head.key)
            walk.set_aside += 1
        else:
            delay = max(head.delay_ms, queue_delay)
            visible_at = seg.timestamp_ms + delay
            if delay and visible_at > c.clock:
                if head.delay_ms <= queue_delay:
                    return False
                walk.flush()
                runs.place(view, offset, Run(Status.WAITING, 0, 0, visible_at, 1))
                walk.set_aside += 1
            else:
                walk.lease(seg, offset, offset + 1)
            if grouped:
                view.txn.put(FIFO, table_key(head.key), u64(offset))
        c.cursor = offset + 1
    return True


def release_range(view: View, lo: int, hi: int) -> None:
    """Records [lo, hi) are finished, dead or gone: each that was its key's
    head passes the key on. Only segments with keys are looked into."""
    if not view.fifo:
        return
    for seg in segments_from(view.txn, RECORDS, lo):
        if seg.base >= hi:
            break
        if seg.flags & HAS_KEY:
            for offset in range(max(lo, seg.base), min(hi, seg.end)):
                key = seg.head(offset - seg.base).key
                if key:
                    release_group(view, offset, key)


def release_group(view: View, offset: int, key: bytes) -> None:
    """``offset`` (of message key ``key``) is finished, dead or gone: if it
    was its key's head, the key's next blocked record becomes head."""
    holder = view.txn.get(FIFO, table_key(key))
    if holder is None or int_of(holder) != offset:
        return
    prefix = blocked_prefix(key)
    nxt = next(view.txn.scan(BLOCKED, prefix, prefix + b"\xff" * 9), None)
    if nxt is None:
        view.txn.delete(FIFO, table_key(key))
        return
    successor = int_of(nxt[0][-8:])
    view.txn.put(FIFO, table_key(key), u64(successor))
    _promote(view, successor, key)


def _promote(view: View, offset: int, key: bytes) -> None:
    """A BLOCKED record became its key's head: READY, or WAITING out its delay."""
    held = runs.at(view, offset)
    seg = next(segments_from(view.txn, RECORDS, offset), None)
    if held is None or seg is None:
        return
    head = seg.head(offset - seg.base)
    delay = max(head.delay_ms, view.cfg.delay_ms)
    visible_at = seg.timestamp_ms + delay
    start, run = held
    if delay and visible_at > view.c.clock:
        new = run.becomes(Status.WAITING, visible_at)
    else:
        new = run.becomes(Status.READY)
    runs.drop(view, start, run, key)
    runs.place(view, offset, new)


def unblock_all(view: View) -> None:
    """Ordering changed from fifo to none: no record waits for its key."""
    for blocked_key, _ in list(view.txn.scan(BLOCKED)):
        offset = int_of(blocked_key[-8:])
        _promote(view, offset, runs.record_key(view, offset))
    for fifo_key, _ in list(view.txn.scan(FIFO)):
        view.txn.delete(FIFO, fifo_key)
