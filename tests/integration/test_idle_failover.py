"""Idle partitions (their heartbeats coalesced per node pair) fail over when
the node leading them is killed (kill -9), on real node processes."""

from __future__ import annotations

import collections
import time

import pytest

from raft_queue.client import Client
from raft_queue.errors import QueueError
from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration

PARTITIONS = 6


def leaders(client: Client, queue: str) -> dict[int, str]:
    try:
        return {p.partition: p.leader for p in client.partitions(queue)}
    except QueueError:
        return {}


def test_killing_the_node_that_leads_idle_partitions_fails_them_over(
    cluster: LocalCluster,
) -> None:
    with cluster.client(timeout_s=10.0) as client:
        client.create_queue("idle", partitions=PARTITIONS, replication_factor=3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(leaders(client, "idle").values()):
            time.sleep(0.2)
        time.sleep(3.0)  # idle long enough for every group's heartbeats to be coalesced
        now = leaders(client, "idle")
    victim_id = collections.Counter(now.values()).most_common(1)[0][0]
    victim = int(victim_id[1:]) - 1
    cluster.kill(victim)
    killed_at = time.monotonic()
    survivors = ",".join(s.address for i, s in enumerate(cluster.specs) if i != victim)
    with Client(bootstrap=survivors, timeout_s=3.0, token=cluster.token) as client:
        after: dict[int, str] = {}
        while time.monotonic() - killed_at < 10:
            after = leaders(client, "idle")
            if len(after) == PARTITIONS and victim_id not in after.values() and all(after.values()):
                break
            time.sleep(0.1)
        took = time.monotonic() - killed_at
        print(f"\nidle partitions led by {victim_id} failed over {took:.1f}s after kill -9")
        assert victim_id not in after.values() and all(after.values()), after
        assert took < 6.0, f"failover of idle partitions took {took:.1f}s"
        client.send("idle", b"after-kill")
