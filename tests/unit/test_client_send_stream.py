"""The SDK's SendStream (client/send_stream.py) against the fake nodes of
test_client.py: a lone send rides one long-lived stream per node, a
request's error comes back on it (field and leader hint kept) and leaves it
open, a broken stream is retried with the same request id (stored once), and
a node without SendStream gets unary Sends."""

from __future__ import annotations

import threading
import time

import pytest

from raft_queue import Client, errors
from raft_queue.client import send_stream
from tests.unit.test_client import FakeCluster


@pytest.fixture(scope="module")
def cluster_servers():
    with FakeCluster(nodes=2) as servers:
        yield servers


@pytest.fixture
def cluster(cluster_servers):
    return cluster_servers.reset()


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def client(cluster, sleeps):
    with Client(cluster.addresses[0], timeout_s=5.0, retries=5, sleep=sleeps.append) as c:
        yield c


def test_one_send_at_a_time_rides_one_stream(client, cluster):
    cluster.add_queue("q")
    offsets = [client.send("q", f"m{i}").offset for i in range(5)]
    assert offsets == [0, 1, 2, 3, 4]
    assert cluster.streams_opened == [0]  # one stream, kept open
    assert len(cluster.streamed) == 5
    assert [r.body for r in cluster.queues["q"].logs[0]] == [f"m{i}".encode() for i in range(5)]


def test_an_error_on_the_stream_names_its_field_and_the_stream_stays_open(client, cluster):
    cluster.add_queue("q")
    cluster.fail("Send", errors.InvalidArgument("entries[0].body", "too large"))
    with pytest.raises(errors.InvalidArgument) as info:
        client.send("q", b"x")
    assert info.value.field == "entries[0].body"
    assert cluster.queues["q"].logs[0] == []  # nothing stored
    assert client.send("q", b"y").offset == 0
    assert cluster.streams_opened == [0]


def test_a_stream_broken_after_storing_is_retried_once_with_the_same_request_id(client, cluster):
    cluster.add_queue("q")
    client.send("q", b"before")  # the stream is open
    cluster.break_streams = 1
    result = client.send("q", b"once")
    assert result.duplicate and result.offset == 1  # the retry got the first answer
    assert [m.body for m in cluster.queues["q"].logs[0]] == [b"before", b"once"]
    ids = [rid for _, rid in cluster.streamed]
    assert ids[1] == ids[2] != ids[0]  # the retry repeated the request id
    assert cluster.streams_opened == [0, 0]  # a new stream after the break
    assert client.send("q", b"after").offset == 2


def test_a_not_leader_answer_on_the_stream_is_followed_at_once(client, cluster, sleeps):
    cluster.add_queue("q", leaders=[0])
    client.partitions("q")  # the client believes node 0 leads
    cluster.leaders[("q", 0)] = 1
    cluster.forward = False
    client.send("q", b"a")
    assert [node for node, _ in cluster.streamed] == [0, 1]  # both on streams
    first, second = (rid for _, rid in cluster.streamed)
    assert first == second
    assert sleeps == []  # a redirect is not a backoff
    client.send("q", b"b")
    assert [node for node, _ in cluster.streamed] == [0, 1, 1]
    assert cluster.streams_opened == [0, 1]


def test_a_node_without_send_stream_gets_unary_sends(client, cluster):
    cluster.add_queue("q")
    cluster.serve_streams = False
    assert [client.send("q", f"m{i}").offset for i in range(3)] == [0, 1, 2]
    assert cluster.streamed == [] and cluster.streams_opened == []
    assert len(cluster.calls_of("Send")) == 3


def test_concurrent_sends_do_not_wait_for_the_stream(cluster):
    """A send while another is on the stream goes unary: both are stored."""
    cluster.add_queue("q")
    gate = threading.Event()
    entered = threading.Event()
    with Client(cluster.addresses[0], timeout_s=5.0) as client:
        client.send("q", b"open")
        stream = client._streams._streams[cluster.addresses[0]]
        real = stream.call

        def slow(request, timeout_s):
            entered.set()
            gate.wait(5)
            return real(request, timeout_s)

        stream.call = slow
        worker = threading.Thread(target=client.send, args=("q", b"streamed"))
        worker.start()
        assert entered.wait(5)
        client.send("q", b"unary")  # the stream is busy: not waited for
        unary_stored = [m.body for m in cluster.queues["q"].logs[0]]
        gate.set()
        worker.join(5)
    assert unary_stored == [b"open", b"unary"]
    assert sorted(m.body for m in cluster.queues["q"].logs[0]) == [b"open", b"streamed", b"unary"]
    assert len(cluster.streamed) == 2


def test_a_closed_client_closes_its_streams(cluster):
    cluster.add_queue("q")
    client = Client(cluster.addresses[0], timeout_s=5.0)
    client.send("q", b"x")
    client.close()
    with pytest.raises(errors.FailedPrecondition):
        client.send("q", b"y")


def test_an_idle_stream_is_closed_and_the_next_send_opens_another(cluster, monkeypatch):
    """A node counts an open stream as a call in progress: a quiet producer
    must not hold one of its max_concurrent_rpcs."""
    monkeypatch.setattr(send_stream, "IDLE_S", 0.3)
    cluster.add_queue("q")
    time.sleep(0.2)  # streams of earlier tests' closed clients end meanwhile
    cluster.streams_ended.clear()
    with Client(cluster.addresses[0], timeout_s=5.0) as client:
        client.send("q", b"a")
        client.send("q", b"b")  # within IDLE_S: the same stream
        assert cluster.streams_opened == [0]
        deadline = time.monotonic() + 5.0
        while not cluster.streams_ended and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cluster.streams_ended == [0]  # closed by the client, idle
        assert client.send("q", b"c").offset == 2
        assert cluster.streams_opened == [0, 0]
        assert len(cluster.streamed) == 3  # every send still rode a stream


def test_a_send_stuck_on_the_stream_times_out_and_the_stream_is_replaced(cluster):
    cluster.add_queue("q")
    release = threading.Event()
    real = cluster.rpc_Send

    def stuck(node, req):
        release.wait(3)
        return real(node, req)

    with Client(cluster.addresses[0], timeout_s=1.0, retries=0) as client:
        client.send("q", b"open")
        cluster.rpc_Send = stuck
        started = time.monotonic()
        try:
            with pytest.raises(errors.OutcomeUnknown):
                client.send("q", b"stuck")
            elapsed = time.monotonic() - started
        finally:
            release.set()
            del cluster.rpc_Send
        assert elapsed < 2.0  # the call's 1 s budget, not the server's 3 s
        assert client.send("q", b"after").offset >= 1
    assert cluster.streams_opened == [0, 0]  # the timed-out stream was dropped
