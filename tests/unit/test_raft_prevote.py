"""Pre-vote and prompt elections (replication/prevote.py), message by message.

Replicas are SafeSyncObj that never tick; messages are fed to the Raft
handler by hand and what a replica would send is recorded (as in
test_raft_hazards.py). Clocks: election deadlines are set by hand, no sleep.
"""

from __future__ import annotations

from typing import Any

import pytest
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.poller import createPoller
from pysyncobj.syncobj import _RAFT_STATE

from raft_queue.replication import codec, prevote
from raft_queue.replication.raft import SafeSyncObj, make_conf
from tests.unit.test_raft_hazards import Recorder, addr, append_entries, feed

MIN_S, MAX_S = 5.0, 10.0


def replica(peers: int = 2, pre_vote: bool = True) -> tuple[Any, Recorder, list[Any]]:
    """A follower with ``peers`` other members, its recorder and their nodes
    (in a fixed order); every peer's link is up."""
    conf = make_conf(
        journal_file=None,
        dump_file=None,
        election_timeout_min_s=MIN_S,
        election_timeout_max_s=MAX_S,
    )
    obj = SafeSyncObj(addr(), [addr() for _ in range(peers)], conf, createPoller("poll"))
    obj.pre_vote = pre_vote
    rec = Recorder()
    obj._SyncObj__transport.send = rec
    nodes = sorted(obj._SyncObj__otherNodes, key=lambda n: n.address)
    obj._SyncObj__connectedNodes.update(nodes)
    return obj, rec, nodes


def follow(obj: Any, leader: Any, term: int = 1) -> None:
    """``leader`` leads ``obj`` in ``term`` (one heartbeat)."""
    feed(obj, leader, append_entries(1, 0, [], term=term))
    assert obj._SyncObj__raftLeader == leader
    assert obj._SyncObj__raftCurrentTerm == term


def pre_vote(term: int, last_index: int = 1, last_term: int = 0) -> dict[str, Any]:
    return {
        "type": "pre_vote",
        "term": term,
        "last_log_index": last_index,
        "last_log_term": last_term,
    }


def sent(rec: Recorder, kind: str) -> list[dict[str, Any]]:
    return [m for m in rec.sent if m["type"] == kind]


def time_out(obj: Any) -> None:
    """The election timer runs out and the replica's tick starts an election."""
    obj._SyncObj__raftElectionDeadline = monotonic_time() - 0.001
    obj._start_election()


# ---- the asking side -----------------------------------------------------------------
def test_a_timed_out_follower_asks_first_and_writes_no_term() -> None:
    obj, rec, (leader, _) = replica()
    follow(obj, leader)
    time_out(obj)
    asks = sent(rec, "pre_vote")
    assert [m["term"] for m in asks] == [2, 2]
    assert not sent(rec, "request_vote")
    assert obj._SyncObj__raftCurrentTerm == 1
    assert obj._SyncObj__votedForNodeId is None
    assert obj._SyncObj__raftState == _RAFT_STATE.FOLLOWER


def test_without_pre_vote_a_timed_out_follower_raises_its_term() -> None:
    # The control: what pysyncobj does, and what pre-vote prevents.
    obj, rec, (leader, _) = replica(pre_vote=False)
    follow(obj, leader)
    time_out(obj)
    assert [m["term"] for m in sent(rec, "request_vote")] == [2, 2]
    assert obj._SyncObj__raftCurrentTerm == 2


def test_a_majority_of_grants_starts_the_real_election() -> None:
    obj, rec, (leader, other) = replica()
    follow(obj, leader)
    time_out(obj)
    feed(obj, other, {"type": "pre_vote_response", "term": 2, "granted": True})
    assert [m["term"] for m in sent(rec, "request_vote")] == [2, 2]
    assert obj._SyncObj__raftState == _RAFT_STATE.CANDIDATE
    assert obj._SyncObj__raftCurrentTerm == 2


def test_a_candidate_whose_election_failed_asks_again_and_grants_start_the_next() -> None:
    # A split vote: every member is a candidate of the same term. Were the
    # grants of a candidate ignored, no member could ever campaign again.
    obj, rec, (leader, other) = replica()
    follow(obj, leader)
    time_out(obj)
    feed(obj, other, {"type": "pre_vote_response", "term": 2, "granted": True})
    assert obj._SyncObj__raftState == _RAFT_STATE.CANDIDATE  # term 2, no votes came
    time_out(obj)
    assert [m["term"] for m in sent(rec, "pre_vote")] == [2, 2, 3, 3]
    feed(obj, other, {"type": "pre_vote_response", "term": 3, "granted": True})
    assert [m["term"] for m in sent(rec, "request_vote")] == [2, 2, 3, 3]
    assert obj._SyncObj__raftCurrentTerm == 3


def test_refusals_and_stale_grants_start_nothing() -> None:
    obj, rec, (leader, other, one_grant, _) = replica(peers=4)
    follow(obj, leader)
    time_out(obj)
    feed(obj, other, {"type": "pre_vote_response", "term": 2, "granted": False})
    feed(obj, leader, {"type": "pre_vote_response", "term": 2, "granted": False})
    feed(obj, other, {"type": "pre_vote_response", "term": 5, "granted": True})  # not asked
    feed(obj, one_grant, {"type": "pre_vote_response", "term": 2, "granted": True})
    feed(obj, one_grant, {"type": "pre_vote_response", "term": 2, "granted": True})  # repeated
    assert not sent(rec, "request_vote"), "2 of 5 is no majority"
    assert obj._SyncObj__raftCurrentTerm == 1


