"""A queue move carries leases (core/lease_carry.py, core/carrying.py): the
copies of records leased at the source are leased on the target until the
source deadlines, with the source's receive counts; in FIFO they hold their
keys as heads. Machines over in-memory stores, explicit ``now_ms``: no clock."""

from __future__ import annotations

from typing import Any

import pytest

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core import access
from raft_queue.core.codec import decode, encode
from raft_queue.core.commands import Ack, ChangeVisibility, Nack, NewRecord, ReceiptRef
from raft_queue.core.lease_carry import CARRIED_EPOCH, CarriedLease, CarryLeases
from raft_queue.errors import InvalidArgument
from raft_queue.manager import carried_leases, move_state
from raft_queue.manager.state import (
    AddCluster,
    ManagerMachine,
    PartitionHome,
    PlaceQueue,
    decode_command,
    encode_command,
)
from tests.unit.test_partition_machine import Partition


def carried(offset: int) -> ReceiptRef:
    return ReceiptRef(offset, CARRIED_EPOCH)


def target(n: int = 6, **config: Any) -> Partition:
    p = Partition(**config)
    p.append(100, *(NewRecord(b"m%d" % i, key=f"k{i % 2}") for i in range(n)))
    return p


def test_carried_copies_stay_in_flight_until_the_source_deadline_then_come_back() -> None:
    p = target(visibility_timeout_ms=30_000)
    assert p.apply(CarryLeases((CarriedLease(1, 5000, 1), CarriedLease(3, 5000, 2)), 200)) == 2
    assert p.leased_offsets(300, 10) == [0, 2, 4, 5]  # the carried ones are not handed out
    assert p.leased_offsets(4999, 10) == []
    got = p.lease(5000, 10)
    assert [m.record.offset for m in got] == [1, 3]  # at the deadline, not 30 s later
    assert [m.receive_count for m in got] == [2, 3]  # the source's counts go on


def test_the_mover_settles_a_carried_lease_with_epoch_1() -> None:
    p = target()
    p.apply(CarryLeases((CarriedLease(0, 9000, 1), CarriedLease(1, 9000, 1)), 200))
    assert p.settle(Ack((carried(0),), 300)) == ["ok"]
    assert p.settle(Nack((carried(1),), 0, 300)) == ["ok"]
    assert [m.record.offset for m in p.lease(301, 10)] == [1, 2, 3, 4, 5]
    assert p.history(0).state == "done"


def test_a_carried_lease_follows_a_visibility_change() -> None:
    p = target()
    p.apply(CarryLeases((CarriedLease(2, 9000, 1),), 200))
    assert p.settle(ChangeVisibility((carried(2),), 100, 300)) == ["ok"]
    assert 2 in p.leased_offsets(400, 10)


def test_fifo_a_carried_lease_blocks_its_key_like_the_source_lease() -> None:
    p = target(ordering="fifo")
    p.apply(CarryLeases((CarriedLease(0, 9000, 1),), 200))  # key k0 held: 2, 4 wait
    assert p.leased_offsets(300, 10) == [1]  # k1's head; 3, 5 wait behind it
    assert p.history(2).state == "blocked"
    assert p.settle(Ack((carried(0),), 400)) == ["ok"]
    assert p.leased_offsets(401, 10) == [2]


def test_max_receives_counts_the_source_receives() -> None:
    p = target(max_receives=2)
    p.apply(CarryLeases((CarriedLease(0, 1000, 2),), 200))
    assert 0 not in p.leased_offsets(1000, 10)  # its second receive ended: dead
    assert p.history(0).state == "dead"


def test_carrying_twice_changes_nothing() -> None:
    p = target()
    cmd = CarryLeases((CarriedLease(1, 5000, 1), CarriedLease(4, 5000, 1)), 200)
    assert p.apply(cmd) == 2
    assert p.apply(cmd) == 0  # below the cursor now: skipped
    assert p.leased_offsets(300, 10) == [0, 2, 3, 5]
    assert p.leased_offsets(5000, 10) == [1, 4]
    assert [p.history(o).receive_count for o in (1, 4)] == [2, 2]


def test_the_command_round_trips_and_bad_fields_are_named() -> None:
    cmd = CarryLeases((CarriedLease(1, 5000, 1), CarriedLease(7, 6000, 3)), 200)
    assert decode(encode(cmd)) == cmd
    for leases, field in (
        ((CarriedLease(2, 1, 1), CarriedLease(2, 1, 1)), "leases[1].offset"),
        ((CarriedLease(2, 1, 0),), "leases[0].receive_count"),
        ((CarriedLease(-1, 1, 1),), "leases[0].offset"),
    ):
        with pytest.raises(InvalidArgument) as info:
            CarryLeases(leases, 1)
        assert info.value.field == field


def test_the_carry_rpcs_are_admin_calls() -> None:
    for rpc in ("CarryLeases", "SettleCarried"):
        assert access.rpc_operation(f"/raft_queue.v1.QueueService/{rpc}") == (access.ADMIN, "")


def test_the_mover_reads_what_became_of_a_source_lease() -> None:
    now, d, late = 10_000, 20_000, 20_000 + carried_leases.LATE_ACK_MARGIN_MS
    fate = carried_leases.lease_fate
    assert fate("done", 0, d, now) == ("ack", 0)
    assert fate("in_flight", d, d, now) is None  # still held
    assert fate("in_flight", 25_000, d, now) == ("visibility", 25_000)
    assert fate("queued", 0, d, now) == ("nack", 0)  # ended before its deadline
    assert fate("delayed", 14_000, d, now) == ("nack", 14_000)
    assert fate("queued", 0, d, d + 1) is None  # expired: a late ack may still come
    assert fate("done", 0, d, late) == ("ack", 0)  # ... and is followed
    assert fate("in_flight", d, d, late + 1) == ("expired", 0)


