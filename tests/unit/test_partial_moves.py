"""Moving only some partitions of a queue (``raftq queue move Q --to C
--partitions 2,3``), the pure parts: the per-partition fence in the
metadata machine, and the move's checks and cut-over in the manager's state
machine (manager/move_state.py)."""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.client.models import OutgoingMessage, QueueConfig
from raft_queue.core import metadata as meta
from raft_queue.core.metadata import MetadataMachine
from raft_queue.manager import move_state, placement, state
from raft_queue.manager.moves import _pairs, _target_config
from tests.unit.test_manager_state import CONFIG, machine_with
from tests.unit.test_metadata_machine import create, machine_with_nodes


def test_fencing_some_partitions_fences_only_those_and_survives_a_snapshot() -> None:
    m = machine_with_nodes()
    record = m.apply(create(m, "q", partitions=4))
    fenced = m.apply(meta.FenceQueue("q", record.uid, True, (2, 3)))
    assert not fenced.fenced and fenced.fenced_partitions == (2, 3)
    assert [fenced.is_fenced(p) for p in range(4)] == [False, False, True, True]
    again = MetadataMachine.from_bytes(m.to_bytes())
    assert again.queue("q").fenced_partitions == (2, 3)  # type: ignore[union-attr]
    cmd = meta.FenceQueue("q", 1, True, (2, 3))
    assert meta.decode_meta(meta.encode_meta(cmd)) == cmd
    with pytest.raises(errors.InvalidArgument) as bad:
        m.apply(meta.FenceQueue("q", record.uid, True, (4,)))
    assert bad.value.field == "partitions"
    assert m.queue("q").fenced_partitions == (2, 3)  # type: ignore[union-attr]
    m.apply(meta.FenceQueue("q", record.uid, False, (3,)))  # unfence one of them
    assert m.queue("q").fenced_partitions == (2,)  # type: ignore[union-attr]
    m.apply(meta.FenceQueue("q", record.uid, False))  # unfence all: the whole and the parts
    assert not m.queue("q").is_fenced(2)  # type: ignore[union-attr]
    assert b"fenced" not in m.to_bytes()


def placed_spread() -> state.ManagerMachine:
    """'orders' with 4 partitions on c1, 'wide' spread over c1 and c2 (0,2 on
    c1; 1,3 on c2); c3 empty."""
    m = machine_with("c1", "c2", "c3")
    m.apply(state.PlaceQueue("orders", placement.plan_homes(m, 4, ("c1",)), dict(CONFIG), 1))
    m.apply(state.PlaceQueue("wide", placement.plan_homes(m, 4, ("c1", "c2")), dict(CONFIG), 1))
    return m


@pytest.mark.parametrize(
    ("queue", "target", "parts", "error", "field"),
    [
        ("orders", "c2", (4,), errors.InvalidArgument, "partitions"),  # out of range
        ("orders", "c2", (2, 2), errors.InvalidArgument, "partitions"),  # twice
        ("wide", "c3", (0, 1), errors.InvalidArgument, "partitions"),  # on two clusters
        ("wide", "c3", (), errors.InvalidArgument, "queue"),  # the whole spans two
        ("wide", "c2", (0,), errors.FailedPrecondition, "to"),  # c2 holds 'wide' already
        ("orders", "c1", (2,), errors.InvalidArgument, "to"),  # already there
    ],
)
def test_bad_partial_moves_name_the_field_and_write_nothing(
    queue: str, target: str, parts: tuple[int, ...], error: type, field: str
) -> None:
    m = placed_spread()
    version, mapping = m.version, m.mapping_version
    with pytest.raises(error) as bad:
        m.apply(move_state.StartMove(queue, target, 5, parts))
    named = getattr(bad.value, "field", "") or str(bad.value).split(":")[0]
    assert named == field
    assert (m.version, m.mapping_version, m.moves()) == (version, mapping, [])


def test_a_partial_move_cuts_over_only_its_partitions_onto_the_targets_first_ones() -> None:
    m = placed_spread()
    mapping = m.mapping_version
    move = m.apply(move_state.StartMove("orders", "c2", 5, (3, 1)))
    assert (move.partitions, move.source_locals, move.source) == ((1, 3), (1, 3), "c1")
    # Clients learn at the fence that sends must be pinned (c1 keeps fenced partitions).
    assert m.queue("orders").pinned and m.mapping_version == mapping + 1  # type: ignore[union-attr]
    mapping = m.mapping_version
    m.apply(move_state.SetMovePhase("orders", "starting", "fenced", 6))
    m.apply(move_state.FinishMove("orders", 7, 7))
    homes = [(h.cluster, h.local) for h in m.queue("orders").partitions]  # type: ignore[union-attr]
    assert homes == [("c1", 0), ("c2", 0), ("c1", 2), ("c2", 1)]
    assert m.mapping_version == mapping + 1
    again = state.ManagerMachine.from_bytes(m.to_bytes())
    assert again.move("orders") == m.move("orders") and again.queue("orders") == m.queue("orders")
    # The rest to c2, where 'orders' now lives: refused (its queue there cannot grow) ...
    with pytest.raises(errors.FailedPrecondition, match="to: cluster 'c2' already holds"):
        m.apply(move_state.StartMove("orders", "c2", 8, (0, 2)))
    # ... to a third cluster: fine, and the source's local indexes are carried.
    later = m.apply(move_state.StartMove("orders", "c3", 9, (0, 2)))
    assert (later.source, later.source_locals) == ("c1", (0, 2))


