"""Rebalance planner: exact plans on simple cases, bad input, Hypothesis properties."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft_queue import errors
from raft_queue.core.metadata import NodeInfo, PartitionAssignment, ReplicaRef
from raft_queue.core.placement import place_partitions
from raft_queue.core.planner import (
    MoveReplica,
    Plan,
    TransferLeader,
    Unplaced,
    apply_plan,
    nodes_due_for_repair,
    plan_drain,
    plan_leaders,
    plan_rebalance,
    plan_repair,
    validate_move,
)

Assignments = Mapping[str, Sequence[PartitionAssignment]]
Cluster = tuple[list[NodeInfo], dict[str, list[PartitionAssignment]]]


def node(i: int, rack: str = "", state: str = "alive", ports: int = 100) -> NodeInfo:
    base = 10_000 + 1000 * i
    return NodeInfo(f"n{i}", f"h{i}:7001", f"h{i}", base, base + ports - 1, rack, False, state)


def port(i: int, k: int = 0) -> int:
    return 10_000 + 1000 * i + k


def part(p: int, *node_numbers: int, epoch: int = 1) -> PartitionAssignment:
    """Partition ``p`` on the given nodes; replica of node i on port(i, p)."""
    return PartitionAssignment(
        p, tuple(ReplicaRef(f"n{i}", port(i, p)) for i in node_numbers), epoch
    )


def replica_counts(assignments: Assignments, among: Sequence[NodeInfo]) -> list[int]:
    c = Counter(r.node_id for seq in assignments.values() for a in seq for r in a.replicas)
    return [c[n.node_id] for n in among]


def leader_counts(assignments: Assignments, among: Sequence[NodeInfo]) -> list[int]:
    c = Counter(a.replicas[0].node_id for seq in assignments.values() for a in seq)
    return [c[n.node_id] for n in among]


def spread(counts: list[int]) -> int:
    return max(counts) - min(counts) if counts else 0


def run(
    nodes: list[NodeInfo], before: Assignments, plan: Plan
) -> dict[str, tuple[PartitionAssignment, ...]]:
    """Execute a plan step by step, each step checked against the state it
    runs on (as the executor will), and return the final assignments."""
    state = {q: tuple(seq) for q, seq in before.items()}
    for step in plan.steps:
        validate_move(nodes, state, step)
        state = apply_plan(state, [step])
    return state


# ---- simple cases with exact plans ---------------------------------------------------------


def test_balanced_cluster_gives_an_empty_plan() -> None:
    nodes = [node(1), node(2), node(3)]
    assignments = {"q": place_partitions(nodes, [], 6, 3)}
    assert plan_rebalance(nodes, assignments) == Plan()


def test_two_nodes_rf1_moves_exactly_half_to_the_empty_node() -> None:
    nodes = [node(1), node(2)]
    assignments = {"q": [part(p, 1) for p in range(4)]}
    plan = plan_rebalance(nodes, assignments)
    assert plan.steps == (
        MoveReplica("q", 0, "n1", "n2", port(2, 0)),
        MoveReplica("q", 1, "n1", "n2", port(2, 1)),
    )
    after = run(nodes, assignments, plan)
    assert after["q"][0] == PartitionAssignment(0, (ReplicaRef("n2", port(2, 0)),), epoch=2)


def test_fourth_node_gets_exactly_nine_replicas_and_a_quarter_of_leaders() -> None:
    nodes = [node(1), node(2), node(3)]
    assignments = {"q": place_partitions(nodes, [], 12, 3)}
    nodes.append(node(4))
    plan = plan_rebalance(nodes, assignments)
    assert len(plan.moves) == 9
    assert Counter(m.from_node for m in plan.moves) == {"n1": 3, "n2": 3, "n3": 3}
    assert {m.to_node for m in plan.moves} == {"n4"}
    assert len({m.partition for m in plan.moves}) == 9
    after = run(nodes, assignments, plan)
    assert replica_counts(after, nodes) == [9, 9, 9, 9]
    assert leader_counts(after, nodes) == [3, 3, 3, 3]
    assert plan_rebalance(nodes, after) == Plan()


def test_leaders_piled_on_one_node_are_spread_by_transfers_only() -> None:
    nodes = [node(1), node(2), node(3)]
    assignments = {"q": [part(p, 1, 2, 3) for p in range(6)]}
    plan = plan_rebalance(nodes, assignments)
    assert plan.moves == ()
    assert len(plan.transfers) == 4  # n1 keeps 2 of its 6
    after = run(nodes, assignments, plan)
    assert leader_counts(after, nodes) == [2, 2, 2]
    assert plan_leaders(nodes, assignments) == plan


def test_leader_transfer_puts_the_target_first_and_keeps_the_others_in_order() -> None:
    after = apply_plan({"q": [part(0, 1, 2, 3)]}, [TransferLeader("q", 0, "n3")])
    assert after["q"][0].node_ids == ("n3", "n1", "n2")
    assert after["q"][0].epoch == 2


def test_moving_the_preferred_leader_makes_the_new_node_preferred() -> None:
    after = apply_plan({"q": [part(0, 1, 2)]}, [MoveReplica("q", 0, "n1", "n3", port(3))])
    assert after["q"][0].node_ids == ("n3", "n2")


def test_sizes_break_ties_toward_even_bytes() -> None:
    nodes = [node(1), node(2)]
    assignments = {"q": [part(p, 1) for p in range(4)]}
    sizes = {("q", 0): 1, ("q", 1): 1, ("q", 2): 100, ("q", 3): 1}
    plan = plan_rebalance(nodes, assignments, sizes)
    assert [m.partition for m in plan.moves] == [2, 0]


def test_max_moves_cuts_the_plan_and_planning_again_finishes_it() -> None:
    nodes = [node(1), node(2), node(3)]
    assignments = {"q": place_partitions(nodes, [], 12, 3)}
    nodes.append(node(4))
    first = plan_rebalance(nodes, assignments, max_moves=4)
    assert (len(first.moves), first.more) == (4, True)
    middle = run(nodes, assignments, first)
    rest = plan_rebalance(nodes, middle)
    assert (len(rest.moves), rest.more) == (5, False)
    assert replica_counts(run(nodes, middle, rest), nodes) == [9, 9, 9, 9]


def test_new_replicas_never_reuse_a_port_freed_earlier_in_the_plan() -> None:
    """Each rack-crowded partition moves one replica to the other rack; the
    second move lands on n2, which the first one left: port(2, 0) may still
    be bound by the old replica, so n2's next port is used."""
    nodes = [node(1, "b"), node(2, "a"), node(3, "a"), node(4, "b")]
    assignments = {"q": [part(0, 3, 2), part(1, 4, 1)]}
    assert plan_rebalance(nodes, assignments).steps == (
        MoveReplica("q", 0, "n2", "n1", port(1, 0)),
        MoveReplica("q", 1, "n1", "n2", port(2, 1)),
    )


