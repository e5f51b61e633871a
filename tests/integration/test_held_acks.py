"""Held commands (``ReplicatedGroup.submit(hold_s=...)``): a background ack
a Receive carries waits for the next entry of its partition and rides in it
(no Raft round of its own, docs/benchmarks.md "W4: where a message's
milliseconds go"), or is proposed alone once its hold ends.

Three real replicas in this process (journals, LMDB, loopback TCP).
"""

from __future__ import annotations

import time

import pytest

from raft_queue.core import commands as cmd
from raft_queue.core.results import OK
from raft_queue.replication.partition import PartitionReplica
from tests.integration.conftest import wait_for
from tests.integration.test_standing_leases import append, leader_of, now_ms

pytestmark = pytest.mark.integration


def _leased(leader: PartitionReplica, body: bytes) -> tuple[cmd.ReceiptRef, ...]:
    leader.submit(append(body)).result(10)
    res = leader.submit(cmd.Lease("c", 10, 30_000, now_ms())).result(10)
    return tuple(cmd.ReceiptRef(m.record.offset, m.epoch) for m in res.messages)


def test_a_held_ack_rides_in_the_next_entry(group: list[PartitionReplica]) -> None:
    leader = leader_of(group)
    refs = _leased(leader, b"one")
    before = leader.raftLastApplied
    held = leader.submit(cmd.Ack(refs, now_ms()), hold_s=30.0)
    time.sleep(0.3)  # heartbeats and ticks meanwhile: it is not proposed alone
    assert not held.done() and leader.raftLastApplied == before
    leader.submit(append(b"two")).result(10)
    assert [o for o, _ in held.result(10).runs] == [OK]
    assert leader.raftLastApplied == before + 1, "the ack and the append: one entry"
    target = leader.raftLastApplied
    wait_for(lambda: all(r.raftLastApplied >= target for r in group))
    assert len({r.digest() for r in group}) == 1, "replicas differ"


def test_a_held_ack_is_proposed_alone_when_its_hold_ends(group: list[PartitionReplica]) -> None:
    """The holder wakes the group after the hold (as settling.py does); the
    group then proposes the ack on its own."""
    leader = leader_of(group)
    refs = _leased(leader, b"one")
    t0 = time.monotonic()
    held = leader.submit(cmd.Ack(refs, now_ms()), hold_s=0.2)
    time.sleep(0.2)
    leader.wake()
    assert [o for o, _ in held.result(10).runs] == [OK]
    assert time.monotonic() - t0 < 5.0
    again = leader.submit(cmd.Lease("c2", 10, 30_000, now_ms())).result(10)
    assert again.messages == (), "acked, so nothing to lease"


def test_a_fifo_queues_ack_is_not_held(group: list[PartitionReplica]) -> None:
    """A FIFO queue's Ack frees its key's next record: it may not wait."""
    leader = leader_of(group)
    ack = cmd.Ack((), now_ms())
    assert leader.may_hold(ack)
    leader.submit(cmd.Configure(cmd.PartitionConfig(ordering="fifo"))).result(10)
    assert not leader.may_hold(ack)
    assert leader.may_hold(cmd.CommitOffset("g", 1))
