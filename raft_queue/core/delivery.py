"""Leases: who may see which record when (SQS semantics on the log).

A record's life: untouched (at or after the cursor) -> LEASED -> finished
(acked), with detours through READY (lease expired or nacked), WAITING (nack
delay, or its own delay when Lease first reached it), BLOCKED (FIFO: its key
already has a head) and DEAD (its last allowed lease ended). Lease takes READY
records first, then advances the cursor; READY offsets are all below the
cursor, so that is offset order.

FIFO (``ordering="fifo"``): each non-empty key has at most one head, the
lowest unfinished record of the key Lease has reached (table ``fifo``); only
the head is ever leased. Later records of the key wait in ``blocked`` and the
next one becomes head when the head is acked, dies or is removed.

Every command that carries time first runs ``mature``: deadlines at or before
``now`` end, so the outcome of a command depends only on the command sequence,
never on how often Expire ran.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import NamedTuple

from raft_queue.core.commands import ReceiptRef
from raft_queue.core.records import decode_value, head
from raft_queue.core.results import NOT_FOUND, OK, STALE, LeasedMessage
from raft_queue.core.state import (
    BLOCKED,
    DELIVERY,
    FIFO,
    NEVER_LEASED,
    READY,
    RECORDS,
    TIMERS,
    Delivery,
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
    record READY, or DEAD once it has used ``max_receives`` leases; a wait
    (visible-at <= ``clock``) ends READY.

    Waits and delays are measured on ``clock``, which never goes back: a
    record that became visible stays visible when a new leader's clock lags,
    whether or not a Lease had already set it aside. Leases use ``now``.
    """
    clock = view.c.clock
    stop = None if clock >= U64_MAX else pair_key(clock + 1, 0)
    for key, status in list(view.txn.scan(TIMERS, b"", stop)):
        at_ms, offset = unpack_pair(key)
        leased = status[0] == Status.LEASED
        old = view.delivery(offset)
        if old is None or (leased and at_ms > view.now):
            continue
        if leased and _exhausted(view, old):
            kill(view, offset, old)
        else:
            view.set_delivery(offset, old._replace(status=Status.READY, at_ms=0), old)


def _exhausted(view: View, d: Delivery) -> bool:
    limit = view.cfg.max_receives
    return limit > 0 and d.receive_count >= limit


def kill(view: View, offset: int, old: Delivery) -> None:
    """Out of delivery; listed by Expire until ForgetDead."""
    view.set_delivery(offset, old._replace(status=Status.DEAD, at_ms=0), old)
    release_group(view, offset)


class _Grant(NamedTuple):
    """What one Lease gives every record it takes."""

    deadline_ms: int
    event: bytes  # the history entry (now, consumer, deadline)
    first: bytes  # the packed Delivery of a record's first lease (the same for all)


def lease(
    view: View, max_records: int, visibility_ms: int, consumer: str
) -> tuple[LeasedMessage, ...]:
    """Up to ``max_records`` visible records in offset order, leased until
    ``now + visibility_ms`` (0: the partition's visibility timeout)."""
    mature(view)
    deadline = later(view.now, visibility_ms or view.cfg.visibility_timeout_ms)
    event = lease_event(view.now, consumer, deadline)
    grant = _Grant(deadline, event, NEVER_LEASED.leased(deadline, event).pack())
    out: list[LeasedMessage] = []
    _lease_ready(view, max_records, grant, out)
    if len(out) < max_records:
        _lease_from_cursor(view, max_records, grant, out)
    return tuple(out)


def _grant(
    view: View,
    offset: int,
    value: bytes,
    old: Delivery | None,
    grant: _Grant,
    out: list[LeasedMessage],
) -> None:
    new = (old or NEVER_LEASED).leased(grant.deadline_ms, grant.event)
    view.set_delivery(offset, new, old)
    out.append(LeasedMessage(decode_value(offset, value), new.epoch, new.receive_count, new.at_ms))


def _lease_ready(view: View, max_records: int, grant: _Grant, out: list[LeasedMessage]) -> None:
    # Slack: in FIFO, READY records that are not their key's head (only after
    # a switch from "none") are skipped and stay READY.
    scan = islice(view.txn.scan(READY), max_records + 64)
    for offset in [int_of(k) for k, _ in scan]:
        if len(out) >= max_records:
            return
        value = view.txn.get(RECORDS, u64(offset))
        if value is None:
            continue
        key = head(value).key if view.fifo else b""
        if key:
            holder = view.txn.get(FIFO, table_key(key))
            if holder is None:
                view.txn.put(FIFO, table_key(key), u64(offset))
            elif int_of(holder) != offset:
                continue
        _grant(view, offset, value, view.delivery(offset), grant, out)


