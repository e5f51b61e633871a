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

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from raft_queue import errors
from raft_queue.core.metadata import NodeInfo, PartitionAssignment, ReplicaRef
from raft_queue.core.placement import _free_port, _has_free_port, _Load, _rack

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