def test_the_move_keeps_its_carried_leases_until_each_is_settled() -> None:
    m = ManagerMachine()
    m.apply(AddCluster("c1", ("127.0.0.1:1",), "t", 1))
    m.apply(AddCluster("c2", ("127.0.0.1:2",), "t", 1))
    m.apply(PlaceQueue("q", (PartitionHome("c1", 0), PartitionHome("c1", 1)), {}, 1))
    m.apply(move_state.StartMove("q", "c2", 1))
    m.apply(move_state.SetMovePhase("q", "starting", "fenced", 2))
    carried = ((0, 5, 0, 1, 9000), (1, 7, 1, 0, 9000))
    finish = move_state.FinishMove("q", 3, 3, carried)
    assert decode_command(encode_command(finish)) == finish
    move = m.apply(finish)
    assert (move.phase, move.leases) == ("leases", carried)
    assert [h.cluster for h in m.queue("q").partitions] == ["c2", "c2"]  # cut over
    with pytest.raises(errors.FailedPrecondition):  # after the cut-over: no cancel
        m.apply(move_state.SetMovePhase("q", "leases", "cancelling", 4))
    with pytest.raises(errors.FailedPrecondition):  # nor a move of it yet
        move_state.check_move(m, "q", "c1")
    settle = move_state.SettleLeases("q", ((0, 5),), ((1, 7, 9500),), 5)
    assert decode_command(encode_command(settle)) == settle
    move = m.apply(settle)
    assert (move.phase, move.leases) == ("leases", ((1, 7, 1, 0, 9500),))
    again = ManagerMachine.from_bytes(m.to_bytes())  # a snapshot keeps them
    assert again.move("q") == move
    assert m.apply(move_state.SettleLeases("q", ((1, 7),), (), 6)).phase == "done"


class _Source:
    """A fenced source partition as ExportPartition shows it: offset -> (state, at_ms);
    offsets below ``earliest`` were acked and compacted."""

    def __init__(self, states: dict[int, tuple[str, int]], earliest: int = 0) -> None:
        self.states, self.earliest, self.gone = states, earliest, False

    def export_partition(self, queue: str, part: int, offset: int, n: int) -> Any:
        if self.gone:
            raise errors.NotFound("queue gone")
        latest = max(self.states) + 1
        lo = max(offset, self.earliest)
        offsets = list(range(lo, min(lo + n, latest)))
        messages = [
            queue_pb2.ExportedMessage(
                message=queue_pb2.Message(offset=o),
                state=self.states[o][0],
                at_ms=self.states[o][1],
            )
            for o in offsets
        ]
        return queue_pb2.ExportPartitionResponse(
            messages=messages, next_offset=(offsets[-1] + 1) if offsets else lo,
            latest_offset=latest,
        )  # fmt: skip


class _Target:
    def __init__(self) -> None:
        self.calls: list[tuple[int, list[int], str, int]] = []

    def settle_carried(self, queue: str, part: int, offsets: list[int], action: str,
                       until: int) -> None:  # fmt: skip
        self.calls.append((part, sorted(offsets), action, until))


def test_one_follow_round_does_to_each_copy_what_was_done_at_the_source() -> None:
    d, now = 20_000, 10_000
    src = _Source({0: ("done", 0), 1: ("done", 0), 2: ("in_flight", d), 3: ("queued", 0),
                   4: ("delayed", 15_000), 5: ("in_flight", 26_000), 6: ("in_flight", d)},
                  earliest=1)  # fmt: skip
    dst = _Target()
    leases = [(0, o, 1, 100 + o, d) for o in range(7)]
    settled, changed = carried_leases.follow(src, dst, "q", leases, now)
    assert sorted(dst.calls) == [
        (1, [100, 101], "ack", 0),  # 0 compacted (acked), 1 acked
        (1, [103], "nack", 0),
        (1, [104], "nack", 15_000),
        (1, [105], "visibility", 26_000),
    ]
    assert sorted(settled) == [(0, 0), (0, 1), (0, 3), (0, 4)]
    assert changed == [(0, 5, 26_000)]  # 2 and 6: still held, followed on
    src.gone = True  # the source queue deleted: nothing left to follow
    settled, _ = carried_leases.follow(src, _Target(), "q", leases[2:3], now)
    assert settled == [(0, 2)]


def test_replicas_applying_the_carry_as_bytes_hold_the_same_state() -> None:
    cmd = CarryLeases((CarriedLease(1, 5000, 1), CarriedLease(4, 6000, 3)), 200)
    a, b = target(ordering="fifo"), target(ordering="fifo")
    a.apply(cmd)
    with b.store.begin(write=True) as txn:
        assert b.machine.apply_encoded(txn, encode(cmd)) == 2
    assert a.digest() == b.digest()
    assert a.digest() != target(ordering="fifo").digest()


def test_copies_a_queue_delay_holds_back_wait_as_a_lease_walk_leaves_them() -> None:
    p = target(delay_ms=1000)  # appended at t=100: visible at 1100
    p.apply(CarryLeases((CarriedLease(2, 5000, 1),), 200))
    assert p.history(0).state == "delayed" and p.history(2).state == "in_flight"
    assert p.leased_offsets(1100, 10) == [0, 1, 3, 4, 5]
