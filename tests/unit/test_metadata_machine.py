"""MetadataMachine: commands, their codec, snapshots and determinism."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft_queue import errors
from raft_queue.config import QueueSpec
from raft_queue.core import metadata as meta
from raft_queue.core.metadata import (
    CreateQueue,
    DeleteQueue,
    MetadataMachine,
    PartitionAssignment,
    RegisterNode,
    ReplicaRef,
    SetAssignment,
    SetNodeState,
    UpdateQueue,
)
from raft_queue.core.placement import place_partitions


def register(node_id: str, now_ms: int = 1, **changes: Any) -> RegisterNode:
    n = int(node_id[1:])
    fields: dict[str, Any] = {
        "node_id": node_id,
        "address": f"127.0.0.1:{7000 + n}",
        "raft_host": "127.0.0.1",
        "raft_port_min": 7000 + 100 * n,
        "raft_port_max": 7000 + 100 * n + 9,
        "now_ms": now_ms,
        **changes,
    }
    return RegisterNode(**fields)


def machine_with_nodes(count: int = 3) -> MetadataMachine:
    m = MetadataMachine()
    for i in range(1, count + 1):
        m.apply(register(f"n{i}"))
    return m


def create(m: MetadataMachine, name: str, now_ms: int = 10, **spec: Any) -> CreateQueue:
    """A CreateQueue placed from ``m``'s current state (as the leader does)."""
    config = QueueSpec(**spec)
    placed = place_partitions(
        m.nodes().values(), m.all_assignments(), config.partitions, config.replication_factor
    )
    return CreateQueue(name, config, tuple(placed), now_ms)


# ---- nodes ---------------------------------------------------------------------------


def test_register_node_is_idempotent_and_updates_the_address() -> None:
    m = MetadataMachine()
    first = m.apply(register("n1"))
    assert m.apply(register("n1", now_ms=99)) == first  # a retry changes nothing
    assert m.version == 1
    moved = m.apply(register("n1", now_ms=100, address="10.0.0.1:7001"))
    assert moved.address == "10.0.0.1:7001" and moved.registered_ms == 1
    assert m.version == 2


def test_a_dead_node_that_registers_is_alive_but_draining_stays_draining() -> None:
    m = machine_with_nodes(2)
    m.apply(SetNodeState("n1", "dead", 5))
    m.apply(SetNodeState("n2", "draining", 5))
    assert m.apply(register("n1", now_ms=6)).state == "alive"
    assert m.apply(register("n2", now_ms=6)).state == "draining"


def test_register_refuses_a_range_that_orphans_a_replica_port() -> None:
    m = machine_with_nodes(1)
    m.apply(create(m, "q", replication_factor=1))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(register("n1", raft_port_min=7150, raft_port_max=7160))


def test_set_node_state_checks() -> None:
    m = machine_with_nodes(1)
    with pytest.raises(errors.NotFound):
        m.apply(SetNodeState("n9", "dead", 1))
    with pytest.raises(errors.InvalidArgument) as exc:
        m.apply(SetNodeState("n1", "sleepy", 1))
    assert exc.value.field == "state"
    m.apply(create(m, "q", replication_factor=1))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(SetNodeState("n1", "removed", 1))
    version = m.version
    assert m.apply(SetNodeState("n1", "alive", 2)).state_ms == 1  # no change, no bump
    assert m.version == version


# ---- queues --------------------------------------------------------------------------


def test_create_queue_assigns_increasing_uids_and_stores_placement() -> None:
    m = machine_with_nodes()
    a = m.apply(create(m, "a", partitions=2))
    b = m.apply(create(m, "b"))
    assert (a.uid, b.uid) == (1, 2)
    assert a.created_ms == 10 and a.spec.partitions == 2
    assert [p.partition for p in m.assignments("a")] == [0, 1]
    assert m.queue("a") == a and m.queue("zz") is None
    assert [q.name for q in m.queues()] == ["a", "b"]


