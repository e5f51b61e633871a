"""Journal syncs off the driver thread (replication/syncs.py): hazard 3 holds
when the fdatasync runs on an I/O thread, and a commit needs any majority of
synced copies, not the leader's.

The I/O thread is replaced by a recorder: a test decides when each sync
ends (``finish``), so the orders that matter are forced, not raced.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from test_raft_hazards import addr, append_entries, entry, leader_node, make_obj, wire

from raft_queue.replication.journal import SyncJob
from raft_queue.replication.raft import make_conf
from raft_queue.replication.syncs import LEADER_INLINE_BYTES, LEADER_INLINE_SYNC_S, SyncThreads


class HeldSyncs:
    """Stands in for SyncThreads: keeps each submitted sync until ``finish``."""

    def __init__(self) -> None:
        self.jobs: list[tuple[SyncJob, Any]] = []

    def submit(self, job: SyncJob, done: Any) -> None:
        self.jobs.append((job, done))

    def run_inline(self, job: SyncJob, done: Any) -> bool:
        """Never inline: every sync is held (tests of inline use SyncThreads)."""
        return False

    def finish(self) -> None:
        """Run the oldest held sync, then its end on the 'driver thread'."""
        job, done = self.jobs.pop(0)
        job.run()
        done(job)


def journaled(tmp_path: Path, peers: list[str], timeout_s: float = 5) -> tuple[Any, HeldSyncs]:
    conf = make_conf(
        journal_file=str(tmp_path / "journal"),
        dump_file=None,
        election_timeout_min_s=timeout_s,
        election_timeout_max_s=timeout_s * 2,
    )
    obj = make_obj("patched", peers, conf)
    syncs = HeldSyncs()
    obj.syncer = syncs
    return obj, syncs


def acks(rec: Any) -> list[int]:
    return [m["next_node_idx"] for m in rec.sent if m["type"] == "next_node_idx" and m["success"]]


def receive(obj: Any, message: dict[str, Any]) -> None:
    """One poll round's message, then the flush the host runs after it."""
    obj._SyncObj__onMessageReceived(leader_node(obj), message)
    obj.flush_durable()


def test_an_ack_waits_for_the_sync_that_covers_its_entries(tmp_path: Path) -> None:
    obj, syncs = journaled(tmp_path, [addr()])
    rec = wire(obj)
    receive(obj, append_entries(1, 0, [entry(2), entry(3)]))
    assert acks(rec) == [], "acked before any sync ended"
    assert len(syncs.jobs) == 1, "one sync begun for the batch"
    # Entry 4 arrives while that sync runs: the running sync does not cover it.
    receive(obj, append_entries(3, 1, [entry(4)]))
    assert len(syncs.jobs) == 1, "a second sync of the same journal began meanwhile"
    syncs.finish()
    assert acks(rec) == [4], "the finished sync covers entries 2-3 only"
    assert len(syncs.jobs) == 1, "the sync of entry 4 begins when the first ends"
    syncs.finish()
    assert acks(rec) == [4, 5]


def test_entries_replaced_while_a_sync_runs_are_not_acked_by_it(tmp_path: Path) -> None:
    obj, syncs = journaled(tmp_path, [addr()])
    rec = wire(obj)
    receive(obj, append_entries(1, 0, [entry(2), entry(3), entry(4)]))
    assert len(syncs.jobs) == 1  # covers up to index 4 (term 1)
    # A new leader (term 2) replaces 3 and 4 before that sync ends.
    receive(obj, append_entries(2, 1, [entry(3, term=2)], term=2))
    syncs.finish()
    assert acks(rec) == [], "the new entry 3 was acked on a sync that began before it"
    assert obj._SyncObj__raftLog.durable_index == 2
    syncs.finish()
    assert acks(rec) == [4], "only the term-2 ack goes out; the term-1 one is dropped"


