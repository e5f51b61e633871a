"""The SDK's operations surface: replica moves, plans, node states and the
metadata group's voters (what ``raftq partitions/leaders/node/controller``
run). Mixed into ``Surface``, so ``Client`` runs these to their result and
``AsyncClient`` returns coroutines of them.

Every call goes to the metadata leader: any node answers NotLeader with the
leader's address, which the SDK follows. Results are the AdminService
messages (``raft_queue._proto.raft_queue.v1.admin_pb2``): ``MoveInfo``,
``PlanResponse``, ``NodeInfo``, ``ControllersResponse``. Mutating calls are
not retried after an unknown outcome (a second ``move_partition`` of the
same partition would be refused as "in flight"); look with ``list_moves``
or ``list_controllers`` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.client import moving
from raft_queue.client.calls import Call, Flow


def _admin(rpc: str, request: Any, mutating: bool = True) -> Flow[Any]:
    response = yield Call(rpc, request, admin=True, mutating=mutating, idempotent=not mutating)
    return response


class AdminSurface:
    """Operations methods; ``_run`` is the client's (see ``client.Surface``)."""

    def _run(self, flow: Flow[Any]) -> Any:
        raise NotImplementedError

    # ---- replica moves ---------------------------------------------------------
    def move_partition(
        self,
        queue: str,
        partition: int,
        from_node: str,
        to_node: str,
        to_port: int = 0,
        throttle_bytes_per_s: int = 0,
    ) -> Any:
        """Record a move of ``partition``'s replica from ``from_node`` to
        ``to_node`` (port 0: its lowest free one); the metadata leader runs it.
        ``throttle_bytes_per_s`` limits the new replica's catch-up (0: the
        cluster's ``move_throttle_bytes_per_s``). Returns the ``MoveInfo``."""
        req = admin_pb2.MovePartitionRequest(
            queue=queue, partition=partition, from_node=from_node, to_node=to_node,
            to_port=to_port, throttle_bytes_per_s=throttle_bytes_per_s,
        )  # fmt: skip
        return self._run(_admin("MovePartition", req))

    def cancel_move(self, queue: str, partition: int) -> Any:
        """Cancel ``partition``'s move (refused once it removes the old replica)."""
        req = admin_pb2.CancelMoveRequest(queue=queue, partition=partition)
        return self._run(_admin("CancelMove", req))

    def list_moves(self) -> Any:
        """Moves in flight (``ListMovesResponse.moves``), with catch-up progress."""
        return self._run(_admin("ListMoves", admin_pb2.ListMovesRequest(), mutating=False))

    def transfer_leader(self, queue: str, partition: int, to_node: str) -> Any:
        """Make ``to_node`` (a replica) the preferred leader of ``partition``."""
        req = admin_pb2.TransferLeaderRequest(queue=queue, partition=partition, to_node=to_node)
        return self._run(_admin("TransferLeader", req))

    def plan(self, kind: str, node: str = "", max_moves: int = 0) -> Any:
        """A ``rebalance``, ``leaders`` or ``drain`` (of ``node``) plan; nothing runs."""
        req = admin_pb2.PlanRequest(kind=kind, node=node, max_moves=max_moves)
        return self._run(_admin("Plan", req, mutating=False))

    def set_managed_by(self, cluster_name: str, managers: Sequence[str]) -> Any:
        """Record that the external manager at ``managers`` manages this cluster
        as ``cluster_name`` (both empty: unmanaged); the manager calls it
        itself (manager/health.py). Idempotent. ``SetManagedByResponse``."""
        req = admin_pb2.SetManagedByRequest(cluster_name=cluster_name, managers=list(managers))
        return self._run(_admin("SetManagedBy", req, mutating=False))

    # ---- moving a queue between clusters (manager/moves.py) ----------------------------
    def fence_queue(self, queue: str, fenced: bool = True, partitions: Sequence[int] = ()) -> Any:
        """Fence ``queue`` (no sends, no leases; acks still apply) or unfence it
        (``FenceQueueResponse``: fenced, partitions, fenced_partitions);
        ``partitions``: only these (a partial move)."""
        return self._run(moving.fence_queue(queue, fenced, partitions))

    def export_partition(
        self, queue: str, partition: int, offset: int = 0, max_messages: int = 1000
    ) -> Any:
        """``partition``'s retained records from ``offset`` with their delivery
        state, its group offsets and whether it had applied a fence
        (``ExportPartitionResponse``)."""
        router = self._router  # type: ignore[attr-defined]
        return self._run(moving.export_partition(router, queue, partition, offset, max_messages))

    def export_dedup(
        self, queue: str, partition: int, after: bytes = b"", max_entries: int = 1000
    ) -> Any:
        """A page of ``partition``'s live dedup entries after key ``after``
        (``ExportDedupResponse``: entries, next_key, done, fenced)."""
        router = self._router  # type: ignore[attr-defined]
        return self._run(moving.export_dedup(router, queue, partition, after, max_entries))

    def seed_dedup(self, queue: str, partition: int, entries: Sequence[Any]) -> Any:
        """Plant ``DedupEntry`` messages in ``partition``'s dedup table
        (``SeedDedupResponse``: how many were new there)."""
        router = self._router  # type: ignore[attr-defined]
        return self._run(moving.seed_dedup(router, queue, partition, entries))

    def carry_leases(self, queue: str, partition: int, leases: Sequence[Any]) -> Any:
        """Lease ``partition``'s copies named by ``CarriedLease`` messages until
        their deadlines (``CarryLeasesResponse``: how many were new)."""
        router = self._router  # type: ignore[attr-defined]
        return self._run(moving.carry_leases(router, queue, partition, leases))

    def settle_carried(
        self, queue: str, partition: int, offsets: Sequence[int], action: str, until_ms: int = 0
    ) -> Any:
        """Ack / nack / change the deadline of carried leases (``SettleCarriedResponse``)."""
        router = self._router  # type: ignore[attr-defined]
        flow = moving.settle_carried(router, queue, partition, offsets, action, until_ms)
        return self._run(flow)

    # ---- encryption at rest --------------------------------------------------------
    def rotate_queue_key(self, queue: str) -> Any:
        """A new data key for ``queue``: new messages are sealed with it, older
        ones stay readable (``RotateQueueKeyResponse``: key_id, master_id)."""
        req = admin_pb2.RotateQueueKeyRequest(queue=queue)
        return self._run(_admin("RotateQueueKey", req))

    def rotate_master_key(self) -> Any:
        """Rewrap every data key under the key provider's current master key
        (``RotateMasterKeyResponse``: rewrapped, master_id)."""
        return self._run(_admin("RotateMasterKey", admin_pb2.RotateMasterKeyRequest()))

    # ---- nodes and controllers ---------------------------------------------------
    def set_node_state(self, node: str, state: str) -> Any:
        """``alive``, ``draining`` or ``removed`` (an operator's change)."""
        req = admin_pb2.SetNodeStateRequest(node=node, state=state)
        return self._run(_admin("SetNodeState", req))

    def change_controller(self, action: str, node: str) -> Any:
        """Start adding (``add``) or removing (``remove``) ``node`` as a voter
        of the metadata group; ``list_controllers`` shows it finish."""
        req = admin_pb2.ChangeControllerRequest(action=action, node=node)
        return self._run(_admin("ChangeController", req))

    def list_controllers(self) -> Any:
        """The metadata group's voters and the change in flight, if any."""
        req = admin_pb2.ListControllersRequest()
        return self._run(_admin("ListControllers", req, mutating=False))

    # ---- principals and grants (docs/security.md) ----------------------------------
    def create_principal(self, name: str) -> Any:
        """A new principal; the ``PrincipalTokenResponse`` holds its token,
        shown this once (the cluster keeps only its SHA-256)."""
        return self._run(_admin("CreatePrincipal", admin_pb2.CreatePrincipalRequest(name=name)))

    def rotate_principal(self, name: str) -> Any:
        """A new token for ``name`` (in the ``PrincipalTokenResponse``); the
        old one stops working at once."""
        return self._run(_admin("RotatePrincipal", admin_pb2.RotatePrincipalRequest(name=name)))

    def delete_principal(self, name: str) -> None:
        """Delete ``name`` and its grants; its token stops working."""
        self._run(_admin("DeletePrincipal", admin_pb2.DeletePrincipalRequest(name=name)))

    def list_principals(self, name: str = "") -> list[Any]:
        """Every principal (or only ``name``) with its grants: ``PrincipalInfo`` messages."""
        req = admin_pb2.ListPrincipalsRequest(name=name)
        return list(self._run(_admin("ListPrincipals", req, mutating=False)).principals)

    def add_grant(self, principal: str, pattern: str, operations: Sequence[str]) -> Any:
        """Allow ``operations`` (send, receive, read, manage, admin) on the queues
        ``pattern`` matches (a name, a prefix ending in ``*``, or ``*``)."""
        req = admin_pb2.GrantRequest(principal=principal, pattern=pattern, operations=operations)
        return self._run(_admin("AddGrant", req))

    def remove_grant(self, principal: str, pattern: str, operations: Sequence[str] = ()) -> Any:
        """Take back ``operations`` on ``pattern`` (all of them when empty)."""
        req = admin_pb2.GrantRequest(principal=principal, pattern=pattern, operations=operations)
        return self._run(_admin("RemoveGrant", req))

    def introspect(self, token: str) -> Any:
        """Who ``token`` is on this cluster (an ``IntrospectResponse``: active,
        principal, superuser, grants); the external manager's check of a
        caller that is not its admin."""
        req = admin_pb2.IntrospectRequest(token=token)
        return self._run(_admin("Introspect", req, mutating=False))

    # ---- quotas and usage (docs/operations.md "Quotas and usage") --------------

    def set_quota(
        self, principal: str, messages_per_s: int = 0, bytes_per_s: int = 0,
        burst_s: float = 1.0, queue: str = "",
    ) -> Any:  # fmt: skip
        """Set ``principal``'s quota (on ``queue``; "" = all its queues
        together); 0 = no limit on that measure. Returns a ``QuotaInfo``."""
        req = admin_pb2.QuotaInfo(principal=principal, queue=queue, messages_per_s=messages_per_s,
                                  bytes_per_s=bytes_per_s, burst_s=burst_s)  # fmt: skip
        return self._run(_admin("SetQuota", req, mutating=False))  # same request = same result

    def remove_quota(self, principal: str, queue: str = "") -> Any:
        req = admin_pb2.RemoveQuotaRequest(principal=principal, queue=queue)
        return self._run(_admin("RemoveQuota", req))

    def list_quotas(self, principal: str = "") -> list[Any]:
        req = admin_pb2.ListQuotasRequest(principal=principal)
        return list(self._run(_admin("ListQuotas", req, mutating=False)).quotas)

    def usage(self, principal: str = "", queue: str = "", since_ms: int = 0) -> list[Any]:
        """Usage rows (``UsageRow``) per principal, queue, hour and operation,
        as flushed to the metadata group (nodes flush about every second)."""
        req = admin_pb2.GetUsageRequest(principal=principal, queue=queue, since_ms=since_ms)
        return list(self._run(_admin("GetUsage", req, mutating=False)).rows)
