"""The planner's working state and its phases (pure): ``_State`` tracks
assignments, loads, ports and racks as steps are added; the phases
(empty leaving nodes, spread racks, balance replicas, balance leaders)
add steps to it. Entry points are in ``planner.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from raft_queue import errors
from raft_queue.core.metadata import NodeInfo, PartitionAssignment
from raft_queue.core.placement import _free_port, _has_free_port, _Load, _rack
from raft_queue.core.planner_steps import (
    Assignments,
    Key,
    MoveReplica,
    Plan,
    Sizes,
    Step,
    TransferLeader,
    Unplaced,
    _after,
    _index,
)

# ---- the planning state --------------------------------------------------------------------


@dataclass
class _State:
    """The assignments as the plan so far leaves them, with per-node counts."""

    nodes: dict[str, NodeInfo]
    parts: dict[Key, PartitionAssignment]
    sizes: Sizes
    eligible: frozenset[str]  # alive and not leaving: may take replicas and lead
    leaving: frozenset[str]
    moves_left: int | None
    keys: list[Key] = field(default_factory=list)  # sorted; moves never add or drop one
    ports: _Load = field(default_factory=_Load)  # every port used so far: never handed out twice
    replicas: Counter[str] = field(default_factory=Counter)
    leaders: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    held: dict[str, set[Key]] = field(default_factory=dict)  # node -> partitions on it
    racks: dict[str, str] = field(default_factory=dict)
    node_ids: dict[Key, tuple[str, ...]] = field(default_factory=dict)
    blocked: set[tuple[str, str]] = field(default_factory=set)  # (src, dst): no balancing move
    steps: list[Step] = field(default_factory=list)
    unplaced: list[Unplaced] = field(default_factory=list)
    more: bool = False

    @classmethod
    def build(
        cls,
        nodes: Iterable[NodeInfo],
        assignments_by_queue: Assignments,
        sizes: Sizes | None,
        evacuate: Collection[str],
        max_moves: int | None,
    ) -> _State:
        by_id = {n.node_id: n for n in sorted(nodes, key=lambda n: n.node_id)}
        for node_id in sorted(set(evacuate) - set(by_id)):
            raise errors.NotFound(f"node_id: node {node_id!r} is not registered")
        if max_moves is not None and max_moves < 0:
            raise errors.InvalidArgument("max_moves", "must be >= 0")
        gone = {n for n, i in by_id.items() if i.state in ("draining", "removed")} | {*evacuate}
        ok = {n for n, i in by_id.items() if i.state == "alive"} - gone
        parts = _index(assignments_by_queue)
        st = cls(
            by_id, parts, sizes or {}, frozenset(ok), frozenset(gone), max_moves, sorted(parts)
        )
        for key in st.keys:
            st.count(key, parts[key], 1)
            st.ports.add(parts[key])
        return st

    def ids(self, key: Key) -> tuple[str, ...]:
        if key not in self.node_ids:  # cached: node_ids builds a tuple per call
            self.node_ids[key] = self.parts[key].node_ids
        return self.node_ids[key]

    def count(self, key: Key, a: PartitionAssignment, sign: int) -> None:
        for i, r in enumerate(a.replicas):
            self.replicas[r.node_id] += sign
            self.leaders[r.node_id] += sign * (i == 0)
            self.bytes[r.node_id] += sign * self.sizes.get(key, 0)
            held = self.held.setdefault(r.node_id, set())
            (held.add if sign > 0 else held.discard)(key)

    def apply(self, step: Step) -> None:
        key = (step.queue, step.partition)
        old, new = self.parts[key], _after(self.parts[key], step)
        self.count(key, old, -1)
        self.count(key, new, 1)
        self.parts[key] = new
        self.node_ids.pop(key, None)
        if isinstance(step, MoveReplica):
            touched = {*old.node_ids, step.to_node}  # their partitions' racks or ports changed
            self.blocked = {pair for pair in self.blocked if not touched.intersection(pair)}
            self.ports.ports.setdefault(step.to_node, set()).add(step.to_port)
            self.moves_left = None if self.moves_left is None else self.moves_left - 1
        self.steps.append(step)

    def room(self) -> bool:
        """May one more move be planned? If not, remember that one was wanted."""
        if self.moves_left is None or self.moves_left > 0:
            return True
        self.more = True
        return False

    def rack(self, node_id: str) -> str:
        if node_id not in self.racks:
            node = self.nodes.get(node_id)
            self.racks[node_id] = _rack(node) if node is not None else f"node:{node_id}"
        return self.racks[node_id]

    def crowding(self, node_ids: Iterable[str]) -> int:
        """Replicas beyond one per rack: 0 when each has a rack of its own."""
        ids = list(node_ids)
        return len(ids) - len({self.rack(n) for n in ids})

    def targets(self, holders: Collection[str]) -> list[NodeInfo]:
        """Nodes that may take a new replica of a partition on ``holders``."""
        return [
            self.nodes[n]
            for n in sorted(self.eligible - set(holders))
            if _has_free_port(self.nodes[n], self.ports)
        ]

    def move(self, key: Key, from_node: str, target: NodeInfo) -> MoveReplica:
        return MoveReplica(*key, from_node, target.node_id, _free_port(target, self.ports))

    def plan(self) -> Plan:
        return Plan(tuple(self.steps), tuple(self.unplaced), self.more)


# ---- phases --------------------------------------------------------------------------------


def _empty(st: _State, leaving: Collection[str]) -> None:
    """Preferred leaderships off ``leaving`` nodes (to the eligible replica
    leading fewest), then each of their replicas to the target crowding
    racks least, then holding fewest replicas, then fewest bytes.
    """
    for key in st.keys:
        candidates = [n for n in st.ids(key) if n in st.eligible]
        if st.ids(key)[0] in leaving and candidates:
            st.apply(TransferLeader(*key, min(candidates, key=lambda n: st.leaders[n])))
    for key in st.keys:
        for node_id in [n for n in st.ids(key) if n in leaving]:
            others = [n for n in st.ids(key) if n != node_id]
            targets = st.targets(others)
            if not targets:
                st.unplaced.append(Unplaced(*key, node_id))
            elif st.room():
                best = min(targets, key=lambda t: _target_rank(st, others, t.node_id))
                st.apply(st.move(key, node_id, best))


def _target_rank(st: _State, others: list[str], node_id: str) -> tuple[int, int, int]:
    return st.crowding([*others, node_id]), st.replicas[node_id], st.bytes[node_id]


def _repeat(st: _State, choose: Callable[[_State], MoveReplica | None]) -> None:
    while (move := choose(st)) is not None and st.room():
        st.apply(move)


def _rack_move(st: _State) -> MoveReplica | None:
    """For the first partition with two replicas in one rack that a node of
    an unused rack can take: its busiest crowded replica to the least loaded
    such node.
    """
    for key in st.keys:
        ids = st.ids(key)
        if not st.crowding(ids):
            continue
        racks = Counter(st.rack(n) for n in ids)
        sources = [n for n in ids if n in st.eligible and racks[st.rack(n)] > 1]
        targets = [t for t in st.targets(ids) if racks[st.rack(t.node_id)] == 0]
        if sources and targets:
            src = min(sources, key=lambda n: (-st.replicas[n], -st.bytes[n], n))
            dst = min(targets, key=lambda t: (st.replicas[t.node_id], st.bytes[t.node_id]))
            return st.move(key, src, dst)
    return None


def _balance_move(st: _State) -> MoveReplica | None:
    """A move from the busiest node to the idlest one it can feed, while they
    differ by two or more (each such move cuts the excess by one).
    """
    sources = sorted(st.eligible, key=lambda n: (-st.replicas[n], -st.bytes[n], n))
    sinks = sorted(st.eligible, key=lambda n: (st.replicas[n], st.bytes[n], n))
    for src in sources:
        for dst in sinks:
            if st.replicas[src] - st.replicas[dst] < 2:
                break
            move = None if (src, dst) in st.blocked else _move_between(st, src, st.nodes[dst])
            if move is not None:
                return move
            st.blocked.add((src, dst))
    return None


def _move_between(st: _State, src: str, dst: NodeInfo) -> MoveReplica | None:
    """The replica of ``src`` that best evens bytes between the two nodes
    without crowding a rack more; a follower unless moving a leader evens
    leaders too.
    """
    if not _has_free_port(dst, st.ports):
        return None
    gap = st.bytes[src] - st.bytes[dst.node_id]
    leader_ok = st.leaders[src] - st.leaders[dst.node_id] >= 2
    best: tuple[int, bool, Key] | None = None
    src_rack, dst_rack = st.rack(src), st.rack(dst.node_id)
    for key in st.held[src] - st.held.get(dst.node_id, set()):
        ids = st.ids(key)
        others = {st.rack(n) for n in ids if n != src}
        if dst_rack in others and src_rack not in others:  # the move would crowd a rack
            continue
        rank = (abs(gap - 2 * st.sizes.get(key, 0)), ids[0] == src and not leader_ok, key)
        best = rank if best is None or rank < best else best
    return None if best is None else st.move(best[2], src, dst)


def _balance_leaders(st: _State) -> None:
    """Even preferred leaders over eligible nodes by transfers only, on a map
    partition -> leader: a partition led by a node not eligible goes to its
    eligible replica leading fewest; then leadership moves along shortest
    chains of replicas from a node to one leading two or more fewer, until
    none is left (then the spread is the best possible: an optimal
    semi-matching, Harvey et al. 2006); then one transfer per changed partition.
    """
    holders = {k: [n for n in st.ids(k) if n in st.eligible] for k in st.keys}
    start = {k: st.ids(k)[0] for k in st.keys if holders[k]}
    counts = Counter({n: 0 for n in st.eligible})
    counts.update(n for n in start.values() if n in st.eligible)
    led = dict(start)
    for key, leader in start.items():
        if leader not in st.eligible:
            led[key] = min(holders[key], key=lambda n: counts[n])
            counts[led[key]] += 1
    while (chain := _leader_chain(led, holders, counts)) is not None:
        for key, to_node in chain:
            counts[led[key]] -= 1
            counts[to_node] += 1
            led[key] = to_node
    for key in sorted(led):
        if led[key] != start[key]:
            st.apply(TransferLeader(*key, led[key]))


def _leader_chain(
    led: dict[Key, str], holders: dict[Key, list[str]], counts: Counter[str]
) -> list[tuple[Key, str]] | None:
    """Transfers (partition, new leader) along a shortest path from the most
    loaded node that has one to a node leading at least two fewer.
    """
    by_leader: dict[str, list[Key]] = {}
    for key in sorted(led):
        by_leader.setdefault(led[key], []).append(key)
    low = min(counts.values(), default=0)
    for src in sorted(counts, key=lambda n: (-counts[n], n)):
        if counts[src] < low + 2:
            return None
        parent: dict[str, tuple[str, Key]] = {}
        frontier = [src]
        while frontier:
            reached = [(k, n) for x in frontier for k in by_leader.get(x, []) for n in holders[k]]
            frontier = []
            for key, n in reached:
                if n == src or n in parent:
                    continue
                parent[n] = (led[key], key)
                frontier.append(n)
                if counts[n] <= counts[src] - 2:
                    return _unwind(parent, src, n)
    return None


def _unwind(parent: dict[str, tuple[str, Key]], src: str, end: str) -> list[tuple[Key, str]]:
    chain = []
    while end != src:
        prev, key = parent[end]
        chain.append((key, end))
        end = prev
    return chain[::-1]
