"""Standing leases (replication/standing.py): a waiting long poll's Lease rides
in the same Raft entry as the Append that wakes it, so a message reaches a
waiting consumer in one round, and is leased on every replica alike.

Three real replicas in this process (journals, LMDB, loopback TCP).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import CancelledError

import pytest

from raft_queue.core import commands as cmd
from raft_queue.replication import raft as raft_module
from raft_queue.replication.partition import PartitionReplica
from raft_queue.replication.standing import StandingLeases
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration


def now_ms() -> int:
    return int(time.time() * 1000)


def append(body: bytes) -> cmd.Append:
    return cmd.Append((cmd.NewRecord(body=body),), now_ms=now_ms())


def leader_of(group: list[PartitionReplica]) -> PartitionReplica:
    wait_for(lambda: any(r.is_leader() for r in group))
    return next(r for r in group if r.is_leader())


def test_a_standing_lease_rides_in_the_appends_entry(group: list[PartitionReplica]) -> None:
    leader = leader_of(group)
    leader.submit(append(b"warm-up")).result(10)
    leader.submit(cmd.Ack((), now_ms())).result(10)  # settle: nothing in flight
    before = leader.raftLastApplied
    standing = leader.standing.stand("c1", 10, 30_000, 10.0)
    leader.submit(append(b"hello")).result(10)
    result = standing.future.result(10)
    # One entry for both (the journal grew by one), the lease after the append.
    assert leader.raftLastApplied == before + 1
    assert [m.record.body for m in result.messages] == [b"warm-up", b"hello"]
    assert [m.epoch for m in result.messages] == [1, 1]
    target = leader.raftLastApplied
    wait_for(lambda: all(r.raftLastApplied >= target for r in group))
    assert len({r.digest() for r in group}) == 1, "replicas differ"
    # Leased on every replica: a second lease finds nothing.
    again = leader.submit(cmd.Lease("c2", 10, 30_000, now_ms())).result(10)
    assert again.messages == ()


def test_commands_that_make_nothing_visible_carry_no_lease(
    group: list[PartitionReplica],
) -> None:
    leader = leader_of(group)
    leader.submit(append(b"one")).result(10)
    standing = leader.standing.stand("c1", 10, 30_000, 10.0)
    leader.submit(cmd.CommitOffset("g", 1)).result(10)
    assert not standing.future.done()
    assert leader.standing.withdraw(standing), "still waiting, so withdrawn untaken"
    assert standing.future.cancelled()


def test_an_expire_carries_the_standing_leases_only_when_a_lease_ends_by_its_time(
    group: list[PartitionReplica],
) -> None:
    # Housekeeping proposes an Expire every second while a partition holds
    # records. One with nothing due took every standing request along, each
    # leasing nothing: a consumer's lingering lease was used up before the
    # Append it was waiting for (server/dataplane/lingering.py).
    leader = leader_of(group)
    leader.submit(append(b"held")).result(10)
    held = leader.submit(cmd.Lease("c0", 1, 1000, now_ms())).result(10)
    assert [m.record.body for m in held.messages] == [b"held"]
    standing = leader.standing.stand("c1", 10, 30_000, 10.0)
    leader.submit(cmd.Expire(now_ms())).result(10)  # c0's lease still runs
    assert not standing.future.done()
    time.sleep(1.1)  # c0's lease ended: this Expire ends it, c1's lease rides along
    leader.submit(cmd.Expire(now_ms())).result(10)
    got = standing.future.result(10)
    assert [m.record.body for m in got.messages] == [b"held"]


def test_withdraw_after_a_claim_says_a_lease_was_taken() -> None:
    box = StandingLeases()
    taken = box.stand("c", 5, 1000, 10.0)
    expired = box.stand("c", 5, 1000, -1.0)  # its poll is already over
    claims = box.claim(lambda: 123)
    assert [(lease.consumer, lease.max_records, lease.now_ms) for lease, _, _ in claims] == [
        ("c", 5, 123)
    ]
    assert expired.future.cancelled(), "an expired request is dropped, not leased"
    assert not box.withdraw(taken), "claimed: the caller must take or give back its result"
    assert not box and box.claim(lambda: 0) == []


@pytest.mark.parametrize("leader_inline", [False, True], ids=["sync-on-threads", "sync-inline"])
def test_a_claimed_lease_outlives_its_claim_deadline(
    group: list[PartitionReplica], leader_inline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's deadline bounds when it may be claimed (a lingering
    request's is the 50 ms linger window); once its Lease is proposed it waits
    for the commit like any command. Failed at the claim deadline, the Lease
    still applied and its records stayed leased to no one for the whole
    visibility timeout. Here every journal sync takes 0.4 s and the request
    stands while the Append is in flight, so its Lease is proposed at once in
    an entry of its own, whose commit comes after the request's 0.15 s: the
    lease must still come back with the message.

    That needs the leader's driver free while the Append syncs, i.e. its
    sync on an I/O thread. A small entry after a fast sync is synced inline
    on the driver (syncs.py, ``LEADER_INLINE``): then the driver sits in the
    0.4 s sync for the whole claim window (the fast warm-up sync let it
    inline; 3 of 8 runs failed so before this case was split) and the
    request may expire unclaimed: nothing may be leased then, the message
    must still be there for the next Lease."""
    monkeypatch.setattr(raft_module, "LEADER_INLINE", leader_inline)
    leader = leader_of(group)
    leader.submit(append(b"warm-up")).result(10)
    leader.submit(cmd.Lease("c0", 10, 30_000, now_ms())).result(10)  # nothing visible after

    def slow_sync(fd: int) -> None:
        time.sleep(0.4)
        os.fdatasync(fd)

    for replica in group:
        replica._SyncObj__raftLog.fdatasync = slow_sync
    try:
        sent = leader.submit(append(b"late"))
        time.sleep(0.1)  # proposed, its sync running
        standing = leader.standing.stand("c1", 10, 30_000, 0.15, lingering=True)
        sent.result(10)
        try:
            result = standing.future.result(10)
        except CancelledError:  # expired unclaimed
            result = None
    finally:
        for replica in group:
            replica._SyncObj__raftLog.fdatasync = None
    if result is None:
        assert leader_inline, "with the leader's sync on a thread the driver claims in time"
        again = leader.submit(cmd.Lease("c2", 10, 30_000, now_ms())).result(10)
        assert [m.record.body for m in again.messages] == [b"late"], "leased to no one"
        return
    assert [m.record.body for m in result.messages] == [b"late"]
