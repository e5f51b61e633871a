"""Queue lifecycle: create, update, delete, purge and describe.

Create, update and delete are metadata commands: run on the metadata leader
(a request reaching another node is forwarded there, one hop). Checks that
need the whole cluster (live nodes, dead-letter queues) are made here,
before the command is submitted, so bad input writes nothing. Partition
leaders pick up a changed spec through the reconciler, which submits a new
Configure to each partition they lead (``Node._configure_leaders``): the
change takes effect on every partition within about a second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.config import IMMUTABLE_QUEUE_FIELDS, QueueSpec
from raft_queue.core import commands as cmd
from raft_queue.core import metadata as meta
from raft_queue.core.placement import place_partitions
from raft_queue.server.api import convert
from raft_queue.server.cluster import Cluster
from raft_queue.server.control.splits import SplitWatch, grow, split_count
from raft_queue.server.dataplane import bounds
from raft_queue.server.dataplane.sending import now_ms

log = logging.getLogger(__name__)

CREATE_WAIT_S = 15.0


class Queues:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.node = cluster.node
        self.watch = SplitWatch(cluster)

    # ---- describe ----------------------------------------------------------------------
    async def info(self, name: str, depth: bool = True) -> Any:
        """QueueInfo; with ``depth``, counters summed over the partition leaders."""
        q = self.node.queue_spec(name)
        info = queue_pb2.QueueInfo(
            name=q.name,
            config=convert.spec_to_pb(q.spec),
            created_ms=q.created_ms,
            writable_partitions=len(q.layout.writable()),
        )
        if not depth:
            return info
        replicas, _ = await self.cluster.all_status()
        oldest = 0
        for r in replicas:
            if r.queue != q.name or r.role != "leader":
                continue
            info.messages += r.messages
            info.in_flight += r.in_flight
            info.delayed += r.delayed
            info.dead += r.dead
            info.bytes += r.bytes
            if r.oldest_timestamp_ms and (not oldest or r.oldest_timestamp_ms < oldest):
                oldest = r.oldest_timestamp_ms
        info.oldest_message_age_ms = max(0, now_ms() - oldest) if oldest else 0
        return info

    # ---- metadata commands --------------------------------------------------------------
    async def _metadata_call(self, forwarded: bool, method: str, request: Any) -> Any | None:
        """None if this node leads the metadata group; else the leader's answer."""
        md = self.node.metadata
        if md is not None and md.is_leader():
            return None
        address = self.node.metadata_leader_address()
        if forwarded or not address or address == self.node.address:
            raise errors.NotLeader("not the metadata leader", address)
        return await self.cluster.peers.forward(address, method, request, CREATE_WAIT_S + 5)

    async def create(self, name: str, spec: QueueSpec, forwarded: bool) -> Any:
        request = queue_pb2.CreateQueueRequest(name=name, config=convert.spec_to_pb(spec))
        remote = await self._metadata_call(forwarded, "CreateQueue", request)
        if remote is not None:
            await self._wait_for(lambda: self.node.view.queue(name) is not None)
            return remote
        # A leader just elected decides from its view only once that holds what
        # earlier terms committed (placement, "exists"): metadata_barrier.py.
        await self.cluster.barrier.vouch()
        nodes = [n for n in self.node.view.nodes().values() if n.state == "alive"]
        existing = self.node.view.queue(name)
        if existing is None:
            if spec.replication_factor > len(nodes):
                raise errors.InvalidArgument(
                    "config.replication_factor",
                    f"{spec.replication_factor} replicas need {spec.replication_factor} live "
                    f"nodes; the cluster has {len(nodes)}",
                )
            self._check_dead_letter(name, spec)
            assignments = place_partitions(
                nodes, self._all_assignments(), spec.partitions, spec.replication_factor
            )
            data_key = self.cluster.crypto.first_key(name, spec)  # encryption at rest
        else:
            # Idempotent re-create: the metadata machine answers (same spec ->
            # the queue, different -> AlreadyExists); never place twice.
            assignments = self.node.view.assignments(name)
            data_key = None
        await self.node.submit_metadata(
            meta.CreateQueue(
                name=name,
                config=spec,
                assignments=tuple(assignments),
                now_ms=now_ms(),
                data_key=data_key,
            )
        )
        await self._wait_for_leaders(name)
        return await self.info(name, depth=False)

    async def update(self, request: Any, forwarded: bool) -> Any:
        """Change the fields set in ``request.config``; the rest stay. A larger
        ``partitions`` grows the queue by splits (control/splits.py), first."""
        name = request.name
        old = self.node.queue_spec(name)
        spec = convert.spec_from_pb(request.config, base=old.spec)
        bounds.check_queue_spec(spec, self.node.config.limits)
        splits = split_count(old.spec.partitions, spec.partitions)
        spec = replace(spec, partitions=old.spec.partitions)
        for field in IMMUTABLE_QUEUE_FIELDS:
            if getattr(spec, field) != getattr(old.spec, field):
                raise errors.InvalidArgument(f"config.{field}", "cannot be changed after creation")
        remote = await self._metadata_call(forwarded, "UpdateQueue", request)
        if remote is not None:
            total = old.spec.partitions + 2 * splits
            await self._wait_for(lambda: self._updated(name, spec, total))
            return remote
        self._check_dead_letter(name, spec)
        if splits:
            await grow(self.node, self._all_assignments(), name, old, splits)
            await self._wait_for_leaders(name)
            await self.watch.step()  # seals the parents whose children lead
            await self._wait_for(lambda: not self._splitting(name))
        if spec != old.spec:
            spec = replace(spec, partitions=self.node.queue_spec(name).spec.partitions)
            await self.node.submit_metadata(meta.UpdateQueue(name=name, config=spec))
        return await self.info(name, depth=False)

    def _splitting(self, name: str) -> bool:
        return any(r.state == "splitting" for r in self.node.queue_spec(name).ranges)

    def _updated(self, name: str, spec: QueueSpec, total: int) -> bool:
        current: QueueSpec = self.node.queue_spec(name).spec
        return current == replace(spec, partitions=total) and not self._splitting(name)

    async def delete(self, name: str, forwarded: bool) -> None:
        self.node.queue_spec(name)
        users = [q.name for q in self.node.view.queues() if q.spec.dead_letter_queue == name]
        if users:
            raise errors.FailedPrecondition(
                f"queue {name!r} is the dead-letter queue of {', '.join(sorted(users))}; "
                "change their dead_letter_queue first"
            )
        request = queue_pb2.DeleteQueueRequest(name=name)
        remote = await self._metadata_call(forwarded, "DeleteQueue", request)
        if remote is None:
            await self.node.submit_metadata(meta.DeleteQueue(name=name))
            # Crypto-shredding reaches the journals (core/metadata_commands.py).
            await self.node.submit_metadata(meta.ShredKeys(queue=name))

    def _check_dead_letter(self, name: str, spec: QueueSpec) -> None:
        """The DLQ exists, is not the queue itself, and following DLQs from it
        never comes back to ``name`` (a cycle would bounce messages forever)."""
        field = "config.dead_letter_queue"
        dlq = spec.dead_letter_queue
        if not dlq:
            return
        if dlq == name:
            raise errors.InvalidArgument(field, "a queue cannot be its own dead-letter queue")
        chain = [name]
        while dlq:
            target = self.node.view.queue(dlq)
            if target is None:
                raise errors.InvalidArgument(field, f"queue {dlq!r} does not exist")
            chain.append(dlq)
            if dlq == name or len(chain) > 64:
                raise errors.InvalidArgument(
                    field, f"dead-letter queues would form a cycle: {' -> '.join(chain)}"
                )
            dlq = target.spec.dead_letter_queue

    def _all_assignments(self) -> list[Any]:
        out: list[Any] = []
        for q in self.node.view.queues():
            out.extend(self.node.view.assignments(q.name))
        return out

    async def _wait_for(self, ready: Any) -> None:
        """Until ``ready()`` (this node's metadata view caught up), or CREATE_WAIT_S."""
        deadline = time.monotonic() + CREATE_WAIT_S
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except errors.NotFound:
                pass
            await asyncio.sleep(0.02)

    async def _wait_for_leaders(self, name: str) -> None:
        """Return once every partition has a leader (so a send right after
        create works), or after CREATE_WAIT_S (partitions still electing)."""
        q = self.node.queue_spec(name)
        deadline = time.monotonic() + CREATE_WAIT_S
        while time.monotonic() < deadline:
            infos = await self.cluster.partition_infos(q)
            if infos and all(p.leader for p in infos):
                return
            await asyncio.sleep(0.1)
        log.warning("queue %s: not every partition has a leader yet", name)

    # ---- purge -----------------------------------------------------------------------------
    async def purge(self, name: str, forwarded: bool) -> int:
        """Drop every message of every partition (offsets are not reused; dedup
        ids stay remembered for their window). Returns how many were dropped."""
        q = self.node.queue_spec(name)
        local, remote = self.cluster.split_partitions(q.name, q.spec.partitions)
        removed = 0
        for _, replica in local:
            removed += int(await self.cluster.submit(replica, cmd.Purge(now_ms())))
        if forwarded:
            return removed
        if len(local) + len(remote) == 0 and q.spec.partitions:
            raise errors.Unavailable(f"{name}: no partition leader known yet")
        request = queue_pb2.PurgeQueueRequest(name=name)
        answers = await asyncio.gather(
            *(
                self.cluster.peers.forward(a, "PurgeQueue", request, self.cluster.timeout_s)
                for a in remote
            )
        )
        return removed + sum(int(a.removed) for a in answers)
