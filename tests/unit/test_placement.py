"""place_partitions: examples and Hypothesis properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft_queue import errors
from raft_queue.core.metadata import NodeInfo, PartitionAssignment, ReplicaRef
from raft_queue.core.placement import place_partitions


def node(i: int, rack: str = "", state: str = "alive", ports: int = 100) -> NodeInfo:
    base = 10_000 + 1000 * i
    return NodeInfo(f"n{i}", f"h{i}:7001", f"h{i}", base, base + ports - 1, rack, False, state)


def replica_counts(placed: list[PartitionAssignment]) -> Counter[str]:
    return Counter(r.node_id for a in placed for r in a.replicas)


def leader_counts(placed: list[PartitionAssignment]) -> Counter[str]:
    return Counter(a.replicas[0].node_id for a in placed)


def check_valid(nodes: list[NodeInfo], placed: list[PartitionAssignment], rf: int) -> None:
    by_id = {n.node_id: n for n in nodes}
    ports = [(r.node_id, r.raft_port) for a in placed for r in a.replicas]
    assert len(ports) == len(set(ports)), "a port is used twice on one node"
    for i, a in enumerate(placed):
        assert (a.partition, a.epoch, len(a.replicas)) == (i, 1, rf)
        assert len(set(a.node_ids)) == rf, "two replicas on one node"
        for r in a.replicas:
            n = by_id[r.node_id]
            assert n.state == "alive"
            assert n.raft_port_min <= r.raft_port <= n.raft_port_max


def test_three_nodes_rf3_every_node_holds_every_partition_and_leaders_rotate() -> None:
    placed = place_partitions([node(1), node(2), node(3)], [], 6, 3)
    assert all(set(a.node_ids) == {"n1", "n2", "n3"} for a in placed)
    assert leader_counts(placed) == {"n1": 2, "n2": 2, "n3": 2}
    assert [r.raft_port for r in placed[0].replicas] == [11_000, 12_000, 13_000]


def test_new_partitions_go_to_the_least_loaded_nodes() -> None:
    nodes = [node(1), node(2), node(3)]
    existing = place_partitions(nodes[:2], [], 4, 1)  # n1, n2 hold two each
    placed = place_partitions(nodes, existing, 2, 1)
    assert [a.node_ids for a in placed] == [("n3",), ("n3",)]
    assert placed[0].replicas[0].raft_port == 13_000


def test_ports_used_by_other_queues_are_skipped() -> None:
    existing = [PartitionAssignment(0, (ReplicaRef("n1", 11_000), ReplicaRef("n1", 11_001)))]
    (placed,) = place_partitions([node(1)], existing, 1, 1)
    assert placed.replicas == (ReplicaRef("n1", 11_002),)


def test_only_alive_nodes_are_used() -> None:
    nodes = [node(1), node(2, state="dead"), node(3, state="draining"), node(4)]
    placed = place_partitions(nodes, [], 4, 2)
    assert set(replica_counts(placed)) == {"n1", "n4"}
    with pytest.raises(errors.InvalidArgument) as exc:
        place_partitions(nodes, [], 1, 3)
    assert exc.value.field == "replication_factor"


def test_racks_are_spread_before_load() -> None:
    nodes = [node(1, "a"), node(2, "a"), node(3, "b"), node(4, "c")]
    for a in place_partitions(nodes, [], 8, 3):
        racks = [nodes[int(n[1:]) - 1].rack for n in a.node_ids]
        assert len(set(racks)) == 3


def test_full_port_ranges_are_resource_exhausted() -> None:
    nodes = [node(1, ports=2), node(2, ports=2)]
    existing = place_partitions(nodes, [], 2, 2)
    with pytest.raises(errors.ResourceExhausted):
        place_partitions(nodes, existing, 1, 2)
    assert len(place_partitions([*nodes, node(3)], existing, 1, 1)) == 1  # n3 has room


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeInfo], int, int]:
    size = draw(st.integers(1, 7))
    racks = draw(st.sampled_from(["", "ab", "abc"]))
    nodes = [node(i, racks[i % len(racks)] if racks else "") for i in range(1, size + 1)]
    rf = draw(st.sampled_from([r for r in (1, 3, 5) if r <= size]))
    return nodes, rf, draw(st.integers(1, 40))


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_placement_is_valid_and_deterministic(cluster: tuple[list[NodeInfo], int, int]) -> None:
    nodes, rf, partitions = cluster
    placed = place_partitions(nodes, [], partitions, rf)
    check_valid(nodes, placed, rf)
    assert place_partitions(list(reversed(nodes)), [], partitions, rf) == placed


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 7), st.data())
def test_replicas_spread_within_one_as_queues_come_and_leaders_nearly(
    size: int, data: st.DataObject
) -> None:
    """Unlabelled nodes, queues created one after another: per-node replica
    counts never differ by more than one; leader counts by at most two
    (greedy placement cannot look ahead; leader balancing evens them later).
    """
    nodes = [node(i) for i in range(1, size + 1)]
    existing: list[PartitionAssignment] = []
    for _ in range(data.draw(st.integers(1, 4))):
        rf = data.draw(st.sampled_from([r for r in (1, 3, 5) if r <= size]))
        existing += place_partitions(nodes, existing, data.draw(st.integers(1, 12)), rf)
        counts = [replica_counts(existing)[n.node_id] for n in nodes]
        assert max(counts) - min(counts) <= 1
    leaders = [leader_counts(existing)[n.node_id] for n in nodes]
    assert max(leaders) - min(leaders) <= 2


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 7), st.sampled_from([1, 3, 5]), st.integers(1, 30))
def test_one_queue_on_a_fresh_cluster_balances_leaders_within_one(
    size: int, rf: int, partitions: int
) -> None:
    nodes = [node(i) for i in range(1, size + 1)]
    placed = place_partitions(nodes, [], partitions, min(rf, size))
    leaders = [leader_counts(placed)[n.node_id] for n in nodes]
    assert max(leaders) - min(leaders) <= 1
