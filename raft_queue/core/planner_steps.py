"""Plan values and steps on assignments (pure): ``MoveReplica`` and
``TransferLeader`` steps, the ``Plan`` that lists them, and checking
(``validate_move``) and applying (``apply_plan``) steps. The planning
itself is in ``planner.py`` (entry points) and ``planner_state.py``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from raft_queue import errors
from raft_queue.core.metadata import NodeInfo, PartitionAssignment, ReplicaRef
from raft_queue.core.placement import _free_port, _Load

Key = tuple[str, int]  # (queue, partition)
Assignments = Mapping[str, Sequence[PartitionAssignment]]
Sizes = Mapping[Key, int]  # bytes per partition


@dataclass(frozen=True, slots=True)
class MoveReplica:
    """A new replica on ``to_node`` takes the place of ``from_node``'s in the
    list (so it may become preferred leader). Executed add-then-remove."""

    queue: str
    partition: int
    from_node: str
    to_node: str
    to_port: int


@dataclass(frozen=True, slots=True)
class TransferLeader:
    """Replica ``to_node`` moves to the front of the list (preferred leader);
    the others keep their order. No data moves."""

    queue: str
    partition: int
    to_node: str


Step = MoveReplica | TransferLeader


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A replica that must leave ``node_id`` but no alive node can take (each
    holds the partition already or has no free Raft port)."""

    queue: str
    partition: int
    node_id: str


@dataclass(frozen=True, slots=True)
class Plan:
    """Steps to run in order, one at a time. ``more``: ``max_moves`` cut the
    plan short; plan again once it is executed."""

    steps: tuple[Step, ...] = ()
    unplaced: tuple[Unplaced, ...] = ()
    more: bool = False

    @property
    def moves(self) -> tuple[MoveReplica, ...]:
        return tuple(s for s in self.steps if isinstance(s, MoveReplica))

    @property
    def transfers(self) -> tuple[TransferLeader, ...]:
        return tuple(s for s in self.steps if isinstance(s, TransferLeader))


def validate_move(
    nodes: Iterable[NodeInfo],
    assignments_by_queue: Assignments,
    step: Step,
    *,
    in_flight: Collection[Key] = (),
) -> Step:
    """The step, checked against the current state (``to_port=0``: filled with
    ``to_node``'s lowest free port); raises, changing nothing: NotFound for
    an unknown queue or ``to_node``; InvalidArgument naming ``partition``,
    ``from_node``, ``to_node`` (holds a replica already; or empty: below the
    replication factor) or ``to_port``; FailedPrecondition when the partition
    has a move ``in_flight`` or ``to_node`` is not alive.
    """
    parts = _index(assignments_by_queue)
    used = _ports_in_use(parts)
    _check_step(assignments_by_queue, parts, used, step)  # a port 0 is never "taken"
    if (step.queue, step.partition) in in_flight:
        raise errors.FailedPrecondition(
            f"partition: {step.queue}/{step.partition} has a move in flight; wait or cancel it"
        )
    target = {n.node_id: n for n in nodes}.get(step.to_node)
    if target is None:
        raise errors.NotFound(f"to_node: node {step.to_node!r} is not registered")
    if target.state != "alive":
        raise errors.FailedPrecondition(f"to_node: {step.to_node} is {target.state}, not alive")
    if not isinstance(step, MoveReplica):
        return step
    if step.to_port == 0:
        load = _Load()
        for a in parts.values():
            load.add(a)
        return replace(step, to_port=_free_port(target, load))
    if not target.raft_port_min <= step.to_port <= target.raft_port_max:
        raise errors.InvalidArgument("to_port", f"{step.to_port} is outside {step.to_node}'s range")
    return step


def apply_plan(
    assignments_by_queue: Assignments, plan: Plan | Iterable[Step]
) -> dict[str, tuple[PartitionAssignment, ...]]:
    """The assignments after the steps, in order (pure). Each step that changes
    a partition bumps its epoch. Raises as ``validate_move`` for what needs no nodes.
    """
    parts = _index(assignments_by_queue)
    used = _ports_in_use(parts)
    for step in plan.steps if isinstance(plan, Plan) else plan:
        old = _check_step(assignments_by_queue, parts, used, step)
        new = _after(old, step)
        used -= {(r.node_id, r.raft_port) for r in old.replicas}
        used |= {(r.node_id, r.raft_port) for r in new.replicas}
        parts[step.queue, step.partition] = new
    return {
        q: tuple(parts[q, p] for p in sorted(a.partition for a in seq))
        for q, seq in assignments_by_queue.items()
    }


# ---- steps on assignments ------------------------------------------------------------------


def _index(assignments_by_queue: Assignments) -> dict[Key, PartitionAssignment]:
    return {(q, a.partition): a for q, seq in assignments_by_queue.items() for a in seq}


def _ports_in_use(parts: Mapping[Key, PartitionAssignment]) -> set[tuple[str, int]]:
    return {(r.node_id, r.raft_port) for a in parts.values() for r in a.replicas}


def _check_step(
    queues: Assignments,
    parts: Mapping[Key, PartitionAssignment],
    used: set[tuple[str, int]],
    step: Step,
) -> PartitionAssignment:
    """The partition's current assignment, if ``step`` fits it (else raise)."""
    name = f"{step.queue}/{step.partition}"
    if step.queue not in queues:
        raise errors.NotFound(f"queue: {step.queue!r} does not exist")
    current = parts.get((step.queue, step.partition))
    if current is None:
        raise errors.InvalidArgument("partition", f"{name} does not exist")
    holders = current.node_ids
    if step.to_node not in holders and isinstance(step, TransferLeader):
        raise errors.InvalidArgument("to_node", f"{step.to_node!r} has no replica of {name}")
    if isinstance(step, MoveReplica):
        if step.from_node not in holders:
            raise errors.InvalidArgument(
                "from_node", f"{step.from_node!r} has no replica of {name}"
            )
        if not step.to_node:
            raise errors.InvalidArgument(
                "to_node",
                f"a move needs a target: removing a replica would leave {name} with "
                f"{len(holders) - 1}, below its replication factor {len(holders)}",
            )
        if step.to_node in holders:
            raise errors.InvalidArgument("to_node", f"{step.to_node} has a replica of {name}")
        if (step.to_node, step.to_port) in used:
            raise errors.InvalidArgument("to_port", f"{step.to_port} is taken on {step.to_node}")
    return current


def _after(current: PartitionAssignment, step: Step) -> PartitionAssignment:
    """The assignment once ``step`` (already checked) has run."""
    if isinstance(step, TransferLeader):
        if current.replicas[0].node_id == step.to_node:
            return current
        first = [r for r in current.replicas if r.node_id == step.to_node]
        replicas = (*first, *(r for r in current.replicas if r.node_id != step.to_node))
    else:
        new = ReplicaRef(step.to_node, step.to_port)
        replicas = tuple(new if r.node_id == step.from_node else r for r in current.replicas)
    return PartitionAssignment(current.partition, replicas, current.epoch + 1)