# ---- drain, repair, racks ------------------------------------------------------------------


def test_drain_moves_leaders_first_then_every_replica() -> None:
    nodes = [node(1), node(2), node(3), node(4)]
    assignments = {"q": place_partitions(nodes, [], 8, 3)}
    plan = plan_drain("n1", nodes, assignments)
    kinds = [type(s) for s in plan.steps]
    assert kinds == sorted(kinds, key=lambda k: k is MoveReplica), "transfers come first"
    assert {t.partition for t in plan.transfers} == {
        a.partition for a in assignments["q"] if a.node_ids[0] == "n1"
    }
    after = run(nodes, assignments, plan)
    assert replica_counts(after, nodes)[0] == 0
    assert spread(replica_counts(after, nodes[1:])) <= 1
    assert all(len(a.replicas) == 3 for a in after["q"])
    assert plan_drain("n1", nodes, after) == Plan()


def test_draining_node_is_emptied_by_rebalance_too() -> None:
    nodes = [node(1, state="draining"), node(2), node(3), node(4)]
    assignments = {"q": [part(p, 1, 2, 3) for p in range(6)]}
    after = run(nodes, assignments, plan_rebalance(nodes, assignments))
    assert replica_counts(after, nodes) == [0, 6, 6, 6]
    assert leader_counts(after, nodes) == [0, 2, 2, 2]