def _lease_from_cursor(
    view: View, max_records: int, grant: _Grant, out: list[LeasedMessage]
) -> None:
    """Walk untouched records from the cursor: lease the visible ones, set
    aside the blocked and the individually delayed. A record held back only by
    the queue's delay stops the walk: timestamps never decrease, so no later
    record can be visible yet.

    A first lease (the bulk of a drain) is written as ``_grant`` would write
    it, but its delivery value is the same for every record, and the rows go
    to ``timers`` and ``delivery`` in one ``put_many`` each after the walk."""
    c, queue_delay, set_aside = view.c, view.cfg.delay_ms, 0
    deadline, first = grant.deadline_ms, grant.first
    timer_value = bytes((Status.LEASED,))
    timers: list[tuple[bytes, bytes]] = []
    deliveries: list[tuple[bytes, bytes]] = []
    for raw_key, value in view.txn.scan(RECORDS, u64(c.cursor)):
        if len(out) >= max_records or set_aside >= SET_ASIDE_LIMIT:
            break
        offset, rec = int_of(raw_key), head(value)
        grouped = view.fifo and rec.key != b""
        if grouped and view.txn.get(FIFO, table_key(rec.key)) is not None:
            view.set_delivery(offset, Delivery(Status.BLOCKED, 0, 0, 0), None, rec.key)
            set_aside += 1
        else:
            delay = max(rec.delay_ms, queue_delay)
            visible_at = rec.timestamp_ms + delay
            if delay and visible_at > c.clock:
                if rec.delay_ms <= queue_delay:
                    break
                view.set_delivery(offset, Delivery(Status.WAITING, 0, 0, visible_at), None)
                set_aside += 1
            else:  # == _grant(view, offset, value, None, grant, out)
                timers.append((pair_key(deadline, offset), timer_value))
                deliveries.append((raw_key, first))
                out.append(LeasedMessage(decode_value(offset, value), 1, 1, deadline))
            if grouped:
                view.txn.put(FIFO, table_key(rec.key), u64(offset))
        c.cursor = offset + 1
    if timers:
        view.txn.put_many(TIMERS, timers)
        view.txn.put_many(DELIVERY, deliveries)
        c.leased += len(timers)


def release_group(view: View, offset: int, key: bytes | None = None) -> None:
    """``offset`` is finished, dead or gone: if it was its key's head, the
    key's next blocked record becomes head. ``key``: the record's key if the
    caller has it (else it is read from the log)."""
    if not view.fifo:
        return
    if key is None:
        value = view.txn.get(RECORDS, u64(offset))
        key = b"" if value is None else head(value).key
    holder = view.txn.get(FIFO, table_key(key)) if key else None
    if holder is None or int_of(holder) != offset:
        return
    prefix = blocked_prefix(key)
    nxt = next(view.txn.scan(BLOCKED, prefix, prefix + b"\xff" * 9), None)
    if nxt is None:
        view.txn.delete(FIFO, table_key(key))
        return
    successor = int_of(nxt[0][-8:])
    view.txn.put(FIFO, table_key(key), u64(successor))
    _promote(view, successor)


def _promote(view: View, offset: int) -> None:
    """A BLOCKED record became its key's head: READY, or WAITING out its delay."""
    old = view.delivery(offset)
    value = view.txn.get(RECORDS, u64(offset))
    if old is None or value is None:
        return
    rec = head(value)
    delay = max(rec.delay_ms, view.cfg.delay_ms)
    visible_at = rec.timestamp_ms + delay
    if delay and visible_at > view.c.clock:
        new = old._replace(status=Status.WAITING, at_ms=visible_at)
    else:
        new = old._replace(status=Status.READY, at_ms=0)
    view.set_delivery(offset, new, old, rec.key)


def unblock_all(view: View) -> None:
    """Ordering changed from fifo to none: no record waits for its key."""
    for blocked_key, _ in list(view.txn.scan(BLOCKED)):
        _promote(view, int_of(blocked_key[-8:]))
    for fifo_key, _ in list(view.txn.scan(FIFO)):
        view.txn.delete(FIFO, fifo_key)


# --- receipts -----------------------------------------------------------

Action = Callable[[View, int, Delivery], None]


def settle(view: View, receipts: tuple[ReceiptRef, ...], action: Action) -> tuple[str, ...]:
    """Apply ``action`` to each receipt that names the record's current lease
    epoch; the others get STALE or NOT_FOUND. A lease whose deadline passed
    but which was not re-leased still counts (as SQS)."""
    mature(view)
    outcomes: list[str] = []
    for ref in receipts:
        current = _current(view, ref)
        if isinstance(current, str):
            outcomes.append(current)
        else:
            action(view, ref.offset, current)
            outcomes.append(OK)
    return tuple(outcomes)


def _current(view: View, ref: ReceiptRef) -> Delivery | str:
    c = view.c
    if not c.earliest <= ref.offset < c.cursor:
        return NOT_FOUND
    d = view.delivery(ref.offset)
    if d is None or d.status == Status.DEAD or d.epoch == 0:
        return NOT_FOUND
    return d if d.epoch == ref.epoch else STALE


def ack(view: View, offset: int, old: Delivery) -> None:
    if old.status == Status.LEASED and not view.fifo:
        # The usual ack, as set_delivery + release_group would do it.
        view.txn.delete(TIMERS, pair_key(old.at_ms, offset))
        view.txn.delete(DELIVERY, u64(offset))
        view.c.leased -= 1
        view.c.done += 1
        return
    view.set_delivery(offset, None, old)
    view.c.done += 1
    release_group(view, offset)


def nack_action(delay_ms: int) -> Action:
    """End the lease now; visible again after ``delay_ms``. A record that has
    used its ``max_receives`` leases dies instead (a nack ends its last lease)."""

    def nack(view: View, offset: int, old: Delivery) -> None:
        if _exhausted(view, old):
            kill(view, offset, old)
        elif delay_ms == 0:
            view.set_delivery(offset, old._replace(status=Status.READY, at_ms=0), old)
        else:
            at = later(view.now, delay_ms)
            new = old._replace(status=Status.WAITING, at_ms=at)
            view.set_delivery(offset, new, old)

    return nack


def visibility_action(visibility_ms: int) -> Action:
    """Leased until ``now + visibility_ms`` (0: the lease ends now)."""

    def change(view: View, offset: int, old: Delivery) -> None:
        at = later(view.now, visibility_ms)
        view.set_delivery(offset, old._replace(status=Status.LEASED, at_ms=at), old)

    return change