def test_the_leader_commits_on_two_synced_followers_while_its_own_sync_runs(
    tmp_path: Path,
) -> None:
    followers = [addr(), addr()]
    obj, syncs = journaled(tmp_path, followers)
    wire(obj)
    obj._SyncObj__setCurrentTerm(1, None)
    obj._SyncObj__onBecomeLeader()  # appends its no-op (index 2), begins a sync
    noop = obj._SyncObj__getCurrentLogIndex()
    assert syncs.jobs and obj._SyncObj__raftLog.durable_index < noop
    nodes = sorted(obj._SyncObj__otherNodes, key=lambda n: n.address)
    ack = {"type": "next_node_idx", "next_node_idx": noop + 1, "reset": False, "success": True}
    obj._SyncObj__onMessageReceived(nodes[0], dict(ack))
    obj._raft_tick()
    assert obj.raftCommitIndex < noop, "one synced follower plus an unsynced leader committed"
    obj._SyncObj__onMessageReceived(nodes[1], dict(ack))
    obj._raft_tick()
    assert obj._SyncObj__raftLog.durable_index < noop, "the leader's sync has not ended"
    assert obj.raftCommitIndex == noop, "two synced followers are a majority"


def test_the_leader_counts_its_own_copy_once_synced(tmp_path: Path) -> None:
    followers = [addr(), addr()]
    obj, syncs = journaled(tmp_path, followers)
    wire(obj)
    obj._SyncObj__setCurrentTerm(1, None)
    obj._SyncObj__onBecomeLeader()
    noop = obj._SyncObj__getCurrentLogIndex()
    node = sorted(obj._SyncObj__otherNodes, key=lambda n: n.address)[0]
    ack = {"type": "next_node_idx", "next_node_idx": noop + 1, "reset": False, "success": True}
    obj._SyncObj__onMessageReceived(node, ack)
    obj._raft_tick()
    assert obj.raftCommitIndex < noop
    syncs.finish()
    obj._raft_tick()
    assert obj.raftCommitIndex == noop, "leader (synced) + one follower are a majority"


