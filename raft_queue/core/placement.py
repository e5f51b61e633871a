"""Placement of new partitions' replicas on nodes (pure, deterministic).

The metadata leader calls ``place_partitions`` with its current view and
puts the result in a CreateQueue command, so every replica applies the same
placement. The rules, in priority order, as Kafka's rack-aware assignment:

1. only ``alive`` nodes, never two replicas of a partition on one node;
2. spread a partition over racks when nodes are labelled (an unlabelled
   node counts as a rack of its own);
3. fewest replicas first (counting every queue's partitions), so replica
   counts stay within one of each other when they start that way;
4. the preferred leader (first replica) is the chosen node leading the
   fewest partitions, so leaders spread too;
5. each replica takes the lowest free port of its node's Raft port range;
   a node whose range is full is skipped.

Ties are broken by node id, so the same input gives the same output.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from raft_queue import errors
from raft_queue.core.metadata import NodeInfo, PartitionAssignment, ReplicaRef


@dataclass
class _Load:
    """What is already placed: replicas, leaders and ports per node."""

    replicas: Counter[str] = field(default_factory=Counter)
    leaders: Counter[str] = field(default_factory=Counter)
    ports: dict[str, set[int]] = field(default_factory=dict)

    def add(self, assignment: PartitionAssignment) -> None:
        for i, ref in enumerate(assignment.replicas):
            self.replicas[ref.node_id] += 1
            self.leaders[ref.node_id] += i == 0
            self.ports.setdefault(ref.node_id, set()).add(ref.raft_port)


def place_partitions(
    nodes: Iterable[NodeInfo],
    existing_assignments: Iterable[PartitionAssignment],
    partitions: int,
    replication_factor: int,
) -> list[PartitionAssignment]:
    """Assignments for partitions ``0..partitions-1`` of a new queue, epoch 1.

    ``existing_assignments``: every partition of every other queue (their
    load and ports). Raises InvalidArgument("replication_factor") if fewer
    alive nodes than replicas, ResourceExhausted if Raft ports run out.
    """
    alive = sorted((n for n in nodes if n.state == "alive"), key=lambda n: n.node_id)
    if replication_factor < 1 or len(alive) < replication_factor:
        raise errors.InvalidArgument(
            "replication_factor",
            f"{replication_factor} replicas need as many alive nodes; {len(alive)} alive",
        )
    load = _Load()
    for assignment in existing_assignments:
        load.add(assignment)
    placed = []
    for partition in range(partitions):
        chosen = _choose_nodes(alive, load, replication_factor)
        assignment = PartitionAssignment(
            partition,
            tuple(ReplicaRef(n.node_id, _free_port(n, load)) for n in chosen),
            epoch=1,
        )
        load.add(assignment)
        placed.append(assignment)
    return placed


def _choose_nodes(alive: Sequence[NodeInfo], load: _Load, count: int) -> list[NodeInfo]:
    """Pick ``count`` distinct nodes with free ports, preferred leader first.

    The leader is the node leading fewest partitions among those that belong
    to some least-loaded set of ``count`` nodes (load at most the count-th
    smallest), so leader balance never costs replica balance. The others:
    least-used rack, then fewest replicas, then the next in node id order
    after the leader (round robin, as Kafka's assignment: a fresh cluster
    gets leaders and replicas balanced at once).
    """
    candidates = [n for n in alive if _has_free_port(n, load)]
    if len(candidates) < count:
        raise errors.ResourceExhausted(
            f"only {len(candidates)} alive nodes have a free Raft port; {count} needed"
        )
    threshold = sorted(load.replicas[n.node_id] for n in candidates)[count - 1]
    leader = min(
        (n for n in candidates if load.replicas[n.node_id] <= threshold),
        key=lambda n: (load.leaders[n.node_id], load.replicas[n.node_id], n.node_id),
    )
    chosen = [leader]
    racks: Counter[str] = Counter([_rack(leader)])
    position = {n.node_id: i for i, n in enumerate(alive)}
    start = position[leader.node_id]
    for _ in range(count - 1):
        best = min(
            (n for n in candidates if n not in chosen),
            key=lambda n: (
                racks[_rack(n)],
                load.replicas[n.node_id],
                (position[n.node_id] - start) % len(alive),
            ),
        )
        chosen.append(best)
        racks[_rack(best)] += 1
    return chosen


def _rack(node: NodeInfo) -> str:
    return f"rack:{node.rack}" if node.rack else f"node:{node.node_id}"


def _has_free_port(node: NodeInfo, load: _Load) -> bool:
    used = load.ports.get(node.node_id, set())
    span = node.raft_port_max - node.raft_port_min + 1
    return len({p for p in used if node.raft_port_min <= p <= node.raft_port_max}) < span


def _free_port(node: NodeInfo, load: _Load) -> int:
    """Lowest port of the node's range not used by any replica on it."""
    used = load.ports.get(node.node_id, set())
    for port in range(node.raft_port_min, node.raft_port_max + 1):
        if port not in used:
            return port
    raise errors.ResourceExhausted(f"node {node.node_id} has no free Raft port")
