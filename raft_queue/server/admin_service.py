"""AdminService: cluster status, and the node-to-node calls behind it.

Registration: every node heartbeats the metadata leader once a second
(``registration_loop``); the leader registers a node it does not know (or
whose address changed) through the metadata group. Liveness is kept in the
leader's memory only; only state changes go through Raft.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from raft_queue._proto.raft_queue.v1 import admin_pb2, admin_pb2_grpc
from raft_queue.core import metadata as meta
from raft_queue.server.cluster import Cluster
from raft_queue.server.controllers import controllers_pb
from raft_queue.server.liveness import Liveness
from raft_queue.server.members import member_change
from raft_queue.server.operations import Operations
from raft_queue.server.queue_service import handled

log = logging.getLogger(__name__)


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, cluster: Cluster, liveness: Liveness, operations: Operations) -> None:
        self.c = cluster
        self.node = cluster.node
        self.liveness = liveness
        self.ops = operations

    @handled
    async def ClusterStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        replicas, unreachable = await self.c.all_status(request.include_digests)
        leader = self.node.metadata_leader_id() or ""
        nodes = []
        for n in sorted(self.node.view.nodes().values(), key=lambda n: n.node_id):
            age = self.liveness.age_s(n.node_id)
            nodes.append(
                admin_pb2.NodeInfo(
                    id=n.node_id,
                    address=n.address,
                    state=n.state,  # as judged by the metadata leader; see unreachable
                    controller=n.controller,
                    metadata_leader=n.node_id == leader,
                    rack=n.rack,
                    last_heartbeat_age_ms=int(age * 1000) if age is not None else 0,
                    disk_low=self.node.disk.low_reason(n.node_id),
                    failure=self.node.disk.failure()
                    if n.node_id == self.node.id
                    else self.liveness.failed.get(n.node_id, ""),
                )
            )
        voters = controllers_pb(self.node)
        return admin_pb2.ClusterStatusResponse(
            nodes=nodes,
            metadata_leader=leader,
            metadata_version=self.node.view.version,
            replicas=replicas,
            unreachable=unreachable,
            controllers=voters.controllers,
            controller_change=voters.change,
        )

    @handled
    async def NodeStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        return admin_pb2.NodeStatusResponse(
            node=self.node.id,
            replicas=self.c.local_status(request.include_digests),
            metadata_version=self.node.view.version,
        )

    @handled
    async def Heartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.liveness.beat(request.node, request.failure)
        low = self.node.disk.report(request.node, request.disk_low)
        await register_if_needed(self.node, request)
        return admin_pb2.HeartbeatResponse(metadata_version=self.node.view.version, disk_low=low)

    # ---- operations (metadata leader) -------------------------------------------------
    @handled
    async def MovePartition(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.ops.move(request)

    @handled
    async def CancelMove(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.ops.cancel(request)

    @handled
    async def ListMoves(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self.ops.list_moves()

    @handled
    async def TransferLeader(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.ops.transfer_leader(request)

    @handled
    async def SetNodeState(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.ops.set_node_state(request)

    @handled
    async def Plan(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self.ops.plan(request)

    @handled
    async def GetMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
        view = self.node.view
        newer = view.version > request.known_version
        return admin_pb2.GetMetadataResponse(
            version=view.version,
            image=view.to_bytes() if newer else b"",
            leader_address=self.node.metadata_leader_address(),
        )

    @handled
    async def MemberChange(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await member_change(self.node, request)

    @handled
    async def ChangeController(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.ops.change_controller(request, self.liveness)

    @handled
    async def ListControllers(self, request: Any, context: Any) -> Any:  # noqa: N802
        return controllers_pb(self.node)


def heartbeat_request(node: Any) -> Any:
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


async def register_if_needed(node: Any, req: Any) -> None:
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
                    resp = await cluster.peers.admin(address).Heartbeat(req, timeout=3.0)
                    node.disk.adopt(dict(resp.disk_low))
        except Exception as exc:  # the next beat retries; log without traceback spam
            log.debug("heartbeat failed: %s", exc)
        registered = node.id in node.view.nodes()
        await asyncio.sleep(period_s if registered else 0.1)
