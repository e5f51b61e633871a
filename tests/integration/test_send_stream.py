"""SendStream on real nodes (server/api/send_stream.py, client/send_stream.py):
the stream is authenticated when it opens, each request is judged by the
grants (and quota) of the moment, a request's error names its field and
leaves the stream open, a repeated request id is stored once, and the SDK's
stream survives its node's death without losing or repeating an acked send."""

from __future__ import annotations

import queue as queue_mod
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from raft_queue import Client, errors
from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster, wait_until

INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED.value[0]
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "send-stream")


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0) as c:
        for name in ("ss.ok", "ss.no", "ss.field", "ss.dedup", "ss.sdk", "ss.kill", "ss.quota"):
            c.create_queue(name, partitions=1, replication_factor=3)
        yield c


class RawStream:
    """One SendStream on one node, driven by hand: ``ask`` sends a request
    and returns its answer (or raises the stream's RpcError)."""

    def __init__(self, address: str, token: str | None) -> None:
        self.channel = grpc.insecure_channel(address)
        self.outbox: queue_mod.SimpleQueue[Any] = queue_mod.SimpleQueue()
        metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()
        stub = queue_pb2_grpc.QueueServiceStub(self.channel)
        self.answers = stub.SendStream(iter(self.outbox.get, None), metadata=metadata, timeout=30)

    def ask(self, queue: str, body: bytes = b"x", **fields: Any) -> Any:
        entries = fields.pop("entries", [queue_pb2.SendEntry(body=body)])
        self.outbox.put(queue_pb2.SendRequest(queue=queue, entries=entries, **fields))
        return next(self.answers)

    def close(self) -> None:
        self.outbox.put(None)
        self.answers.cancel()
        self.channel.close()


def leader_of(admin: Client, queue: str) -> str:
    return str(wait_until(lambda: admin.partitions(queue)[0].leader_address, 30))


def stored(admin: Client, queue: str) -> int:
    return admin.partitions(queue)[0].latest_offset


@pytest.mark.parametrize("token", [None, "rqt_" + "A" * 43])
def test_a_stream_without_a_valid_token_is_refused_and_stores_nothing(cluster, admin, token):
    stream = RawStream(leader_of(admin, "ss.ok"), token)
    before = stored(admin, "ss.ok")
    try:
        with pytest.raises(grpc.RpcError) as info:
            stream.ask("ss.ok")
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        stream.close()
    assert stored(admin, "ss.ok") == before


def test_grants_are_judged_per_request_and_a_refusal_leaves_the_stream_open(cluster, admin):
    token = admin.create_principal("streamer").token
    admin.add_grant("streamer", "ss.ok", ["send", "read"])
    stream = RawStream(leader_of(admin, "ss.ok"), token)
    try:
        first = wait_until(lambda: (a := stream.ask("ss.ok")).HasField("response") and a, 10)
        assert not first.response.results[0].duplicate
        refused = stream.ask("ss.no")
        assert refused.error.code == PERMISSION_DENIED
        assert "send" in refused.error.details and "ss.no" in refused.error.details
        assert refused.error.trailers["raftq-error"] == "PermissionDenied"
        creating = stream.ask("ss.ok", create=True)  # a Send that may create needs manage
        assert creating.error.code == PERMISSION_DENIED and "manage" in creating.error.details
        assert stream.ask("ss.ok").HasField("response")  # still open
        admin.remove_grant("streamer", "ss.ok", ["send"])
        # A grant taken back stops the next request of an open stream.
        wait_until(lambda: stream.ask("ss.ok").error.code == PERMISSION_DENIED, 10)
        admin.delete_principal("streamer")
        wait_until(lambda: stream.ask("ss.ok").error.code == UNAUTHENTICATED, 10)
    finally:
        stream.close()
    assert stored(admin, "ss.no") == 0


def test_a_bad_request_names_its_field_writes_nothing_and_the_stream_goes_on(cluster, admin):
    stream = RawStream(leader_of(admin, "ss.field"), cluster.token)
    try:
        bad = stream.ask("ss.field", entries=[queue_pb2.SendEntry(body=b"x", partition=7)])
        assert bad.error.code == INVALID_ARGUMENT
        assert bad.error.trailers["raftq-field"] == "entries[0].partition"
        empty = stream.ask("ss.field", entries=[])
        assert empty.error.code == INVALID_ARGUMENT
        assert empty.error.trailers["raftq-field"] == "entries"
        long_id = stream.ask("ss.field", request_id=b"r" * 65)
        assert long_id.error.trailers["raftq-field"] == "request_id"
        assert stored(admin, "ss.field") == 0
        ok = stream.ask("ss.field", body=b"good")
        assert ok.response.results[0].offset == 0
    finally:
        stream.close()


