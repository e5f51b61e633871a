"""The SDK marks a Receive that carries only background acks
(``ReceiveRequest.ack_background``: the server answers without waiting for
their commit, issue 17's W4), and only that one: a Receive with acks of the
caller's own (``ack=``) still waits for and returns their results.
Against the in-process fake nodes of test_client.py (real gRPC)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raft_queue.client import Client
from tests.unit.test_client import FakeCluster


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeCluster]:
    with FakeCluster(nodes=1) as servers:
        yield servers


@pytest.fixture
def cluster(fake: FakeCluster) -> FakeCluster:
    return fake.reset()


@pytest.fixture
def client(cluster: FakeCluster) -> Iterator[Client]:
    with Client(cluster.addresses[0], timeout_s=5.0, ack_flush_ms=60_000) as c:
        yield c


def test_a_receive_carrying_only_background_acks_asks_not_to_wait(
    client: Client, cluster: FakeCluster
) -> None:
    cluster.add_queue("q")
    client.send_batch("q", [b"1", b"2", b"3"])
    first = client.receive("q", max_messages=2)
    client.ack("q", first, wait=False)
    second = client.receive("q", max_messages=2)
    assert [m.body for m in second] == [b"3"] and second.acks == []
    (_, carrying) = cluster.calls_of("Receive")[-1]
    assert list(carrying.ack) == [m.receipt for m in first]
    assert carrying.ack_background
    assert client.background_acks.sent == 2


def test_a_receive_with_acks_of_its_own_waits_for_them(
    client: Client, cluster: FakeCluster
) -> None:
    cluster.add_queue("q")
    client.send_batch("q", [b"1", b"2", b"3"])
    a, b = client.receive("q", max_messages=2)
    client.ack("q", [a], wait=False)
    client.receive("q", max_messages=1, ack=[b])
    (_, carrying) = cluster.calls_of("Receive")[-1]
    assert list(carrying.ack) == [b.receipt, a.receipt]
    assert not carrying.ack_background
    client.receive("q", max_messages=1)
    assert not cluster.calls_of("Receive")[-1][1].ack_background