def test_drain_with_nowhere_to_go_is_refused_and_rebalance_reports_it() -> None:
    nodes = [node(1), node(2), node(3)]
    assignments = {"q": [part(0, 1, 2, 3)]}
    with pytest.raises(errors.FailedPrecondition, match="q/0"):
        plan_drain("n1", nodes, assignments)
    nodes[0] = node(1, state="draining")
    plan = plan_rebalance(nodes, assignments)
    assert plan.unplaced == (Unplaced("q", 0, "n1"),)
    assert plan.moves == ()


def test_repair_recreates_dead_replicas_on_healthy_nodes_in_unused_racks() -> None:
    nodes = [node(1, "a", "dead"), node(2, "a"), node(3, "b"), node(4, "c"), node(5, "a")]
    assignments = {"q": [part(0, 1, 3, 4), part(1, 3, 1, 4)]}
    plan = plan_repair(["n1"], nodes, assignments)
    assert plan.steps == (
        TransferLeader("q", 0, "n4"),  # n3 leads q/1 already
        MoveReplica("q", 0, "n1", "n2", port(2)),
        MoveReplica("q", 1, "n1", "n5", port(5)),
    )
    assert plan_rebalance(nodes, assignments, evacuate=["n1"]).moves == plan.moves


def test_dead_replicas_stay_put_until_repair_is_asked() -> None:
    nodes = [node(1, state="dead"), node(2), node(3), node(4)]
    assignments = {"q": [part(p, 1, 2) for p in range(2)] + [part(2, 3, 4)]}
    plan = plan_rebalance(nodes, assignments)
    assert all(m.from_node != "n1" for m in plan.moves)
    assert {t.partition for t in plan.transfers} >= {0, 1}  # preferred leader off the dead node


def test_repair_refuses_nodes_that_are_not_dead() -> None:
    nodes = [node(1), node(2)]
    with pytest.raises(errors.FailedPrecondition, match="alive"):
        plan_repair(["n1"], nodes, {})
    with pytest.raises(errors.NotFound):
        plan_repair(["n9"], nodes, {})


def test_nodes_due_for_repair_are_dead_long_enough() -> None:
    nodes = [
        NodeInfo("a", "", "", 1, 2, state="dead", state_ms=1_000),
        NodeInfo("b", "", "", 1, 2, state="dead", state_ms=5_000),
        NodeInfo("c", "", "", 1, 2, state="suspect", state_ms=0),
    ]
    assert nodes_due_for_repair(nodes, now_ms=11_000, repair_after_ms=10_000) == ["a"]


def test_partitions_crowded_on_one_rack_spread_to_a_new_rack() -> None:
    nodes = [node(1, "a"), node(2, "a"), node(3, "b"), node(4, "b")]
    assignments = {"q": [part(0, 1, 2), part(1, 3, 4)]}
    nodes.append(node(5, "c"))
    plan = plan_rebalance(nodes, assignments)
    after = run(nodes, assignments, plan)
    racks = {n.node_id: n.rack for n in nodes}
    assert all(len({racks[i] for i in a.node_ids}) == 2 for a in after["q"])
    assert len(plan.moves) == 2


