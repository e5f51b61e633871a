"""Coalesced heartbeats (replication/heartbeats.py) on three RaftHosts in this
process, each hosting one replica of several groups, on loopback.

What must hold: idle groups stop sending per-group heartbeats (one message per
node pair per period instead) and stay stable (no elections); they fail over
when their leader's node dies or is cut off; a cut-off leader stops serving
leader reads and steps down within about one election timeout (hazard 5); a
member the far node does not host is refused and gets per-group heartbeats;
an idle group's own connection survives its silence (a command after a long
idle stretch commits at once).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raft_queue.replication import heartbeats
from raft_queue.replication.host import RaftHost
from raft_queue.replication.raft import make_conf
from raft_queue.testing.cluster import free_block
from tests.integration.test_raft_leader_stepdown import NullGroup

pytestmark = pytest.mark.integration

ELECTION_S = (0.4, 0.8)
HEARTBEAT_S = 0.1
GROUPS = 6


class Cluster:
    """hosts[h] holds groups[h][g], the replica of group g on host h."""

    def __init__(self, coalesce: bool = True) -> None:
        # Below the ephemeral range (free_port's): other processes' outgoing
        # connections take ephemeral ports, and pysyncobj blocks on a taken one.
        base = free_block(3 * GROUPS + 1)
        self.addrs = [[f"127.0.0.1:{base + 3 * g + h}" for h in range(3)] for g in range(GROUPS)]
        self.spare = f"127.0.0.1:{base + 3 * GROUPS}"  # hosted nowhere
        self.hosts = [
            RaftHost(idle_tick_s=0.02, heartbeat_s=HEARTBEAT_S if coalesce else None)
            for _ in range(3)
        ]
        peers = {a: f"h{h}" for group in self.addrs for h, a in enumerate(group)}
        self.groups: list[list[Any]] = []
        for h, host in enumerate(self.hosts):
            host.start()
            if host.heartbeats is not None:
                host.heartbeats.set_peers(peers)
            self.groups.append([self._open(host, g, h) for g in range(GROUPS)])

    def _open(self, host: RaftHost, g: int, h: int) -> Any:
        me = self.addrs[g][h]
        others = [a for a in self.addrs[g] if a != me]
        conf = make_conf(
            journal_file=None,
            dump_file=None,
            election_timeout_min_s=ELECTION_S[0],
            election_timeout_max_s=ELECTION_S[1],
            heartbeat_s=HEARTBEAT_S,
        )

        def open_() -> Any:
            group = NullGroup(f"g{g}", host, me, others, conf, lease_quorum_s=ELECTION_S[0])
            host.add(group)
            return group

        return host.call(open_).result(15)

    def on(self, h: int, fn: Callable[[], Any]) -> Any:
        return self.hosts[h].call(fn).result(15)

    def leaders(self, hosts: range | list[int] | None = None) -> dict[int, int]:
        """group -> host of its leader, among ``hosts``."""
        out = {}
        for h in hosts if hosts is not None else range(3):
            for g, group in enumerate(self.groups[h]):
                if group.is_leader():
                    out[g] = h
        return out

    def wait_leaders(self, hosts: list[int] | None = None, timeout_s: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leaders = self.leaders(hosts)
            if len(leaders) == GROUPS:
                return leaders
            time.sleep(0.05)
        raise AssertionError(f"groups without a leader: {set(range(GROUPS)) - set(leaders)}")

    def terms(self, h: int) -> list[int]:
        return [g._SyncObj__raftCurrentTerm for g in self.groups[h]]

    def wait_quiet(self, timeout_s: float = 10.0) -> None:
        """Every leader's heartbeats are coalesced."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            quiet = [
                self.on(h, lambda g=g, h=h: self.hosts[h].heartbeats.quiet_peers(g) is not None)
                for h in range(3)
                for g in self.groups[h]
                if g.is_leader()
            ]
            if len(quiet) == GROUPS and all(quiet):
                return
            time.sleep(0.05)
        raise AssertionError("leaders never became quiet")

    def count_sent(self, secs: float) -> collections.Counter[str]:
        """Messages every replica sends during ``secs``, by type."""
        sent: collections.Counter[str] = collections.Counter()
        undo = []
        for h in range(3):
            for group in self.groups[h]:
                transport = group._SyncObj__transport
                orig = transport.send

                def send(node: Any, message: Any, orig: Any = orig) -> bool:
                    if isinstance(message, dict):
                        sent[message.get("type", "?")] += 1
                    return bool(orig(node, message))

                transport.send = send
                undo.append((transport, orig))
        time.sleep(secs)
        for transport, orig in undo:
            transport.send = orig
        return sent

    def cut_off(self, h: int) -> None:
        """Everything host h's replicas send or receive is dropped."""
        for group in self.groups[h]:
            transport = group._SyncObj__transport
            transport.send = lambda node, message: True
            transport.setOnMessageReceivedCallback(lambda node, message: None)

    def stop(self) -> None:
        for host in self.hosts:
            host.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.stop()