def test_create_queue_again_with_same_spec_returns_the_queue() -> None:
    m = machine_with_nodes()
    cmd = create(m, "q")
    first = m.apply(cmd)
    version = m.version
    assert m.apply(create(m, "q", now_ms=99)) == first
    assert m.version == version
    with pytest.raises(errors.AlreadyExists):
        m.apply(create(m, "q", visibility_timeout_ms=1))


def test_a_recreated_queue_never_reuses_the_old_uid() -> None:
    m = machine_with_nodes()
    old = m.apply(create(m, "q"))
    m.apply(DeleteQueue("q"))
    assert m.assignments("q") == [] and m.queue("q") is None
    assert m.apply(create(m, "q")).uid != old.uid
    with pytest.raises(errors.NotFound):
        m.apply(DeleteQueue("nope"))


def test_create_from_a_stale_placement_is_retryable_and_changes_nothing() -> None:
    m = machine_with_nodes()
    first, second = create(m, "a"), create(m, "b")  # both placed from the same state
    m.apply(first)
    version = m.version
    with pytest.raises(errors.Unavailable) as exc:
        m.apply(second)
    assert exc.value.retryable
    assert m.version == version and m.queue("b") is None
    m.apply(create(m, "b"))  # re-placed from the new state


def test_create_rejects_bad_names_and_dead_letter_targets() -> None:
    m = machine_with_nodes()
    with pytest.raises(errors.InvalidArgument) as exc:
        m.apply(create(m, "bad name"))
    assert exc.value.field == "name"
    for dlq in ("q", "missing"):
        with pytest.raises(errors.InvalidArgument) as exc:
            m.apply(create(m, "q", dead_letter_queue=dlq, max_receives=3))
        assert exc.value.field == "dead_letter_queue"
    m.apply(create(m, "dlq"))
    assert m.apply(create(m, "q", dead_letter_queue="dlq", max_receives=3)).uid == 2


def test_update_queue_changes_mutable_fields_only() -> None:
    m = machine_with_nodes()
    record = m.apply(create(m, "q", partitions=2))
    updated = m.apply(UpdateQueue("q", record.spec.with_updates(visibility_timeout_ms=5)))
    assert updated.spec.visibility_timeout_ms == 5 and updated.uid == record.uid
    for name, value in (("partitions", 3), ("replication_factor", 1), ("ordering", "fifo")):
        with pytest.raises(errors.InvalidArgument) as exc:
            m.apply(UpdateQueue("q", record.spec.with_updates(**{name: value})))
        assert exc.value.field == name
    with pytest.raises(errors.NotFound):
        m.apply(UpdateQueue("other", record.spec))


# ---- assignments ---------------------------------------------------------------------


def test_set_assignment_fences_stale_epochs_and_old_uids() -> None:
    m = machine_with_nodes(4)
    record = m.apply(create(m, "q"))
    old = m.assignments("q")[0]
    moved = (*old.replicas[:2], ReplicaRef("n4", 7400))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(SetAssignment("q", 0, moved, epoch=old.epoch))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(SetAssignment("q", 0, moved, epoch=2, uid=record.uid + 1))
    with pytest.raises(errors.InvalidArgument):
        m.apply(SetAssignment("q", 5, moved, epoch=2))
    new = m.apply(SetAssignment("q", 0, moved, epoch=2, uid=record.uid))
    assert m.assignments("q") == [new]
    assert [r.queue for r in m.replicas_on("n4")] == ["q"]


def test_set_assignment_rejects_taken_ports_and_duplicate_nodes() -> None:
    m = machine_with_nodes(3)
    m.apply(create(m, "q", partitions=2))
    p0, p1 = m.assignments("q")
    with pytest.raises(errors.Unavailable):
        m.apply(SetAssignment("q", 0, p1.replicas, epoch=2))  # p1's ports
    with pytest.raises(errors.InvalidArgument):
        m.apply(SetAssignment("q", 0, (p0.replicas[0], p0.replicas[0]), epoch=2))
    with pytest.raises(errors.Unavailable):
        m.apply(SetAssignment("q", 0, (ReplicaRef("n9", 1),), epoch=2))
    reordered = (p0.replicas[1], p0.replicas[0], p0.replicas[2])
    assert m.apply(SetAssignment("q", 0, reordered, epoch=2)).replicas == reordered