def test_balance_never_crowds_a_rack() -> None:
    """n1 is rack a's only node, so it holds every partition; moving one of
    its replicas to rack b would crowd b: racks win over counts."""
    nodes = [node(1, "a"), node(2, "b"), node(3, "b")]
    assignments = {"q": [part(0, 1, 2), part(1, 1, 2), part(2, 1, 3), part(3, 1, 3)]}
    assert replica_counts(assignments, nodes) == [4, 2, 2]
    assert plan_rebalance(nodes, assignments).moves == ()


def test_plans_do_not_depend_on_input_order() -> None:
    nodes = [node(1, "a"), node(2, "b"), node(3, "a"), node(4, "c", "draining"), node(5, "b")]
    queues = {"x": [part(p, 1, 4) for p in range(5)], "y": [part(p, 4, 3, 1) for p in range(3)]}
    assert plan_rebalance(nodes[::-1], dict(reversed(queues.items()))) == plan_rebalance(
        nodes, queues
    )


# ---- bad input -----------------------------------------------------------------------------


# (step, error, field named, also caught by apply_plan, which has no node list)
BAD_MOVES = [
    (MoveReplica("nope", 0, "n1", "n3", port(3)), errors.NotFound, "queue", True),
    (MoveReplica("q", 7, "n1", "n3", port(3)), errors.InvalidArgument, "partition", True),
    (MoveReplica("q", 0, "n3", "n4", port(4)), errors.InvalidArgument, "from_node", True),
    (MoveReplica("q", 0, "n1", "n9", 1), errors.NotFound, "to_node", False),
    (MoveReplica("q", 0, "n1", "n2", port(2, 5)), errors.InvalidArgument, "to_node", True),
    (MoveReplica("q", 0, "n1", "", 0), errors.InvalidArgument, "to_node", True),
    (MoveReplica("q", 0, "n1", "n5", port(5)), errors.FailedPrecondition, "to_node", False),
    (MoveReplica("q", 0, "n1", "n3", 80), errors.InvalidArgument, "to_port", False),
    (MoveReplica("q", 0, "n1", "n3", port(3, 1)), errors.InvalidArgument, "to_port", True),
    (TransferLeader("q", 0, "n3"), errors.InvalidArgument, "to_node", True),
]


@pytest.mark.parametrize(("step", "error", "field", "structural"), BAD_MOVES)
def test_bad_moves_are_refused_naming_the_field_and_change_nothing(
    step: MoveReplica | TransferLeader,
    error: type[errors.QueueError],
    field: str,
    structural: bool,
) -> None:
    nodes = [node(1), node(2), node(3), node(4), node(5, state="draining")]
    assignments = {"q": [part(0, 1, 2), part(1, 3, 4)]}
    frozen = {q: tuple(seq) for q, seq in assignments.items()}
    with pytest.raises(error) as exc:
        validate_move(nodes, assignments, step)
    assert type(exc.value) is error
    assert getattr(exc.value, "field", None) == field or str(exc.value).startswith(f"{field}: ")
    if structural:
        with pytest.raises(error):
            apply_plan(assignments, [step])
    assert {q: tuple(seq) for q, seq in assignments.items()} == frozen


def test_a_below_replication_factor_move_says_so() -> None:
    with pytest.raises(errors.InvalidArgument, match="below its replication factor 2"):
        apply_plan({"q": [part(0, 1, 2)]}, [MoveReplica("q", 0, "n1", "", 0)])


def test_a_bad_step_in_a_plan_fails_the_whole_plan() -> None:
    assignments = {"q": [part(0, 1, 2)]}
    good = MoveReplica("q", 0, "n1", "n3", port(3))
    with pytest.raises(errors.InvalidArgument, match="n3 has a replica"):
        apply_plan(assignments, [good, MoveReplica("q", 0, "n2", "n3", port(3, 1))])
    assert assignments == {"q": [part(0, 1, 2)]}


