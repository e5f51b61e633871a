"""Pre-vote with real links (replication/prevote.py): three replicas in this
process on loopback, each on its own RaftHost (as test_raft_leader_stepdown).

A follower cut off for several election timeouts (everything it sends and
receives dropped) and then let back must not depose the healthy leader:
with pre-vote its term never rises while it is cut off. Without pre-vote
(pysyncobj's behaviour, xfail strict) its raised term makes the leader step
down when it returns. Elections still converge: when a leader's host stops,
the two others elect one leader; after a split vote (every member a
candidate of the same term) one leader is elected. Bounds are generous liveness limits, not
speed targets (those live in raft_queue/bench/failover.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from raft_queue.testing.cluster import free_port
from tests.integration.test_raft_leader_stepdown import cut_off, start_patched

pytestmark = pytest.mark.integration

CUT_FOR_S = 4.0  # five or more election timeouts (0.4-0.8 s)
SETTLE_S = 2.0  # election timeouts after the rejoin in which a deposition would show


def leader_of(groups: list[Any], timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [g for g in groups if g.is_leader()]
        if len(leaders) == 1:
            return leaders[0]
        time.sleep(0.02)
    raise AssertionError(f"no single leader within {timeout_s}s")


def rejoin(group: Any) -> None:
    """Undo ``cut_off``: the transport's own send, the group's own handler."""
    transport = group._SyncObj__transport
    del transport.send
    transport.setOnMessageReceivedCallback(group._SyncObj__onMessageReceived)


def start(pre_vote: bool) -> tuple[list[Any], list[Any]]:
    """Three replicas (and their hosts, in the same order)."""
    groups, hosts = start_patched([f"127.0.0.1:{free_port()}" for _ in range(3)])
    for g in groups:
        g.pre_vote = pre_vote
    return groups, hosts


@pytest.fixture(
    params=[
        True,
        pytest.param(
            False,
            marks=pytest.mark.xfail(strict=True, reason="no pre-vote: a rejoining node deposes"),
        ),
    ],
    ids=["pre_vote", "no_pre_vote"],
)
def replicas(request: Any) -> Iterator[list[Any]]:
    groups, hosts = start(request.param)
    yield groups
    for h in hosts:
        h.stop()


def test_a_node_cut_off_and_rejoining_does_not_depose_a_healthy_leader(
    replicas: list[Any],
) -> None:
    leader = leader_of(replicas)
    term = leader.term()
    follower = next(g for g in replicas if g is not leader)
    cut_off(follower)
    time.sleep(CUT_FOR_S)  # its election timer runs out again and again
    assert leader.is_leader(), "the leader lost its quorum of two"
    cut_term = follower.term()
    rejoin(follower)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and follower.leader_address() != leader.selfNode.address:
        time.sleep(0.02)
    time.sleep(SETTLE_S)
    assert cut_term == term, f"the cut-off node raised its term to {cut_term}"
    assert leader.is_leader() and leader.term() == term, "the rejoining node deposed the leader"
    assert follower.leader_address() == leader.selfNode.address


def test_when_the_leaders_host_stops_the_others_elect_one_leader() -> None:
    # The host's stop closes the leader's sockets, as a killed process's
    # are: the followers' prompt election (pre-vote first) must converge.
    groups, hosts = start(pre_vote=True)
    try:
        leader = leader_of(groups)
        term = leader.term()
        hosts[groups.index(leader)].stop()
        survivors = [g for g in groups if g is not leader]
        new = leader_of(survivors)
        assert new.term() > term
        other = next(g for g in survivors if g is not new)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and other.leader_address() != new.selfNode.address:
            time.sleep(0.02)
        assert other.leader_address() == new.selfNode.address
    finally:
        for h in hosts:
            h.stop()


def test_after_a_split_vote_one_leader_is_elected() -> None:
    # Every member a candidate of the same term, each with its own vote (the
    # vote requests were lost): they ask again and must count the grants
    # they get as candidates, or no one ever campaigns again.
    groups, hosts = start(pre_vote=True)
    try:
        leader_of(groups)
        for g in groups:
            cut_off(g)
        for g, h in zip(groups, hosts, strict=True):
            h.call(g._campaign).result(5)
        terms = {g.term() for g in groups}
        assert len(terms) == 1 and not any(g.is_leader() for g in groups), "not a split"
        for g in groups:
            rejoin(g)
        new = leader_of(groups)
        assert new.term() > terms.pop()
    finally:
        for h in hosts:
            h.stop()
