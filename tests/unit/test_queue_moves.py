"""Moving a queue between clusters, the pure parts: the fence in the
partition machine and the metadata machine, and the move's phases in the
manager's state machine (manager/move_state.py)."""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.core import metadata as meta
from raft_queue.core.codec import decode, encode
from raft_queue.core.commands import (
    Ack,
    Append,
    Configure,
    Lease,
    NewRecord,
    PartitionConfig,
    ReceiptRef,
)
from raft_queue.core.metadata import MetadataMachine
from raft_queue.core.partition import PartitionMachine
from raft_queue.manager import move_state, placement, state
from raft_queue.storage import MemoryStore
from tests.unit.test_manager_state import CONFIG, machine_with
from tests.unit.test_metadata_machine import create, machine_with_nodes


def _apply(machine: PartitionMachine, store: MemoryStore, cmd: object) -> object:
    with store.begin(write=True) as txn:
        return machine.apply_encoded(txn, encode(cmd))  # type: ignore[arg-type]


def test_a_fenced_config_round_trips_and_an_unfenced_one_encodes_as_before() -> None:
    plain = Configure(PartitionConfig(ordering="fifo"))
    fenced = Configure(PartitionConfig(ordering="fifo", fenced=True))
    both = Configure(PartitionConfig(ordering="fifo", sealed=True, fenced=True))
    assert decode(encode(fenced)) == fenced and decode(encode(both)) == both
    assert encode(plain) == encode(Configure(PartitionConfig(ordering="fifo", fenced=False)))
    assert encode(fenced) != encode(plain)


def test_a_fenced_partition_refuses_appends_leases_nothing_and_still_takes_acks() -> None:
    machine, store = PartitionMachine(), MemoryStore(PartitionMachine.TABLES)
    _apply(machine, store, Configure(PartitionConfig(ordering="none")))
    _apply(machine, store, Append(tuple(NewRecord(b"m%d" % i) for i in range(3)), 1))
    leased = _apply(machine, store, Lease("c", 1, 1000, 2))
    refs = tuple(ReceiptRef(m.record.offset, m.epoch) for m in leased.messages)  # type: ignore[attr-defined]
    _apply(machine, store, Configure(PartitionConfig(ordering="none", fenced=True)))
    with pytest.raises(errors.PartitionSealed):
        _apply(machine, store, Append((NewRecord(b"late"),), 3))
    assert _apply(machine, store, Lease("c", 10, 1000, 4)).messages == ()  # type: ignore[attr-defined]
    _apply(machine, store, Ack(refs, 5))  # a lease given before the fence is still acked
    with store.begin() as txn:
        stats = machine.stats(txn, 6)
        assert stats.fenced and stats.messages == 2 and stats.latest_offset == 3
        assert machine.history(txn, 0).state == "done"  # type: ignore[union-attr]
    # Unfenced (a cancelled move): sends and leases again.
    _apply(machine, store, Configure(PartitionConfig(ordering="none")))
    _apply(machine, store, Append((NewRecord(b"again"),), 7))
    assert len(_apply(machine, store, Lease("c", 10, 1000, 8)).messages) == 3  # type: ignore[attr-defined]


def test_fence_queue_marks_every_partition_sealed_and_survives_a_snapshot() -> None:
    m = machine_with_nodes()
    record = m.apply(create(m, "q", partitions=2))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(meta.FenceQueue("q", record.uid + 1, True))  # a re-created queue: refused
    fenced = m.apply(meta.FenceQueue("q", record.uid, True))
    assert fenced.fenced and fenced.sealed(0) is False  # sealed = split; fenced is its own
    assert meta.decode_meta(meta.encode_meta(meta.FenceQueue("q", 1, True))) == meta.FenceQueue(
        "q", 1, True
    )
    again = MetadataMachine.from_bytes(m.to_bytes())
    assert again.queue("q").fenced  # type: ignore[union-attr]
    m.apply(meta.FenceQueue("q", record.uid, False))
    assert not m.queue("q").fenced  # type: ignore[union-attr]
    assert b"fenced" not in m.to_bytes()  # an unfenced queue's image is as before


