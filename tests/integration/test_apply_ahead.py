"""A leader applies its newest entry while it is being replicated (issue 17).

``PartitionReplica.after_append`` runs the entry's apply in an LMDB write
transaction held open until the entry commits; the commit's apply is then an
LMDB commit. These tests hold it to its contract: the state committed is
exactly what applying at commit gives, nothing of it is visible before the
commit, an entry that commits at that index with other bytes (a new
leader's) is applied from its own bytes, and a replica closing or
restoring with one held does not hang. Real replicas (LMDB, journal), no
network.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from raft_queue.core import codec
from raft_queue.core import commands as cmd
from raft_queue.replication import entries, partition
from raft_queue.replication.group import ReplicaFailed
from raft_queue.replication.host import RaftHost
from raft_queue.replication.partition import PartitionReplica
from raft_queue.testing.faults import install_failing_store
from tests.integration.conftest import wait_for
from tests.integration.test_snapshot_install import send
from tests.integration.test_snapshot_off_driver import lone_replica

pytestmark = pytest.mark.integration


def append(body: bytes) -> bytes:
    """A regular entry's payload: one Append of one record."""
    return codec.encode(cmd.Append((cmd.NewRecord(body=body),), now_ms=5_000))


def bodies(replica: PartitionReplica) -> list[bytes]:
    return [r.body for r in replica.read(0, 100).records]


@pytest.fixture
def host() -> object:
    h = RaftHost(idle_tick_s=0.02)
    h.start()
    yield h
    h.stop()


def test_applied_ahead_commits_the_state_applying_at_commit_gives(
    host: RaftHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ahead = lone_replica(host, "ahead/0", tmp_path / "ahead")
    send(ahead, b"m-", 30)
    monkeypatch.setattr(partition, "APPLY_AHEAD", False)
    plain = lone_replica(host, "plain/0", tmp_path / "plain")
    send(plain, b"m-", 30)
    assert ahead.applied_ahead >= 25, "the sends did not take the apply-ahead path"
    assert plain.applied_ahead == 0
    assert bodies(ahead) == [b"m-%03d" % i for i in range(30)]
    assert ahead.digest() == plain.digest()
    assert ahead.store.last_applied() == ahead.raftLastApplied


def test_an_entry_applied_ahead_is_invisible_then_replaced_by_other_bytes(
    host: RaftHost, tmp_path: Path
) -> None:
    r = lone_replica(host, "r/0", tmp_path / "r")
    send(r, b"m-", 2)
    seen: list[list[bytes]] = []

    def on_driver() -> None:
        # As a leader whose entry idx is out: apply it ahead.
        idx = r.raftLastApplied + 1
        journal = r._SyncObj__raftLog
        journal.add(entries.regular(append(b"ahead")), idx, journal[-1][2])
        r.after_append()
        assert r._ahead is not None and r._ahead.index == idx
        reader = threading.Thread(target=lambda: seen.append(bodies(r)))
        reader.start()
        reader.join(10)
        # The index commits with another leader's bytes: those are applied.
        r.apply_bytes(idx, append(b"other"))
        assert r._ahead is None

    host.call(on_driver).result(10)
    assert seen == [[b"m-000", b"m-001"]], "an uncommitted apply was visible"
    assert bodies(r) == [b"m-000", b"m-001", b"other"]
    assert r.applied_ahead == 2  # the two sends; not the replaced entry


def test_a_replica_restores_and_closes_with_an_entry_held_ahead(
    host: RaftHost, tmp_path: Path
) -> None:
    source = lone_replica(host, "source/0", tmp_path / "source")
    send(source, b"s-", 3)
    dump = os.path.join(source.data_dir, "raft.dump")
    host.call(source.forceLogCompaction).result(10)
    wait_for(lambda: os.path.exists(dump), 20)
    r = lone_replica(host, "r/0", tmp_path / "r")
    send(r, b"m-", 1)

    def hold_one(replica: PartitionReplica) -> None:
        idx = replica.raftLastApplied + 1
        journal = replica._SyncObj__raftLog
        journal.add(entries.regular(append(b"held")), idx, journal[-1][2])
        replica.after_append()
        assert replica._ahead is not None

    def install() -> None:
        r._loading_at_start = False  # received from a leader
        r._deserialize(dump)

    # A restore (a snapshot from a leader) and a close each end the held
    # transaction first: each would otherwise wait for it for ever (the
    # store's exclusive gate), and the driver with it.
    host.call(lambda: hold_one(r)).result(10)
    host.call(install).result(10)
    assert r._ahead is None
    assert r.digest() == source.digest()
    closing = lone_replica(host, "closing/0", tmp_path / "closing")
    send(closing, b"c-", 1)
    host.call(lambda: hold_one(closing)).result(10)
    host.call(lambda: host.remove(closing.key)).result(10)
    assert closing.store.closed


def test_a_held_entry_whose_commit_fails_stops_the_replica(host: RaftHost, tmp_path: Path) -> None:
    r = lone_replica(host, "r/0", tmp_path / "r")
    send(r, b"m-", 2)
    store = host.call(lambda: install_failing_store(r)).result(10)
    outcome: list[BaseException] = []

    def on_driver() -> None:
        idx = r.raftLastApplied + 1
        journal = r._SyncObj__raftLog
        journal.add(entries.regular(append(b"doomed")), idx, journal[-1][2])
        r.after_append()
        assert r._ahead is not None
        store.arm()  # the disk fails between the apply ahead and the commit
        try:
            r.apply_regular(append(b"doomed"))
        except ReplicaFailed as exc:
            outcome.append(exc)
        # Before the replica's removal (posted to the driver) closes its store:
        # nothing of the entry was committed.
        with store.begin() as txn:
            on_disk.extend(rec.body for rec in r.machine.read(txn, 0, 100).records)

    on_disk: list[bytes] = []
    host.call(on_driver).result(10)
    assert outcome, "the failed commit was not reported"
    assert r.failed and f"apply of entry {r.raftLastApplied + 1}" in r.failed
    assert store.failed_writes == 1
    assert on_disk == [b"m-000", b"m-001"]
