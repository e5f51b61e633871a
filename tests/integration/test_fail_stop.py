"""Fail-stop: a storage error stops the replica it hits; it never skips an entry.

Three real replicas of one partition (journals, LMDB, fdatasync, loopback
TCP; the ``group`` fixture). One replica's store or journal sync is made to
fail (raft_queue/testing/faults.py). Before fail-stop, an apply whose write
raised was returned as the entry's result and counted as applied, so that
replica skipped the entry for good (its digest differed from then on), and a
failed journal fdatasync was simply retried, and its success trusted.
"""

from __future__ import annotations

import errno
import re
import time
from typing import Any

import pytest

from raft_queue import errors
from raft_queue.core import commands as cmd
from raft_queue.replication.partition import PartitionReplica
from raft_queue.testing.faults import install_failing_store, install_failing_sync
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration


def append(i: int) -> cmd.Append:
    return cmd.Append((cmd.NewRecord(body=b"m%06d" % i),), now_ms=1_000 + i)


def leader_of(group: list[PartitionReplica], exclude: Any = None) -> PartitionReplica:
    wait_for(lambda: any(r.is_leader() and r is not exclude for r in group), 30)
    return next(r for r in group if r.is_leader() and r is not exclude)


def send(group: list[PartitionReplica], start: int, count: int, exclude: Any = None) -> int:
    """Send ``count`` appends through whoever leads (retrying a leader change)."""
    sent, deadline = 0, time.monotonic() + 60
    while sent < count and time.monotonic() < deadline:
        leader = leader_of(group, exclude)
        try:
            leader.submit(append(start + sent)).result(10)
            sent += 1
        except (errors.NotLeader, errors.Unavailable, errors.OutcomeUnknown):
            time.sleep(0.1)
    assert sent == count, f"only {sent} of {count} appends were acknowledged"
    return sent


def reopen(old: PartitionReplica, group: list[PartitionReplica]) -> PartitionReplica:
    """A restart of ``old``: a new replica on the same directory and address."""
    host = old._host
    me = old.selfNode.address
    peers = [r.selfNode.address for r in group if r is not old]

    def open_() -> PartitionReplica:
        if host.get(old.key) is old:
            host.remove(old.key)
        r = PartitionReplica(old.key, host, me, peers, old.data_dir, election_timeout_s=(0.4, 0.8))
        host.add(r)
        return r

    return host.call(open_).result(30)


def assert_equal_after_restart(group: list[PartitionReplica], failed: PartitionReplica) -> None:
    group[group.index(failed)] = fresh = reopen(failed, group)
    target = max(r.raftLastApplied for r in group if r is not fresh)
    wait_for(lambda: fresh.raftLastApplied >= target, 60)
    digests = {r.digest() for r in group}
    assert len(digests) == 1, "the restarted replica differs from the others"


@pytest.mark.parametrize("role", ["follower", "leader"])
def test_an_apply_whose_store_write_raises_stops_that_replica(
    group: list[PartitionReplica], role: str
) -> None:
    send(group, 0, 5)
    leader = leader_of(group)
    victim = leader if role == "leader" else next(r for r in group if not r.is_leader())
    store = install_failing_store(victim)
    store.arm()
    stuck_at = victim.raftLastApplied
    if role == "leader":  # its own apply of the next entry fails: no ack, outcome unknown
        with pytest.raises(errors.OutcomeUnknown):
            victim.submit(append(1000)).result(10)
        stuck_at = victim.raftLastApplied
    # Every acknowledged append is on the two healthy replicas.
    send(group, 5, 20, exclude=victim)
    wait_for(lambda: bool(victim.failed), 30)
    assert store.failed_writes >= 1
    status = victim.status()
    assert status["role"] == "failed" and "apply of entry" in status["failure"]
    assert "DiskError" in status["failure"]
    # Stopped, not diverged: the entry that failed was never counted as applied.
    # (Entries that write nothing, e.g. a new leader's no-op, may apply between
    # arming and the failure: the invariant is about the entry that failed.)
    failed_index = int(re.search(r"apply of entry (\d+)", status["failure"]).group(1))
    assert victim.raftLastApplied == failed_index - 1 >= stuck_at
    assert not victim.is_leader()
    with pytest.raises(errors.Unavailable):
        victim.submit(append(99)).result(5)
    with pytest.raises(errors.Unavailable):
        victim.read(0, 10)
    healthy = [r for r in group if r is not victim]
    target = max(r.raftLastApplied for r in healthy)
    assert target > stuck_at
    wait_for(lambda: all(r.raftLastApplied >= target for r in healthy), 30)
    assert len({r.digest() for r in healthy}) == 1
    # Re-read from disk on restart (the store works again): nothing skipped.
    assert_equal_after_restart(group, victim)
    bodies = [r.body for r in leader_of(group).read(0, 100).records]
    acked = [b"m%06d" % i for i in range(25)]
    # The leader's failed entry was committed (not acked): it may be there too.
    assert [b for b in bodies if b in acked] == acked and len(bodies) <= 26


def test_a_failed_journal_fsync_is_never_retried_as_success(
    group: list[PartitionReplica],
) -> None:
    send(group, 0, 3)
    victim = next(r for r in group if not r.is_leader())
    sync = install_failing_sync(victim, failures=1, code=errno.EIO)
    sync.arm()
    send(group, 3, 20, exclude=victim)
    wait_for(lambda: sync.failed == 1, 30)
    journal = victim._SyncObj__raftLog
    durable = journal.durable_index
    # fsyncgate: the sync that would have succeeded next is never run, and
    # nothing more counts as durable (so nothing more is acknowledged).
    send(group, 23, 5, exclude=victim)
    time.sleep(1.0)
    assert sync.after_failure == 0, "a failed fdatasync was retried"
    assert journal.durable_index == durable
    assert victim.failed, "the replica kept serving after its journal sync failed"
    assert journal.failure and "fdatasync" in journal.failure
    status = victim.status()
    assert status["role"] == "failed" and "journal sync failed" in status["failure"]
    assert_equal_after_restart(group, victim)


def test_a_leader_whose_journal_fsync_fails_stops_and_another_leads(
    group: list[PartitionReplica],
) -> None:
    """The leader's own sync (inline on its driver for a small entry, after
    the AppendEntries went out: replication/syncs.py) fails: it stops at
    once, its entry's waiter is told Unavailable (never success), and the
    others elect a leader and carry on; after a restart all three agree."""
    send(group, 0, 3)
    victim = leader_of(group)
    sync = install_failing_sync(victim, failures=1, code=errno.EIO)
    sync.arm()
    with pytest.raises(errors.QueueError):
        victim.submit(append(3)).result(10)
    wait_for(lambda: sync.failed == 1, 30)
    assert victim.failed and not victim.is_leader()
    assert "journal sync failed" in victim.status()["failure"]
    send(group, 4, 20, exclude=victim)
    assert sync.after_failure == 0, "a failed fdatasync was retried"
    assert_equal_after_restart(group, victim)
