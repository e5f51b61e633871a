"""Leases carried across a queue move (manager/moves.py drives them;
docs/operations.md "Moving a queue between clusters").

At copy time (``carry``): each record leased at the source when it was
fenced is copied, and its copy leased on the target until the source
lease's deadline with the source's receive count (CarryLeases, one Raft
command on the target partition, core/lease_carry.py). So a consumer still
holding the source receipt is not overtaken by a second delivery from the
target before its visibility timeout ends.

After the cut-over (``follow``, the move's ``leases`` phase): the source
consumer settles its lease at the source (its receipt names the source
cluster). Every round the mover reads each carried lease's record at the
source (ExportPartition: state, deadline) and does the same to the copy
(SettleCarried, epoch 1 on the target): acked -> ack; nacked (or its lease
ended early by a visibility change to 0) -> nack, visible again when the
source said; deadline changed -> the same deadline. A lease that simply
expires needs nothing (the target's ends at the same time); it is followed
``LATE_ACK_MARGIN_MS`` past its deadline still, as a source ack after expiry
succeeds (the fenced source never leases it again): the copy is acked then
if the target has not leased it again meanwhile. Every step is idempotent:
a settled lease settled again answers stale or not_found.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core.lease_carry import MAX_CARRIED
from raft_queue.manager.move_state import Carried

LATE_ACK_MARGIN_MS = 3000  # how long past its deadline a carried lease is followed
EXPORT_CHUNK = 1000
_ENDED = ("queued", "blocked", "delayed", "dead")  # a lease ended at the source


def carry(
    dst: Any, queue: str, source: int, to: int, leased: list[Any], at: list[tuple[int, int]]
) -> list[Carried]:
    """Lease the copies of ``leased`` (ExportedMessages in flight at the
    source) on the target's partition ``to``; ``at``: (source offset, target
    offset) of every copy. The carried leases, as the move keeps them."""
    target_of = dict(at)
    out: list[Carried] = []
    wanted = []
    for e in leased:
        t = target_of.get(e.message.offset)
        if t is None:
            continue
        out.append((source, e.message.offset, to, t, int(e.at_ms)))
        wanted.append(
            queue_pb2.CarriedLease(
                offset=t, deadline_ms=e.at_ms, receive_count=max(1, e.receive_count)
            )
        )
    wanted.sort(key=lambda x: x.offset)
    for i in range(0, len(wanted), MAX_CARRIED):
        dst.carry_leases(queue, to, wanted[i : i + MAX_CARRIED])
    return out


def lease_fate(state: str, at_ms: int, deadline_ms: int, now_ms: int) -> tuple[str, int] | None:
    """What to do to a carried lease's copy, given its record's ``state`` and
    ``at_ms`` at the source, the deadline carried (``deadline_ms``) and now:
    ("ack", 0), ("nack", visible-at), ("visibility", new deadline),
    ("expired", 0): stop following; None: nothing yet."""
    if state == "done":
        return ("ack", 0)
    if now_ms > deadline_ms + LATE_ACK_MARGIN_MS:
        return ("expired", 0)
    if state == "in_flight":
        return None if at_ms == deadline_ms else ("visibility", at_ms)
    if state in _ENDED and now_ms < deadline_ms:  # ended before its deadline: nacked
        return ("nack", at_ms if state == "delayed" else 0)
    return None  # expired at the source: the copy's lease ends at the same time


def follow(
    src: Any, dst: Any, queue: str, leases: Iterable[Carried], now_ms: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """One round: (settled keys, (partition, offset, new deadline) changes)."""
    by_source: dict[int, list[Carried]] = defaultdict(list)
    for lease in leases:
        by_source[lease[0]].append(lease)
    settled: list[tuple[int, int]] = []
    changed: list[tuple[int, int, int]] = []
    for part, items in sorted(by_source.items()):
        try:
            states = source_states(src, queue, part, sorted(x[1] for x in items))
        except errors.NotFound:  # the source's queue is gone: nothing left to follow
            settled += [(x[0], x[1]) for x in items]
            continue
        todo: dict[tuple[int, str, int], list[Carried]] = defaultdict(list)
        for x in items:
            if x[1] not in states:
                continue  # not read this round
            state, at_ms = states[x[1]]
            fate = lease_fate(state, at_ms, x[4], now_ms)
            if fate is None:
                continue
            if fate[0] == "expired":
                settled.append((x[0], x[1]))
            else:
                todo[(x[2], *fate)].append(x)
        for (to, action, until), group in todo.items():
            dst.settle_carried(queue, to, [x[3] for x in group], action, until)
            if action == "visibility":
                changed += [(x[0], x[1], until) for x in group]
            else:
                settled += [(x[0], x[1]) for x in group]
    return settled, changed


def source_states(
    src: Any, queue: str, part: int, offsets: list[int]
) -> dict[int, tuple[str, int]]:
    """offset -> (state, at_ms) at the source for each of ``offsets``
    (ascending) it could tell: a record no longer retained (acked and
    compacted) is ("done", 0)."""
    out: dict[int, tuple[str, int]] = {}
    i = 0
    while i < len(offsets):
        lo = offsets[i]
        page = src.export_partition(queue, part, lo, min(EXPORT_CHUNK, offsets[-1] - lo + 1))
        seen = {e.message.offset: (e.state, int(e.at_ms)) for e in page.messages}
        # Everything below ``covered`` that the page lacks is gone from the source.
        covered = page.next_offset if page.messages else page.latest_offset
        if covered <= lo:
            break  # past the source's log: unknown (never for a carried record)
        while i < len(offsets) and offsets[i] < covered:
            out[offsets[i]] = seen.get(offsets[i], ("done", 0))
            i += 1
    return out
