"""ReceiveStream on real nodes (server/api/receive_stream.py, the SDK's
CallStreams): the stream is authenticated when it opens, each request is
judged by the grants of the moment, a request's error names its field and
leaves the stream open, a long poll on it returns when a message arrives,
and a stream cancelled while its long poll waits leaves no message leased."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from raft_queue import Client
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster, wait_until
from tests.integration.test_send_stream import (
    PERMISSION_DENIED,
    UNAUTHENTICATED,
    RawStream,
    leader_of,
)

INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "receive-stream")


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0) as c:
        for name in ("rs.auth", "rs.ok", "rs.no", "rs.field", "rs.sdk", "rs.cancel", "rs.count"):
            c.create_queue(name, partitions=1, replication_factor=3)
        yield c


class RawReceives(RawStream):
    """One ReceiveStream on one node, driven by hand."""

    def __init__(self, address: str, token: str | None) -> None:
        super().__init__(address, token, "ReceiveStream", timeout_s=60)

    def ask(self, queue: str, **fields: Any) -> Any:  # type: ignore[override]
        fields.setdefault("max_messages", 10)
        self.outbox.put(queue_pb2.ReceiveRequest(queue=queue, **fields))
        return next(self.answers)


def visible(admin: Client, queue: str) -> list[bytes]:
    """What a fresh Receive leases now (then given back at once: visible again)."""
    got = admin.receive(queue, max_messages=100)
    if got:
        admin.nack(queue, got, release=True)
    return sorted(m.body for m in got)


@pytest.mark.parametrize("token", [None, "rqt_" + "A" * 43])
def test_a_stream_without_a_valid_token_is_refused_and_leases_nothing(cluster, admin, token):
    body = b"kept, %s token" % (b"no" if token is None else b"a forged")
    admin.send("rs.auth", body)
    stream = RawReceives(leader_of(admin, "rs.auth"), token)
    try:
        with pytest.raises(grpc.RpcError) as info:
            stream.ask("rs.auth")
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        stream.close()
    assert body in visible(admin, "rs.auth")


def test_grants_are_judged_per_request_and_a_refusal_leaves_the_stream_open(cluster, admin):
    token = admin.create_principal("r-streamer").token
    admin.add_grant("r-streamer", "rs.ok", ["receive"])
    admin.send_batch("rs.ok", [b"one", b"two"])
    admin.send("rs.no", b"not yours")
    stream = RawReceives(leader_of(admin, "rs.ok"), token)
    try:
        first = wait_until(
            lambda: (a := stream.ask("rs.ok", max_messages=1)).HasField("response") and a, 10
        )
        assert [m.body for m in first.response.messages] == [b"one"]
        refused = stream.ask("rs.no")
        assert refused.error.code == PERMISSION_DENIED
        assert "receive" in refused.error.details and "rs.no" in refused.error.details
        assert refused.error.trailers["raftq-error"] == "PermissionDenied"
        second = stream.ask("rs.ok", max_messages=1)  # still open
        assert [m.body for m in second.response.messages] == [b"two"]
        admin.remove_grant("r-streamer", "rs.ok", ["receive"])
        # A grant taken back stops the next request of an open stream (the
        # queue has nothing visible left: the asks before that lease nothing).
        wait_until(lambda: stream.ask("rs.ok").error.code == PERMISSION_DENIED, 10)
        admin.delete_principal("r-streamer")
        wait_until(lambda: stream.ask("rs.ok").error.code == UNAUTHENTICATED, 10)
    finally:
        stream.close()
    assert visible(admin, "rs.no") == [b"not yours"]  # nothing leased by the refusal
    assert visible(admin, "rs.ok") == []  # one and two stay leased (30 s)


def test_a_bad_request_names_its_field_leases_nothing_and_the_stream_goes_on(cluster, admin):
    admin.send("rs.field", b"good")
    stream = RawReceives(leader_of(admin, "rs.field"), cluster.token)
    try:
        bad = stream.ask("rs.field", max_messages=100_000)
        assert bad.error.code == INVALID_ARGUMENT
        assert bad.error.trailers["raftq-field"] == "max_messages"
        late = stream.ask("rs.field", visibility_ms=100 * 24 * 3600 * 1000)
        assert late.error.code == INVALID_ARGUMENT
        assert late.error.trailers["raftq-field"] == "visibility_ms"
        long = stream.ask("rs.field", wait_ms=10**9)
        assert long.error.code == INVALID_ARGUMENT
        assert long.error.trailers["raftq-field"] == "wait_ms"
        missing = stream.ask("rs.none")
        assert missing.error.code == NOT_FOUND
        assert visible(admin, "rs.field") == [b"good"]
        ok = stream.ask("rs.field", visibility_ms=60_000)
        assert [m.body for m in ok.response.messages] == [b"good"]
    finally:
        stream.close()


def test_the_sdk_receives_on_one_stream_to_the_leader_and_a_long_poll_wakes(cluster, admin):
    leader = leader_of(admin, "rs.sdk")
    with cluster.client(timeout_s=20.0) as consumer, cluster.client() as producer:
        producer.send("rs.sdk", b"first")
        got = consumer.receive("rs.sdk", max_messages=10, wait_ms=5000)
        assert [m.body for m in got] == [b"first"]
        consumer.ack("rs.sdk", got)
        assert list(consumer._receive_streams._streams) == [leader]

        timer = threading.Timer(0.5, lambda: producer.send("rs.sdk", b"later"))
        started = time.monotonic()
        timer.start()
        try:
            got = consumer.receive("rs.sdk", max_messages=10, wait_ms=15_000)
        finally:
            timer.join()
        assert [m.body for m in got] == [b"later"]
        assert time.monotonic() - started < 10  # woken by the send, not by the wait's end
        assert list(consumer._receive_streams._streams) == [leader]  # the same stream


def test_a_stream_cancelled_during_its_long_poll_leaves_nothing_leased(cluster, admin):
    """The poll's task is cancelled with its stream: a message sent after is
    not leased to the consumer that left (it would stay invisible for the
    visibility timeout, 30 s here) but goes to the next Receive at once."""
    stream = RawReceives(leader_of(admin, "rs.cancel"), cluster.token)
    answers: list[Any] = []
    polling = threading.Thread(
        target=lambda: answers.append(_quietly(stream.ask, "rs.cancel", wait_ms=20_000))
    )
    polling.start()
    time.sleep(1.0)  # the poll stands on the leader
    stream.close()
    polling.join(10)
    assert not polling.is_alive()
    assert all(isinstance(a, grpc.RpcError) for a in answers)
    time.sleep(0.5)  # the cancellation reached the node
    admin.send("rs.cancel", b"after")
    got = admin.receive("rs.cancel", max_messages=10, wait_ms=5000)
    assert [m.body for m in got] == [b"after"]


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except grpc.RpcError as exc:
        return exc


def test_each_receive_on_a_stream_counts_as_a_receive_in_the_rpc_metrics(cluster, admin):
    """Dashboards and alerts on QueueService/Receive keep working when the SDK
    receives over its stream: every request counts with its own code."""

    def receives(code: str) -> float:
        total = 0.0
        for url in cluster.metrics_urls:
            text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
            for line in text.splitlines():
                if line.startswith("raftq_rpc_requests_total{") and (
                    'method="QueueService/Receive"' in line and f'code="{code}"' in line
                ):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    with cluster.client() as client:
        client.send("rs.count", b"x")
        ok_before, missing_before = receives("OK"), receives("NOT_FOUND")
        for _ in range(5):
            client.receive("rs.count", max_messages=1)
        assert client._receive_streams._streams  # they rode the stream
    stream = RawReceives(leader_of(admin, "rs.count"), cluster.token)
    try:
        assert stream.ask("no-such-queue").error.code == NOT_FOUND
    finally:
        stream.close()
    assert receives("OK") - ok_before >= 5
    assert receives("NOT_FOUND") - missing_before >= 1