def test_a_grant_arriving_after_the_leader_spoke_again_is_ignored() -> None:
    obj, rec, (leader, other) = replica()
    follow(obj, leader)
    time_out(obj)
    follow(obj, leader)  # the leader was only slow
    feed(obj, other, {"type": "pre_vote_response", "term": 2, "granted": True})
    assert not sent(rec, "request_vote")
    assert obj._SyncObj__raftLeader == leader


def test_a_leadership_transfer_skips_the_pre_vote() -> None:
    obj, rec, (leader, _) = replica()
    follow(obj, leader)
    feed(obj, leader, {"type": "timeout_now", "term": 1})
    time_out(obj)
    assert [m["term"] for m in sent(rec, "request_vote")] == [2, 2]
    assert not sent(rec, "pre_vote")


# ---- the granting side ---------------------------------------------------------------
def test_a_follower_hearing_its_leader_refuses_and_changes_nothing() -> None:
    obj, rec, (leader, other) = replica()
    follow(obj, leader)
    feed(obj, other, pre_vote(2))
    assert sent(rec, "pre_vote_response") == [
        {"type": "pre_vote_response", "term": 2, "granted": False}
    ]
    assert obj._SyncObj__raftCurrentTerm == 1
    assert obj._SyncObj__raftLeader == leader


def test_a_follower_grants_once_its_leader_link_dropped_or_its_timer_ran_out() -> None:
    obj, rec, (leader, other) = replica()
    follow(obj, leader)
    obj._SyncObj__onNodeDisconnected(leader)
    feed(obj, other, pre_vote(2))
    obj2, rec2, (leader2, other2) = replica()
    follow(obj2, leader2)
    obj2._SyncObj__raftElectionDeadline = monotonic_time() - 0.001
    feed(obj2, other2, pre_vote(2))
    for r, o in ((rec, obj), (rec2, obj2)):
        assert [m["granted"] for m in sent(r, "pre_vote_response")] == [True]
        assert o._SyncObj__raftCurrentTerm == 1, "a pre-vote writes no term"
        assert o._SyncObj__votedForNodeId is None, "a pre-vote writes no vote"


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (pre_vote(1), "term not above ours"),
        (pre_vote(2, last_index=5, last_term=0), "log term older than ours"),
        (pre_vote(2, last_index=2, last_term=1), "same log term, shorter log"),
    ],
)
def test_a_pre_vote_for_a_stale_candidate_is_refused(message: dict[str, Any], why: str) -> None:
    obj, rec, (leader, other) = replica()
    entries = [(b"\x00\xa2a", 2, 1), (b"\x00\xa2b", 3, 1)]
    feed(obj, leader, append_entries(1, 0, entries, term=1))
    obj._SyncObj__onNodeDisconnected(leader)  # no live leader: only the log decides
    feed(obj, other, message)
    assert [m["granted"] for m in sent(rec, "pre_vote_response")] == [False], why
    feed(obj, other, pre_vote(2, last_index=3, last_term=1))  # control: up to date
    assert [m["granted"] for m in sent(rec, "pre_vote_response")] == [False, True]


def test_a_leader_refuses_a_pre_vote_and_keeps_leading() -> None:
    obj, rec, (a, b) = replica()
    obj._SyncObj__raftElectionDeadline = monotonic_time() - 0.001
    obj._campaign()  # a real election in term 1: one vote makes it leader
    feed(obj, a, {"type": "response_vote", "term": 1})
    assert obj._SyncObj__raftState == _RAFT_STATE.LEADER
    feed(obj, b, pre_vote(2, last_index=99, last_term=1))  # a rejoining node
    assert [m["granted"] for m in sent(rec, "pre_vote_response")] == [False]
    assert obj._SyncObj__raftState == _RAFT_STATE.LEADER
    assert obj._SyncObj__raftCurrentTerm == 1


# ---- prompt elections ----------------------------------------------------------------
def test_a_dropped_leader_link_brings_the_election_within_a_fraction_of_the_timeout() -> None:
    obj, _, (leader, other) = replica()
    follow(obj, leader)
    assert obj._SyncObj__raftElectionDeadline - monotonic_time() >= MIN_S - 0.5
    obj._SyncObj__onNodeDisconnected(other)  # not the leader: nothing changes
    assert obj._SyncObj__raftElectionDeadline - monotonic_time() >= MIN_S - 0.5
    obj._SyncObj__onNodeDisconnected(leader)
    left = obj._SyncObj__raftElectionDeadline - monotonic_time()
    assert left <= MIN_S * prevote.PROMPT_FRACTION
    assert obj.leader_lost()


def test_without_pre_vote_a_dropped_leader_link_changes_no_deadline() -> None:
    obj, _, (leader, _) = replica(pre_vote=False)
    follow(obj, leader)
    obj._SyncObj__onNodeDisconnected(leader)
    assert obj._SyncObj__raftElectionDeadline - monotonic_time() >= MIN_S - 0.5


# ---- the wire ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "message",
    [
        pre_vote(7, last_index=123, last_term=6),
        {"type": "pre_vote_response", "term": 7, "granted": True},
        {"type": "pre_vote_response", "term": 7, "granted": False},
    ],
)
def test_pre_vote_messages_round_trip_the_codec(message: dict[str, Any]) -> None:
    assert codec.decode(codec.encode(message)) == message
