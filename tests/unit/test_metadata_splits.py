"""Splits in the metadata machine and the seal in the partition machine.

A split is one metadata entry: parents sealed, children placed and numbered
after the existing partitions, the spec's partition count grown; the seal a
partition's leader then applies refuses every Append in that Raft group,
batched or not, while acks of what it holds still apply.
"""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.core import metadata as meta
from raft_queue.core.codec import decode, encode
from raft_queue.core.commands import (
    Ack,
    Append,
    Batch,
    Configure,
    Lease,
    NewRecord,
    PartitionConfig,
    ReceiptRef,
)
from raft_queue.core.metadata import MetadataMachine, PartitionAssignment
from raft_queue.core.partition import PartitionMachine
from raft_queue.core.placement import place_partitions
from raft_queue.storage import MemoryStore
from tests.unit.test_metadata_machine import create, machine_with_nodes


def split_cmd(m: MetadataMachine, name: str, parents: tuple[int, ...]) -> meta.SplitPartitions:
    q = m.queue(name)
    assert q is not None
    placed = place_partitions(
        m.nodes().values(), m.all_assignments(), 2 * len(parents), q.spec.replication_factor
    )
    children = tuple(
        PartitionAssignment(q.spec.partitions + i, a.replicas) for i, a in enumerate(placed)
    )
    return meta.SplitPartitions(name, q.uid, parents, children)


def test_a_split_seals_the_parent_and_adds_two_children() -> None:
    m = machine_with_nodes()
    m.apply(create(m, "q", partitions=2, ordering="fifo"))
    version = m.version
    record = m.apply(split_cmd(m, "q", (1,)))
    assert m.version == version + 1
    assert record.spec.partitions == 4
    assert [r.state for r in record.ranges] == ["open", "splitting", "open", "open"]
    assert [a.partition for a in m.assignments("q")] == [0, 1, 2, 3]
    assert record.layout.writable() == (0, 1, 2, 3) and not record.sealed(1)
    record = m.apply(meta.SetPartitionState("q", record.uid, 1, "sealed"))
    assert record.layout.writable() == (0, 2, 3)
    assert record.sealed(1) and not record.sealed(0)
    assert record.layout.gated() == {2, 3}


def test_a_bad_split_changes_nothing() -> None:
    m = machine_with_nodes()
    m.apply(create(m, "q", partitions=1))
    good = split_cmd(m, "q", (0,))
    before = m.to_bytes()
    with pytest.raises(errors.InvalidArgument):
        m.apply(meta.SplitPartitions("q", good.uid, (5,), good.assignments))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(meta.SplitPartitions("q", good.uid + 7, (0,), good.assignments))
    assert m.to_bytes() == before
    m.apply(good)
    with pytest.raises(errors.InvalidArgument, match="splitting"):  # a parent splits once
        m.apply(split_cmd(m, "q", (0,)))


def test_drained_is_recorded_once_and_only_for_a_sealed_partition() -> None:
    m = machine_with_nodes()
    m.apply(create(m, "q", partitions=1, ordering="fifo"))
    m.apply(split_cmd(m, "q", (0,)))
    uid = m.queue("q").uid  # type: ignore[union-attr]
    with pytest.raises(errors.FailedPrecondition):
        m.apply(meta.SetPartitionState("q", uid, 1, "drained"))  # a child, open
    with pytest.raises(errors.FailedPrecondition):
        m.apply(meta.SetPartitionState("q", uid, 0, "drained"))  # not sealed yet
    m.apply(meta.SetPartitionState("q", uid, 0, "sealed"))
    record = m.apply(meta.SetPartitionState("q", uid, 0, "drained"))
    assert record.layout.gated() == set()
    version = m.version
    m.apply(meta.SetPartitionState("q", uid, 0, "drained"))
    assert m.version == version


