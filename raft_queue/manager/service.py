"""ManagerService (proto/raft_queue/v1/manager.proto) on one manager process.

Every call runs on the leader (a follower answers NotLeader with the leader's
address, which client/manager_admin.py follows), reads too: a follower's copy
may lag, and a client that reads the mapping right after a queue was placed
must find it. And only once the leader's copy is current (``can_serve``): just
after the manager group restarted, a new leader answered a mapping one entry
older than the one it had acknowledged (a test saw it). Clients ask for the
mapping rarely (they cache it). Creating a queue
creates the per-cluster queues first (each cluster's CreateQueue is
idempotent), then records the mapping: a manager that dies in between leaves
per-cluster queues without a mapping, and the same create, retried, adopts
them (docs/operations.md).

Every call needs a manager admin token (``door``), as AdminService needs one
of a cluster's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import manager_pb2, manager_pb2_grpc
from raft_queue.client.models import config_from_pb, config_to_pb
from raft_queue.config import check_queue_name
from raft_queue.manager import move_state, placement, queue_update, state
from raft_queue.manager.callers import Callers
from raft_queue.manager.health import cluster_client, release
from raft_queue.manager.node import ManagerNode
from raft_queue.manager.sealing import TokenSeal
from raft_queue.security.identity import Authenticator, Identity
from raft_queue.server.api.status import abort_with

CLUSTER_CALL_TIMEOUT_S = 30.0  # one cluster's CreateQueue / GetQueue, retries included


def cluster_pb(
    record: state.ClusterRecord, view: state.ManagerMachine, heat: float | None = None
) -> Any:
    return manager_pb2.ClusterInfo(
        name=record.name,
        bootstrap=list(record.bootstrap),
        health=record.health,
        load=record.load,
        draining=record.draining,
        health_since_ms=record.health_since_ms,
        reason=record.reason,
        queues=view.queues_on(record.name),
        heat_msgs_per_s=-1.0 if heat is None else heat,
    )


def mapping_pb(queue: state.ManagedQueue) -> Any:
    homes = [manager_pb2.PartitionHome(cluster=h.cluster, local_partition=h.local)
             for h in queue.partitions]  # fmt: skip
    return manager_pb2.QueueMapping(
        name=queue.name, partitions=homes, config=config_to_pb(queue.config), pinned=queue.pinned
    )


def move_pb(move: move_state.QueueMove, error: str = "", partitions: int = 0) -> Any:
    return manager_pb2.QueueMoveInfo(
        queue=move.queue, source=move.source, target=move.target, phase=move.phase,
        started_ms=move.started_ms, phase_ms=move.phase_ms, finished_ms=move.finished_ms,
        copied=move.copied, partitions=partitions or len(move.partitions), error=error,
        moved_partitions=list(move.partitions), leases_left=len(move.leases),
    )  # fmt: skip


class ManagerService(manager_pb2_grpc.ManagerServiceServicer):
    def __init__(
        self, node: ManagerNode, seal: TokenSeal, door: Authenticator, moves: Any = None
    ) -> None:
        self._node = node
        self._seal = seal
        self._callers = Callers(door, node, seal)  # admins, or principals of the clusters
        self._moves = moves  # manager/moves.py MoveWatch: its steps' last errors
        # A cluster's heat per node as the leader's poller last measured it
        # (manager/main.py wires manager/health.py's meter in); None: unknown.
        self.heat_of: Callable[[str], float | None] = lambda name: None

    # ---- the edge ---------------------------------------------------------------------------
    async def _serve(
        self, context: Any, work: Callable[..., Awaitable[Any]], reader: bool = False
    ) -> Any:
        """Run ``work()`` on the leader for a manager admin; ``reader``: for any
        caller one of the clusters knows too (manager/callers.py), as
        ``work(identity)``."""
        try:
            authorization = ""
            for key, value in context.invocation_metadata() or ():
                if key == "authorization":
                    authorization = str(value)
            who = await self._callers.identify(authorization)
            if not who.superuser and not reader:
                raise errors.PermissionDenied(
                    f"{who.name!r} is no admin of this manager: it may only read the mapping"
                    " of the queues it holds grants on (GetMapping)"
                )
            if not self._node.is_leader():
                raise errors.NotLeader("not the manager leader", self._node.leader_address())
            if not self._node.can_serve():
                raise errors.Unavailable("the manager leader is catching up; retry")
            return await (work(who) if reader else work())
        except grpc.RpcError:
            raise
        except Exception as exc:
            await abort_with(context, exc)

    # ---- clusters ---------------------------------------------------------------------------
    async def AddCluster(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            bootstrap = tuple(a.strip() for a in request.bootstrap if a.strip())
            state.check_cluster(request.name, bootstrap)
            sealed = self._seal.seal(request.token, request.name)
            cmd = state.AddCluster(request.name, bootstrap, sealed, _now_ms())
            return cluster_pb(await self._node.submit(cmd), self._node.view)

        return await self._serve(context, work)

    async def RemoveCluster(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            record = await self._node.submit(state.RemoveCluster(request.name))
            await release(record, self._seal, 5.0)  # its nodes stop naming this manager
            return cluster_pb(record, self._node.view)

        return await self._serve(context, work)

    async def DrainCluster(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            cmd = state.SetDraining(request.name, not request.undrain)
            return cluster_pb(await self._node.submit(cmd), self._node.view)

        return await self._serve(context, work)

    async def ListClusters(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            view = self._node.view
            clusters = [
                cluster_pb(c, view, self.heat_of(name))
                for name, c in sorted(view.clusters().items())
            ]
            return manager_pb2.ListClustersResponse(
                clusters=clusters, version=view.version, leader=self._node.leader_address()
            )

        return await self._serve(context, work)

    # ---- queues -----------------------------------------------------------------------------
    async def CreateQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            check_queue_name(request.name)
            config = dataclasses.asdict(config_from_pb(request.config))
            partitions = int(config.get("partitions") or 1)
            homes = placement.plan_homes(self._node.view, partitions, tuple(request.clusters))
            return mapping_pb(await self._place(request.name, homes, config))

        return await self._serve(context, work)

    async def PlaceQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            check_queue_name(request.name)
            placed = self._node.view.queue(request.name)
            if placed is not None:
                if placed.clusters() == [request.cluster]:
                    return mapping_pb(placed)
                raise errors.FailedPrecondition(
                    f"queue {request.name!r} is placed on {placed.clusters()}: move it with "
                    "raftq queue move"
                )
            config = dataclasses.asdict(config_from_pb(request.config))
            existing = await self._existing(request.cluster, request.name)
            if existing is not None:  # adopt the queue that cluster already has
                config = dataclasses.asdict(existing.config)
            partitions = int(config.get("partitions") or 1)
            homes = placement.plan_homes(self._node.view, partitions, (request.cluster,))
            return mapping_pb(await self._place(request.name, homes, config))

        return await self._serve(context, work)

    async def ForgetQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            return mapping_pb(await self._node.submit(state.ForgetQueue(request.name)))

        return await self._serve(context, work)

    async def UpdateQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        """Forward the fields set to every cluster of the queue, then record the
        effective config; ``partitions`` grows a queue whole on one cluster by
        splits there (manager/queue_update.py). A manager dying in between
        leaves the clusters updated and the mapping behind: the same update,
        retried, is a no-op there and records it."""

        async def work() -> Any:
            check_queue_name(request.name)
            given = dataclasses.asdict(config_from_pb(request.config))
            changes = {k: v for k, v in given.items() if v is not None}
            queue = queue_update.check_update(self._node.view, request.name, changes)
            fields = queue_update.forwarded(queue, changes)
            info = None
            for cluster in queue.clusters():

                def update(client: Any) -> Any:
                    return client.update_queue(request.name, **fields)

                info = await self._on_cluster(cluster, update)
            assert info is not None  # a managed queue has a partition somewhere
            homes = queue_update.grown_homes(
                queue, int(info.config.partitions), state.PartitionHome
            )
            config = dataclasses.asdict(info.config)
            cmd = queue_update.UpdateQueue(request.name, homes, config)
            return mapping_pb(await self._node.submit(cmd))

        return await self._serve(context, work)

    async def GetMapping(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work(who: Identity) -> Any:
            view = self._node.view
            out = manager_pb2.GetMappingResponse(version=view.mapping_version)
            if request.known_version and request.known_version == view.mapping_version:
                out.unchanged = True
                return out
            queues = [q for q in view.queues() if who.superuser or who.sees(q.name)]
            hosting = {c for q in queues for c in q.clusters()}
            clusters = sorted(view.clusters().items())
            out.clusters.extend(
                cluster_pb(c, view) for name, c in clusters if who.superuser or name in hosting
            )
            out.queues.extend(mapping_pb(q) for q in queues)
            return out

        return await self._serve(context, work, reader=True)

    # ---- moves between clusters (manager/moves.py) -------------------------------------------
    async def MoveQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            parts = tuple(int(p) for p in request.partitions)
            return await self.start_move(request.name, request.to, request.dry_run, parts)

        return await self._serve(context, work)

    async def start_move(
        self, name: str, to: str, dry_run: bool = False, partitions: tuple[int, ...] = ()
    ) -> Any:
        """Check and start a move of ``name`` (or of its GLOBAL ``partitions``
        only) to cluster ``to`` (QueueMoveInfo); the operator's MoveQueue and
        the rebalancer (manager/rebalance.py) both come through here. Errors
        name the field; nothing is written then."""
        source, parts, _ = move_state.check_move(self._node.view, name, to, partitions)
        info = await self._on_cluster(source, lambda c: c.get_queue(name))
        count = int(info.config.partitions or 1)
        if info.writable_partitions and info.writable_partitions != count:
            raise errors.FailedPrecondition(
                f"queue: {name!r} was split on {source}; moving a split queue is not built"
            )
        if await self._existing(to, name) is not None:
            raise errors.FailedPrecondition(
                f"to: cluster {to!r} already has a queue named {name!r} "
                "(a queue moved away stays there, fenced: delete it on that cluster first)"
            )
        moving = len(parts) or count
        if dry_run:
            plan = move_state.QueueMove(name, source, to, "planned", 0, 0, partitions=parts)
            out = move_pb(plan, partitions=moving)
            out.messages = int(info.messages)  # the whole source queue's, moved or not
            return out
        move = await self._node.submit(move_state.StartMove(name, to, _now_ms(), parts))
        return move_pb(move, partitions=moving)

    async def MoveStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            view = self._node.view
            moves = view.moves()
            if request.name:
                moves = [m for m in moves if m.queue == request.name]
                if not moves:
                    raise errors.NotFound(f"queue: {request.name!r} has no move")
            failures = getattr(self._moves, "errors", {})
            return manager_pb2.MoveStatusResponse(
                moves=[move_pb(m, failures.get(m.queue, "") if m.active else "") for m in moves]
            )

        return await self._serve(context, work)

    async def CancelQueueMove(self, request: Any, context: Any) -> Any:  # noqa: N802
        async def work() -> Any:
            move = self._node.view.move(request.name)
            if move is None:
                raise errors.NotFound(f"queue: {request.name!r} has no move")
            cmd = move_state.SetMovePhase(request.name, move.phase, "cancelling", _now_ms())
            return move_pb(await self._node.submit(cmd))

        return await self._serve(context, work)

    # ---- helpers ------------------------------------------------------------------------------
    async def _place(
        self, name: str, homes: tuple[state.PartitionHome, ...], config: dict[str, Any]
    ) -> state.ManagedQueue:
        """Create ``name`` on each cluster of ``homes`` (its share of the
        partitions), then record the mapping with the effective config."""
        effective: dict[str, Any] = {}
        for cluster in dict.fromkeys(h.cluster for h in homes):
            count = sum(1 for h in homes if h.cluster == cluster)
            fields = {**config, "partitions": count}

            def create(client: Any, fields: dict[str, Any] = fields) -> Any:
                return client.create_queue(name, **fields)

            info = await self._on_cluster(cluster, create)
            effective = effective or dataclasses.asdict(info.config)
        effective["partitions"] = len(homes)
        cmd = state.PlaceQueue(name, homes, effective, _now_ms())
        result: state.ManagedQueue = await self._node.submit(cmd)
        return result

    async def _existing(self, cluster: str, name: str) -> Any:
        try:
            return await self._on_cluster(cluster, lambda c: c.get_queue(name))
        except errors.NotFound:
            return None

    async def _on_cluster(self, cluster: str, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(client)`` against ``cluster`` with its admin token (a thread)."""
        record = self._node.view.cluster(cluster)
        if record is None:
            raise errors.NotFound(f"cluster {cluster!r} is not registered")
        token = self._seal.open(record.token, cluster)

        def call() -> Any:
            with cluster_client(record.bootstrap, token, CLUSTER_CALL_TIMEOUT_S) as client:
                return fn(client)

        return await asyncio.get_running_loop().run_in_executor(None, call)


def _now_ms() -> int:
    return int(time.time() * 1000)
