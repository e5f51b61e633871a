"""Regression tests for the pysyncobj 0.3.17 hazards of shared/PYSYNCOBJ.md.

Each test runs twice: against ``SafeSyncObj`` (must pass) and against the
unmodified ``SyncObj`` (marked xfail(strict=True): it must FAIL there, so the
suite breaks if a test stops being able to detect its hazard).

Messages are fed to the Raft message handler directly (deterministic, no
timing); only hazard 5 needs real clocks and uses lower bounds.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj import pickle as raft_pickle
from pysyncobj.poller import createPoller
from pysyncobj.syncobj import FAIL_REASON

from raft_queue.replication.raft import SafeSyncObj, make_conf
from raft_queue.testing.cluster import free_port

PATCHED = "patched"
UNMODIFIED = "unmodified"
IMPLS = [
    PATCHED,
    pytest.param(UNMODIFIED, marks=pytest.mark.xfail(strict=True, reason="hazard present")),
]


def addr() -> str:
    """A node address no other call in this process has been given.

    Not a port bound to 0 and closed: the kernel may hand that same port out on
    the next call (seen: 8 in 200,000 pairs), and a peer whose address equals
    the node's own is dropped by pysyncobj, leaving a follower with no leader
    (a CI failure of hazard 8 at 4a5bc7a)."""
    return f"127.0.0.1:{free_port()}"


def make_obj(impl: str, peers: list[str], conf: SyncObjConf | None = None) -> Any:
    """A follower that never ticks: we feed its handler by hand."""
    conf = conf or make_conf(
        journal_file=None, dump_file=None, election_timeout_min_s=5, election_timeout_max_s=10
    )
    if impl == PATCHED:
        return SafeSyncObj(addr(), peers, conf, createPoller("poll"))
    conf.autoTick = False
    return SyncObj(addr(), peers, conf)


def test_addresses_never_repeat_within_the_process() -> None:
    # 5,000 ports bound to 0 would repeat one almost surely (a birthday draw
    # from ~28,000); the reserved pool pops each port once, and never draws a
    # chunk of 128 again (5,000 ports are 40 draws from 156 chunks: random
    # chunks repeated one in a CI run, 872 distinct of 1,000).
    given = [addr() for _ in range(5000)]
    assert len(set(given)) == len(given)


class Recorder:
    """Stands in for the transport's send: records what the node would send."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def __call__(self, node: Any, message: dict[str, Any]) -> bool:
        self.sent.append(message)
        return True


def wire(obj: Any) -> Recorder:
    rec = Recorder()
    obj._SyncObj__transport.send = rec
    return rec


def feed(obj: Any, node: Any, message: dict[str, Any]) -> None:
    obj._SyncObj__onMessageReceived(node, message)
    if isinstance(obj, SafeSyncObj):
        obj.flush_durable()


def append_entries(prev_idx: int, prev_term: int, entries: list[Any], term: int = 1) -> dict:
    return {
        "type": "append_entries",
        "term": term,
        "commit_index": 0,
        "prevLogIdx": prev_idx,
        "prevLogTerm": prev_term,
        "entries": entries,
    }


def leader_node(obj: Any) -> Any:
    return next(iter(obj._SyncObj__otherNodes))


def entry(idx: int, term: int = 1) -> tuple[bytes, int, int]:
    return (b"\x00\xa2cmd%d" % idx, idx, term)  # a regular entry (entries.py)


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard1_stale_append_entries_never_truncates_acknowledged_entries(impl: str) -> None:
    obj = make_obj(impl, [addr()])
    wire(obj)
    leader = leader_node(obj)
    feed(obj, leader, append_entries(1, 0, [entry(2), entry(3), entry(4)]))
    assert obj._SyncObj__raftLog[-1][1] == 4
    # A re-sent (older) message for index 3 arrives after 4 was acknowledged.
    feed(obj, leader, append_entries(2, 1, [entry(3)]))
    # A heartbeat with an old prevLogIdx and no entries.
    feed(obj, leader, append_entries(2, 1, []))
    assert obj._SyncObj__raftLog[-1][1] == 4, "acknowledged entry 4 was truncated"


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard1_conflicting_entries_are_still_replaced(impl: str) -> None:
    # Control: a real conflict must truncate (both implementations pass); the
    # xfail on "unmodified" is met by the non-conflict assertion at the end.
    obj = make_obj(impl, [addr()])
    wire(obj)
    leader = leader_node(obj)
    feed(obj, leader, append_entries(1, 0, [entry(2), entry(3), entry(4)]))
    feed(obj, leader, append_entries(2, 1, [entry(3, term=2)], term=2))
    log = obj._SyncObj__raftLog
    assert [(e[1], e[2]) for e in log[1:]] == [(2, 1), (3, 2)]
    feed(obj, leader, append_entries(2, 1, [], term=2))
    assert log[-1][1] == 3


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard1_ack_reports_only_what_the_message_proved(impl: str) -> None:
    obj = make_obj(impl, [addr()])
    rec = wire(obj)
    leader = leader_node(obj)
    feed(obj, leader, append_entries(1, 0, [entry(2), entry(3), entry(4)]))
    rec.sent.clear()
    feed(obj, leader, append_entries(2, 1, []))
    acks = [m for m in rec.sent if m["type"] == "next_node_idx" and m["success"]]
    assert acks and acks[-1]["next_node_idx"] == 3
    assert obj._SyncObj__raftLog[-1][1] == 4


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard2_compaction_never_empties_the_log(impl: str) -> None:
    obj = make_obj(impl, [addr()])
    wire(obj)
    feed(obj, leader_node(obj), append_entries(1, 0, [entry(2), entry(3)]))
    obj._SyncObj__deleteEntriesTo(10)  # a compaction point past the log end
    assert len(obj._SyncObj__raftLog) >= 1
    assert obj._SyncObj__getCurrentLogIndex() == 3