def test_naming_every_partition_is_a_whole_move_and_a_spread_queues_part_can_move() -> None:
    m = placed_spread()
    whole = m.apply(move_state.StartMove("orders", "c2", 5, (0, 1, 2, 3)))
    assert (whole.partitions, whole.source_locals) == ((), ())
    assert not m.queue("orders").pinned  # type: ignore[union-attr]
    m.apply(move_state.SetMovePhase("orders", "starting", "cancelling", 6))
    m.apply(move_state.SetMovePhase("orders", "cancelling", "cancelled", 7))
    part = m.apply(move_state.StartMove("wide", "c3", 8, (1, 3)))  # c2's share of 'wide'
    assert (part.source, part.source_locals) == ("c2", (0, 1))
    m.apply(move_state.SetMovePhase("wide", "starting", "fenced", 9))
    m.apply(move_state.FinishMove("wide", 0, 10))
    homes = [(h.cluster, h.local) for h in m.queue("wide").partitions]  # type: ignore[union-attr]
    assert homes == [("c1", 0), ("c3", 0), ("c1", 1), ("c3", 1)]


def test_the_mover_copies_source_locals_to_the_targets_partitions_in_order() -> None:
    partial = move_state.QueueMove("q", "c1", "c2", "fenced", 0, 0, partitions=(1, 3),
                                   source_locals=(1, 3))  # fmt: skip
    whole = move_state.QueueMove("q", "c1", "c2", "fenced", 0, 0)
    config = QueueConfig(partitions=4, ordering="fifo")
    assert _target_config(partial, config)["partitions"] == 2
    assert _target_config(whole, config)["partitions"] == 4
    assert _target_config(partial, config)["ordering"] == "fifo"
    assert _pairs(partial, 2) == [(1, 0), (3, 1)]
    assert _pairs(whole, 4) == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_a_partial_start_move_round_trips_the_manager_log_codec() -> None:
    cmd = move_state.StartMove("q", "c2", 5, (2, 3))
    assert state.decode_command(state.encode_command(cmd)) == cmd


def test_a_pinned_queues_bare_bodies_are_pinned_to_their_local_partition() -> None:
    from raft_queue.client.managed import _localized

    assert _localized(b"x", 1) == b"x"  # left to the cluster's round robin
    assert _localized(b"x", 1, pin=True) == OutgoingMessage(b"x", partition=1)
    assert _localized(OutgoingMessage(b"x", key="k"), 2).partition == 2


def test_a_receive_learns_a_partial_cut_over_from_the_mappings_age_without_waiting() -> None:
    """The source of a partial move keeps serving, so nothing fails there: a
    receive whose mapping is old refreshes it behind itself, and the next
    receive visits the target. A slow manager holds no receive up."""
    import threading
    import time

    from raft_queue.client.managed import Home, Mapping_
    from tests.unit.test_managed_client import FakeCluster, managed

    client, fakes = managed((Home("c1", 0), Home("c1", 1)))
    fakes["c2"] = FakeCluster("c2", 1)
    fakes["c2"].logs[0].append(OutgoingMessage(b"copied", "k"))
    released = threading.Event()

    def refresh() -> int:  # a slow manager naming the cut-over of global partition 1
        released.wait(5)
        bootstrap = {**client._mapping.bootstrap, "c2": ("127.0.0.1:3",)}
        homes = (Home("c1", 0), Home("c2", 0))
        client._map.current = Mapping_(2, bootstrap, {"q": homes}, {}, frozenset({"q"}))
        client._map.fetched_at = time.monotonic()
        return 2

    client.refresh = refresh  # type: ignore[method-assign]
    client._map.fetched_at = 0.0  # an old copy
    began = time.monotonic()
    assert client.receive("q", wait_ms=0) == []  # c1 has nothing; the manager is slow
    assert time.monotonic() - began < 1.0
    released.set()
    deadline = time.monotonic() + 5
    while client.mapping_version != 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    got = client.receive("q", wait_ms=0)
    assert [m.body for m in got] == [b"copied"] and got[0].partition == 1
