"""MetadataMachine: replica moves in flight (StartMove, SetMovePhase, FinishMove, DropMove)."""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.core import metadata as meta
from raft_queue.core.metadata import (
    DeleteQueue,
    DropMove,
    FinishMove,
    MetadataMachine,
    ReplicaRef,
    SetAssignment,
    SetMovePhase,
    SetNodeState,
    StartMove,
)
from tests.unit.test_metadata_machine import create, machine_with_nodes


def four_nodes_one_queue() -> MetadataMachine:
    m = machine_with_nodes(4)
    m.apply(SetNodeState("n4", "draining"))
    m.apply(create(m, "q", partitions=1, replication_factor=3))
    m.apply(SetNodeState("n4", "alive"))
    return m


def start(m: MetadataMachine, frm: str = "n1", to: str = "n4", port: int = 7405) -> meta.Move:
    a = m.assignments("q")[0]
    assert frm in a.node_ids and to not in a.node_ids
    result: meta.Move = m.apply(StartMove("q", 0, frm, to, port, now_ms=5))
    return result


def test_a_finished_move_replaces_the_replica_in_place_and_bumps_the_epoch() -> None:
    m = four_nodes_one_queue()
    before = m.assignments("q")[0]
    start(m)
    assert [mv.to for mv in m.moves()] == [ReplicaRef("n4", 7405)]
    m.apply(SetMovePhase("q", 0, "removing"))
    after = m.apply(FinishMove("q", 0))
    assert after.epoch == before.epoch + 1
    assert after.node_ids == tuple("n4" if n == "n1" else n for n in before.node_ids)
    assert m.moves() == []


def test_a_move_target_hosts_nothing_until_finished_and_its_port_is_reserved() -> None:
    m = four_nodes_one_queue()
    start(m)
    assert m.replicas_on("n4") == []
    assert ("n4", 7405) in m._used_ports()  # a second queue cannot place a replica there
    m2 = MetadataMachine.from_bytes(m.to_bytes())
    assert m2.moves() == m.moves() and m2.to_bytes() == m.to_bytes()


@pytest.mark.parametrize(
    ("frm", "to", "port", "error"),
    [
        ("n4", "n1", 7105, errors.InvalidArgument),  # from holds none
        ("n1", "n2", 7205, errors.InvalidArgument),  # to holds one
        ("n1", "n9", 7905, errors.NotFound),  # unknown node
        ("n1", "n4", 9999, errors.Unavailable),  # port out of range
    ],
)
def test_a_bad_move_changes_nothing(frm: str, to: str, port: int, error: type) -> None:
    m = four_nodes_one_queue()
    snapshot = m.to_bytes()
    with pytest.raises(error):
        m.apply(StartMove("q", 0, frm, to, port))
    assert m.to_bytes() == snapshot


def test_one_move_per_partition_and_no_assignment_change_meanwhile() -> None:
    m = four_nodes_one_queue()
    start(m)
    snapshot = m.to_bytes()
    with pytest.raises(errors.FailedPrecondition):
        m.apply(StartMove("q", 0, "n2", "n4", 7406))
    a = m.assignments("q")[0]
    with pytest.raises(errors.FailedPrecondition):
        m.apply(SetAssignment("q", 0, tuple(reversed(a.replicas)), a.epoch + 1))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(SetNodeState("n4", "removed"))
    assert m.to_bytes() == snapshot


def test_cancel_is_refused_once_removing_and_a_cancelled_move_leaves_no_trace() -> None:
    m = four_nodes_one_queue()
    before = m.assignments("q")
    start(m)
    m.apply(SetMovePhase("q", 0, "cancelling"))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(SetMovePhase("q", 0, "removing"))
    m.apply(DropMove("q", 0))
    assert m.assignments("q") == before and m.moves() == []
    start(m)
    m.apply(SetMovePhase("q", 0, "removing"))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(SetMovePhase("q", 0, "cancelling"))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(DropMove("q", 0))


def test_move_commands_round_trip_the_codec_and_deleting_the_queue_drops_its_moves() -> None:
    for cmd in (StartMove("q", 0, "n1", "n4", 7405, 3), SetMovePhase("q", 0, "removing"),
                FinishMove("q", 0), DropMove("q", 0)):  # fmt: skip
        assert meta.decode_meta(meta.encode_meta(cmd)) == cmd
    m = four_nodes_one_queue()
    start(m)
    m.apply(DeleteQueue("q"))
    assert m.moves() == []
