"""Acks that ride a Receive (ReceiveRequest.ack) and the SDK's background acks,
on a real 3-node cluster (real processes, gRPC, Raft with fsync, LMDB)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.bench.peer_adapter import RaftQueueAdapter
from raft_queue.client import Client, Consumer, Message
from raft_queue.errors import InvalidArgument
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "acks")


def _queue(client: Client, name: str, count: int, **config: int) -> None:
    client.create_queue(name, partitions=1, replication_factor=3, **config)
    client.send_batch(name, [b"m%03d" % i for i in range(count)])


def _depth(client: Client, name: str) -> tuple[int, int]:
    info = client.get_queue(name)
    return info.messages, info.in_flight


def test_a_receive_that_carries_acks_acks_exactly_those_and_leases_anew(
    cluster: LocalCluster,
) -> None:
    with cluster.client(timeout_s=20.0) as c:
        # Retention by time: with retention_ms=0 an acked prefix may be compacted
        # away before the history reads below (NotFound, as documented).
        _queue(c, "carry", 10, retention_ms=3_600_000)
        first = c.receive("carry", max_messages=4, wait_ms=2000)
        assert len(first) == 4
        second = c.receive("carry", max_messages=4, wait_ms=2000, ack=first[:3])
        assert [r.ok for r in second.acks] == [True, True, True]
        assert [r.receipt for r in second.acks] == [m.receipt for m in first[:3]]
        assert len(second) == 4
        assert not {m.offset for m in second} & {m.offset for m in first}
        # acked: the three; in flight: first[3] (not in the ack list) and the new four
        assert _depth(c, "carry") == (7, 5)
        for m in first[:3]:
            assert c.get_history("carry", 0, m.offset).state == "done"
        assert c.get_history("carry", 0, first[3].offset).state != "done"
        assert all(m.receive_count == 1 for m in second)


def test_a_stale_receipt_fails_alone_and_the_lease_still_happens(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20.0) as c:
        _queue(c, "stale", 3)
        (old,) = c.receive("stale", max_messages=1, visibility_ms=300, wait_ms=2000)
        time.sleep(0.6)  # the lease ends; the next receive leases it again, new epoch
        (again,) = c.receive("stale", max_messages=1, wait_ms=2000)
        assert again.offset == old.offset and again.receipt != old.receipt
        got = c.receive("stale", max_messages=5, wait_ms=2000, ack=[old, again])
        assert [r.ok for r in got.acks] == [False, True]
        assert "stale" in got.acks[0].error
        assert sorted(m.offset for m in got) == [1, 2]  # leased all the same
        assert _depth(c, "stale") == (2, 2)


def test_a_forged_receipt_fails_the_whole_call_and_nothing_applies(
    cluster: LocalCluster,
) -> None:
    with cluster.client(timeout_s=20.0) as c:
        _queue(c, "forged", 3)
        (m,) = c.receive("forged", max_messages=1, wait_ms=2000)
        forged = m.receipt[:-4] + ("0000" if not m.receipt.endswith("0000") else "1111")
        with pytest.raises(InvalidArgument) as err:
            c.receive("forged", max_messages=5, wait_ms=0, ack=[m.receipt, forged])
        assert err.value.field == "ack[1]"
        assert _depth(c, "forged") == (3, 1)  # nothing acked, nothing leased
        assert c.ack("forged", m)[0].ok  # the good receipt was left alone


def test_carried_acks_are_applied_through_a_node_that_leads_nothing(
    cluster: LocalCluster,
) -> None:
    """The forwarded path: the Receive is forwarded to the leader's node and
    the acks go there as an Ack call of their own."""
    with cluster.client(timeout_s=20.0) as c:
        _queue(c, "fwd", 6)
        (part,) = c.partitions("fwd")
        first = c.receive("fwd", max_messages=3, wait_ms=2000)
    follower = next(s.address for s in cluster.specs if s.node_id != part.leader)
    md = (("authorization", f"Bearer {cluster.token}"),)
    with grpc.insecure_channel(follower) as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        request = queue_pb2.ReceiveRequest(
            queue="fwd", max_messages=3, wait_ms=2000, ack=[m.receipt for m in first]
        )
        response = stub.Receive(request, timeout=20, metadata=md)
    assert response.acks.failures_only and not response.acks.failed
    assert len(response.messages) == 3
    with cluster.client(timeout_s=20.0) as c:
        assert _depth(c, "fwd") == (3, 3)


def test_background_acks_ride_the_next_receive(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap, token=cluster.token, ack_flush_ms=60_000) as c:
        _queue(c, "ride", 6)
        first = c.receive("ride", max_messages=3, wait_ms=2000)
        assert c.ack("ride", first, wait=False) == []
        assert _depth(c, "ride") == (6, 3)  # not sent: the timer is a minute away
        second = c.receive("ride", max_messages=3, wait_ms=2000)
        assert second.acks == []  # the caller's own ack= results only
        assert c.background_acks.sent == 3
        assert _depth(c, "ride") == (3, 3)
        c.ack("ride", second)


def test_background_acks_leave_on_the_timer_and_on_close(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap, token=cluster.token, ack_flush_ms=50) as c:
        _queue(c, "timer", 4)
        got = c.receive("timer", max_messages=2, wait_ms=2000)
        c.ack("timer", got, wait=False)
        deadline = time.monotonic() + 10
        while _depth(c, "timer")[0] != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _depth(c, "timer") == (2, 0)
    c = Client(cluster.bootstrap, token=cluster.token, ack_flush_ms=60_000)
    got = c.receive("timer", max_messages=2, wait_ms=2000)
    c.ack("timer", got, wait=False)
    c.close()  # flushes and waits
    with cluster.client(timeout_s=20.0) as other:
        assert _depth(other, "timer") == (0, 0)


KILLED_CONSUMER = """
import os, sys
from raft_queue.bench.peer_adapter import RaftQueueAdapter
from raft_queue.client import Client, Consumer, Message
c = Client(sys.argv[1], token=sys.argv[2], ack_flush_ms=60_000)
got = c.receive("killed", max_messages=5, visibility_ms=1500, wait_ms=5000)
c.ack("killed", got, wait=False)
print(len(got), flush=True)
sys.stdin.read()  # killed here, before any flush
"""


def test_a_consumer_killed_before_its_flush_gets_its_messages_again(
    cluster: LocalCluster,
) -> None:
    with cluster.client(timeout_s=20.0) as c:
        _queue(c, "killed", 5)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED_CONSUMER), cluster.bootstrap, cluster.token],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "5"
        child.kill()
    finally:
        child.wait(10)
    with cluster.client(timeout_s=20.0) as c:
        again: list = []
        deadline = time.monotonic() + 15
        while len(again) < 5 and time.monotonic() < deadline:
            again += c.receive("killed", max_messages=5, wait_ms=1000)
        assert sorted(m.offset for m in again) == [0, 1, 2, 3, 4]  # nothing lost
        assert all(m.receive_count == 2 for m in again)  # redelivered once
        c.ack("killed", again)
        assert _depth(c, "killed") == (0, 0)


def _commit_index(c: Client, queue: str) -> int:
    return max(
        r.commit_index
        for r in c.cluster_status().replicas
        if r.queue == queue and r.role == "leader"
    )


def test_a_carried_ack_and_its_lease_share_one_raft_entry(cluster: LocalCluster) -> None:
    """A consume loop with carried acks appends one entry per batch, not two."""
    with cluster.client(timeout_s=20.0) as c:
        _queue(c, "entries", 200)
        batch = c.receive("entries", max_messages=10, wait_ms=2000)
        before = _commit_index(c, "entries")
        for _ in range(10):
            batch = c.receive("entries", max_messages=10, wait_ms=2000, ack=batch)
            assert all(r.ok for r in batch.acks) and len(batch) == 10
        entries = _commit_index(c, "entries") - before
        assert entries <= 12  # 10 (Ack + Lease each), and room for a housekeeping entry


def test_a_consumer_with_background_acks_handles_and_acks_every_message(
    cluster: LocalCluster,
) -> None:
    with Client(cluster.bootstrap, token=cluster.token, ack_flush_ms=60_000) as c:
        _queue(c, "consumer", 7)
        consumer = Consumer(c, "consumer", batch=3, wait_ms=500, background_acks=True)
        seen: list[int] = []

        def handle(m: Message) -> None:
            seen.append(m.offset)
            if len(seen) == 7:
                consumer.stop()

        consumer.run(handle)
        assert sorted(seen) == list(range(7))
        assert c.background_acks.sent >= 3  # the first batch rode the second receive
    with cluster.client(timeout_s=20.0) as other:
        assert _depth(other, "consumer") == (0, 0)  # the rest left at close


@pytest.mark.parametrize("prefetch", ["1", "2"])
def test_the_peer_adapter_acks_what_it_returned_and_gives_back_what_it_received_ahead(
    cluster: LocalCluster, prefetch: str
) -> None:
    adapter = RaftQueueAdapter(
        "pb_acks", target=cluster.bootstrap, token=cluster.token, prefetch=prefetch
    )
    assert adapter.prefetch == int(prefetch)
    adapter.connect()
    adapter.reset()
    adapter.publish_batch([b"p%02d" % i for i in range(10)])
    first = adapter.consume(4, timeout=2.0)
    second = adapter.consume(4, timeout=2.0)  # acks the first four (sent ahead)
    assert len(first) == 4 and len(second) == 4
    adapter.close()  # acks the second four; the two received ahead go back
    with cluster.client(timeout_s=20.0) as c:
        # (the release may feed the consumer's lingering lease, undone after
        # limits.receive_linger_ms: lingering.py)
        deadline = time.monotonic() + 10
        while _depth(c, "pb_acks") != (2, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _depth(c, "pb_acks") == (2, 0)
        rest = c.receive("pb_acks", max_messages=10, wait_ms=2000)
        assert sorted(m.body for m in rest) == [b"p08", b"p09"]
        assert all(m.receive_count == 1 for m in rest)  # released: count restored


def test_the_peer_adapter_receives_ahead_only_for_the_harness_pipelined_workloads() -> None:
    # prefetch=auto: W3's drain (max_inflight 256) keeps 2 Receives of half
    # its window of 1024 ahead; W1 and W4's consumer (max_inflight 1) none:
    # ahead tripled W4's p99.
    w3 = RaftQueueAdapter("pb_w3", max_inflight=256, consumer_window=1024)
    assert (w3.prefetch, w3.recv) == (2, 512)
    assert RaftQueueAdapter("pb_w4", max_inflight=1, consumer_window=1024).prefetch == 0
    assert RaftQueueAdapter("pb_w4", max_inflight=1, prefetch="2").prefetch == 2
    assert RaftQueueAdapter("pb_w3", max_inflight=256, prefetch="0").prefetch == 0
    one = RaftQueueAdapter("pb_w3", max_inflight=256, consumer_window=1024, prefetch="1")
    assert one.recv == 1000  # the server's cap on a Receive
    assert RaftQueueAdapter("pb_w3", max_inflight=256, recv="64").recv == 64
    with pytest.raises(ValueError, match="recv"):
        RaftQueueAdapter("pb_w3", max_inflight=256, recv="lots")
    for bad in ("0", "\u0663"):  # zero, and a non-ASCII digit int() would also take
        with pytest.raises(ValueError, match="recv"):
            RaftQueueAdapter("pb_w3", max_inflight=256, recv=bad)


def test_the_peer_adapter_keeps_what_it_leased_within_the_harness_window(
    cluster: LocalCluster,
) -> None:
    adapter = RaftQueueAdapter(
        "pb_window", target=cluster.bootstrap, token=cluster.token,
        max_inflight=256, consumer_window=8,
    )  # fmt: skip
    assert (adapter.prefetch, adapter.recv) == (2, 4)
    adapter.connect()
    adapter.reset()
    adapter.publish_batch([b"w%02d" % i for i in range(30)])
    got: list[bytes] = []
    for _ in range(40):
        batch = adapter.consume(3, timeout=0.5)
        assert len(batch) <= 3
        got += batch
        # held + asked for in flight never pass the window (the batch just
        # returned is acked in the background, as msg.ack() is)
        assert len(adapter._held) + adapter.recv * len(adapter._ahead) <= 8
        if len(got) == 30:
            break
    assert sorted(got) == [b"w%02d" % i for i in range(30)]  # each once
    adapter.close()  # flushes the last acks; nothing held is left leased
    with cluster.client(timeout_s=20.0) as c:
        deadline = time.monotonic() + 10
        while _depth(c, "pb_window") != (0, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _depth(c, "pb_window") == (0, 0)


def test_a_receive_answers_runs_to_a_client_that_asks_and_messages_to_one_that_does_not(
    cluster: LocalCluster,
) -> None:
    """ReceiveRequest.runs: bare records leave as MessageRuns, their receipts
    (head + offset + tail) ack as any; keyed ones stay Messages, in order."""
    with cluster.client(timeout_s=20.0) as c:
        _queue(c, "runs", 3)
        c.send("runs", b"keyed", key="k", headers={"h": b"v"})
        c.send_batch("runs", [b"m%03d" % i for i in range(3, 6)])
        (part,) = c.partitions("runs")
    leader = next(s.address for s in cluster.specs if s.node_id == part.leader)
    md = (("authorization", f"Bearer {cluster.token}"),)
    with grpc.insecure_channel(leader) as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        ask = queue_pb2.ReceiveRequest(queue="runs", max_messages=5, wait_ms=2000, runs=True)
        response = stub.Receive(ask, timeout=20, metadata=md)
        assert [(r.at, r.offset, list(r.bodies)) for r in response.runs] == [
            (0, 0, [b"m000", b"m001", b"m002"]), (4, 4, [b"m003"])
        ]  # fmt: skip
        assert [(m.offset, m.key, dict(m.headers)) for m in response.messages] == [
            (3, "k", {"h": b"v"})
        ]
        run = response.runs[0]
        receipts = [f"{run.receipt_head}{run.offset + i}{run.receipt_tail}" for i in range(3)]
        acked = stub.Ack(queue_pb2.AckRequest(queue="runs", receipts=receipts), timeout=20,
                         metadata=md)  # fmt: skip
        assert [r.ok for r in acked.results] == [True, True, True]
        plain = stub.Receive(
            queue_pb2.ReceiveRequest(queue="runs", max_messages=5, wait_ms=2000),
            timeout=20, metadata=md,
        )  # fmt: skip
        assert not plain.runs and [m.body for m in plain.messages] == [b"m004", b"m005"]
    back = [response.messages[0].receipt, *(m.receipt for m in plain.messages)]
    back.append(f"{response.runs[1].receipt_head}4{response.runs[1].receipt_tail}")
    with cluster.client(timeout_s=20.0) as c:
        assert _depth(c, "runs") == (4, 4)
        assert all(r.ok for r in c.nack("runs", back, release=True))
        got = c.receive("runs", max_messages=5, wait_ms=2000)  # the SDK: both lists, in order
        assert [(m.offset, m.body, m.key) for m in got] == [
            (3, b"keyed", "k"),
            (4, b"m003", ""),
            (5, b"m004", ""),
            (6, b"m005", ""),
        ]
        assert all(r.ok for r in c.ack("runs", got))
