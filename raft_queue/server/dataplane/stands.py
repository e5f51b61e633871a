"""What a Receive does with the standing leases it left (replication/standing.py):
withdraw them, keep what they took, give the rest back.

A standing request is claimed at most once, on the driver thread; once
``StandingLeases.withdraw`` returns False its lease was (or is being) taken,
and whoever withdrew it must deliver what the future brings or give it back
(Release: visible again, receive count and history as before). Nothing here
waits: the caller decides how long to wait for a lease in flight.

Leases a Receive delivers end no earlier than its arrival + visibility, but
for a lingering lease (lingering.py), which may be taken up to the linger
window before its consumer's Receive arrives. ``fresh`` enforces that bound
on what a Receive takes up, so that a lease taken longer ago (a bug, or a
clock step) is given back instead of reaching a consumer with part of its
visibility spent, which another consumer could then lease again while the
first still works on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from raft_queue.core import commands as cmd
from raft_queue.core.results import LeasedSpan, LeaseResult
from raft_queue.replication.partition import PartitionReplica
from raft_queue.server.api import convert
from raft_queue.server.dataplane.lingering import Stand
from raft_queue.server.dataplane.receipts import Receipts
from raft_queue.server.dataplane.sending import now_ms

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord

Claimed = tuple[int, PartitionReplica, LeaseResult]  # (partition, its leader replica, lease)

# How long a poll waits for a standing lease that was already proposed
# (normally one commit: milliseconds).
TAKEN_WAIT_S = 1.0

# Slack on ``fresh``'s bound: the linger window is measured on the loop's
# clock, lease deadlines on the leader's wall clock.
FRESH_SLACK_MS = 50


def take_meanwhile(stands: list[Stand]) -> tuple[list[Claimed], list[Stand]]:
    """(the applied leases of ``stands``, the rest but those cancelled): an
    applied lease is withdrawn and kept. A lease in flight stays with its
    request, as a request still standing does: the caller's linger keeps
    both for the consumer's next Receive, which checks how fresh a lease it
    takes up is (``fresh``). Given back here, its messages would wait for
    the Release's round and then a lease of their own."""
    done: list[Stand] = []
    left: list[Stand] = []
    for st in stands:  # one look each: the driver thread may resolve it any time
        fut = st[2].future
        if fut.done():
            if not fut.cancelled():  # a cancelled request took nothing: dropped
                done.append(st)
        else:
            left.append(st)
    return withdraw(done, keep=True), left


def withdraw(stands: list[Stand], keep: bool) -> list[Claimed]:
    """Withdraw standing leases. Those already taken: with ``keep``, each
    applied one; every other taken lease (still in flight, or all of them
    without ``keep``) is given back once it applies."""
    kept: list[Claimed] = []
    for part, replica, s in stands:
        if replica.standing.withdraw(s):
            continue  # never taken
        fut = s.future
        if keep and fut.done() and not fut.cancelled() and fut.exception() is None:
            kept.append((part, replica, fut.result()))
        else:
            fut.add_done_callback(partial(nack_unwanted, replica))
    return kept


def undo(stands: list[Stand]) -> None:
    """Withdraw requests not taken; undo the leases of those taken."""
    withdraw(stands, keep=False)


def nack_unwanted(replica: PartitionReplica, fut: Future[Any]) -> None:
    """Undo the lease ``fut`` brings (any thread): nobody will deliver it."""
    if fut.cancelled() or fut.exception() is not None:
        return
    give_back(replica, fut.result().spans)


def give_back(replica: PartitionReplica, spans: Sequence[LeasedSpan]) -> None:
    """Release ``spans`` (leases nobody will deliver) on ``replica``."""
    refs = tuple(cmd.ReceiptRun(s.offset, s.count, s.epoch) for s in spans)
    if refs:
        replica.submit(cmd.Release(refs, now_ms()))


def fresh(claimed: list[Claimed], earliest_deadline_ms: int) -> list[Claimed]:
    """``claimed`` without the leased spans ending before
    ``earliest_deadline_ms``; those are given back."""
    ok, stale = split_stale(claimed, earliest_deadline_ms)
    for replica, spans in stale:
        give_back(replica, spans)
    return ok


def split_stale(
    claimed: list[Claimed], earliest_deadline_ms: int
) -> tuple[list[Claimed], list[tuple[PartitionReplica, list[LeasedSpan]]]]:
    """(``claimed`` without the spans ending before ``earliest_deadline_ms``,
    those spans by replica)."""
    ok: list[Claimed] = []
    stale: list[tuple[PartitionReplica, list[LeasedSpan]]] = []
    for part, replica, res in claimed:
        late = [s for s in res.spans if s.deadline_ms < earliest_deadline_ms]
        if late:
            stale.append((replica, late))
            res = replace(
                res, spans=tuple(s for s in res.spans if s.deadline_ms >= earliest_deadline_ms)
            )
        ok.append((part, replica, res))
    return ok, stale


def messages(
    q: QueueRecord, claimed: list[Claimed], receipts: Receipts, crypto: Any = None
) -> list[Any]:
    """The Messages of ``claimed`` (queue record ``q``), with receipts."""
    lease_messages = convert.lease_messages
    return [
        m
        for part, _, res in claimed
        for m in lease_messages(
            q.name, part, q.uid, res, receipts, crypto and crypto.opener(q.name, q.uid, part)
        )
    ]