def placed(*clusters: str) -> state.ManagerMachine:
    m = machine_with(*clusters)
    homes = placement.plan_homes(m, 4, ("c1",))
    m.apply(state.PlaceQueue("orders", homes, dict(CONFIG), 1))
    return m


def test_bad_moves_name_the_field_and_write_nothing() -> None:
    m = placed("c1", "c2")
    version = m.version
    with pytest.raises(errors.NotFound, match="queue: 'nope'"):
        m.apply(move_state.StartMove("nope", "c2", 5))
    with pytest.raises(errors.NotFound, match="to: cluster 'c9'"):
        m.apply(move_state.StartMove("orders", "c9", 5))
    with pytest.raises(errors.InvalidArgument) as same:
        m.apply(move_state.StartMove("orders", "c1", 5))
    assert same.value.field == "to"
    m.apply(state.SetDraining("c2", True))
    with pytest.raises(errors.FailedPrecondition, match="to: cluster 'c2' is draining"):
        m.apply(move_state.StartMove("orders", "c2", 5))
    assert m.version == version + 1 and m.moves() == []


def test_a_move_runs_through_its_phases_and_the_cut_over_switches_the_mapping() -> None:
    m = placed("c1", "c2")
    m.apply(state.PlaceQueue("other", placement.plan_homes(m, 1, ("c1",)), dict(CONFIG), 1))
    move = m.apply(move_state.StartMove("orders", "c2", 5))
    assert (move.source, move.target, move.phase) == ("c1", "c2", "starting")
    with pytest.raises(errors.FailedPrecondition, match="a move is running"):
        m.apply(move_state.StartMove("other", "c2", 6))  # one at a time
    with pytest.raises(errors.FailedPrecondition, match="is moving"):
        m.apply(state.ForgetQueue("orders"))
    mapping = m.mapping_version
    m.apply(move_state.SetMovePhase("orders", "starting", "fenced", 7))
    with pytest.raises(errors.FailedPrecondition):  # a deposed leader's stale step
        m.apply(move_state.SetMovePhase("orders", "starting", "fenced", 8))
    assert m.mapping_version == mapping
    done = m.apply(move_state.FinishMove("orders", 42, 9))
    assert done.phase == "done" and done.copied == 42 and m.mapping_version == mapping + 1
    assert {h.cluster for h in m.queue("orders").partitions} == {"c2"}  # type: ignore[union-attr]
    assert [h.local for h in m.queue("orders").partitions] == [0, 1, 2, 3]  # type: ignore[union-attr]
    with pytest.raises(errors.FailedPrecondition, match="already cut over"):
        m.apply(move_state.SetMovePhase("orders", "done", "cancelling", 10))
    again = state.ManagerMachine.from_bytes(m.to_bytes())
    assert again.move("orders") == done and again.queue("orders") == m.queue("orders")


def test_a_cancel_before_the_cut_over_rolls_back_and_frees_the_next_move() -> None:
    m = placed("c1", "c2")
    m.apply(move_state.StartMove("orders", "c2", 5))
    m.apply(move_state.SetMovePhase("orders", "starting", "fenced", 6))
    m.apply(move_state.SetMovePhase("orders", "fenced", "cancelling", 7))
    with pytest.raises(errors.FailedPrecondition):  # the copy's cut-over comes too late
        m.apply(move_state.FinishMove("orders", 3, 8))
    m.apply(move_state.SetMovePhase("orders", "cancelling", "cancelled", 9))
    assert {h.cluster for h in m.queue("orders").partitions} == {"c1"}  # type: ignore[union-attr]
    assert m.apply(move_state.StartMove("orders", "c2", 10)).phase == "starting"


def test_the_cluster_side_of_a_move_is_admin_only() -> None:
    from raft_queue.core import access

    for method in ("AdminService/FenceQueue", "QueueService/ExportPartition"):
        assert access.rpc_operation(f"/raft_queue.v1.{method}") == (access.ADMIN, "")


def test_move_commands_round_trip_the_manager_log_codec() -> None:
    for cmd in (
        move_state.StartMove("q", "c2", 5),
        move_state.SetMovePhase("q", "starting", "fenced", 6),
        move_state.FinishMove("q", 12, 7),
    ):
        assert state.decode_command(state.encode_command(cmd)) == cmd
