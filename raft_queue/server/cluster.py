"""Cluster-wide view for request handlers: routing, fan-out, queue lifecycle.

Leader routing: a partition's leader is known exactly when this node hosts a
replica (its Raft state); otherwise from the last NodeStatus answers
(``routes``), and failing that the preferred (first) replica. A wrong guess
costs one NotLeader, which carries the right leader back to the client.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.client.partitioner import partition_for_key
from raft_queue.config import QueueSpec
from raft_queue.core import metadata as meta
from raft_queue.core.placement import place_partitions
from raft_queue.replication.partition import PartitionReplica
from raft_queue.server import convert
from raft_queue.server.node import Node
from raft_queue.server.peers import Peers

log = logging.getLogger(__name__)

CREATE_WAIT_S = 15.0


class Cluster:
    def __init__(self, node: Node, peers: Peers, timeout_s: float = 10.0) -> None:
        self.node = node
        self.peers = peers
        self.timeout_s = timeout_s
        self.routes: dict[tuple[str, int], str] = {}
        self._rr = itertools.count()

    # ---- partitions and leaders ------------------------------------------------------
    def partition_of(self, i: int, entry: Any, partitions: int) -> int:
        if entry.HasField("partition"):
            return convert.check_range(
                entry.partition, 0, partitions - 1, f"entries[{i}].partition"
            )
        if entry.key:
            return partition_for_key(entry.key, partitions)
        return next(self._rr) % partitions

    def leader_id(self, queue: str, part: int) -> str | None:
        replica = self.node.replica(queue, part)
        if replica is not None:
            if replica.is_leader():
                return self.node.id
            leader = replica.leader_address()
            if leader:
                return self.node.raft_address_to_node().get(leader)
            return None
        if (queue, part) in self.routes:
            return self.routes[(queue, part)]
        for a in self.node.view.assignments(queue):
            if a.partition == part and a.replicas:
                return str(a.replicas[0].node_id)
        return None

    def leader_address(self, queue: str, part: int) -> str:
        nid = self.leader_id(queue, part)
        return (self.node.node_address(nid) or "") if nid else ""

    def local_leader(
        self, queue: str, part: int, forwarded: bool, reads: bool = False
    ) -> PartitionReplica | None:
        """The local replica if it leads (with quorum contact for reads served
        outside Raft: hazard 5); None to forward. A forwarded request that
        finds no local leader fails with NotLeader (one hop only)."""
        replica = self.node.replica(queue, part)
        if replica is not None and replica.is_leader():
            if not reads or replica.can_serve_leader_reads():
                return replica
        if forwarded:
            raise errors.NotLeader(
                f"{queue}[{part}]: this node does not lead it", self.leader_address(queue, part)
            )
        return None

    async def forward_to_leader(self, queue: str, part: int, method: str, request: Any) -> Any:
        address = self.leader_address(queue, part)
        if address == self.node.address:
            raise errors.Unavailable(f"{queue}[{part}]: leader election in progress")
        return await self.peers.forward(address, method, request, self.timeout_s)

    def split_partitions(
        self, queue: str, partitions: int
    ) -> tuple[list[tuple[int, PartitionReplica]], list[str]]:
        """Local leaders, and the addresses of other nodes leading the rest."""
        start = next(self._rr)
        local: list[tuple[int, PartitionReplica]] = []
        remote: list[str] = []
        for k in range(partitions):
            part = (start + k) % partitions
            replica = self.node.replica(queue, part)
            if replica is not None and replica.is_leader():
                local.append((part, replica))
                continue
            address = self.leader_address(queue, part)
            if address and address != self.node.address and address not in remote:
                remote.append(address)
        return local, remote

    async def submit(self, replica: PartitionReplica, command: Any) -> Any:
        result = await asyncio.wrap_future(replica.submit(command, self.timeout_s))
        if isinstance(result, BaseException):
            raise result
        return result

    def maybe_empty(self, replica: PartitionReplica) -> bool:
        """True if the partition holds no unacked message (skip a Raft round trip)."""
        return bool(replica.stats(_now_ms()).messages == 0)

    async def wait_for_data(self, queue: str, timeout_s: float) -> None:
        await asyncio.sleep(max(0.0, min(timeout_s, 0.02)))

    # ---- status ---------------------------------------------------------------------------
    def local_status(self, include_digests: bool) -> list[Any]:
        now = _now_ms()
        out = []
        for key, replica in list(self.node.replicas.items()):
            st = replica.status()
            stats = replica.stats(now)
            leader = self.node.raft_address_to_node().get(st["leader"], "")
            out.append(
                admin_pb2.ReplicaStatus(
                    queue=key.queue,
                    partition=key.partition,
                    node=self.node.id,
                    role=st["role"],
                    leader=leader,
                    term=st["term"],
                    commit_index=st["commit_index"],
                    last_applied=st["last_applied"],
                    log_len=st["log_len"],
                    next_offset=stats.latest_offset,
                    earliest_offset=stats.earliest_offset,
                    messages=stats.messages,
                    in_flight=stats.in_flight,
                    digest=replica.digest() if include_digests else "",
                    has_quorum=st["has_quorum"],
                )
            )
        return out

    async def all_status(self, include_digests: bool = False) -> tuple[list[Any], list[str]]:
        """ReplicaStatus from every node (self included) and the unreachable ones."""
        replicas = self.local_status(include_digests)
        others = [n for n in self.node.view.nodes().values() if n.node_id != self.node.id]

        async def ask(n: Any) -> Any:
            req = admin_pb2.NodeStatusRequest(include_digests=include_digests)
            return await self.peers.admin(n.address).NodeStatus(req, timeout=3.0)

        answers = await asyncio.gather(*(ask(n) for n in others), return_exceptions=True)
        unreachable = []
        for n, ans in zip(others, answers, strict=True):
            if isinstance(ans, BaseException):
                unreachable.append(n.node_id)
            else:
                replicas.extend(ans.replicas)
        for r in replicas:
            if r.role == "leader":
                self.routes[(r.queue, r.partition)] = r.node
        return replicas, unreachable

    async def partition_infos(self, q: Any) -> list[Any]:
        replicas, _ = await self.all_status()
        leaders = {r.partition: r for r in replicas if r.queue == q.name and r.role == "leader"}
        infos = []
        for a in self.node.view.assignments(q.name):
            r = leaders.get(a.partition)
            nid = r.node if r is not None else ""
            infos.append(
                queue_pb2.PartitionInfo(
                    partition=a.partition,
                    leader=nid,
                    leader_address=(self.node.node_address(nid) or "") if nid else "",
                    replicas=[x.node_id for x in a.replicas],
                    epoch=a.epoch,
                    earliest_offset=r.earliest_offset if r else 0,
                    latest_offset=r.next_offset if r else 0,
                    commit_index=r.commit_index if r else 0,
                    messages=r.messages if r else 0,
                    in_flight=r.in_flight if r else 0,
                )
            )
        return infos

    # ---- queue lifecycle (metadata leader) -----------------------------------------------------
    async def queue_info(self, name: str, depth: bool = True) -> Any:
        q = self.node.queue_spec(name)
        info = queue_pb2.QueueInfo(
            name=q.name, config=convert.spec_to_pb(q.spec), created_ms=q.created_ms
        )
        if depth:
            for p in await self.partition_infos(q):
                info.messages += p.messages
                info.in_flight += p.in_flight
        return info

    async def _metadata_call(self, forwarded: bool, method: str, request: Any) -> Any | None:
        """None if this node leads the metadata group; else the leader's answer."""
        md = self.node.metadata
        if md is not None and md.is_leader():
            return None
        address = self.node.metadata_leader_address()
        if forwarded or not address or address == self.node.address:
            raise errors.NotLeader("not the metadata leader", address)
        return await self.peers.forward(address, method, request, CREATE_WAIT_S + 5)

    async def create_queue(self, name: str, spec: QueueSpec, forwarded: bool) -> Any:
        request = queue_pb2.CreateQueueRequest(name=name, config=convert.spec_to_pb(spec))
        remote = await self._metadata_call(forwarded, "CreateQueue", request)
        if remote is not None:
            await self._wait_for_queue(name)
            return remote
        nodes = [n for n in self.node.view.nodes().values() if n.state == "alive"]
        existing = self.node.view.queue(name)
        if existing is None:
            if spec.replication_factor > len(nodes):
                raise errors.InvalidArgument(
                    "config.replication_factor",
                    f"{spec.replication_factor} replicas need {spec.replication_factor} live "
                    f"nodes; the cluster has {len(nodes)}",
                )
            if spec.dead_letter_queue and self.node.view.queue(spec.dead_letter_queue) is None:
                raise errors.InvalidArgument(
                    "config.dead_letter_queue", f"queue {spec.dead_letter_queue!r} does not exist"
                )
        if existing is not None:
            # Idempotent re-create: the metadata machine answers (same spec ->
            # the queue, different -> AlreadyExists); never place twice.
            assignments = self.node.view.assignments(name)
        else:
            assignments = place_partitions(
                nodes, self._all_assignments(), spec.partitions, spec.replication_factor
            )
        await self.node.submit_metadata(
            meta.CreateQueue(
                name=name, config=spec, assignments=tuple(assignments), now_ms=_now_ms()
            )
        )
        await self._wait_for_leaders(name)
        return await self.queue_info(name, depth=False)

    def _all_assignments(self) -> list[Any]:
        out: list[Any] = []
        for q in self.node.view.queues():
            out.extend(self.node.view.assignments(q.name))
        return out

    async def _wait_for_queue(self, name: str) -> None:
        deadline = time.monotonic() + CREATE_WAIT_S
        while self.node.view.queue(name) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def _wait_for_leaders(self, name: str) -> None:
        """Return once every partition has a leader (so a send right after
        create works), or after CREATE_WAIT_S (partitions still electing)."""
        q = self.node.queue_spec(name)
        deadline = time.monotonic() + CREATE_WAIT_S
        while time.monotonic() < deadline:
            infos = await self.partition_infos(q)
            if infos and all(p.leader for p in infos):
                return
            await asyncio.sleep(0.1)
        log.warning("queue %s: not every partition has a leader yet", name)

    async def delete_queue(self, name: str, forwarded: bool) -> None:
        self.node.queue_spec(name)
        request = queue_pb2.DeleteQueueRequest(name=name)
        remote = await self._metadata_call(forwarded, "DeleteQueue", request)
        if remote is None:
            await self.node.submit_metadata(meta.DeleteQueue(name=name))


def _now_ms() -> int:
    return int(time.time() * 1000)
