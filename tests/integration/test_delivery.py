"""Delivery semantics (issue 3) on one real 3-node cluster shared by the module:
visibility and receipts, long polls, dead letters, dedup, durability levels,
headers, purge and queue metadata. Each test uses its own queues."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.client import Client
from raft_queue.core.partition import PartitionMachine
from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration

# Delivery history and the oldest message's age come from the partition
# machine; these tests run once core/ keeps them.
needs_history = pytest.mark.skipif(
    not hasattr(PartitionMachine, "history"), reason="core keeps no delivery history yet"
)


def module_cluster(
    tmp_path_factory: pytest.TempPathFactory, name: str, **options: Any
) -> Iterator[LocalCluster]:
    """A 3-node cluster for a whole test module (tests use distinct queues);
    the delivery test modules share this, each with its own cluster.
    ``options``: more LocalCluster arguments (e.g. ``tls=True``)."""
    c = LocalCluster(Path(tmp_path_factory.mktemp(name)) / "cluster", nodes=3, **options)
    c.start()
    try:
        c.wait_ready(60)
        yield c
    except BaseException:
        for i in range(c.nodes):
            print(f"--- n{i + 1} log tail ---")
            print("\n".join(c.log_path(i).read_text(errors="replace").splitlines()[-30:]))
        raise
    finally:
        c.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "delivery")


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0) as c:
        yield c


def wait_until(predicate, timeout_s: float = 10.0, step_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"not true after {timeout_s}s")


# ---- 1. visibility and receipts --------------------------------------------------------


def test_a_lease_hides_the_message_until_its_visibility_timeout(client: Client) -> None:
    client.create_queue("vis", partitions=1, replication_factor=3)
    assert client.get_queue("vis").config.visibility_timeout_ms == 30_000  # the default
    client.send("vis", b"m")
    first = client.receive("vis", visibility_ms=1500, consumer="c1")
    assert [m.receive_count for m in first] == [1]
    assert client.receive("vis") == []
    again = client.receive("vis", wait_ms=5000, consumer="c2")
    assert [m.body for m in again] == [b"m"] and again[0].receive_count == 2
    stale = client.ack("vis", first[0].receipt)[0]
    assert not stale.ok and "stale" in stale.error
    assert client.ack("vis", again[0].receipt)[0].ok
    assert client.receive("vis", wait_ms=300) == []


def test_change_visibility_extends_and_shortens_a_lease(client: Client) -> None:
    client.create_queue("chvis", partitions=1, replication_factor=3)
    client.send("chvis", b"m")
    (m,) = client.receive("chvis", visibility_ms=1000)
    assert client.change_visibility("chvis", m, 10_000)[0].ok
    assert client.receive("chvis", wait_ms=2000) == []  # past the first deadline: still leased
    assert client.change_visibility("chvis", m, 0)[0].ok  # visible at once
    (again,) = client.receive("chvis", wait_ms=2000)
    assert again.offset == m.offset and again.receive_count == 2


def test_nack_makes_a_message_visible_again_after_its_delay(client: Client) -> None:
    client.create_queue("nack", partitions=1, replication_factor=3)
    client.send("nack", b"m")
    (m,) = client.receive("nack")
    assert client.nack("nack", m, delay_ms=1500)[0].ok
    assert client.receive("nack", wait_ms=700) == []
    assert [x.body for x in client.receive("nack", wait_ms=5000)] == [b"m"]
    assert client.receive("nack") == []  # leased again by the receive above


def test_bad_visibility_and_receipts_name_the_field(client: Client) -> None:
    client.create_queue("badvis", partitions=1, replication_factor=3)
    with pytest.raises(errors.InvalidArgument) as exc:
        client.receive("badvis", visibility_ms=13 * 3600 * 1000)
    assert exc.value.field == "visibility_ms"
    with pytest.raises(errors.InvalidArgument) as exc:
        client.change_visibility("badvis", ["1:0:0:1"], 13 * 3600 * 1000)
    assert exc.value.field == "visibility_ms"
    with pytest.raises(errors.InvalidArgument) as exc:
        client.ack("badvis", ["x:y"])
    assert exc.value.field == "receipts[0]"
    with pytest.raises(errors.InvalidArgument) as exc:
        client.create_queue("badvis2", partitions=1, visibility_timeout_ms=13 * 3600 * 1000)
    assert "visibility_timeout_ms" in exc.value.field
    with pytest.raises(errors.NotFound):
        client.get_queue("badvis2")


# ---- 5. long polling ---------------------------------------------------------------------


def _receive_in_thread(client: Client, queue: str, wait_ms: int) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        start = time.monotonic()
        out["messages"] = client.receive(queue, max_messages=10, wait_ms=wait_ms)
        out["at"] = time.monotonic()
        out["took"] = out["at"] - start

    t = threading.Thread(target=run)
    t.start()
    return t, out


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_long_poll_returns_as_soon_as_a_message_arrives(client: Client, partitions: int) -> None:
    name = f"poll{partitions}"
    client.create_queue(name, partitions=partitions, replication_factor=3)
    client.receive(name)  # learn the leaders
    for p in range(partitions):
        t, out = _receive_in_thread(client, name, 15_000)
        time.sleep(1.0)
        sent_at = time.monotonic()
        client.send(name, b"wake-%d" % p, partition=p)
        t.join(20)
        assert [m.body for m in out["messages"]] == [b"wake-%d" % p]
        latency = out["at"] - sent_at
        assert latency < 0.5, f"partition {p}: long poll woke {latency:.3f}s after the send"
        client.ack(name, out["messages"])


def test_an_empty_long_poll_waits_its_time_and_writes_nothing(client: Client) -> None:
    client.create_queue("idle", partitions=1, replication_factor=3)
    time.sleep(4.5)  # past the hand-over to the preferred leader and its first entries
    before = client.partitions("idle")[0].commit_index
    start = time.monotonic()
    assert client.receive("idle", wait_ms=2000) == []
    took = time.monotonic() - start
    assert 1.9 <= took < 3.0
    after = client.partitions("idle")[0].commit_index
    assert after - before <= 1, "an idle long poll should not write Raft entries"


def test_a_long_poll_wakes_when_a_lease_expires(client: Client) -> None:
    client.create_queue("expiry", partitions=1, replication_factor=3)
    client.send("expiry", b"m")
    client.receive("expiry", visibility_ms=1200)
    start = time.monotonic()
    (m,) = client.receive("expiry", wait_ms=10_000)
    assert m.receive_count == 2 and time.monotonic() - start < 2.5


def test_wait_over_the_limit_is_refused(client: Client) -> None:
    client.create_queue("longwait", partitions=1, replication_factor=3)
    with pytest.raises(errors.InvalidArgument) as exc:
        client.receive("longwait", wait_ms=20_001)
    assert exc.value.field == "wait_ms"


# ---- 2. dead letters ---------------------------------------------------------------------


@needs_history
def test_a_message_received_max_receives_times_moves_to_the_dlq_with_its_history(
    client: Client,
) -> None:
    client.create_queue("work.dlq", partitions=1, replication_factor=3)
    client.create_queue(
        "work", partitions=2, replication_factor=3, max_receives=2, dead_letter_queue="work.dlq"
    )
    sent = client.send("work", b"poison", key="k", headers={"trace": b"t-1"})
    for consumer in ("alpha", "beta"):
        (m,) = client.receive("work", visibility_ms=500, wait_ms=5000, consumer=consumer)
        assert m.body == b"poison"
    (dead,) = client.receive("work.dlq", wait_ms=10_000)
    assert dead.body == b"poison" and dead.key == "k"
    h = dead.headers
    assert h["trace"] == b"t-1"
    assert h["raftq-dlq-queue"] == b"work"
    assert int(h["raftq-dlq-partition"]) == sent.partition
    assert int(h["raftq-dlq-offset"]) == sent.offset
    assert int(h["raftq-dlq-receive-count"]) == 2
    history = json.loads(h["raftq-dlq-history"])
    assert [d["consumer"] for d in history] == ["alpha", "beta"]
    assert client.receive("work", wait_ms=1000) == []
    assert client.get_queue("work").messages == 0


def test_a_dead_message_moves_to_the_dlq(client: Client) -> None:
    client.create_queue("plain.dlq", partitions=1, replication_factor=3)
    client.create_queue(
        "plain", partitions=1, replication_factor=3, max_receives=1, dead_letter_queue="plain.dlq"
    )
    client.send("plain", b"poison", headers={"trace": b"t"})
    (m,) = client.receive("plain", wait_ms=2000)
    client.nack("plain", m)  # its only receive used: dead
    (dead,) = client.receive("plain.dlq", wait_ms=10_000)
    assert dead.body == b"poison" and dead.headers["trace"] == b"t"
    assert dead.headers["raftq-dlq-queue"] == b"plain"
    assert client.receive("plain", wait_ms=500) == []


def test_dead_letter_queues_must_exist_and_never_form_a_cycle(client: Client) -> None:
    client.create_queue("cyc-a", partitions=1, replication_factor=3)
    client.create_queue(
        "cyc-b", partitions=1, replication_factor=3, max_receives=3, dead_letter_queue="cyc-a"
    )
    with pytest.raises(errors.InvalidArgument) as exc:
        client.update_queue("cyc-a", max_receives=3, dead_letter_queue="cyc-b")
    assert exc.value.field == "config.dead_letter_queue" and "cycle" in str(exc.value)
    with pytest.raises(errors.InvalidArgument) as exc:
        client.create_queue("cyc-c", partitions=1, max_receives=1, dead_letter_queue="nope")
    assert exc.value.field == "config.dead_letter_queue"
    with pytest.raises(errors.FailedPrecondition):
        client.delete_queue("cyc-a")
    assert client.get_queue("cyc-a").config.dead_letter_queue == ""


@needs_history
def test_history_lists_every_receive_with_its_consumer(client: Client) -> None:
    # Retention by time: with retention_ms=0 the acked record may be compacted
    # away before the last history read (NotFound, as documented).
    client.create_queue("hist", partitions=1, replication_factor=3, retention_ms=3_600_000)
    sent = client.send("hist", b"m")
    client.receive("hist", visibility_ms=300, consumer="first")
    time.sleep(0.5)
    (m,) = client.receive("hist", consumer="second")
    history = client.get_history("hist", sent.partition, sent.offset)
    assert history.state == "in_flight" and history.receive_count == 2
    assert [d.consumer for d in history.deliveries] == ["first", "second"]
    assert history.deliveries[0].time_ms <= history.deliveries[1].time_ms
    client.ack("hist", m)
    assert client.get_history("hist", sent.partition, sent.offset).state == "done"


# ---- 9. dedup ----------------------------------------------------------------------------


def test_a_duplicate_send_returns_the_original_partition_and_offset(client: Client) -> None:
    client.create_queue("dedup", partitions=3, replication_factor=3, dedup_window_ms=2000)
    first = client.send("dedup", b"a", dedup_id="order-17")
    again = client.send("dedup", b"a", dedup_id="order-17")
    assert (again.partition, again.offset, again.duplicate) == (
        first.partition,
        first.offset,
        True,
    )
    assert not first.duplicate
    time.sleep(2.5)  # past the window: stored anew
    later = client.send("dedup", b"a", dedup_id="order-17")
    assert not later.duplicate and later.offset > first.offset
    with pytest.raises(errors.InvalidArgument) as exc:
        client.create_queue("dedup2", partitions=1, dedup_window_ms=31 * 86_400_000)
    assert "dedup_window_ms" in exc.value.field


def test_a_repeated_send_request_is_stored_once(client: Client, cluster: LocalCluster) -> None:
    """What the SDK's retries rely on: the same request_id, sent again (here
    to another node, so partitions led elsewhere are forwarded with it),
    stores nothing and answers the first offsets as duplicates."""
    client.create_queue("requests", partitions=2, replication_factor=3)
    wait_until(lambda: all(p.leader for p in client.partitions("requests")), 30)
    entries = [queue_pb2.SendEntry(body=b"m%d" % i, partition=i % 2) for i in range(6)]
    request = queue_pb2.SendRequest(queue="requests", entries=entries, request_id=os.urandom(16))
    answers = []
    auth = (("authorization", f"Bearer {cluster.token}"),)
    for spec in cluster.specs[:2]:
        with grpc.insecure_channel(spec.address) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            answers.append(stub.Send(request, timeout=20, metadata=auth))
    first, again = ([(r.partition, r.offset, r.duplicate) for r in a.results] for a in answers)
    assert [(p, o) for p, o, _ in again] == [(p, o) for p, o, _ in first]
    assert [d for _, _, d in first] == [False] * 6 and [d for _, _, d in again] == [True] * 6
    assert sum(p.latest_offset for p in client.partitions("requests")) == 6
    other = queue_pb2.SendRequest(queue="requests", entries=entries, request_id=b"another")
    with grpc.insecure_channel(cluster.specs[0].address) as channel:
        third = queue_pb2_grpc.QueueServiceStub(channel).Send(other, timeout=20, metadata=auth)
    assert not any(r.duplicate for r in third.results)


# ---- 10. durability ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fsync", "quorum", "leader"])
def test_every_send_reports_the_durability_it_reached(client: Client, mode: str) -> None:
    name = f"dur-{mode}"
    client.create_queue(name, partitions=1, replication_factor=3, durability=mode)
    assert client.get_queue(name).config.durability == mode
    results = [client.send(name, b"m%d" % i) for i in range(5)]
    if mode == "leader":
        assert {r.durability for r in results} <= {"leader", "quorum"}
        assert "leader" in {r.durability for r in results}
    else:
        assert {r.durability for r in results} == {mode}
    assert [r.offset for r in results] == list(range(5))
    # "leader" acks before the entry is applied, so the last send may become
    # readable a moment after its ack: wait for it (bounded).
    wait_until(lambda: len(client.read(name, 0, 0, max_messages=10).messages) == 5)
    stored = client.read(name, 0, 0, max_messages=10)
    assert [m.body for m in stored.messages] == [b"m%d" % i for i in range(5)]


def test_durability_can_be_updated(client: Client) -> None:
    client.create_queue("dur-up", partitions=1, replication_factor=3, durability="fsync")
    client.update_queue("dur-up", durability="quorum")
    wait_until(lambda: client.send("dur-up", b"x").durability == "quorum")


# ---- 11. headers, purge, metadata ----------------------------------------------------------


@needs_history
def test_headers_purge_and_queue_metadata(client: Client) -> None:
    client.create_queue("meta", partitions=2, replication_factor=3)
    client.send("meta", b"h", headers={"a": b"\x00\x01", "b": "text"})
    (m,) = client.receive("meta", wait_ms=2000)
    assert m.headers == {"a": b"\x00\x01", "b": b"text"}
    client.send("meta", b"later", delay_ms=60_000)
    client.send_batch("meta", [b"x", b"y"])
    time.sleep(0.3)
    info = wait_until(lambda: (q := client.get_queue("meta")).messages == 4 and q)
    assert info.in_flight == 1
    assert info.oldest_message_age_ms >= 300
    assert client.purge_queue("meta") == 4
    info = client.get_queue("meta")
    assert (info.messages, info.in_flight) == (0, 0)
    assert client.receive("meta", wait_ms=300) == []
    assert not client.ack("meta", m)[0].ok  # its message was purged


def test_update_queue_changes_only_what_is_given(client: Client) -> None:
    client.create_queue("upd", partitions=2, replication_factor=3, max_receives=5)
    info = client.update_queue("upd", visibility_timeout_ms=2000)
    assert info.config.visibility_timeout_ms == 2000 and info.config.max_receives == 5
    with pytest.raises(errors.InvalidArgument) as exc:
        client.update_queue("upd", partitions=3)
    assert exc.value.field == "config.partitions"
    with pytest.raises(errors.InvalidArgument) as exc:
        client.update_queue("upd", ordering="fifo")
    assert exc.value.field == "config.ordering"
    assert client.get_queue("upd").config.partitions == 2
    client.send("upd", b"m")
    client.receive("upd", wait_ms=2000)  # leased for the new default, 2 s
    assert client.receive("upd", wait_ms=5000)
