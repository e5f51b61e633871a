"""AdminService: cluster status and operations, for operators and the CLI.

The calls nodes make to each other are NodeService (server/api/node_service.py),
which only signed node calls reach.
"""

from __future__ import annotations

import logging
from typing import Any

from raft_queue._proto.raft_queue.v1 import admin_pb2, admin_pb2_grpc
from raft_queue.server.api.principals import Principals
from raft_queue.server.api.queue_service import handled
from raft_queue.server.api.quota import Quotas
from raft_queue.server.api.usage import get_usage
from raft_queue.server.cluster import Cluster
from raft_queue.server.control.controllers import controllers_pb
from raft_queue.server.control.liveness import Liveness
from raft_queue.server.control.operations import Operations
from raft_queue.server.control.redirects import set_managed_by
from raft_queue.server.dataplane.exporting import Exporter

log = logging.getLogger(__name__)


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, cluster: Cluster, liveness: Liveness, operations: Operations) -> None:
        self.cluster = cluster
        self.node = cluster.node
        self.liveness = liveness
        self.ops = operations
        self.principals = Principals(cluster.node)
        self.quotas = Quotas(cluster.node)
        self.exporter = Exporter(cluster)

    @handled
    async def ClusterStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        counters: dict[str, list[Any]] | None = {} if request.include_counters else None
        replicas, unreachable = await self.cluster.all_status(request.include_digests, counters)
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
            **_claim_pb(self.node.view),
            counters=[
                admin_pb2.NodeCounters(node=n, queues=qs) for n, qs in (counters or {}).items()
            ],
        )

    @handled
    async def SetManagedBy(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await set_managed_by(self.node, request)

    # ---- operations (metadata leader) -------------------------------------------------
    # ---- encryption at rest (metadata leader; server/dataplane/encryption.py) -----------------
    @handled
    async def RotateQueueKey(self, request: Any, context: Any) -> Any:  # noqa: N802
        key = await self.cluster.crypto.rotate_key(request.queue)
        return admin_pb2.RotateQueueKeyResponse(key_id=key.key_id, master_id=key.master_id)

    @handled
    async def RotateMasterKey(self, request: Any, context: Any) -> Any:  # noqa: N802
        count, master = await self.cluster.crypto.rotate_master()
        return admin_pb2.RotateMasterKeyResponse(rewrapped=count, master_id=master)

    @handled
    async def FenceQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.exporter.fence(request)

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
    async def ChangeController(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.ops.change_controller(request, self.liveness)

    @handled
    async def ListControllers(self, request: Any, context: Any) -> Any:  # noqa: N802
        return controllers_pb(self.node)

    # ---- principals and grants (server/api/principals.py) -------------------------------
    @handled
    async def CreatePrincipal(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.principals.create(request)

    @handled
    async def RotatePrincipal(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.principals.rotate(request)

    @handled
    async def DeletePrincipal(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.principals.delete(request)

    @handled
    async def ListPrincipals(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self.principals.list(request)

    @handled
    async def AddGrant(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.principals.add_grant(request)

    @handled
    async def RemoveGrant(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.principals.remove_grant(request)

    @handled
    async def Introspect(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self.principals.introspect(request)

    # ---- quotas and usage (server/api/quota.py, usage.py) ------------------------------
    @handled
    async def SetQuota(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.quotas.set(request)

    @handled
    async def RemoveQuota(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.quotas.remove(request)

    @handled
    async def ListQuotas(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self.quotas.list(request)

    @handled
    async def GetUsage(self, request: Any, context: Any) -> Any:  # noqa: N802
        return get_usage(self.cluster.node, request)


def _claim_pb(view: Any) -> dict[str, Any]:
    """ClusterStatus fields of the external manager's claim (none: unmanaged)."""
    claim = view.managed_by()
    return {"cluster_name": claim.cluster, "managers": list(claim.managers)} if claim else {}
