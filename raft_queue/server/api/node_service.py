"""NodeService: the calls only other nodes of the cluster make (status of
this node's replicas, heartbeats, membership steps of a move, the metadata
copy of a non-voter). Each arrives signed by its node; the interceptor in
``server/api/node_identity.py`` refused anything else before we get here.

Registration: every node heartbeats the metadata leader once a second
(``registration_loop``); the leader registers a node it does not know (or
whose address changed) through the metadata group. Liveness is kept in the
leader's memory only; only state changes go through Raft.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2, node_pb2_grpc
from raft_queue.core import metadata as meta
from raft_queue.server.api import usage
from raft_queue.server.api.queue_service import handled
from raft_queue.server.cluster import Cluster
from raft_queue.server.control.liveness import Liveness
from raft_queue.server.control.members import member_change

if TYPE_CHECKING:
    from raft_queue.server.node import Node

log = logging.getLogger(__name__)


class NodeService(node_pb2_grpc.NodeServiceServicer):
    def __init__(self, cluster: Cluster, liveness: Liveness) -> None:
        self.cluster = cluster
        self.node = cluster.node
        self.liveness = liveness
        # Fills NodeStatusResponse's counters, ready and metrics_address
        # (observability/node.py sets it); None leaves them empty.
        self.node_status_extras: Callable[[Any], None] | None = None

    @handled
    async def NodeStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        resp = admin_pb2.NodeStatusResponse(
            node=self.node.id,
            replicas=self.cluster.local_status(request.include_digests),
            metadata_version=self.node.view.version,
        )
        if request.include_counters and self.node_status_extras is not None:
            self.node_status_extras(resp)
        return resp

    @handled
    async def Heartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.liveness.beat(request.node, request.failure)
        low = self.node.disk.report(request.node, request.disk_low)
        await register_if_needed(self.node, request)
        return admin_pb2.HeartbeatResponse(metadata_version=self.node.view.version, disk_low=low)

    @handled
    async def GetMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        view = self.node.view
        newer = view.version > request.known_version
        return admin_pb2.GetMetadataResponse(
            version=view.version,
            image=view.to_bytes() if newer else b"",
            leader_address=self.node.metadata_leader_address(),
            leader_ready=self.node.metadata_leader_ready(),
        )

    @handled
    async def MemberChange(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await member_change(self.node, request)

    @handled
    async def WithdrawPoll(self, request: Any, context: Any) -> Any:  # noqa: N802
        """End a forwarded Receive whose caller stopped waiting (dataplane/withdrawals.py)."""
        found = self.cluster.forwarded_polls.withdraw(request.poll_id)
        return admin_pb2.WithdrawPollResponse(found=found)

    @handled
    async def FlushUsage(self, request: Any, context: Any) -> Any:  # noqa: N802
        """A node's usage batch (server/api/usage.py), on the metadata leader."""
        md = self.node.metadata
        if md is None or not md.is_leader():
            raise errors.NotLeader("not the metadata leader", self.node.metadata_leader_address())
        applied = await usage.record(
            self.node, request.node, request.seq, usage.rows_of(request.rows)
        )
        return admin_pb2.FlushUsageResponse(applied_seq=applied)


def heartbeat_request(node: Node) -> Any:
    c = node.config
    return admin_pb2.HeartbeatRequest(
        node=node.id,
        address=node.address,
        raft_host=c.raft_host,
        rack=c.rack,
        metadata_version=node.view.version,
        raft_port_min=c.raft_port_min,
        raft_port_max=c.raft_port_max,
        controller=node.metadata is not None,
        metadata_raft_port=c.metadata_raft_port,
        disk_low=node.disk.check(),
        failure=node.disk.failure(),
    )


async def register_if_needed(node: Node, req: Any) -> None:
    """On the metadata leader: register ``req``'s node if unknown or changed."""
    known = node.view.nodes().get(req.node)
    if known is not None and (known.address, known.raft_host, known.metadata_raft_port) == (
        req.address,
        req.raft_host,
        req.metadata_raft_port,
    ):
        return
    await node.submit_metadata(
        meta.RegisterNode(
            node_id=req.node,
            address=req.address,
            raft_host=req.raft_host,
            raft_port_min=req.raft_port_min,
            raft_port_max=req.raft_port_max,
            rack=req.rack,
            controller=req.controller,
            now_ms=int(time.time() * 1000),
            metadata_raft_port=req.metadata_raft_port,
        )
    )


async def registration_loop(cluster: Cluster, period_s: float = 1.0) -> None:
    """Heartbeat the metadata leader forever (registering this node first)."""
    node = cluster.node
    while True:
        try:
            req = heartbeat_request(node)
            if node.metadata is not None and node.metadata.is_leader():
                node.disk.adopt(node.disk.report(node.id, req.disk_low))
                await register_if_needed(node, req)
            else:
                address = node.metadata_leader_address()
                if address and address != node.address:
                    resp = await cluster.peers.node(address).Heartbeat(req, timeout=3.0)
                    node.disk.adopt(dict(resp.disk_low))
        except Exception as exc:  # the next beat retries; log without traceback spam
            log.debug("heartbeat failed: %s", exc)
        registered = node.id in node.view.nodes()
        await asyncio.sleep(period_s if registered else 0.1)
