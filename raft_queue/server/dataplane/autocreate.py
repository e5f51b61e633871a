"""Auto-create: a Send to a queue that does not exist may create it.

Two ways in, one decision (``may_create``):

- the cluster allows it: ``[cluster] auto_create_queues = true`` (Kafka's
  ``auto.create.topics.enable``; off by default, as Kafka advises for
  production, where a typo would otherwise make a queue);
- the caller asks for it: ``SendRequest.create`` (SDK ``send(...,
  create=True)``, ``raftq send --create``), whatever the option says.

Either way the queue gets the node's ``[queue_defaults]`` (a QueueSpec;
``replication_factor`` left at its default of 3 becomes 1 on a cluster of
fewer nodes, as CreateQueue does when it is not given). Creation is
CreateQueue's own path (server/control/queues.py): idempotent for the same spec,
so any number of concurrent first sends make one queue and all succeed;
a queue created meanwhile with other settings is used as it is.

Authorization: an explicit ``create`` is a request to manage queues. When
principals and grants exist, ``may_create`` is the one place to require
the ``manage`` grant for it (and to decide whether the cluster option
still lets a principal with only ``send`` create).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue.config import NodeConfig, QueueSpec
from raft_queue.server.api import convert
from raft_queue.server.control.queues import Queues

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord
    from raft_queue.server.cluster import Cluster

# A forwarded Send for a queue the forwarding node knows (it may have just
# created it) waits this long for this node's metadata view to catch up.
VIEW_WAIT_S = 5.0
# A queue this young may still be electing its first leaders.
YOUNG_MS = 30_000


def may_create(request: Any, config: NodeConfig) -> bool:
    """Whether a Send to a missing queue creates it (see the module doc). An
    explicit ``request.create`` needs the caller's ``manage`` grant too, which
    the token door checked before the Send got here (server/api/auth.py)."""
    return bool(request.create) or config.cluster.auto_create_queues


def defaults_for(config: NodeConfig, live_nodes: int) -> QueueSpec:
    """``[queue_defaults]``, with the default replication factor fitted to
    the cluster (3, or 1 when it has fewer nodes), as CreateQueue does."""
    spec = config.queue_defaults
    default_rf = QueueSpec().replication_factor
    if spec.replication_factor == default_rf and live_nodes < default_rf:
        return dataclasses.replace(spec, replication_factor=1)
    return spec


class AutoCreate:
    def __init__(self, queues: Queues) -> None:
        self.queues = queues
        self.node = queues.node

    async def queue_for_send(self, request: Any, forwarded: bool) -> Any:
        """The queue record a Send goes to, created first if allowed. A
        creating Send to a young queue (made by this Send or a concurrent
        one) also waits until its partitions can be routed to."""
        try:
            q = self.node.queue_spec(request.queue)
        except errors.NotFound:
            if forwarded:
                return await self._learned(request.queue)
            if not may_create(request, self.node.config):
                raise
            q = await self._create(request.queue)
        if forwarded or not may_create(request, self.node.config):
            return q
        if time.time() * 1000 - q.created_ms < YOUNG_MS:
            await self._routable(q)
        return q

    async def _create(self, queue: str) -> Any:
        name = convert.check_queue_name(queue, "queue")
        alive = sum(1 for n in self.node.view.nodes().values() if n.state == "alive")
        # AlreadyExists: created meanwhile with its own settings; send to it.
        with contextlib.suppress(errors.AlreadyExists):
            await self.queues.create(name, defaults_for(self.node.config, alive), False)
        return await self._learned(name)

    async def _routable(self, q: QueueRecord) -> None:
        """Until this node knows where each partition's leader is (it leads
        it, or it has heard of the leader elsewhere), at most VIEW_WAIT_S: the
        Send that follows then neither fails nor bounces off a new partition
        still electing or whose leader has not reached this node's replica."""
        c = self.queues.cluster
        deadline = time.monotonic() + VIEW_WAIT_S
        while time.monotonic() < deadline:
            if all(self._routes(c, q.name, p) for p in range(q.spec.partitions)):
                return
            await asyncio.sleep(0.02)

    def _routes(self, c: Cluster, queue: str, part: int) -> bool:
        replica = self.node.replica(queue, part)
        if replica is not None and replica.is_leader():
            return True
        known = replica is not None and bool(replica.leader_address())
        return known or (replica is None and bool(c.leader_address(queue, part)))

    async def _learned(self, name: str) -> Any:
        """The queue once this node's metadata view has it (NotFound after VIEW_WAIT_S)."""
        deadline = time.monotonic() + VIEW_WAIT_S
        while True:
            try:
                return self.node.queue_spec(name)
            except errors.NotFound:
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.02)
