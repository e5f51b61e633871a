"""Rebalance planning (pure, deterministic): replica moves and preferred
leader changes, as steps executed one at a time. docs/operations.md states
the guarantees; in short, a plan executed in full leaves: one replica per
node, replica counts kept, new replicas on alive nodes at ports never used
on them (not even earlier in the plan: a freed port may still be bound);
draining/removed nodes empty (leaderships first); racks spread when
possible; replica and then preferred-leader (first replica) counts of alive
nodes within one of each other, by the fewest moves when racks do not
constrain and by transfers only for leaders. Planning again gives an empty
plan; ties go by node id, queue, partition. Replicas of dead or suspect
nodes stay until ``plan_repair`` (or ``evacuate``) asks: a restart must not
trigger a full copy.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from raft_queue import errors
from raft_queue.core.metadata import NodeInfo
from raft_queue.core.planner_state import (
    _balance_leaders,
    _balance_move,
    _empty,
    _rack_move,
    _repeat,
    _State,
)
from raft_queue.core.planner_steps import (
    Assignments,
    Key,
    MoveReplica,
    Plan,
    Sizes,
    Step,
    TransferLeader,
    Unplaced,
    apply_plan,
    validate_move,
)

__all__ = [
    "Assignments", "Key", "MoveReplica", "Plan", "Sizes", "Step", "TransferLeader", "Unplaced",
    "apply_plan", "nodes_due_for_repair", "plan_drain", "plan_leaders", "plan_rebalance",
    "plan_repair", "validate_move",
]  # fmt: skip

# ---- public entry points -------------------------------------------------------------------


def plan_rebalance(
    nodes: Iterable[NodeInfo],
    assignments_by_queue: Assignments,
    sizes: Sizes | None = None,
    *,
    max_moves: int | None = None,
    evacuate: Collection[str] = (),
) -> Plan:
    """Empty draining/removed nodes and ``evacuate`` (e.g. nodes due for
    repair), spread racks, even replica counts, then even preferred leaders.
    ``max_moves`` caps replica moves (leader transfers are free).
    """
    st = _State.build(nodes, assignments_by_queue, sizes, evacuate, max_moves)
    _empty(st, st.leaving)
    _repeat(st, _rack_move)
    _repeat(st, _balance_move)
    _balance_leaders(st)
    return st.plan()


def plan_leaders(nodes: Iterable[NodeInfo], assignments_by_queue: Assignments) -> Plan:
    """Transfers only (``raftq leaders balance``): preferred leaders off nodes
    that are draining or not alive, then even over alive nodes."""
    st = _State.build(nodes, assignments_by_queue, None, (), None)
    _balance_leaders(st)
    return st.plan()


def plan_drain(
    node_id: str,
    nodes: Iterable[NodeInfo],
    assignments_by_queue: Assignments,
    sizes: Sizes | None = None,
) -> Plan:
    """Empty one node, its preferred leaderships first, nothing else (rebalance
    after if wanted). NotFound: unknown node; FailedPrecondition (nothing
    planned) if a replica has nowhere to go.
    """
    st = _State.build(nodes, assignments_by_queue, sizes, (node_id,), None)
    _empty(st, {node_id})
    if st.unplaced:
        where = ", ".join(f"{u.queue}/{u.partition}" for u in st.unplaced)
        raise errors.FailedPrecondition(
            f"node_id: cannot drain {node_id}: no alive node can take {where} "
            "(add a node or free Raft ports first)"
        )
    return st.plan()


def plan_repair(
    dead_node_ids: Collection[str],
    nodes: Iterable[NodeInfo],
    assignments_by_queue: Assignments,
    sizes: Sizes | None = None,
) -> Plan:
    """Re-create dead nodes' replicas on alive ones; partial (see
    ``Plan.unplaced``). NotFound: unknown node; FailedPrecondition: not dead.
    """
    st = _State.build(nodes, assignments_by_queue, sizes, dead_node_ids, None)
    for node_id in sorted(dead_node_ids):
        if (state := st.nodes[node_id].state) != "dead":
            raise errors.FailedPrecondition(f"dead_node_ids: {node_id} is {state}, not dead")
    _empty(st, set(dead_node_ids))
    return st.plan()


def nodes_due_for_repair(nodes: Iterable[NodeInfo], now_ms: int, repair_after_ms: int) -> list[str]:
    """Dead nodes whose state changed ``repair_after_ms`` or more before
    ``now_ms`` (the metadata leader's clock), by node id."""
    return sorted(
        n.node_id for n in nodes if n.state == "dead" and now_ms - n.state_ms >= repair_after_ms
    )
