"""Ordering, delays, replay and retention (issue 3 items 3, 4, 7, 8) on one
real 3-node cluster shared by the module."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from raft_queue import errors
from raft_queue.client import Client, OutgoingMessage
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "log")


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0) as c:
        yield c


# ---- 3. FIFO per key ----------------------------------------------------------------------


def test_fifo_delivers_one_message_per_key_at_a_time_in_offset_order(client: Client) -> None:
    client.create_queue("fifo", partitions=1, replication_factor=3, ordering="fifo")
    client.send_batch(
        "fifo",
        [OutgoingMessage(b"a1", key="a"), OutgoingMessage(b"a2", key="a"),
         OutgoingMessage(b"b1", key="b"), OutgoingMessage(b"a3", key="a")],
    )  # fmt: skip
    first = client.receive("fifo", max_messages=10, wait_ms=2000)
    assert sorted(m.body for m in first) == [b"a1", b"b1"]  # keys in parallel, one each
    assert client.receive("fifo", max_messages=10) == []
    a1 = next(m for m in first if m.body == b"a1")
    client.nack("fifo", a1)  # a1 again before a2: order holds across redelivery
    (again,) = client.receive("fifo", max_messages=10, wait_ms=2000)
    assert again.body == b"a1" and again.receive_count == 2
    client.ack("fifo", [again, *[m for m in first if m.body == b"b1"]])
    assert [m.body for m in client.receive("fifo", max_messages=10, wait_ms=2000)] == [b"a2"]


def test_fifo_without_a_key_is_refused_and_nothing_is_written(client: Client) -> None:
    client.create_queue("fifo2", partitions=1, replication_factor=3, ordering="fifo")
    with pytest.raises(errors.InvalidArgument) as exc:
        client.send_batch("fifo2", [OutgoingMessage(b"ok", key="k"), OutgoingMessage(b"no")])
    assert exc.value.field == "entries[1].key"
    assert client.partitions("fifo2")[0].latest_offset == 0


# ---- 4. delays ------------------------------------------------------------------------------


def test_a_delayed_message_is_invisible_until_due(client: Client) -> None:
    client.create_queue("delay", partitions=1, replication_factor=3)
    start = time.monotonic()
    client.send("delay", b"later", delay_ms=1500)
    client.send("delay", b"now")
    assert [m.body for m in client.receive("delay", max_messages=10)] == [b"now"]
    (m,) = client.receive("delay", max_messages=10, wait_ms=10_000)
    took = time.monotonic() - start
    assert m.body == b"later" and 1.4 <= took < 3.0
    assert client.read("delay", 0, 0).messages[0].body == b"later"  # replay sees it at once


def test_a_queue_delay_applies_to_every_message_and_can_be_long(client: Client) -> None:
    client.create_queue("qdelay", partitions=1, replication_factor=3, delay_ms=1000)
    start = time.monotonic()
    client.send("qdelay", b"m")
    far = client.send("qdelay", b"far", delay_ms=30 * 86_400_000)  # a month: no SQS-like cap
    (m,) = client.receive("qdelay", max_messages=10, wait_ms=5000)
    assert m.body == b"m" and time.monotonic() - start >= 0.95
    assert client.receive("qdelay", wait_ms=300) == []
    assert client.get_queue("qdelay").delayed >= 1
    assert far.offset == 1


def test_bad_delays_name_the_field(client: Client) -> None:
    client.create_queue("baddelay", partitions=1, replication_factor=3)
    with pytest.raises(errors.InvalidArgument) as exc:
        client.send("baddelay", b"x", delay_ms=-1)
    assert "delay_ms" in exc.value.field
    with pytest.raises(errors.InvalidArgument) as exc:
        client.send("baddelay", b"x", delay_ms=10**15)
    assert exc.value.field.startswith("entries[0].delay_ms")
    assert client.partitions("baddelay")[0].latest_offset == 0


# ---- 7. replay and consumer groups ----------------------------------------------------------


def test_read_by_offset_and_by_timestamp(client: Client) -> None:
    client.create_queue("replay", partitions=1, replication_factor=3)
    client.send_batch("replay", [b"a", b"b"])
    time.sleep(0.2)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    client.send_batch("replay", [b"c", b"d"])
    page = client.read("replay", 0, 1, max_messages=2)
    assert [m.body for m in page.messages] == [b"b", b"c"] and page.next_offset == 3
    by_time = client.read("replay", 0, timestamp_ms=middle)
    assert [m.offset for m in by_time.messages] == [2, 3]
    assert client.read("replay", 0, timestamp_ms=0).messages[0].offset == 0
    assert client.read("replay", 0, timestamp_ms=middle + 60_000).messages == []
    (m,) = client.receive("replay")
    client.ack("replay", m)
    assert len(client.read("replay", 0, 0, wait_ms=0).messages) >= 3  # a lease does not hide it


def test_a_read_at_the_end_waits_for_the_next_append(client: Client) -> None:
    import threading

    client.create_queue("tail", partitions=1, replication_factor=3)
    client.read("tail", 0, 0)  # learn the leader
    sender = threading.Timer(0.8, lambda: client.send("tail", b"x"))
    sender.start()
    start = time.monotonic()
    page = client.read("tail", 0, 0, wait_ms=10_000)
    waited = time.monotonic() - start
    sender.join(10)  # its send must finish before the fixture closes the client
    # woken by the append, not by the end of the 10 s wait (bound loose: shared CPU)
    assert [m.body for m in page.messages] == [b"x"] and waited < 8.0


def test_committed_offsets_never_move_backwards_unless_reset(client: Client) -> None:
    client.create_queue("groups", partitions=2, replication_factor=3)
    assert client.commit_offsets("groups", "g", {0: 5, 1: 2}) == {0: 5, 1: 2}
    assert client.commit_offsets("groups", "g", {0: 3}) == {0: 5}
    assert client.get_offsets("groups", "g") == {0: 5, 1: 2}
    assert client.commit_offsets("groups", "g", {0: 3}, reset=True) == {0: 3}
    assert client.get_offsets("groups", "g") == {0: 3, 1: 2}
    assert client.get_offsets("groups", "other") == {}
    with pytest.raises(errors.InvalidArgument) as exc:
        client.commit_offsets("groups", "", {0: 1})
    assert exc.value.field == "group"
    with pytest.raises(errors.InvalidArgument):
        client.commit_offsets("groups", "g", {7: 1})


# ---- 8. retention ---------------------------------------------------------------------------


def _wait_earliest(client: Client, queue: str, at_least: int, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        earliest = client.partitions(queue)[0].earliest_offset
        if earliest >= at_least:
            return earliest
        time.sleep(0.2)
    raise AssertionError(f"{queue}: earliest offset stayed below {at_least}")


def test_time_retention_drops_old_messages_and_offsets_are_never_reused(client: Client) -> None:
    client.create_queue("ret", partitions=1, replication_factor=3, retention_ms=1000)
    client.send_batch("ret", [b"a", b"b", b"c"])
    _wait_earliest(client, "ret", 3)
    with pytest.raises(errors.OutOfRange):
        client.read("ret", 0, 0)
    assert client.send("ret", b"d").offset == 3
    assert [m.body for m in client.receive("ret", max_messages=10, wait_ms=1000)] == [b"d"]


def test_size_retention_keeps_the_newest_bytes(client: Client) -> None:
    # retention_bytes counts stored bytes: body plus key, headers, dedup id
    # and a few bytes of framing (about 50 here).
    client.create_queue("retb", partitions=1, replication_factor=3, retention_bytes=2500)
    client.send_batch("retb", [b"%d" % i * 1000 for i in range(6)])
    earliest = _wait_earliest(client, "retb", 4)
    assert earliest == 4  # 2 x ~1050 bytes fit in 2500, 3 do not
    assert [m.body[:1] for m in client.read("retb", 0, earliest).messages] == [b"4", b"5"]


def test_acked_messages_are_compacted_away(client: Client) -> None:
    client.create_queue("compact", partitions=1, replication_factor=3)
    client.send_batch("compact", [b"a", b"b", b"c"])
    got = client.receive("compact", max_messages=2, wait_ms=2000)
    client.ack("compact", got)
    assert _wait_earliest(client, "compact", 2) == 2
    assert client.partitions("compact")[0].latest_offset == 3
