"""Cluster-wide view for request handlers: routing, fan-out, submission, status.

Leader routing: a partition's leader is known exactly when this node hosts a
replica that has heard from it (its Raft state); otherwise from the last NodeStatus answers
(``routes``), and failing that the preferred (first) replica. A wrong guess
costs one NotLeader, which carries the right leader back to the client.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.replication.partition import PartitionReplica
from raft_queue.server.control.metadata_barrier import MetadataBarrier
from raft_queue.server.dataplane.encryption import NodeCrypto
from raft_queue.server.dataplane.receipts import Receipts
from raft_queue.server.dataplane.wakeups import Wakeups
from raft_queue.server.dataplane.withdrawals import ForwardedPolls
from raft_queue.server.node import Node
from raft_queue.server.peers import Peers

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord

log = logging.getLogger(__name__)

# How often a request waiting for a partition's election looks again
# (Cluster.await_leader): a poll costs a few dict lookups.
LEADER_POLL_S = 0.01


class Cluster:
    def __init__(self, node: Node, peers: Peers, timeout_s: float = 10.0) -> None:
        self.node = node
        self.peers = peers
        self.timeout_s = timeout_s
        self.routes: dict[tuple[str, int], str] = {}
        self.receipts = Receipts(node.secret)  # makes and checks receipt strings
        self.crypto = NodeCrypto(node)  # encryption at rest (server/dataplane/encryption.py)
        self._rr = itertools.count()
        # Looks twice before "does not exist" or refusing a token (control/metadata_barrier.py).
        self.barrier = MetadataBarrier(node, peers)
        # This node's QueueCounters (observability/node.py sets it when metrics
        # are on); for ClusterStatus(include_counters).
        self.local_counters: Callable[[], list[Any]] = list
        # Forwarded Receives running here, to end on WithdrawPoll (dataplane/withdrawals.py).
        self.forwarded_polls = ForwardedPolls()

    @property
    def wakeups(self) -> Wakeups:
        return self.node.wakeups

    # ---- partitions and leaders ------------------------------------------------------
    def partition_of(self, i: int, entry: Any, partitions: int) -> int:
        """Round robin, for an entry with no partition, key or dedup id."""
        return next(self._rr) % partitions

    def leader_id(self, queue: str, part: int) -> str | None:
        replica = self.node.replica(queue, part)
        if replica is not None:
            if replica.is_leader():
                return self.node.id
            leader = replica.leader_address()
            if leader and not replica.leader_lost():
                return self.node.raft_address_to_node().get(leader)
            if leader or replica.term() > 0:
                return None  # an election in progress, or about to start
            # A new partition whose leader has not reached this replica yet
            # (it was elected before this replica started; a few hundred ms):
            # guess as a node without a replica does, rather than refuse.
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
        leads = replica is not None and replica.is_leader()
        if leads and (not reads or replica.can_serve_leader_reads()):  # type: ignore[union-attr]
            return replica
        if forwarded:
            raise errors.NotLeader(
                f"{queue}[{part}]: this node does not lead it", self.leader_address(queue, part)
            )
        return None

    async def forward_to_leader(self, queue: str, part: int, method: str, request: Any) -> Any:
        """Forward to the partition's leader. With no leader known (an election,
        or a leader whose link is down), wait for one (``await_leader``): a
        remote one gets the request; if this node won, NotLeader names it, and
        the client retries here at once instead of backing off."""
        address = self.leader_address(queue, part)
        if not address or address == self.node.address:
            address = await self.await_leader(queue, part)
            if address == self.node.address:
                raise errors.NotLeader(f"{queue}[{part}]: elected here meanwhile", address)
        return await self.peers.forward(address, method, request, self.timeout_s)

    def split_receivable(
        self, q: QueueRecord
    ) -> tuple[list[tuple[int, PartitionReplica]], list[str]]:
        """``split_partitions`` over the partitions Receive may lease from: a
        FIFO queue's split children wait for their parents to drain
        (core/placement_keys.py, "Gating"). The gate is read from the current
        view, not ``q``: a long poll that began before a parent drained sees
        its plan change and plans again."""
        if not q.ranges or q.spec.ordering != "fifo":
            return self.split_partitions(q.name, q.spec.partitions)
        now = self.node.view.queue(q.name)
        if now is not None and now.uid == q.uid:
            q = now
        return self.split_partitions(q.name, q.spec.partitions, q.layout.gated())

    async def await_leader(self, queue: str, part: int) -> str:
        """The leader's address once one is known and is not this node's
        stale view of itself, polled every ``LEADER_POLL_S`` for up to one
        maximum election timeout (a timer-found failure elects within about
        that); Unavailable after that. Failover (docs/internals.md): answering
        when the election ends beats a client's exponential backoff by up to
        a second. Not longer: a node on the minority side of a cut never
        learns the leader, and its Unavailable sends the SDK to another node."""
        limit = self.node.config.raft.election_timeout_max_s
        deadline = time.monotonic() + limit
        while True:
            address = self.leader_address(queue, part)
            replica = self.node.replica(queue, part)
            if address and address != self.node.address:
                return address
            if address and replica is not None and replica.can_serve_leader_reads():
                return address  # elected here (and ready): the caller redirects to us
            if time.monotonic() >= deadline:
                raise errors.Unavailable(
                    f"{queue}[{part}]: no leader after {limit:g} s (election in progress)"
                )
            await asyncio.sleep(LEADER_POLL_S)

    def split_partitions(
        self, queue: str, partitions: int, skip: Collection[int] = ()
    ) -> tuple[list[tuple[int, PartitionReplica]], list[str]]:
        """Local leaders, and the addresses of other nodes leading the rest
        (but ``skip``)."""
        start = next(self._rr)
        local: list[tuple[int, PartitionReplica]] = []
        remote: list[str] = []
        for k in range(partitions):
            part = (start + k) % partitions
            if part in skip:
                continue
            replica = self.node.replica(queue, part)
            if replica is not None and replica.is_leader():
                local.append((part, replica))
                continue
            address = self.leader_address(queue, part)
            if address and address != self.node.address and address not in remote:
                remote.append(address)
        return local, remote

    async def submit(self, replica: PartitionReplica, command: Any) -> Any:
        self.node.ensure_configured(replica)
        result = await replica.submit_awaitable(command, self.timeout_s)
        if isinstance(result, BaseException):
            raise result
        return result

    async def submit_append(self, replica: PartitionReplica, command: Any) -> tuple[Any, str]:
        """Submit an Append; the result and the durability level it reached
        (``"leader"`` when acked before replication, see PartitionReplica)."""
        self.node.ensure_configured(replica)
        result, reached = await replica.submit_append_awaitable(command, self.timeout_s)
        if isinstance(result, BaseException):
            raise result
        return result, reached

    def nothing_visible(self, replica: PartitionReplica) -> bool:
        """True if no message of the partition can be leased now: each is
        in flight or delayed (skip a Lease that would find nothing). Counts
        err towards "visible" (a record Lease has not reached counts so even
        while its delay runs; FIFO-blocked ones too), never the other way."""
        st = replica.stats(_now_ms())
        return bool(st.messages - st.in_flight - st.delayed <= 0)

    # ---- status ---------------------------------------------------------------------------
    def local_status(self, include_digests: bool) -> list[Any]:
        now = _now_ms()
        out = []
        for key, replica in list(self.node.replicas.items()):
            st = replica.status()
            if st["role"] == "failed":
                out.append(_failed_status(key, self.node.id, st, replica))
                continue
            try:
                stats = replica.stats(now)
            except errors.Unavailable:
                continue  # stopped just now by the reconciler (its own thread)
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
                    delayed=stats.delayed,
                    dead=stats.dead,
                    bytes=stats.bytes,
                    oldest_timestamp_ms=getattr(stats, "oldest_timestamp_ms", 0),
                    digest=replica.digest() if include_digests else "",
                    has_quorum=st["has_quorum"],
                    snapshot_failures=replica.snapshot_failures,
                    sealed=getattr(stats, "sealed", False),
                )
            )
        return out

    async def all_status(
        self, include_digests: bool = False, counters: dict[str, list[Any]] | None = None
    ) -> tuple[list[Any], list[str]]:
        """ReplicaStatus from every node (self included) and the unreachable ones;
        ``counters`` given: filled with each answering node's QueueCounters."""
        replicas = self.local_status(include_digests)
        others = [n for n in self.node.view.nodes().values() if n.node_id != self.node.id]
        if counters is not None:
            counters[self.node.id] = self.local_counters()

        async def ask(n: Any) -> Any:
            req = admin_pb2.NodeStatusRequest(
                include_digests=include_digests, include_counters=counters is not None
            )
            return await self.peers.node(n.address).NodeStatus(req, timeout=3.0)

        answers = await asyncio.gather(*(ask(n) for n in others), return_exceptions=True)
        unreachable = []
        for n, ans in zip(others, answers, strict=True):
            if isinstance(ans, BaseException):
                unreachable.append(n.node_id)
            else:
                replicas.extend(ans.replicas)
                if counters is not None:
                    counters[n.node_id] = list(ans.counters)
        for r in replicas:
            if r.role == "leader":
                self.routes[(r.queue, r.partition)] = r.node
        return replicas, unreachable

    async def partition_infos(self, q: QueueRecord) -> list[Any]:
        replicas, _ = await self.all_status()
        leaders = {r.partition: r for r in replicas if r.queue == q.name and r.role == "leader"}
        infos = []
        record = self.node.view.queue(q.name) or q
        layout = record.layout
        gated = layout.gated() if record.spec.ordering == "fifo" else frozenset()
        for a in self.node.view.assignments(q.name):
            if a.partition >= layout.version:
                continue  # a split this record does not show yet
            r = leaders.get(a.partition)
            kr = layout.ranges[a.partition]
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
                    hash_modulus=kr.modulus,
                    hash_residue=kr.residue,
                    parent=kr.parent,
                    state=kr.state,
                    gated=a.partition in gated,
                )
            )
        return infos


def _failed_status(key: Any, node_id: str, st: dict[str, Any], replica: Any) -> Any:
    """A fail-stopped replica: role "failed" and why (no stats: it reads nothing)."""
    return admin_pb2.ReplicaStatus(
        queue=key.queue,
        partition=key.partition,
        node=node_id,
        role="failed",
        failure=st["failure"],
        last_applied=st["last_applied"],
        snapshot_failures=replica.snapshot_failures,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)