def test_idle_groups_heartbeat_in_one_message_per_node_pair_and_stay_stable(
    cluster: Cluster,
) -> None:
    cluster.wait_leaders()
    cluster.wait_quiet()
    terms = [cluster.terms(h) for h in range(3)]
    sent = cluster.count_sent(2.0)
    # Per group: 2 followers x 10 heartbeats/s x 2 s = 40 AppendEntries, 240 in all
    # without coalescing. Allowed: one round of the groups' own heartbeats (6 groups
    # x 2 followers = 12), the fallback when a coalesced round comes late. In a
    # fresh-clone suite run (2026-11-26) exactly that happened once: 12 and 12, no
    # election, quorum contact kept; 6 of 6 alone passed at <= 6. Not traced (the
    # driver thread stalled beyond a heartbeat period inside the long pytest
    # process is the suspect); the bound still tells the paths apart (12 vs 240).
    assert sent["append_entries"] <= 12, sent
    assert sent["next_node_idx"] <= 12, sent
    assert 10 <= sent[heartbeats.BATCH] <= 2 * 6 * 10 * 1.5, sent  # <= 6 pairs x 10/s x 2 s
    assert sent[heartbeats.BATCH_ACK] >= sent[heartbeats.BATCH] // 2, sent
    assert [cluster.terms(h) for h in range(3)] == terms, "an idle group held an election"
    for g, h in cluster.leaders().items():
        assert cluster.groups[h][g].can_serve_leader_reads(), f"g{g} lost quorum contact"


def test_without_coalescing_every_group_sends_its_own_heartbeats() -> None:
    # Control for the test above: the counts it asserts do tell the paths apart.
    cluster = Cluster(coalesce=False)
    try:
        cluster.wait_leaders()
        time.sleep(1.0)
        sent = cluster.count_sent(2.0)
        assert sent["append_entries"] >= 150, sent
        assert sent[heartbeats.BATCH] == 0, sent
    finally:
        cluster.stop()


def test_idle_groups_fail_over_when_their_leaders_node_dies(cluster: Cluster) -> None:
    leaders = cluster.wait_leaders()
    cluster.wait_quiet()
    dead = collections.Counter(leaders.values()).most_common(1)[0][0]
    led = sorted(g for g, h in leaders.items() if h == dead)
    cluster.hosts[dead].stop()
    killed = time.monotonic()
    alive = [h for h in range(3) if h != dead]
    cluster.wait_leaders(alive, timeout_s=5.0)
    took = time.monotonic() - killed
    assert took < 3.0, f"groups {led} took {took:.1f}s to fail over"


def test_a_cut_off_node_stops_leading_its_idle_groups(cluster: Cluster) -> None:
    leaders = cluster.wait_leaders()
    cluster.wait_quiet()
    cut = collections.Counter(leaders.values()).most_common(1)[0][0]
    led = [cluster.groups[cut][g] for g, h in leaders.items() if h == cut]
    cluster.cut_off(cut)
    cut_at = time.monotonic()
    while time.monotonic() - cut_at < 3.0 and any(g.can_serve_leader_reads() for g in led):
        time.sleep(0.02)
    reads_stopped = time.monotonic() - cut_at
    assert reads_stopped < 1.0, f"cut-off leaders served reads for {reads_stopped:.2f}s"
    while time.monotonic() - cut_at < 3.0 and any(g.is_leader() for g in led):
        time.sleep(0.02)
    stepped_down = time.monotonic() - cut_at
    assert stepped_down < 2.0, f"cut-off leaders still led after {stepped_down:.2f}s"
    cluster.wait_leaders([h for h in range(3) if h != cut], timeout_s=5.0)


def test_a_member_the_far_node_does_not_host_is_refused(cluster: Cluster) -> None:
    leaders = cluster.wait_leaders()
    cluster.wait_quiet()
    g, h = next(iter(leaders.items()))
    leader = cluster.groups[h][g]
    follower_host = (h + 1) % 3
    carrier = cluster.groups[follower_host][g]
    node = carrier._SyncObj__transport._nodeAddrToNode[cluster.addrs[g][h]]
    ghost = cluster.spare
    item = (cluster.addrs[g][h], ghost, 1, 1, 1, 1)
    cluster.on(
        follower_host,
        lambda: cluster.hosts[follower_host].heartbeats.receive(
            carrier, node, {"type": heartbeats.BATCH, "items": [item]}
        ),
    )
    refused = cluster.hosts[h].heartbeats._refused
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and (cluster.addrs[g][h], ghost) not in refused:
        time.sleep(0.02)
    assert (cluster.addrs[g][h], ghost) in refused
    assert leader.is_leader()


def test_a_member_on_no_known_node_gets_its_own_heartbeats() -> None:
    cluster = Cluster()
    try:
        for host in cluster.hosts:
            assert host.heartbeats is not None
            host.heartbeats.set_peers({})  # nobody known: nothing is quiet
        cluster.wait_leaders()
        time.sleep(1.0)
        terms = [cluster.terms(h) for h in range(3)]
        sent = cluster.count_sent(2.0)
        assert sent["append_entries"] >= 150, sent
        assert sent[heartbeats.BATCH] == 0, sent
        assert [cluster.terms(h) for h in range(3)] == terms
    finally:
        cluster.stop()


def test_a_command_after_a_long_idle_stretch_commits_at_once(cluster: Cluster) -> None:
    leaders = cluster.wait_leaders()
    cluster.wait_quiet()
    time.sleep(2.5)  # > connectionTimeout (election max, 0.8 s) of every silent connection
    g, h = next(iter(leaders.items()))
    t0 = time.monotonic()
    result = cluster.groups[h][g].submit(b"x", timeout_s=5).result(5)
    took = time.monotonic() - t0
    assert isinstance(result, int)
    assert took < 0.3, f"first command after idling took {took:.2f}s (connection dropped?)"
