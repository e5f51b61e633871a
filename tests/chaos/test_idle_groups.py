"""Idle partitions (coalesced heartbeats, replication/heartbeats.py) under node
faults, on real node processes with every link through the fault proxy.

Idle groups heartbeat in one message per node pair, carried on one of their
own Raft connections. These tests check that the proxies cut that traffic
like every other Raft message: when the node leading idle partitions is
isolated, or can no longer send to the others (one-way cut), the others
elect new leaders in seconds; after the heal the groups settle (no election
storm: terms stay put while idle).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cluster import ChaosCluster
from raft_queue.client import Client
from raft_queue.errors import QueueError

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.integration]

QUEUE = "idle"
PARTITIONS = 6
FAILOVER_S = 8.0  # election timeout 0.8-1.6 s, plus routing and status round trips
SETTLE_S = 30.0  # heal, catch-up, then handovers after 3 s of stable lead (retried every 5 s)


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[ChaosCluster]:
    cc = ChaosCluster(tmp_path / "chaos", nodes=3, seed=5)
    try:
        cc.start()
        with cc.client(timeout_s=10.0) as client:
            client.create_queue(QUEUE, partitions=PARTITIONS, replication_factor=3)
            wait_leaders(client, exclude="")
        time.sleep(3.0)  # idle: every group's heartbeats are coalesced by now
        yield cc
    finally:
        cc.stop()


def wait_leaders(client: Client, exclude: str, timeout_s: float = FAILOVER_S) -> dict[int, str]:
    """partition -> leader node id, once every partition has a leader other than
    ``exclude``."""
    deadline = time.monotonic() + timeout_s
    leaders: dict[int, str] = {}
    while time.monotonic() < deadline:
        try:
            leaders = {p.partition: p.leader for p in client.partitions(QUEUE)}
        except QueueError:
            leaders = {}
        if len(leaders) == PARTITIONS and all(v and v != exclude for v in leaders.values()):
            return leaders
        time.sleep(0.2)
    raise AssertionError(f"leaders after {timeout_s}s: {leaders} (excluding {exclude!r})")


def wait_preferred_leaders(client: Client, timeout_s: float = SETTLE_S) -> None:
    """Until every partition is led by its preferred (first) replica."""
    deadline = time.monotonic() + timeout_s
    off: dict[int, tuple[str, str]] = {}
    while time.monotonic() < deadline:
        try:
            parts = client.partitions(QUEUE)
        except QueueError:
            parts = []
        off = {p.partition: (p.leader, p.replicas[0]) for p in parts if p.leader != p.replicas[0]}
        if parts and not off:
            return
        time.sleep(0.2)
    raise AssertionError(f"not led by their preferred replica after {timeout_s}s: {off}")


def busiest_leader(cc: ChaosCluster) -> tuple[int, list[int]]:
    with cc.client(timeout_s=10.0) as client:
        leaders = wait_leaders(client, exclude="")
    node_id = collections.Counter(leaders.values()).most_common(1)[0][0]
    return cc.index_of(node_id), sorted(p for p, n in leaders.items() if n == node_id)


def majority_client(cc: ChaosCluster, victim: int) -> Client:
    return Client(
        bootstrap=",".join(a for i, a in enumerate(cc.local.advertise) if i != victim),
        timeout_s=5.0,
        token=cc.local.token,
    )


def terms(cc: ChaosCluster) -> dict[tuple[int, str], int]:
    with cc.client(timeout_s=10.0) as client:
        status = client.cluster_status()
    assert not status.unreachable, status.unreachable
    return {(r.partition, r.node): r.term for r in status.replicas if r.queue == QUEUE}


def settled_terms(
    cc: ChaosCluster, quiet_s: float = 2.0, timeout_s: float = 10.0
) -> dict[tuple[int, str], int]:
    """The replicas' terms once unchanged for ``quiet_s`` (a hand-over retry
    already under way when the leaders were seen back ends first); an
    election storm never settles and fails here."""
    deadline = time.monotonic() + timeout_s
    last = terms(cc)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = terms(cc)
        if now == last:
            return now
        last = now
    raise AssertionError(f"terms still changing {timeout_s}s after the leaders settled")


def test_isolating_the_leader_of_idle_partitions_fails_them_over_and_heals_quietly(
    chaos: ChaosCluster,
) -> None:
    victim, led = busiest_leader(chaos)
    chaos.isolate(victim)
    cut_at = time.monotonic()
    with majority_client(chaos, victim) as client:
        wait_leaders(client, exclude=chaos.node_id(victim))
        print(f"\n{len(led)} idle partitions failed over {time.monotonic() - cut_at:.1f}s after")
        for i in range(2 * PARTITIONS):
            client.send(QUEUE, b"after-cut-%d" % i, key=str(i))
    chaos.heal()
    # After the heal each node hands leadership back to its preferred replicas
    # (node.py _prefer_leaders: an intended election, after PREFER_AFTER_S of
    # stable lead, retried every PREFER_RETRY_S). Only once that is done must
    # the idle groups keep their terms.
    with chaos.client(timeout_s=10.0) as client:
        wait_preferred_leaders(client)
    # Seen once in ~10 CI runs: one replica's term moved within 3 s of the
    # leaders being back (2026-11-24, n2's copy of partition 3, 5 -> 6).
    before = settled_terms(chaos)
    time.sleep(3.0)
    assert terms(chaos) == before, "idle groups held elections after the heal"


def test_a_leader_that_cannot_send_to_the_others_loses_its_idle_partitions(
    chaos: ChaosCluster,
) -> None:
    victim, _ = busiest_leader(chaos)
    others = [i for i in range(chaos.nodes) if i != victim]
    chaos.cut_one_way([victim], others)
    with majority_client(chaos, victim) as client:
        wait_leaders(client, exclude=chaos.node_id(victim))
    chaos.heal()