def on_journal_sync(
    monkeypatch: pytest.MonkeyPatch, inner: Any, path: str, hook: Callable[[], None]
) -> None:
    """Call ``hook`` whenever the journal file is synced, by msync (pysyncobj's
    ``flush``) or by fdatasync/fsync of a descriptor of it (ours)."""
    flush = inner.flush
    inner.flush = lambda: (hook(), flush())[1]
    journal = os.path.realpath(path)

    def wrap(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            if os.path.realpath(f"/proc/self/fd/{fd}") == journal:
                hook()
            real(fd)

        return sync

    for name in ("fdatasync", "fsync"):
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard3_follower_acks_only_after_journal_sync(
    impl: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = make_conf(
        journal_file=str(tmp_path / "journal"),
        dump_file=None,
        election_timeout_min_s=5,
        election_timeout_max_s=10,
    )
    obj = make_obj(impl, [addr()], conf)
    rec = wire(obj)
    raft_log = obj._SyncObj__raftLog
    inner = getattr(raft_log, "_inner", raft_log)
    events: list[str] = []
    on_journal_sync(monkeypatch, inner, conf.journalFile, lambda: events.append("sync"))
    orig_send = rec.__call__

    def send(node: Any, message: dict[str, Any]) -> bool:
        if message["type"] == "next_node_idx" and message["success"]:
            events.append("ack")
        return orig_send(node, message)

    obj._SyncObj__transport.send = send
    leader = leader_node(obj)
    for i in range(2, 12):  # ten messages in one poll round
        obj._SyncObj__onMessageReceived(
            leader, append_entries(i - 1, 0 if i == 2 else 1, [entry(i)])
        )
    if isinstance(obj, SafeSyncObj):
        obj.flush_durable()
    assert events, "no ack at all"
    assert events[0] == "sync", f"ack sent before the journal was synced: {events[:3]}"
    assert events.count("sync") == 1, "one sync must cover the whole batch"
    assert events.count("ack") == 10


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard3_leader_commits_only_synced_entries(
    impl: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = make_conf(
        journal_file=str(tmp_path / "journal"),
        dump_file=None,
        election_timeout_min_s=0.01,
        election_timeout_max_s=0.02,
    )
    obj = make_obj(impl, [], conf)  # a single-node group: leader of itself
    raft_log = obj._SyncObj__raftLog
    inner = getattr(raft_log, "_inner", raft_log)
    synced = {"idx": 0}
    violations: list[tuple[int, int]] = []
    set_commit = inner.setRaftCommitIndex

    def on_sync() -> None:
        synced["idx"] = inner[-1][1]

    def on_commit(idx: int) -> None:
        if idx > synced["idx"]:
            violations.append((idx, synced["idx"]))
        set_commit(idx)

    on_journal_sync(monkeypatch, inner, conf.journalFile, on_sync)
    inner.setRaftCommitIndex = on_commit
    results: list[Any] = []
    deadline = time.monotonic() + 5
    while not obj._isLeader() and time.monotonic() < deadline:
        obj._onTick(0.01)
    obj._applyCommand(b"\x01", lambda res, err: results.append(err))  # a no-op entry
    for _ in range(5):
        obj._onTick(0.01)
    assert obj.raftCommitIndex >= 2
    assert not violations, f"committed past the synced journal: {violations}"


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard4_snapshot_install_resolves_skipped_waiters(impl: str, tmp_path: Any) -> None:
    dump = tmp_path / "dump"
    dump.write_bytes(b"image")
    peer = addr()
    snapshot = ((b"\x00", 10, 1), (b"\x00", 9, 1), {peer})
    conf = make_conf(
        journal_file=None,
        dump_file=str(dump),
        election_timeout_min_s=5,
        election_timeout_max_s=10,
        serializer=lambda path, data: None,
        deserializer=lambda path: snapshot,
    )
    obj = make_obj(impl, [peer], conf)
    wire(obj)
    outcomes: list[int] = []
    obj._SyncObj__commandsWaitingCommit[5].append((1, lambda res, err: outcomes.append(err)))
    obj._SyncObj__loadDumpFile(clearJournal=True)
    assert obj.raftLastApplied == 10
    assert outcomes == [FAIL_REASON.UNKNOWN_OUTCOME], "a waiter was lost"


class _Touch:
    """Unpickling this creates ``path`` (what a hostile peer would run)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard6_chunked_entries_are_never_unpickled(impl: str, tmp_path: Any) -> None:
    # pysyncobj reassembled "transmission" chunks with pickle.loads: a peer
    # could make a follower run code. SafeSyncObj has no chunked path at all
    # (and the wire has no encoding for it, test_raft_codec.py).
    target = tmp_path / "pwned"
    data = raft_pickle.dumps(_Touch(str(target)))
    obj = make_obj(impl, [addr()])
    wire(obj)
    leader = leader_node(obj)
    for kind in ("start", "finish"):
        message = {
            "type": "append_entries",
            "transmission": kind,
            "data": data if kind == "start" else b"",
            "term": 1,
            "commit_index": 0,
            "prevLogIdx": 1,
            "prevLogTerm": 0,
        }
        with contextlib.suppress(Exception):
            feed(obj, leader, message)
    assert not target.exists(), "a chunk was unpickled"


def snapshot_chunk(data: bytes, first: bool, last: bool, commit: int, term: int = 1) -> dict:
    return {
        "type": "append_entries",
        "term": term,
        "commit_index": commit,
        "serialized": (data, first, last),
    }


def snapshot_follower(impl: str, tmp_path: Any, deserializer: Callable[[str], Any]) -> Any:
    conf = make_conf(
        journal_file=None,
        dump_file=str(tmp_path / "dump"),
        election_timeout_min_s=5,
        election_timeout_max_s=10,
        serializer=lambda path, data: None,
        deserializer=deserializer,
    )
    return make_obj(impl, [addr()], conf)


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard7_a_snapshot_chunk_commits_none_of_our_entries(impl: str, tmp_path: Any) -> None:
    # pysyncobj set commit = min(leader's commit, our last index) on every
    # snapshot chunk: a follower applied uncommitted entries of an old term
    # that the leader's log does not hold, because their indexes were below
    # the leader's commit index. A chunk proves nothing about our log.
    obj = snapshot_follower(impl, tmp_path, lambda path: None)
    wire(obj)
    leader = leader_node(obj)
    feed(obj, leader, append_entries(1, 0, [entry(2), entry(3), entry(4)]))
    assert obj._SyncObj__raftCommitIndex <= 1
    feed(obj, leader, snapshot_chunk(b"part", first=True, last=False, commit=50, term=2))
    assert obj._SyncObj__raftCommitIndex <= 1, "a snapshot chunk committed our stale entries"
    assert obj.raftLastApplied <= 1


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard8_a_snapshot_that_fails_to_load_is_not_acknowledged(
    impl: str, tmp_path: Any
) -> None:
    # pysyncobj logs a snapshot that fails to load (here: a corrupt image)
    # and acknowledges it anyway, "success" with its own last index + 1:
    # the leader then counts the follower's unrelated entries as copies of
    # its own, and commits without a quorum.
    def broken(path: str) -> Any:
        raise ValueError("corrupt snapshot image")

    obj = snapshot_follower(impl, tmp_path, broken)
    rec = wire(obj)
    leader = leader_node(obj)
    feed(obj, leader, append_entries(1, 0, [entry(2), entry(3), entry(4)], term=1))
    rec.sent.clear()
    feed(obj, leader, snapshot_chunk(b"image", first=True, last=True, commit=40, term=2))
    acks = [m for m in rec.sent if m["type"] == "next_node_idx"]
    assert not [m for m in acks if m["success"]], f"a failed install was acknowledged: {acks}"
    assert obj._SyncObj__raftCommitIndex <= 1


@pytest.mark.parametrize("impl", IMPLS)
def test_hazard9_a_leader_ignores_acks_of_an_earlier_term(impl: str) -> None:
    # pysyncobj's ack names no term: one delayed across two elections (a
    # slow link) set the match index of a leader whose log had changed in
    # between. Measured in raft_queue/testing/raftsim.py: such acks arrive.
    obj = make_obj(impl, [addr(), addr()])
    rec = wire(obj)
    follower = leader_node(obj)
    obj._SyncObj__setCurrentTerm(3, None)
    obj._SyncObj__onBecomeLeader()
    assert obj._isLeader()
    for i in range(2, 6):
        obj._SyncObj__raftLog.add(b"\x00\xa2cmd%d" % i, i, 3)
    rec.sent.clear()
    stale = {"type": "next_node_idx", "next_node_idx": 6, "reset": False, "success": True}
    if impl == PATCHED:
        stale["term"] = 2
    feed(obj, follower, stale)
    assert obj._SyncObj__raftMatchIndex[follower] == 0, "an ack of term 2 was counted in term 3"
