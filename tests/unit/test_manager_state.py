"""The external manager's state machine (manager/state.py): pure, no sockets."""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.client.models import ClusterStatus, NodeInfo, ReplicaStatus
from raft_queue.manager import placement, state
from raft_queue.manager.health import judge

CONFIG = {"partitions": 4, "ordering": "fifo"}


def machine_with(*names: str, health: str = "healthy") -> state.ManagerMachine:
    m = state.ManagerMachine()
    for i, name in enumerate(names):
        m.apply(state.AddCluster(name, (f"127.0.0.1:{7000 + i}",), "", 1))
        m.apply(state.ReportHealth(name, health, 0, "", 2))
    return m


def test_add_cluster_checks_name_and_addresses_and_writes_nothing_when_bad() -> None:
    m = state.ManagerMachine()
    with pytest.raises(errors.InvalidArgument) as bad:
        m.apply(state.AddCluster("c1", ("nohost",), "", 1))
    assert bad.value.field == "bootstrap[0]"
    with pytest.raises(errors.InvalidArgument):
        m.apply(state.AddCluster("-x", ("127.0.0.1:1",), "", 1))
    assert m.version == 0 and m.clusters() == {}


def test_health_reports_bump_version_but_not_the_mapping_version() -> None:
    m = machine_with("c1")
    mapping = m.mapping_version
    m.apply(state.ReportHealth("c1", "down", 0, "silent", 10))
    assert m.cluster("c1").health == "down"  # type: ignore[union-attr]
    assert m.cluster("c1").health_since_ms == 10  # type: ignore[union-attr]
    assert m.mapping_version == mapping


def test_new_queue_goes_to_the_least_loaded_healthy_cluster_not_draining() -> None:
    m = machine_with("c1", "c2", "c3")
    m.apply(state.ReportHealth("c1", "healthy", 5, "", 3))
    m.apply(state.ReportHealth("c2", "degraded", 0, "n2 dead", 3))
    m.apply(state.ReportHealth("c3", "healthy", 9, "", 3))
    homes = placement.plan_homes(m, 2, ())
    assert {h.cluster for h in homes} == {"c1"} and [h.local for h in homes] == [0, 1]
    m.apply(state.SetDraining("c1", True))
    assert {h.cluster for h in placement.plan_homes(m, 1, ())} == {"c3"}
    m.apply(state.ReportHealth("c3", "down", 0, "", 4))
    with pytest.raises(errors.Unavailable):
        placement.plan_homes(m, 1, ())


def test_named_clusters_share_the_partitions_round_robin() -> None:
    m = machine_with("c1", "c2")
    homes = placement.plan_homes(m, 4, ("c1", "c2"))
    assert homes == (
        state.PartitionHome("c1", 0), state.PartitionHome("c2", 0),
        state.PartitionHome("c1", 1), state.PartitionHome("c2", 1),
    )  # fmt: skip
    with pytest.raises(errors.NotFound):
        placement.plan_homes(m, 1, ("c9",))


def test_place_is_idempotent_and_a_cluster_holding_queues_cannot_be_removed() -> None:
    m = machine_with("c1", "c2")
    homes = placement.plan_homes(m, 4, ("c1", "c2"))
    q = m.apply(state.PlaceQueue("orders", homes, CONFIG, 5))
    version = m.mapping_version
    assert m.apply(state.PlaceQueue("orders", homes, CONFIG, 6)) == q
    assert m.mapping_version == version
    with pytest.raises(errors.AlreadyExists):
        m.apply(state.PlaceQueue("orders", homes[:2], CONFIG, 6))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(state.RemoveCluster("c2"))
    assert q.clusters() == ["c1", "c2"] and q.local_count("c2") == 2
    m.apply(state.ForgetQueue("orders"))
    m.apply(state.RemoveCluster("c2"))
    assert list(m.clusters()) == ["c1"]


def test_commands_and_snapshots_round_trip_to_equal_bytes() -> None:
    m = machine_with("c1", "c2")
    cmd = state.PlaceQueue("q", placement.plan_homes(m, 3, ("c1", "c2")), CONFIG, 7)
    assert state.decode_command(state.encode_command(cmd)) == cmd
    m.apply(state.decode_command(state.encode_command(cmd)))
    copy = state.ManagerMachine.from_bytes(m.to_bytes())
    assert copy.to_bytes() == m.to_bytes()
    assert copy.queue("q") == m.queue("q")


def _status(states: dict[str, str], unreachable: list[str] = ()) -> ClusterStatus:  # type: ignore[assignment]
    nodes = [NodeInfo(n, state=s) for n, s in states.items()]
    replicas = [ReplicaStatus("q", p, n) for p in range(2) for n in states]
    return ClusterStatus(nodes, replicas, "n1", 1, list(unreachable))


def test_judge_healthy_degraded_down() -> None:
    assert judge(_status({"n1": "alive", "n2": "alive"}), "", 0, 3) == ("healthy", 2, "")
    health, _, reason = judge(_status({"n1": "alive", "n2": "dead"}), "", 0, 3)  # type: ignore[misc]
    assert health == "degraded" and "n2" in reason
    assert judge(None, "refused", 1.0, 3) is None  # one lost poll says nothing
    assert judge(None, "refused", 3.5, 3)[0] == "down"  # type: ignore[index]
