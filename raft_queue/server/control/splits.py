"""Growing a queue in place: splits, and the watch that un-gates children.

``raftq queue update Q --partitions N`` (UpdateQueue with a larger
``partitions``) comes here on the metadata leader: the parents are chosen
(``plan_splits``: largest key range first), the children's replicas placed
like a new queue's (core/placement.py, counting every existing replica),
and one ``SplitPartitions`` command records it all. The parents are then
``splitting``: they still take their ranges' sends while the children's
Raft groups start (through the reconciler, as a new queue's) and elect.
Once both children of a parent have a leader, it is sealed
(``SetPartitionState``); from that entry on:

- sends place keys by the new ranges (server/dataplane/sending.py; the SDK
  learns the ranges with GetPartitions); a send to a sealed parent is
  refused (PartitionSealed) and the SDK places it again;
- each parent's leader applies a Configure with ``sealed`` (Node._configure):
  from that Raft entry on the parent refuses every Append, whatever a stale
  node believed, so its set of messages only shrinks.

UpdateQueue returns once the parents are sealed (or after CREATE_WAIT_S:
the watch below finishes the job). ``SplitWatch`` (every node runs it; only
the metadata leader acts) seals parents whose children lead (after a
metadata leader change, say), and marks a parent ``drained`` once a replica
of it reports the seal applied and no message left (no visible, delayed or
in-flight one). Any replica is
a safe witness: with the seal applied every Append it will ever hold is
applied, and a replica behind the leader has applied fewer acks, never
more. A FIFO queue's children are gated until every ancestor is drained
(core/placement_keys.py), so a key's messages in a child are delivered only
after the parent's are acked, dead-lettered or expired.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue.core import metadata as meta
from raft_queue.core.placement import place_partitions
from raft_queue.core.placement_keys import plan_splits, splits_for

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord

log = logging.getLogger(__name__)

WATCH_S = 0.5  # how often the metadata leader looks at sealed parents


def split_count(current: int, wanted: int) -> int:
    """Splits from ``current`` partitions to ``wanted``; InvalidArgument naming
    ``config.partitions`` if that cannot be done (fewer, or an odd step)."""
    try:
        return splits_for(current, wanted)
    except ValueError as exc:
        raise errors.InvalidArgument("config.partitions", str(exc)) from exc


async def grow(
    node: Any, existing: Iterable[meta.PartitionAssignment], name: str, record: Any, splits: int
) -> Any:
    """Record ``splits`` splits of ``record``'s queue (metadata leader only)."""
    try:
        parents = plan_splits(record.layout, splits)
    except ValueError as exc:
        raise errors.InvalidArgument("config.partitions", str(exc)) from exc
    alive = [n for n in node.view.nodes().values() if n.state == "alive"]
    placed = place_partitions(alive, existing, 2 * splits, record.spec.replication_factor)
    first = record.spec.partitions
    children = tuple(
        meta.PartitionAssignment(first + i, a.replicas, a.epoch) for i, a in enumerate(placed)
    )
    log.info("queue %s: splitting partitions %s into %d children", name, parents, len(children))
    return await node.submit_metadata(
        meta.SplitPartitions(
            name=name, uid=record.uid, parents=tuple(parents), assignments=children
        )
    )


class SplitWatch:
    """Moves split parents on (see the module doc); metadata leader only."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.node = cluster.node

    async def run_forever(self) -> None:
        while True:
            try:
                await self.step()
            except Exception as exc:  # retried next round
                log.warning("split watch round failed: %r", exc)
            await asyncio.sleep(WATCH_S)

    def waiting(self) -> list[tuple[Any, Any]]:
        """(queue record, key range) of every splitting or sealed partition."""
        return [
            (q, r) for q in self.node.view.queues() for r in q.ranges
            if r.state in ("splitting", "sealed")
        ]  # fmt: skip

    async def step(self) -> None:
        """Seal each splitting parent whose children both have a leader (its
        range's sends can go to them at once); mark drained each sealed one a
        replica reports sealed and empty."""
        md = self.node.metadata
        if md is None or not md.is_leader():
            return
        waiting = self.waiting()
        if not waiting:
            return
        replicas, _ = await self.cluster.all_status()
        led = {(r.queue, r.partition) for r in replicas if r.role == "leader"}
        empty = {
            (r.queue, r.partition)
            for r in replicas
            if r.sealed and r.messages == 0 and r.role in ("leader", "follower")
        }
        for q, r in waiting:
            if r.state == "splitting":
                kids = q.layout.children(r.partition)
                if all((q.name, k) in led for k in kids):
                    await self._set(q, r.partition, "sealed")
            elif (q.name, r.partition) in empty:
                await self._set(q, r.partition, "drained")

    async def _set(self, q: QueueRecord, partition: int, state: str) -> None:
        log.info("queue %s: partition %d %s", q.name, partition, state)
        await self.node.submit_metadata(meta.SetPartitionState(q.name, q.uid, partition, state))
