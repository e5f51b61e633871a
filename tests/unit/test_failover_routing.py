"""A request that meets an election (server/cluster.py ``forward_to_leader``):
it waits for the election instead of failing, never forwards to a leader
whose link is down, and if this node won, NotLeader names this node so the
SDK retries here at once. Fakes for the node, its replica and its peers;
the replica's view changes after a number of looks, not after a time."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from raft_queue import errors
from raft_queue.server import cluster as cluster_mod
from raft_queue.server.cluster import Cluster

ME, OTHER, DEAD = "n1", "n2", "n3"
GRPC = {ME: "127.0.0.1:7001", OTHER: "127.0.0.1:7002", DEAD: "127.0.0.1:7003"}
RAFT = {ME: "127.0.0.1:9001", OTHER: "127.0.0.1:9002", DEAD: "127.0.0.1:9003"}


class Replica:
    """A follower whose view runs through ``views`` ((leader raft address,
    link lost, this replica leads and is ready)), one per look."""

    def __init__(self, *views: tuple[str, bool, bool]) -> None:
        self.views = list(views)
        self.looks = 0

    def _view(self) -> tuple[str, bool, bool]:
        return self.views[min(self.looks - 1, len(self.views) - 1)]

    def is_leader(self) -> bool:
        self.looks += 1  # one look per poll: Cluster.leader_id asks this first
        return self._view()[2]

    def leader_address(self) -> str:
        return self._view()[0]

    def leader_lost(self) -> bool:
        return self._view()[1]

    def can_serve_leader_reads(self) -> bool:
        return self._view()[2]

    def term(self) -> int:
        return 3


class Peers:
    def __init__(self) -> None:
        self.forwarded: list[str] = []

    async def forward(self, address: str, method: str, request: Any, timeout_s: float) -> str:
        self.forwarded.append(address)
        return "answer"


def make(replica: Replica, max_election_s: float = 5.0) -> tuple[Cluster, Peers]:
    raft = SimpleNamespace(election_timeout_max_s=max_election_s)
    node = SimpleNamespace(
        id=ME,
        address=GRPC[ME],
        config=SimpleNamespace(raft=raft),
        secret=None,
        replica=lambda q, p: replica,
        raft_address_to_node=lambda: {v: k for k, v in RAFT.items()},
        node_address=GRPC.get,
        view=SimpleNamespace(assignments=lambda q: []),
    )
    peers = Peers()
    c = Cluster.__new__(Cluster)  # only the routing half: no crypto, no receipts
    c.node, c.peers, c.timeout_s, c.routes = node, peers, 10.0, {}
    return c, peers


@pytest.fixture(autouse=True)
def _fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_mod, "LEADER_POLL_S", 0.0)


def test_a_request_during_an_election_waits_and_goes_to_the_winner() -> None:
    replica = Replica(("", False, False), ("", False, False), (RAFT[OTHER], False, False))
    c, peers = make(replica)
    assert asyncio.run(c.forward_to_leader("q", 0, "Send", object())) == "answer"
    assert peers.forwarded == [GRPC[OTHER]]


def test_a_leader_whose_link_is_down_is_never_forwarded_to() -> None:
    replica = Replica(
        (RAFT[DEAD], True, False), (RAFT[DEAD], True, False), (RAFT[OTHER], False, False)
    )
    c, peers = make(replica)
    asyncio.run(c.forward_to_leader("q", 0, "Send", object()))
    assert peers.forwarded == [GRPC[OTHER]]
    assert replica.looks >= 3


def test_when_this_node_won_not_leader_names_it() -> None:
    replica = Replica(("", False, False), (RAFT[ME], False, True))
    c, peers = make(replica)
    with pytest.raises(errors.NotLeader) as exc:
        asyncio.run(c.forward_to_leader("q", 0, "Send", object()))
    assert exc.value.leader == GRPC[ME]
    assert peers.forwarded == []


def test_with_no_leader_after_an_election_timeout_it_is_unavailable() -> None:
    c, peers = make(Replica(("", False, False)), max_election_s=0.01)
    with pytest.raises(errors.Unavailable, match="no leader after"):
        asyncio.run(c.forward_to_leader("q", 0, "Send", object()))
    assert peers.forwarded == []


def test_a_known_live_leader_is_forwarded_to_at_once() -> None:
    replica = Replica((RAFT[OTHER], False, False))
    c, peers = make(replica)
    asyncio.run(c.forward_to_leader("q", 0, "Send", object()))
    assert peers.forwarded == [GRPC[OTHER]] and replica.looks == 1
