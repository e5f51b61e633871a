"""Issue 2's contract on a real 3-node cluster: exactly-once receive, failover,
crash recovery, identical replicas."""

from __future__ import annotations

import time

import pytest

from raft_queue import errors
from raft_queue.testing.cluster import LocalCluster
from tests.integration.conftest import Producer, read_all, wait_identical_replicas

pytestmark = pytest.mark.integration


def test_ten_thousand_messages_are_each_received_exactly_once(cluster: LocalCluster) -> None:
    with cluster.client() as client:
        client.create_queue("orders", partitions=3, replication_factor=3)
        sent: set[bytes] = set()
        for start in range(0, 10_000, 500):
            bodies = [b"order-%05d" % i for i in range(start, start + 500)]
            results = client.send_batch("orders", bodies)
            assert len(results) == 500
            sent.update(bodies)
        assert {p.partition for p in client.partitions("orders")} == {0, 1, 2}
        received: list[bytes] = []
        idle = 0
        while len(received) < len(sent) and idle < 5:
            batch = client.receive("orders", max_messages=500, wait_ms=500)
            if not batch:
                idle += 1
                continue
            acks = client.ack("orders", [m.receipt for m in batch])
            assert all(a.ok for a in acks)
            received.extend(m.body for m in batch)
        assert len(received) == len(set(received)), "a message was delivered twice"
        assert set(received) == sent
        assert client.receive("orders", max_messages=10, wait_ms=200) == []
        wait_identical_replicas(client, "orders")


def test_bad_input_names_the_field_and_writes_nothing(cluster: LocalCluster) -> None:
    with cluster.client() as client:
        client.create_queue("small", partitions=1, replication_factor=3, max_message_bytes=100)
        with pytest.raises(errors.InvalidArgument) as exc:
            client.send("small", b"x" * 101)
        assert "body" in str(exc.value)
        with pytest.raises(errors.NotFound):
            client.send("nope", b"x")
        with pytest.raises(errors.InvalidArgument) as exc:
            client.create_queue("bad name!", partitions=1)
        assert "name" in str(exc.value)
        with pytest.raises(errors.InvalidArgument) as exc:
            client.create_queue("toomany", partitions=1, replication_factor=5)
        assert "replication_factor" in str(exc.value)
        with pytest.raises(errors.InvalidArgument) as exc:
            client.ack("small", ["not-a-receipt"])
        assert "receipts[0]" in str(exc.value)
        assert [p.latest_offset for p in client.partitions("small")] == [0]


def test_killing_a_partition_leader_during_sends_loses_nothing(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20.0) as client:
        client.create_queue("pay", partitions=3, replication_factor=3)
        producer = Producer(client, "pay").start()
        time.sleep(2.0)
        leader = next(p for p in client.partitions("pay") if p.partition == 0).leader
        victim = int(leader[1:]) - 1
        killed_at = time.monotonic()
        cluster.kill(victim)
        # Writes to partition 0 resume on a new leader.
        deadline = killed_at + 30
        resumed = None
        while time.monotonic() < deadline and resumed is None:
            resumed = next((t for t, p in producer.ack_times if t > killed_at and p == 0), None)
            time.sleep(0.1)
        assert resumed is not None, f"partition 0 never resumed: {producer.errors[-3:]}"
        print(f"\nfailover: partition 0 writes resumed {resumed - killed_at:.2f}s after kill -9")
        cluster.start(victim)
        time.sleep(3.0)
        producer.stop()
        assert len(producer.acked) > 1000
        wait_identical_replicas(client, "pay")
        stored = read_all(client, "pay")
        for body, where in producer.acked.items():
            assert stored.get(where) == body, f"acked {body!r} at {where} is missing"
        assert len(set(stored.values())) == len(stored), "a message is stored twice"


def test_killing_every_node_keeps_every_acknowledged_message(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20.0) as client:
        client.create_queue("ledger", partitions=3, replication_factor=3)
        producer = Producer(client, "ledger").start()
        time.sleep(2.0)
        for i in range(3):
            cluster.kill(i)
        producer.stop()
        acked = dict(producer.acked)
        assert len(acked) > 500
        for i in range(3):
            cluster.start(i)
        cluster.wait_ready(60)
        deadline = time.monotonic() + 30
        while True:
            try:
                stored = read_all(client, "ledger")
                break
            except errors.QueueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        missing = [b for b, where in acked.items() if stored.get(where) != b]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
        wait_identical_replicas(client, "ledger")


def test_a_follower_behind_a_compacted_log_catches_up_from_a_snapshot(tmp_path) -> None:
    # Compact after 40 entries so the restarted node must install an LMDB image.
    c = LocalCluster(tmp_path / "c", nodes=3, raft={"log_compaction_min_entries": 40})
    c.start()
    try:
        c.wait_ready(60)
        with c.client(timeout_s=20.0) as client:
            client.create_queue("snap", partitions=1, replication_factor=3)
            leader = client.partitions("snap")[0].leader
            follower = next(i for i in range(3) if f"n{i + 1}" != leader)
            c.kill(follower)
            acked = {}
            for k in range(150):  # 150 entries: several compactions on the live nodes
                bodies = [b"snap-%05d" % (k * 10 + j) for j in range(10)]
                for body, res in zip(bodies, client.send_batch("snap", bodies), strict=True):
                    acked[body] = (res.partition, res.offset)
            c.start(follower)
            wait_identical_replicas(client, "snap", timeout_s=60)
            stored = read_all(client, "snap")
            assert all(stored.get(where) == body for body, where in acked.items())
            snapshots = list((c.specs[follower].dir / "data" / "partitions").glob("*/raft.dump"))
            assert snapshots, "the follower did not receive a snapshot"
    finally:
        c.stop()


def test_a_new_partition_is_led_by_its_preferred_replica_from_its_first_election(
    cluster: LocalCluster,
) -> None:
    """The preferred (first) replica of a new partition campaigns first, so the
    partition never needs the hand-over (an election that pauses it) that the
    nodes make after PREFER_AFTER_S of lead by another replica."""
    with cluster.client() as client:
        client.create_queue("fresh", partitions=6, replication_factor=3)
        deadline = time.monotonic() + 20
        parts = client.partitions("fresh")
        while not all(p.leader for p in parts) and time.monotonic() < deadline:
            time.sleep(0.05)
            parts = client.partitions("fresh")
        assert all(p.leader for p in parts), parts
        terms = {r.term for r in client.cluster_status().replicas if r.queue == "fresh"}
    assert {p.partition: p.leader for p in parts} == {p.partition: p.replicas[0] for p in parts}
    assert max(terms) == 1, "a partition held more than one election"  # 0: not reached yet
