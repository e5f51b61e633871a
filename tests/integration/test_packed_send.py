"""SendRequest.packed: bare bodies for one partition, end to end (the SDK's
bulk case, server/api/packed.py), stored as entries would be, forwarded as
they came, and refused whole, naming the field, when malformed."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.client import Client
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster, wait_until
from tests.integration.test_send_forwarding import _followers, _send


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "packed")


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0) as c:
        yield c


def _packed(queue: str, bodies: list[bytes], partition: int = 0) -> queue_pb2.SendRequest:
    packed = queue_pb2.PackedBodies(
        partition=partition, lengths=[len(b) for b in bodies], bodies=b"".join(bodies)
    )
    return queue_pb2.SendRequest(queue=queue, packed=packed, results_as_runs=True)


def _leader(client: Client, queue: str) -> str:
    return str(wait_until(lambda: client.partitions(queue)[0].leader_address, 30))


def test_packed_bodies_to_the_leader_and_to_a_follower_are_stored_in_order(
    cluster: LocalCluster, client: Client
) -> None:
    client.create_queue("packed-one", partitions=1, replication_factor=3)
    sdk = [b"sdk-%d" % i for i in range(2500)]  # the SDK packs them: 3 RPCs
    got = client.send_batch("packed-one", sdk)
    assert [(r.partition, r.offset) for r in got] == [(0, i) for i in range(2500)]
    raw = [b"", b"x" * 300, b"follower"]  # an empty body is a body
    follower = _followers(cluster, client, "packed-one")[0]
    resp = _send(cluster, follower, _packed("packed-one", raw))
    assert [(r.partition, r.offset, r.count) for r in resp.runs] == [(0, 2500, 3)]
    stored = client.read("packed-one", 0, 2495, max_messages=10).messages
    assert [m.body for m in stored] == sdk[-5:] + raw
    assert all(not m.key and not m.headers and not m.dedup_id for m in stored)
    # a retry of the same request (same id) stores nothing again
    again = _packed("packed-one", [b"once"])
    again.request_id = b"packed-retry-1"
    first = _send(cluster, _leader(client, "packed-one"), again)
    second = _send(cluster, follower, again)
    assert [(r.offset, r.duplicate) for r in first.runs] == [(2503, False)]
    assert [(r.offset, r.duplicate) for r in second.runs] == [(2503, True)]
    assert client.partitions("packed-one")[0].latest_offset == 2504


def test_packed_bodies_go_to_their_explicit_partition(
    cluster: LocalCluster, client: Client
) -> None:
    client.create_queue("packed-three", partitions=3, replication_factor=3)
    wait_until(lambda: all(p.leader for p in client.partitions("packed-three")), 30)
    infos = client.partitions("packed-three")
    resp = _send(cluster, infos[2].leader_address, _packed("packed-three", [b"a", b"b"], 2))
    assert [(r.partition, r.offset, r.count) for r in resp.runs] == [(2, 0, 2)]
    assert [m.body for m in client.read("packed-three", 2, 0).messages] == [b"a", b"b"]
    assert client.partitions("packed-three")[0].latest_offset == 0


BAD = {
    "lengths short of the bodies": (
        lambda r: r.packed.lengths.__setitem__(0, 1),
        "packed.lengths",
    ),
    "entries beside packed": (lambda r: r.entries.add(body=b"e"), "packed"),
    "a body over max_message_bytes": (
        lambda r: (
            r.packed.lengths.extend([65]),
            setattr(r.packed, "bodies", r.packed.bodies + b"y" * 65),
        ),
        "packed.lengths[3]",
    ),
    "a partition the queue does not have": (
        lambda r: setattr(r.packed, "partition", 1),
        "packed.partition",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("to", ["leader", "follower"])
def test_a_bad_packed_request_names_the_field_and_stores_nothing(
    cluster: LocalCluster, client: Client, case: str, to: str
) -> None:
    queue = f"packed-bad-{to}"
    if queue not in {q.name for q in client.list_queues()}:
        client.create_queue(queue, partitions=1, replication_factor=3, max_message_bytes=64)
    address = _leader(client, queue) if to == "leader" else _followers(cluster, client, queue)[0]
    request = _packed(queue, [b"ok", b"fine", b"good"])
    change, field = BAD[case]
    change(request)
    with pytest.raises(grpc.RpcError) as exc:
        _send(cluster, address, request)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (exc.value.details() or ""), exc.value.details()
    assert client.partitions(queue)[0].latest_offset == 0


def test_a_fifo_queue_refuses_packed_bodies(cluster: LocalCluster, client: Client) -> None:
    client.create_queue("packed-fifo", partitions=1, replication_factor=3, ordering="fifo")
    with pytest.raises(grpc.RpcError) as exc:
        _send(cluster, _leader(client, "packed-fifo"), _packed("packed-fifo", [b"a", b"b"]))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "packed" in (exc.value.details() or "") and "key" in (exc.value.details() or "")
    with pytest.raises(errors.InvalidArgument, match="key") as sdk:  # the SDK packs them too
        client.send_batch("packed-fifo", [b"a", b"b"])
    assert sdk.value.field == "packed"
    assert client.partitions("packed-fifo")[0].latest_offset == 0


def test_more_packed_bodies_than_a_batch_may_hold_are_refused_whole(
    cluster: LocalCluster, client: Client
) -> None:
    client.create_queue("packed-many", partitions=1, replication_factor=3)
    with pytest.raises(grpc.RpcError) as exc:
        _send(cluster, _leader(client, "packed-many"), _packed("packed-many", [b"m"] * 10_001))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "packed.lengths" in (exc.value.details() or "") and "at most 10000" in (
        exc.value.details() or ""
    )
    assert client.partitions("packed-many")[0].latest_offset == 0