def test_a_follower_syncing_inline_acks_after_its_sync_and_not_before(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """SyncThreads.run_inline (nothing else queued on the host): the sync runs
    on the driver and the ack goes out right after it, in the same flush."""
    obj, _ = journaled(tmp_path, [addr()])
    rec = wire(obj)
    obj.syncer = SyncThreads(lambda fn: fn(), threads=0, quiet=lambda: True)
    seen: list[list[int]] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        seen.append(acks(rec))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    receive(obj, append_entries(1, 0, [entry(2), entry(3)]))
    assert seen and all(s == [] for s in seen), "the ack went out before a sync"
    assert acks(rec) == [4] and obj._SyncObj__raftLog.durable_index == 3
    assert obj.syncer.inlined == 1


def test_a_busy_host_hands_the_sync_to_the_threads(tmp_path: Path) -> None:
    """Another group's work queued (``quiet`` false): not inline, and no ack
    until the I/O thread's sync ends."""
    obj, _ = journaled(tmp_path, [addr()])
    rec = wire(obj)
    posted: list[Any] = []
    obj.syncer = SyncThreads(posted.append, threads=1, quiet=lambda: False)
    try:
        receive(obj, append_entries(1, 0, [entry(2), entry(3)]))
        assert obj.syncer.inlined == 0
        deadline = time.monotonic() + 10
        while not posted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert acks(rec) == [], "acked before the sync's end reached the driver"
        posted.pop()()
        assert acks(rec) == [4]
    finally:
        obj.syncer.stop()


def test_the_leader_ticks_only_for_an_ack_or_sync_that_can_commit(tmp_path: Path) -> None:
    """Its own sync ending first and the second follower's ack commit
    nothing: they ask for no tick (two of the four driver rounds of a W1
    send). The ack that makes a majority does; so does a refused ack."""
    obj, syncs = journaled(tmp_path, [addr(), addr()])
    wire(obj)
    obj._SyncObj__setCurrentTerm(1, None)
    obj._SyncObj__onBecomeLeader()
    noop = obj._SyncObj__getCurrentLogIndex()
    ticks: list[int] = []
    obj._on_activity = lambda: ticks.append(1)
    first, second = sorted(obj._SyncObj__otherNodes, key=lambda n: n.address)
    ack = {"type": "next_node_idx", "next_node_idx": noop + 1, "reset": False, "success": True}
    syncs.finish()
    assert obj._SyncObj__raftLog.durable_index == noop
    assert ticks == [], "the leader's copy alone is no majority"
    obj._SyncObj__onMessageReceived(first, dict(ack))
    assert ticks == [1], "leader + one follower commit: tick"
    obj._raft_tick()
    assert obj.raftCommitIndex == noop
    obj._SyncObj__onMessageReceived(second, dict(ack))
    assert ticks == [1], "the second ack moves no commit index"
    obj._SyncObj__onMessageReceived(second, dict(ack, success=False, reset=True))
    assert ticks == [1, 1], "a refused ack is a retry to arrange: tick"


def _leader_with_inline_syncs(tmp_path: Path, monkeypatch: Any) -> tuple[Any, Any, list[str]]:
    """A leader of three on a quiet host (syncs may run inline), its no-op
    synced; ``order`` records each AppendEntries with entries and each fdatasync."""
    obj, held = journaled(tmp_path, [addr(), addr()])
    rec = wire(obj)
    obj._SyncObj__setCurrentTerm(1, None)
    obj._SyncObj__onBecomeLeader()
    held.finish()
    obj._SyncObj__raftLog.last_sync_s = 0.0  # a fast disk (the test's may not be)
    posted: list[Any] = []
    obj.syncer = SyncThreads(posted.append, threads=0, quiet=lambda: True)
    order: list[str] = []
    real_send, real_sync = rec.__call__, os.fdatasync

    def send(node: Any, message: dict[str, Any]) -> bool:
        if message.get("entries"):
            order.append("ae")
        return real_send(node, message)

    def fdatasync(fd: int) -> None:
        order.append("sync")
        real_sync(fd)

    obj._SyncObj__transport.send = send
    obj._SyncObj__connectedNodes.update(obj._SyncObj__otherNodes)  # AppendEntries go out
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return obj, posted, order


def test_a_leader_sends_a_small_entry_first_then_syncs_it_on_the_driver(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A one-message entry on a quiet host: both AppendEntries go out, then
    the leader's fdatasync runs inline (the followers sync meanwhile), and
    its end needs neither an I/O thread nor a round of its own."""
    obj, posted, order = _leader_with_inline_syncs(tmp_path, monkeypatch)
    obj._applyCommand(b"\x00\xa2small", lambda res, err: None)
    ticks: list[int] = []
    obj._on_activity = lambda: ticks.append(1)
    obj._raft_tick()
    last = obj._SyncObj__getCurrentLogIndex()
    assert order == ["ae", "ae", "sync"], order
    assert obj._SyncObj__raftLog.durable_index == last
    assert obj.syncer.inlined == 1 and posted == []
    assert ticks == [], "the leader's copy alone commits nothing: no tick asked"


def test_a_leader_hands_a_large_entry_to_the_threads_before_sending_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Over LEADER_INLINE_BYTES (a W2 batch) the sync is begun on the I/O
    threads before the AppendEntries: the driver is not held by it."""
    obj, _, order = _leader_with_inline_syncs(tmp_path, monkeypatch)
    obj._applyCommand(b"\x00\xa2" + b"x" * (LEADER_INLINE_BYTES + 1), lambda res, err: None)
    obj._raft_tick()
    assert order == ["ae", "ae"], "synced on the driver"
    assert obj.syncer.inlined == 0
    assert obj._SyncObj__raftLog.inflight is not None, "no sync begun before the sends"


def test_after_a_slow_sync_a_leader_syncs_on_the_threads_again(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """While its disk is slow (the last sync over LEADER_INLINE_SYNC_S) the
    driver must not sit in a sync: an ack arriving meanwhile would wait."""
    obj, _, order = _leader_with_inline_syncs(tmp_path, monkeypatch)
    obj._SyncObj__raftLog.last_sync_s = LEADER_INLINE_SYNC_S * 10
    obj._applyCommand(b"\x00\xa2small", lambda res, err: None)
    obj._raft_tick()
    assert order == ["ae", "ae"] and obj.syncer.inlined == 0
    assert obj._SyncObj__raftLog.inflight is not None
