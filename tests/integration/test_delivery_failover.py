"""Delivery guarantees across a leader kill -9 (issue 3): acked messages are
never delivered again, in-flight leases come back only after their deadline,
delayed messages still fire, dedup still holds, committed offsets are kept."""

from __future__ import annotations

import time

import pytest

from raft_queue.client import Client, OutgoingMessage
from raft_queue.testing.cluster import LocalCluster
from tests.integration.conftest import wait_identical_replicas

pytestmark = pytest.mark.integration

LEASE_MS = 8000
DELAY_MS = 6000


def _wait_for_leader(client: Client, queue: str, not_node: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            leader = client.partitions(queue)[0].leader
        except Exception:
            leader = ""
        if leader and leader != not_node:
            return leader
        time.sleep(0.2)
    raise AssertionError("no new leader")


def _drain(client: Client, queue: str, want: set[bytes], timeout_s: float) -> dict[bytes, float]:
    """Receive and ack until every body of ``want`` was seen; body -> wall time seen."""
    seen: dict[bytes, float] = {}
    deadline = time.monotonic() + timeout_s
    while not want <= set(seen) and time.monotonic() < deadline:
        try:
            batch = client.receive(queue, max_messages=10, wait_ms=1000)
        except Exception:
            continue  # election in progress
        now = time.time()
        for m in batch:
            assert m.body not in seen, f"{m.body!r} delivered twice after acks"
            seen[m.body] = now
        if batch:
            client.ack(queue, batch)
    return seen


def test_delivery_state_survives_a_leader_kill(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=30.0) as client:
        client.create_queue("fo", partitions=1, replication_factor=3)
        messages = [OutgoingMessage(b"m%d" % i, dedup_id=f"d{i}") for i in range(10)]
        sent = client.send_batch("fo", messages)
        acked = client.receive("fo", max_messages=4, wait_ms=2000)
        assert all(r.ok for r in client.ack("fo", acked))
        leased = client.receive("fo", max_messages=3, visibility_ms=LEASE_MS)
        leased_at = time.time()
        client.send_batch("fo", [OutgoingMessage(b"late%d" % i, delay_ms=DELAY_MS) for i in (0, 1)])
        delayed_at = time.time()
        client.commit_offsets("fo", "g", {0: 5})

        leader = client.partitions("fo")[0].leader
        cluster.kill(int(leader[1:]) - 1)
        _wait_for_leader(client, "fo", leader)

        again = client.send("fo", b"m0", dedup_id="d0")
        assert again.duplicate and again.offset == sent[0].offset
        assert client.get_offsets("fo", "g") == {0: 5}
        assert client.commit_offsets("fo", "g", {0: 2}) == {0: 5}

        rest = {m.body for m in messages} - {m.body for m in acked}
        seen = _drain(client, "fo", rest | {b"late0", b"late1"}, timeout_s=40)
        assert not {m.body for m in acked} & set(seen), "an acked message came back"
        assert rest | {b"late0", b"late1"} <= set(seen)
        for m in leased:
            assert seen[m.body] >= leased_at + LEASE_MS / 1000 - 0.3, "lease ended early"
        for body in (b"late0", b"late1"):
            assert seen[body] >= delayed_at + DELAY_MS / 1000 - 0.3, "delay ended early"

        cluster.start(int(leader[1:]) - 1)
        wait_identical_replicas(client, "fo")