def test_replicas_on_lists_what_a_node_must_host() -> None:
    m = machine_with_nodes(3)
    m.apply(create(m, "a", partitions=3, replication_factor=1))
    on_n2 = m.replicas_on("n2")
    assert len(on_n2) == 1 and on_n2[0].uid == 1
    assert on_n2[0].assignment.node_ids == ("n2",)


# ---- codec and snapshots -------------------------------------------------------------

SAMPLE_COMMANDS = [
    register("n1", rack="r1", controller=True),
    SetNodeState("n1", "draining", 7),
    CreateQueue(
        "q",
        QueueSpec(partitions=1, replication_factor=1, ordering="fifo"),
        (PartitionAssignment(0, (ReplicaRef("n1", 7100),), 1),),
        3,
    ),
    UpdateQueue("q", QueueSpec(delay_ms=5)),
    DeleteQueue("q"),
    SetAssignment("q", 0, (ReplicaRef("n1", 7101), ReplicaRef("n2", 7200)), 4, uid=1),
]


@pytest.mark.parametrize("cmd", SAMPLE_COMMANDS, ids=lambda c: type(c).__name__)
def test_every_command_round_trips_through_the_codec(cmd: meta.MetaCommand) -> None:
    data = meta.encode_meta(cmd)
    assert meta.decode_meta(data) == cmd
    assert meta.encode_meta(meta.decode_meta(data)) == data


@pytest.mark.parametrize(
    "data", [b"", b"{}", b'{"v":1,"type":"Nope"}', b'{"v":2,"type":"DeleteQueue","name":"q"}']
)
def test_undecodable_entries_are_internal(data: bytes) -> None:
    with pytest.raises(errors.Internal):
        meta.decode_meta(data)


def test_snapshot_round_trip_is_byte_identical() -> None:
    m = machine_with_nodes(3)
    m.apply(create(m, "a", partitions=2))
    m.apply(SetNodeState("n3", "suspect", 9))
    image = m.to_bytes()
    copy = MetadataMachine.from_bytes(image)
    assert copy.to_bytes() == image
    assert copy.version == m.version and copy.queues() == m.queues()
    b = copy.apply(create(copy, "b", replication_factor=1))
    assert b.uid == m.apply(create(m, "b", replication_factor=1)).uid  # counter kept
    with pytest.raises(errors.Internal):
        MetadataMachine.from_bytes(b"{not json")


def random_command(draw: Any, m: MetadataMachine) -> meta.MetaCommand:
    kind = draw(st.sampled_from(["register", "state", "create", "update", "delete"]))
    node = draw(st.sampled_from(["n1", "n2", "n3", "n4"]))
    name = draw(st.sampled_from(["a", "b", "c"]))
    if kind == "register":
        return register(node, now_ms=draw(st.integers(0, 9)))
    if kind == "state":
        return SetNodeState(node, draw(st.sampled_from(meta.NODE_STATES)), 5)
    if kind == "update":
        return UpdateQueue(name, QueueSpec(replication_factor=1, delay_ms=draw(st.integers(0, 2))))
    if kind == "delete":
        return DeleteQueue(name)
    try:
        return create(m, name, partitions=draw(st.integers(1, 3)), replication_factor=1)
    except errors.QueueError:
        return DeleteQueue(name)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_replaying_the_log_reproduces_the_state(data: st.DataObject) -> None:
    """A follower applying the encoded log (with failures) ends byte-identical."""
    leader, log = MetadataMachine(), []
    for _ in range(data.draw(st.integers(0, 25))):
        cmd = random_command(data.draw, leader)
        log.append(meta.encode_meta(cmd))
        with contextlib.suppress(errors.QueueError):
            leader.apply(cmd)
    follower = MetadataMachine()
    for entry in log:
        with contextlib.suppress(errors.QueueError):
            follower.apply(meta.decode_meta(entry))
    assert follower.to_bytes() == leader.to_bytes()
    assert MetadataMachine.from_bytes(leader.to_bytes()).to_bytes() == leader.to_bytes()