def test_splits_survive_the_codec_and_the_snapshot() -> None:
    m = machine_with_nodes()
    m.apply(create(m, "q", partitions=2))
    cmd = split_cmd(m, "q", (0, 1))
    assert meta.decode_meta(meta.encode_meta(cmd)) == cmd
    m.apply(cmd)
    copy = MetadataMachine.from_bytes(m.to_bytes())
    assert copy.queue("q") == m.queue("q")
    assert copy.to_bytes() == m.to_bytes()


def test_an_unsplit_queue_snapshots_as_before() -> None:
    m = machine_with_nodes()
    m.apply(create(m, "q", partitions=2))
    assert b"ranges" not in m.to_bytes()


def test_create_repeated_after_a_split_is_still_idempotent() -> None:
    m = machine_with_nodes()
    first = create(m, "q", partitions=2)
    m.apply(first)
    m.apply(split_cmd(m, "q", (0,)))
    assert m.apply(first).spec.partitions == 4


def test_partitions_change_only_by_splits() -> None:
    m = machine_with_nodes()
    m.apply(create(m, "q", partitions=2))
    q = m.queue("q")
    assert q is not None
    from dataclasses import replace

    with pytest.raises(errors.InvalidArgument, match="partitions"):
        m.apply(meta.UpdateQueue("q", replace(q.spec, partitions=4)))


# ---- the seal in the partition's own Raft group ---------------------------------------


def _apply(machine: PartitionMachine, store: MemoryStore, cmd: object) -> object:
    with store.begin(write=True) as txn:
        return machine.apply_encoded(txn, encode(cmd))  # type: ignore[arg-type]


def test_a_sealed_config_round_trips_and_unsealed_encodes_as_before() -> None:
    plain = Configure(PartitionConfig(ordering="fifo"))
    sealed = Configure(PartitionConfig(ordering="fifo", sealed=True))
    assert decode(encode(sealed)) == sealed
    assert len(encode(sealed)) == len(encode(plain)) and encode(sealed) != encode(plain)


def test_a_sealed_partition_refuses_appends_but_acks_still_apply() -> None:
    machine, store = PartitionMachine(), MemoryStore(PartitionMachine.TABLES)
    _apply(machine, store, Configure(PartitionConfig(ordering="fifo")))
    _apply(machine, store, Append((NewRecord(b"a", key="k"), NewRecord(b"b", key="j")), 1))
    leased = _apply(machine, store, Lease("c", 10, 1000, 2))
    refs = tuple(ReceiptRef(m.record.offset, m.epoch) for m in leased.messages)  # type: ignore[attr-defined]
    _apply(machine, store, Configure(PartitionConfig(ordering="fifo", sealed=True)))
    with pytest.raises(errors.PartitionSealed):
        _apply(machine, store, Append((NewRecord(b"late", key="k"),), 3))
    # In a batch, the refused Append is its own result: the ack beside it applies.
    out = _apply(machine, store, Batch((Append((NewRecord(b"late"),), 4), Ack(refs, 4))))
    assert isinstance(out[0], errors.PartitionSealed)  # type: ignore[index]
    with store.begin() as txn:
        stats = machine.stats(txn, 5)
    assert stats.sealed and stats.messages == 0 and stats.latest_offset == 2


def test_a_sealed_partition_answers_the_retry_of_an_append_it_stored_before_the_seal() -> None:
    machine, store = PartitionMachine(), MemoryStore(PartitionMachine.TABLES)
    _apply(machine, store, Configure(PartitionConfig(ordering="fifo")))
    first = Append((NewRecord(b"a", key="k"), NewRecord(b"b", key="k")), 1, request_id=b"r1")
    stored = _apply(machine, store, first)
    _apply(machine, store, Configure(PartitionConfig(ordering="fifo", sealed=True)))
    again = _apply(machine, store, Append(first.records, 9, request_id=b"r1"))
    assert [(i.offset, i.duplicate) for i in again.items] == [  # type: ignore[attr-defined]
        (i.offset, True)
        for i in stored.items  # type: ignore[attr-defined]
    ]
    with pytest.raises(errors.PartitionSealed):
        _apply(machine, store, Append(first.records, 9, request_id=b"r2"))
