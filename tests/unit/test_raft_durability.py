"""Crash safety of the Raft files around the journal: compaction, the
snapshot/journal pair at start, and the term/vote file.

As in test_raft_hazards.py, messages are fed to the handler by hand; tests
that name a hazard run against unmodified SyncObj too (xfail strict).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.journal import FileJournal
from test_raft_hazards import IMPLS, addr, append_entries, entry, feed, leader_node, make_obj, wire

from raft_queue.replication.journal import DurableMetaStorer
from raft_queue.replication.raft import SafeSyncObj, make_conf


def close(obj: Any) -> None:
    obj._SyncObj__transport.destroy()
    obj._SyncObj__raftLog._destroy()


def journal_conf(tmp_path: Path, snapshot: Any = None) -> Any:
    dump = tmp_path / "dump"
    if snapshot is not None:
        dump.write_bytes(b"image")
    return make_conf(
        journal_file=str(tmp_path / "journal"),
        dump_file=str(dump),
        election_timeout_min_s=5,
        election_timeout_max_s=10,
        serializer=lambda path, data: None,
        deserializer=lambda path: snapshot,
    )


def follower_with_entries(impl: str, conf: Any, last: int) -> Any:
    obj = make_obj(impl, [addr()], conf)
    wire(obj)
    feed(obj, leader_node(obj), append_entries(1, 0, [entry(i) for i in range(2, last + 1)]))
    return obj


def test_compaction_writes_a_journal_that_reopens_with_the_kept_entries(tmp_path: Path) -> None:
    conf = journal_conf(tmp_path)
    obj = follower_with_entries("patched", conf, 20)
    obj._SyncObj__deleteEntriesTo(10)
    log = obj._SyncObj__raftLog
    assert [e[1] for e in log[:]] == list(range(10, 21))
    feed(obj, leader_node(obj), append_entries(20, 1, [entry(21)]))
    kept = list(log[:])
    close(obj)
    assert not os.path.exists(f"{conf.journalFile}.compact")
    reopened = FileJournal(conf.journalFile)
    assert list(reopened[:]) == kept
    reopened._destroy()


@pytest.mark.parametrize("impl", IMPLS)
def test_a_crash_between_snapshot_rename_and_compaction_keeps_later_entries(
    impl: str, tmp_path: Path
) -> None:
    # The snapshot covers entries up to 6 and was renamed into place; the
    # process died before the journal (entries 1..10) was compacted.
    conf = journal_conf(tmp_path, snapshot=(entry(6), entry(5), {addr()}))
    close(follower_with_entries(impl, conf, 10))
    obj = make_obj(impl, [addr()], conf)
    wire(obj)
    obj._SyncObj__loadDumpFile(clearJournal=False)
    assert obj.raftLastApplied == 6
    assert obj._SyncObj__getCurrentLogIndex() == 10, "entries after the snapshot were dropped"
    close(obj)


def test_term_and_vote_reach_disk_before_they_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = journal_conf(tmp_path)
    obj = make_obj("patched", [addr()], conf)
    assert isinstance(obj, SafeSyncObj)
    synced: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        real(fd)
        synced.append(Path(os.path.realpath(f"/proc/self/fd/{fd}")).name)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    peer = leader_node(obj)
    obj._SyncObj__setCurrentTerm(7, peer.id)  # as when granting a vote
    assert synced == ["journal.vote"], "one sync of the vote file, before returning"
    monkeypatch.undo()
    close(obj)
    # A restart reads them back (from our file: pysyncobj's .meta is stale).
    again = make_obj("patched", [addr()], conf)
    assert again._SyncObj__raftCurrentTerm == 7
    assert again._SyncObj__votedForNodeId == peer.id
    close(again)


def test_a_torn_vote_write_leaves_the_previous_term_and_vote(tmp_path: Path) -> None:
    journal = str(tmp_path / "journal")
    storer = DurableMetaStorer(journal)
    storer.storeMeta({"currentTerm": 4, "votedForNodeId": "a"})
    storer.storeMeta({"currentTerm": 5, "votedForNodeId": "b"})
    storer.close()
    with open(f"{journal}.vote", "r+b") as f:  # power cut in the middle of the last write
        f.seek(0 * DurableMetaStorer.SLOT + 20)  # sequence 2 went to slot 0
        f.write(b"\xff\xff")
    assert DurableMetaStorer(journal).getMeta() == {"currentTerm": 4, "votedForNodeId": "a"}