def test_a_second_move_of_a_partition_in_flight_is_refused() -> None:
    nodes = [node(1), node(2), node(3)]
    move = MoveReplica("q", 0, "n1", "n3", port(3))
    with pytest.raises(errors.FailedPrecondition, match="in flight"):
        validate_move(nodes, {"q": [part(0, 1, 2)]}, move, in_flight={("q", 0)})


def test_port_zero_is_filled_with_the_lowest_free_port_of_the_target() -> None:
    nodes = [node(1), node(2), node(3)]
    assignments = {"q": [part(0, 1, 2), part(1, 3, 2)]}  # n3 uses port(3, 1)
    move = validate_move(nodes, assignments, MoveReplica("q", 0, "n2", "n3", 0))
    assert move == MoveReplica("q", 0, "n2", "n3", port(3, 0))
    with pytest.raises(errors.InvalidArgument, match="n1 has a replica"):
        validate_move(nodes, assignments, MoveReplica("q", 0, "n2", "n1", 0))
    one_port = [node(1), node(2), node(3, ports=1)]
    on_n3 = PartitionAssignment(1, (ReplicaRef("n3", port(3, 0)),))
    with pytest.raises(errors.ResourceExhausted):
        validate_move(one_port, {"q": [part(0, 1, 2), on_n3]}, MoveReplica("q", 0, "n2", "n3", 0))


def test_negative_max_moves_and_unknown_drain_node_are_refused() -> None:
    with pytest.raises(errors.InvalidArgument) as exc:
        plan_rebalance([node(1)], {}, max_moves=-1)
    assert exc.value.field == "max_moves"
    with pytest.raises(errors.NotFound):
        plan_drain("n9", [node(1)], {})


# ---- properties ----------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn, racks: bool = True, leaving: bool = True) -> Cluster:
    """Nodes (some draining or dead when ``leaving``) and an arbitrary valid,
    usually unbalanced assignment of one or more queues with one replication factor."""
    size = draw(st.integers(2, 7))
    labels = draw(st.sampled_from(["", "ab", "abc"])) if racks else ""
    states = st.sampled_from(["alive"] * 4 + (["draining", "dead"] if leaving else []))
    nodes = [
        node(i, labels[i % len(labels)] if labels else "", draw(states)) for i in range(1, size + 1)
    ]
    holders = [i for i in range(1, size + 1) if leaving or nodes[i - 1].state == "alive"]
    rf = draw(st.integers(1, min(3, len(holders))))
    rnd = random.Random(draw(st.integers(0, 2**32)))  # one draw, not one per partition: fast
    used: Counter[int] = Counter()
    queues: dict[str, list[PartitionAssignment]] = {}
    for q in range(draw(st.integers(1, 3))):
        queues[f"q{q}"] = []
        for p in range(draw(st.integers(1, 10))):
            chosen = rnd.sample(holders, rf)
            refs = tuple(ReplicaRef(f"n{i}", port(i, used[i])) for i in chosen)
            used.update(chosen)
            queues[f"q{q}"].append(PartitionAssignment(p, refs))
    return nodes, queues


def check_valid(nodes: list[NodeInfo], before: Assignments, after: Assignments, plan: Plan) -> None:
    by_id = {n.node_id: n for n in nodes}
    seen = [(r.node_id, r.raft_port) for seq in after.values() for a in seq for r in a.replicas]
    assert len(seen) == len(set(seen)), "one port used twice on a node"
    for q, seq in after.items():
        for old, new in zip(before[q], seq, strict=True):
            assert len(set(new.node_ids)) == len(new.replicas) == len(old.replicas)
            for r in new.replicas:
                assert (
                    by_id[r.node_id].raft_port_min <= r.raft_port <= by_id[r.node_id].raft_port_max
                )
    stuck = {(u.queue, u.partition, u.node_id) for u in plan.unplaced}
    for q, seq in after.items():
        for a in seq:
            assert all(n not in leaving(nodes) or (q, a.partition, n) in stuck for n in a.node_ids)


