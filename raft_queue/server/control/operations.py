"""Cluster operations on the metadata leader: the AdminService calls behind
``raftq partitions move/cancel/status``, ``raftq leaders balance``,
``raftq partitions rebalance`` and ``raftq node drain/remove``.

Each call checks its input with the planner (``core/planner.py``) against
the current metadata and records its effect through the metadata group;
the work itself (a replica move) is done by the mover (``mover.py``).
Another node answers NotLeader with the metadata leader's address, which
the SDK follows.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta
from raft_queue.core import planner
from raft_queue.server.control.controllers import check_majority, controllers_pb
from raft_queue.server.control.metadata_barrier import view_miss

if TYPE_CHECKING:
    from raft_queue.server.cluster import Cluster
    from raft_queue.server.node import Node

OPERATOR_STATES = ("alive", "draining", "removed")


class Operations:
    def __init__(self, cluster: Cluster, mover: Any) -> None:
        self.cluster = cluster
        self.node = cluster.node
        self.mover = mover

    def _require_leader(self) -> None:
        md = self.node.metadata
        if md is None or not md.is_leader():
            raise errors.NotLeader("not the metadata leader", self.node.metadata_leader_address())

    def _assignments(self) -> dict[str, list[meta.PartitionAssignment]]:
        return assignments(self.node.view)

    async def move(self, req: Any) -> Any:
        """Validate (planner.validate_move) and record the move; the mover runs it."""
        self._require_leader()
        step = planner.MoveReplica(req.queue, req.partition, req.from_node, req.to_node,
                                   req.to_port)  # fmt: skip
        move = await start_step(self.node, step, throttle_bytes_per_s=req.throttle_bytes_per_s)
        return self.move_info(move)

    async def cancel(self, req: Any) -> Any:
        """Refused (FailedPrecondition) once the move removes its old replica."""
        self._require_leader()
        cmd = meta.SetMovePhase(req.queue, req.partition, "cancelling")
        return self.move_info(await self.node.submit_metadata(cmd))

    def list_moves(self) -> Any:
        self._require_leader()
        moves = [self.move_info(m) for m in self.node.view.moves()]
        return admin_pb2.ListMovesResponse(moves=moves)

    async def transfer_leader(self, req: Any) -> Any:
        """Make ``to_node`` the preferred (first) replica; each node's
        preferred-leader loop then hands Raft leadership over."""
        self._require_leader()
        step = planner.TransferLeader(req.queue, req.partition, req.to_node)
        result = await start_step(self.node, step)
        return admin_pb2.TransferLeaderResponse(epoch=result.epoch)

    async def set_node_state(self, req: Any) -> Any:
        self._require_leader()
        if req.state not in OPERATOR_STATES:
            raise errors.InvalidArgument("state", f"operators set one of {OPERATOR_STATES}")
        if req.node not in self.node.view.nodes():  # vouched for before answered
            miss = errors.NotFound(f"node {req.node!r} is not registered")
            raise view_miss(miss, lambda: req.node in self.node.view.nodes())
        node = await self.node.submit_metadata(
            meta.SetNodeState(req.node, req.state, int(time.time() * 1000))
        )
        return admin_pb2.NodeInfo(
            id=node.node_id, address=node.address, state=node.state,
            controller=node.controller, rack=node.rack,
        )  # fmt: skip

    async def change_controller(self, req: Any, liveness: Any) -> Any:
        """Record a change of the metadata group's voters (one at a time, never
        leaving fewer than a live majority); server/control/controllers.py makes it."""
        self._require_leader()
        if req.action not in ("add", "remove"):
            raise errors.InvalidArgument("action", "one of add, remove")
        node = self.node.view.nodes().get(req.node)
        if node is None:  # vouched for before answered
            miss = errors.NotFound(f"node: {req.node!r} is not registered")
            raise view_miss(miss, lambda: req.node in self.node.view.nodes())
        voters = self.node.controller_addresses()
        if self.node.view.controllers():
            voters = self.node.view.controllers()
        alive = {n for n, info in self.node.view.nodes().items() if info.state == "alive"}
        if req.action == "add" or req.node in voters:
            check_majority(voters, alive, req.action, req.node)
        address = f"{node.raft_host}:{node.metadata_raft_port}" if node.metadata_raft_port else ""
        cmd = meta.StartControllerChange(req.action, req.node, address,
                                         tuple(sorted(voters.items())))  # fmt: skip
        await self.node.submit_metadata(cmd)
        return controllers_pb(self.node)

    def plan(self, req: Any) -> Any:
        """A plan from the current metadata; nothing is executed."""
        self._require_leader()
        nodes = list(self.node.view.nodes().values())
        parts = self._assignments()
        if req.kind == "rebalance":
            result = planner.plan_rebalance(nodes, parts, max_moves=req.max_moves or None)
        elif req.kind == "leaders":
            result = planner.plan_leaders(nodes, parts)
        elif req.kind == "drain":
            result = planner.plan_drain(req.node, nodes, parts)
        else:
            raise errors.InvalidArgument("kind", "one of rebalance, leaders, drain")
        return plan_to_pb(result)

    def move_info(self, move: meta.Move) -> Any:
        p = self.mover.progress.get(move.key) or admin_pb2.MemberChangeResponse()
        return admin_pb2.MoveInfo(
            queue=move.queue, partition=move.partition, from_node=move.from_node,
            to_node=move.to.node_id, to_port=move.to.raft_port, phase=move.phase,
            started_ms=move.started_ms, match_index=p.match_index, leader_index=p.leader_index,
            throttle_bytes_per_s=self.mover.throttle_of(move), bytes_sent=p.bytes_sent,
            snapshot_bytes=p.snapshot_bytes,
        )  # fmt: skip


def assignments(view: meta.MetadataMachine) -> dict[str, list[meta.PartitionAssignment]]:
    return {q.name: view.assignments(q.name) for q in view.queues()}


async def start_step(node: Node, step: planner.Step, throttle_bytes_per_s: int = 0) -> Any:
    """Check one plan step against the current metadata (validate_move) and
    record it: a MoveReplica becomes a Move in flight (the mover runs it,
    limiting catch-up to ``throttle_bytes_per_s``, 0: the cluster default),
    a TransferLeader a SetAssignment reordering the replicas. Returns the
    command's result (Move or PartitionAssignment)."""
    view = node.view
    step = planner.validate_move(
        view.nodes().values(), assignments(view), step, in_flight={m.key for m in view.moves()}
    )
    if isinstance(step, planner.MoveReplica):
        cmd: Any = meta.StartMove(step.queue, step.partition, step.from_node, step.to_node,
                                  step.to_port, int(time.time() * 1000),
                                  throttle_bytes_per_s)  # fmt: skip
    else:
        new = planner.apply_plan(assignments(view), [step])[step.queue][step.partition]
        uid = node.queue_spec(step.queue).uid
        cmd = meta.SetAssignment(step.queue, step.partition, new.replicas, new.epoch, uid)
    return await node.submit_metadata(cmd)


def plan_to_pb(plan: planner.Plan) -> Any:
    steps = []
    for s in plan.steps:
        if isinstance(s, planner.MoveReplica):
            steps.append(admin_pb2.PlanStep(kind="move", queue=s.queue, partition=s.partition,
                                            from_node=s.from_node, to_node=s.to_node,
                                            to_port=s.to_port))  # fmt: skip
        else:
            steps.append(admin_pb2.PlanStep(kind="leader", queue=s.queue,
                                            partition=s.partition, to_node=s.to_node))  # fmt: skip
    unplaced = [f"{u.queue}/{u.partition}@{u.node_id}" for u in plan.unplaced]
    return admin_pb2.PlanResponse(steps=steps, unplaced=unplaced, more=plan.more)