def test_a_repeated_request_id_on_the_stream_is_stored_once(cluster, admin):
    stream = RawStream(leader_of(admin, "ss.dedup"), cluster.token)
    try:
        first = stream.ask("ss.dedup", body=b"once", request_id=b"req-1")
        again = stream.ask("ss.dedup", body=b"once", request_id=b"req-1")
    finally:
        stream.close()
    assert not first.response.results[0].duplicate
    assert again.response.results[0].duplicate
    assert again.response.results[0].offset == first.response.results[0].offset
    assert stored(admin, "ss.dedup") == 1


def test_a_quota_refuses_a_request_on_the_stream_and_charges_nothing(cluster, admin):
    token = admin.create_principal("q-streamer").token
    admin.add_grant("q-streamer", "ss.quota", ["send", "read"])
    admin.set_quota("q-streamer", queue="ss.quota", messages_per_s=1, burst_s=1.0)
    stream = RawStream(leader_of(admin, "ss.quota"), token)
    try:
        answers = [stream.ask("ss.quota") for _ in range(6)]
    finally:
        stream.close()
    over = [a for a in answers if a.HasField("error")]
    assert over and all(a.error.code == RESOURCE_EXHAUSTED for a in over)
    assert all(int(a.error.trailers["retry-after-ms"]) > 0 for a in over)
    assert stored(admin, "ss.quota") == len(answers) - len(over)


def test_the_sdk_sends_on_one_stream_to_the_leader(cluster, admin):
    with cluster.client(timeout_s=20.0) as client:
        offsets = [client.send("ss.sdk", f"m{i}").offset for i in range(5)]
        assert offsets == list(range(5))
        assert list(client._streams._streams) == [leader_of(admin, "ss.sdk")]
        got = client.read("ss.sdk", 0, 0, max_messages=10).messages
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(5)]


def test_a_stream_to_a_follower_is_forwarded_to_the_leader_and_stored_once(cluster, admin):
    admin.create_queue("ss.fwd", partitions=1, replication_factor=3)
    token = admin.create_principal("fwd-streamer").token
    admin.add_grant("fwd-streamer", "ss.fwd", ["send", "read"])
    leader = leader_of(admin, "ss.fwd")
    follower = next(s.address for s in cluster.specs if s.address != leader)
    stream = RawStream(follower, token)
    try:
        first = wait_until(lambda: (a := stream.ask("ss.fwd", b"one")).HasField("response") and a)
        second = stream.ask("ss.fwd", b"two")
    finally:
        stream.close()
    assert [first.response.results[0].offset, second.response.results[0].offset] == [0, 1]
    assert stored(admin, "ss.fwd") == 2


def test_a_stream_whose_node_dies_loses_and_repeats_no_acked_send(cluster, admin):
    """Kills the queue's leader, restarts it, and waits until the cluster is
    ready again, so the tests after it do not meet the elections."""
    leader = leader_of(admin, "ss.kill")
    index = next(i for i, s in enumerate(cluster.specs) if s.address == leader)
    acked: list[tuple[bytes, int]] = []
    with cluster.client(timeout_s=30.0) as client:
        for i in range(5):
            acked.append((f"a{i}".encode(), client.send("ss.kill", f"a{i}").offset))
        assert leader in client._streams._streams
        cluster.kill(index)
        try:
            for i in range(5):
                acked.append((f"b{i}".encode(), client.send("ss.kill", f"b{i}").offset))
            got = client.read("ss.kill", 0, 0, max_messages=100).messages
        finally:
            cluster.start(index)
            cluster.wait_ready(60)
    assert [(m.body, m.offset) for m in got] == acked


def test_each_send_on_a_stream_counts_as_a_send_in_the_rpc_metrics(cluster: Any) -> None:
    """Dashboards and alerts on QueueService/Send keep working when the SDK
    sends over its stream: every request counts with its own code."""
    import urllib.request

    def sends(code: str) -> float:
        total = 0.0
        for url in cluster.metrics_urls:
            text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
            for line in text.splitlines():
                if line.startswith("raftq_rpc_requests_total{") and (
                    'method="QueueService/Send"' in line and f'code="{code}"' in line
                ):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    with cluster.client() as client:
        client.create_queue("counted", 1)
        ok_before, missing_before = sends("OK"), sends("NOT_FOUND")
        for i in range(5):
            client.send("counted", b"m%d" % i)
        with pytest.raises(errors.NotFound):
            client.send("no-such-queue", b"x")
    assert sends("OK") - ok_before >= 5
    assert sends("NOT_FOUND") - missing_before >= 1
