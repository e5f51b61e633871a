"""The receipt calls (Ack, Nack, ChangeVisibility), and the acks a Receive carries.

Each partition's receipts go to its leader as one command (one Raft entry,
or part of one: the group commits what was submitted before its next tick
in one entry, replication/group.py). ``start`` submits the local commands
before it returns, so a Lease submitted right after it on the same loop
turn (a Receive that carries the previous batch's receipts) lands in the
same entry as the Ack: a consume loop pays one Raft round per batch, not
two. The asyncio thread holds the GIL between the two submits (no I/O in
between), so the driver thread cannot tick in the gap in practice; if it
did, the two entries would still be proposed back to back.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue.core.results import OK
from raft_queue.observability import metrics
from raft_queue.server.cluster import Cluster
from raft_queue.server.dataplane.receipts import PartReceipts
from raft_queue.server.dataplane.sending import now_ms
from raft_queue.server.peers import RemoteError

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord

Results = Coroutine[Any, Any, list[Any]]

# Background acks a Receive carries (``ack_background``: nobody waits for
# them) are held this long for the next entry of their partition (the next
# Append, or a Lease), which takes them along: no Raft round of their own
# (docs/benchmarks.md, "W4: where a message's milliseconds go"). Then they
# are proposed alone. Not on a FIFO queue (an Ack frees its key: held, the
# key's next record would wait). RAFTQ_ACK_HOLD_MS=0 in a node's environment:
# proposed at once (the A/B switch).
HOLD_S = max(0, int(os.environ.get("RAFTQ_ACK_HOLD_MS", "5"))) / 1000


class Settler:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def settle(
        self, request: Any, forwarded: bool, make: Callable[..., Any], method: str
    ) -> list[Any]:
        """One result per receipt, in order: its outcome (``"ok"``, ...) when
        settled here, a ReceiptResult when forwarded (``receipts_response``
        makes the response)."""
        q = self.cluster.node.queue_spec(request.queue)
        if not request.receipts:
            raise errors.InvalidArgument("receipts", "at least one receipt is required")
        # MACs and fields checked before anything is proposed (receipts.py)
        by_part = self.cluster.receipts.parse(q.name, request.receipts, q.uid, q.spec.partitions)
        return await self.start(q, request, by_part, forwarded, make, method)

    def start(
        self,
        q: QueueRecord,
        request: Any,
        by_part: dict[int, PartReceipts],
        forwarded: bool,
        make: Callable[..., Any],
        method: str,
        carried: bool = False,
        background: bool = False,
    ) -> Results:
        """Submit the command of every partition led here NOW; the returned
        coroutine forwards the rest and gives one result per receipt. Await
        it (or close it): the local commands apply either way. ``carried``:
        a partition whose call failed as a whole (timed out, leader lost,
        forward failed) gets a failure per receipt saying why, instead of
        failing the call (the acks a Receive carries: its messages are
        leased by then and must still reach the consumer). A carried call
        also wakes the driver only once the caller's task yields, so a Lease
        it submits before that joins the Ack's entry (waking the driver
        releases the GIL in a write, and the driver would tick at once).
        ``background`` (carried acks nobody waits for): held for the next
        entry, up to HOLD_S (``HOLD_S`` above)."""
        results: list[Any] = [None] * len(request.receipts)
        waits: list[Coroutine[Any, Any, None]] = []
        try:
            for part, items in by_part.items():
                replica = self.cluster.local_leader(q.name, part, forwarded)
                if replica is None:
                    waits.append(self._forward(q, part, items, request, method, results))
                    continue
                self.cluster.node.ensure_configured(replica)
                command = make(items.runs(), now_ms())
                hold = HOLD_S if background and replica.may_hold(command) else 0.0
                fut = replica.submit(command, self.cluster.timeout_s, wake=not carried, hold_s=hold)
                if hold:  # proposed by then, if no other entry took it along
                    asyncio.get_running_loop().call_later(hold, replica.wake)
                elif carried:  # woken once this task yields: its Lease joins the entry
                    asyncio.get_running_loop().call_soon(replica.wake)
                waits.append(self._local(q, part, items, fut, method, results))
        except BaseException:
            for w in waits:
                w.close()
            raise
        return _gathered(waits, results, carried)

    async def _local(
        self,
        q: QueueRecord,
        part: int,
        items: PartReceipts,
        fut: Any,
        method: str,
        results: list[Any],
    ) -> None:
        res = await asyncio.wrap_future(fut)
        if isinstance(res, BaseException):
            raise res
        if method == "Ack":
            metrics.count_acked(q.name, part, sum(n for o, n in res.runs if o == OK))
        for i, outcome in zip(items.indexes, res.outcomes, strict=True):
            results[i] = outcome

    async def _forward(
        self,
        q: QueueRecord,
        part: int,
        items: PartReceipts,
        request: Any,
        method: str,
        results: list[Any],
    ) -> None:
        sub = type(request)()
        sub.CopyFrom(request)
        sub.failures_only = False  # one result per receipt, matched by position
        del sub.receipts[:]
        sub.receipts.extend(request.receipts[i] for i in items.indexes)
        resp = await self.cluster.forward_to_leader(q.name, part, method, sub)
        for i, res in zip(items.indexes, resp.results, strict=True):
            results[i] = res


async def _gathered(
    waits: list[Coroutine[Any, Any, None]], results: list[Any], carried: bool
) -> list[Any]:
    outcomes = await asyncio.gather(*waits, return_exceptions=carried)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        for exc in failed:
            if not isinstance(exc, errors.QueueError | RemoteError):
                raise exc
        why = f"not confirmed (it may have applied): {_reason(failed[0])}"
        results[:] = [why if r is None else r for r in results]
    return results


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "message", None) or exc or type(exc).__name__)