def leaving(nodes: list[NodeInfo]) -> set[str]:
    return {n.node_id for n in nodes if n.state == "draining"}


def rack_crowding(nodes: list[NodeInfo], assignments: Assignments) -> dict[tuple[str, int], int]:
    rack = {n.node_id: n.rack or n.node_id for n in nodes}
    return {(q, a.partition): len(a.replicas) - len({rack[i] for i in a.node_ids})
            for q, seq in assignments.items() for a in seq}  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_rebalance_plans_are_valid_idempotent_and_deterministic(cluster: Cluster) -> None:
    nodes, before = cluster
    plan = plan_rebalance(nodes, before)
    after = run(nodes, before, plan)
    check_valid(nodes, before, after, plan)
    assert plan_rebalance(nodes, after).steps == ()
    assert plan_rebalance(nodes[::-1], before) == plan
    # racks are never crowded more, except by a replica that had to leave a
    # draining node when every other target was in a used rack
    forced = {(m.queue, m.partition) for m in plan.moves if m.from_node in leaving(nodes)}
    crowd_before, crowd_after = rack_crowding(nodes, before), rack_crowding(nodes, after)
    assert all(crowd_after[k] <= crowd_before[k] for k in crowd_after if k not in forced)


def exact_min_moves(counts: list[int]) -> int:
    """Fewest moves to even ``counts`` within one: each node above its share
    (q + 1 for the r busiest, q for the others) sheds the excess."""
    q, r = divmod(sum(counts), len(counts))
    ranked = sorted(counts, reverse=True)
    return sum(max(0, c - (q + 1 if i < r else q)) for i, c in enumerate(ranked))


@settings(max_examples=200, deadline=None)
@given(clusters(racks=False, leaving=False))
def test_unlabelled_rebalance_is_balanced_and_minimal(cluster: Cluster) -> None:
    nodes, before = cluster
    alive = [n for n in nodes if n.state == "alive"]
    plan = plan_rebalance(nodes, before)
    after = run(nodes, before, plan)
    assert spread(replica_counts(after, alive)) <= 1
    assert spread(leader_counts(after, alive)) <= 1
    assert len(plan.moves) == exact_min_moves(replica_counts(before, alive))
    assert len({(t.queue, t.partition) for t in plan.transfers}) == len(plan.transfers)


@settings(max_examples=150, deadline=None)
@given(clusters(racks=False))
def test_moves_are_never_fewer_than_the_lower_bound(cluster: Cluster) -> None:
    """Every replica on a draining node must move, and every alive node
    above ceil(average) must shed down to it."""
    nodes, before = cluster
    alive = [n for n in nodes if n.state == "alive"]
    plan = plan_rebalance(nodes, before)
    forced = sum(1 for m in plan.moves if m.from_node not in {n.node_id for n in alive})
    total = sum(replica_counts(before, alive)) + forced
    ceiling = -(-total // len(alive)) if alive else 0
    bound = forced + sum(max(0, c - ceiling) for c in replica_counts(before, alive))
    assert len(plan.moves) >= bound
    after = run(nodes, before, plan)
    if not plan.unplaced:
        assert spread(replica_counts(after, alive)) <= 1


@settings(max_examples=100, deadline=None)
@given(clusters(racks=False), st.integers(1, 4))
def test_capped_plans_executed_in_rounds_reach_balance(cluster: Cluster, cap: int) -> None:
    nodes, start = cluster
    alive = [n for n in nodes if n.state == "alive"]
    state: Assignments = start
    for _ in range(100):  # each round but the last moves ``cap`` replicas: it ends
        plan = plan_rebalance(nodes, state, max_moves=cap)
        assert len(plan.moves) <= cap
        state = run(nodes, state, plan)
        if not plan.more:
            break
    else:
        pytest.fail("capped plans never finished")
    assert plan_rebalance(nodes, state).steps == ()
    if not plan.unplaced:
        assert spread(replica_counts(state, alive)) <= 1
