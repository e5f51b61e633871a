"""The SDK's Receives on a ReceiveStream (client/send_stream.py's CallStreams,
server/api/receive_stream.py) against the fake nodes of test_client.py: a
lone Receive rides one long-lived stream per node, a request's error comes
back on it as the unary call's QueueError and leaves it open, a NOT_LEADER
answer on it is followed, and a node without ReceiveStream gets unary
Receives."""

from __future__ import annotations

import pytest

from raft_queue import Client, errors
from tests.unit.test_client import FakeCluster


@pytest.fixture(scope="module")
def cluster_servers():
    with FakeCluster(nodes=2) as servers:
        yield servers


@pytest.fixture
def cluster(cluster_servers):
    return cluster_servers.reset()


@pytest.fixture
def client(cluster):
    with Client(cluster.addresses[0], timeout_s=5.0, retries=5, sleep=lambda s: None) as c:
        yield c


def test_one_receive_at_a_time_rides_one_stream(client, cluster):
    cluster.add_queue("q", leaders=[0])
    client.send_batch("q", [b"a", b"b", b"c"])
    got = [client.receive("q", max_messages=1)[0].body for _ in range(3)]
    assert got == [b"a", b"b", b"c"]
    assert client.receive("q", max_messages=10) == []
    assert cluster.receive_streams_opened == [0]  # one stream, kept open
    assert cluster.receive_streamed == 4
    assert len(cluster.calls_of("Receive")) == 4  # each a Receive to the node


def test_an_error_on_the_stream_is_the_unary_error_and_the_stream_stays_open(client, cluster):
    cluster.add_queue("q", leaders=[0])
    client.send("q", b"x")
    with pytest.raises(errors.InvalidArgument) as info:
        client.receive("q", max_messages=5000)
    assert info.value.field == "max_messages"
    with pytest.raises(errors.NotFound):
        client.receive("no-such-queue")
    assert [m.body for m in client.receive("q", max_messages=10)] == [b"x"]
    assert cluster.receive_streams_opened == [0]


def test_a_not_leader_answer_on_the_stream_is_followed(client, cluster):
    cluster.add_queue("q", leaders=[1])
    client.send("q", b"x")
    cluster.fail("Receive", errors.NotLeader("moved", leader=cluster.addresses[1]), node=1)
    got = client.receive("q", max_messages=10)
    assert [m.body for m in got] == [b"x"]
    assert all(node == 1 for node, _ in cluster.calls_of("Receive"))
    assert cluster.receive_streams_opened == [1]  # the retry rode the same stream


def test_a_node_without_receive_stream_gets_unary_receives(client, cluster):
    cluster.add_queue("q", leaders=[0])
    cluster.serve_receive_streams = False
    client.send_batch("q", [b"a", b"b"])
    assert [m.body for m in client.receive("q", max_messages=10)] == [b"a", b"b"]
    assert client.receive("q") == []
    assert cluster.receive_streamed == 0 and cluster.receive_streams_opened == []
    assert len(cluster.calls_of("Receive")) == 2


def test_receive_stream_false_keeps_receives_unary(cluster):
    cluster.add_queue("q", leaders=[0])
    with Client(cluster.addresses[0], timeout_s=5.0, receive_stream=False) as client:
        client.send("q", b"a")
        assert [m.body for m in client.receive("q")] == [b"a"]
    assert cluster.receive_streams_opened == []
