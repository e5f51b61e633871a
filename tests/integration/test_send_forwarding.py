"""Sends that reach a node which does not lead the partition: forwarded in one
hop, checked but not packed there, answered as if sent to the leader
(server/dataplane/sending.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.client import Client
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "forwarding")


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0) as c:
        yield c


def _send(cluster: LocalCluster, address: str, request: Any) -> Any:
    auth = (("authorization", f"Bearer {cluster.token}"),)
    with grpc.insecure_channel(address) as channel:
        return queue_pb2_grpc.QueueServiceStub(channel).Send(request, timeout=20, metadata=auth)


def _followers(cluster: LocalCluster, client: Client, queue: str) -> list[str]:
    leader = wait_until(lambda: client.partitions(queue)[0].leader_address, 30)
    return [s.address for s in cluster.specs if s.address != leader]


@pytest.mark.parametrize("as_runs", [False, True])
def test_a_send_to_a_follower_is_stored_once_in_order(
    cluster: LocalCluster, client: Client, as_runs: bool
) -> None:
    queue = f"fwd-one-{int(as_runs)}"
    client.create_queue(queue, partitions=1, replication_factor=3)
    follower = _followers(cluster, client, queue)[0]
    entries = [
        queue_pb2.SendEntry(body=b"plain"),
        queue_pb2.SendEntry(body=b"keyed", key="k"),
        queue_pb2.SendEntry(body=b"dedup", dedup_id="d-1"),
        queue_pb2.SendEntry(body=b"headers", headers={"h": b"v"}),
    ]
    request = queue_pb2.SendRequest(queue=queue, entries=entries, results_as_runs=as_runs)
    resp = _send(cluster, follower, request)
    if as_runs:
        got = [(r.partition, r.offset + k) for r in resp.runs for k in range(r.count)]
    else:
        got = [(r.partition, r.offset) for r in resp.results]
    assert got == [(0, i) for i in range(4)]
    stored = client.read(queue, 0, 0, max_messages=10).messages
    assert [m.body for m in stored] == [e.body for e in entries]
    assert stored[3].headers == {"h": b"v"}


def test_a_bad_entry_sent_to_a_follower_writes_nothing(
    cluster: LocalCluster, client: Client
) -> None:
    """The follower checks every entry before forwarding any (it does not
    pack them): the bad one is named, nothing is stored."""
    client.create_queue("fwd-bad", partitions=1, replication_factor=3, max_message_bytes=64)
    follower = _followers(cluster, client, "fwd-bad")[0]
    entries = [queue_pb2.SendEntry(body=b"ok"), queue_pb2.SendEntry(body=b"x" * 65)]
    with pytest.raises(grpc.RpcError) as exc:
        _send(cluster, follower, queue_pb2.SendRequest(queue="fwd-bad", entries=entries))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "entries[1].body" in (exc.value.details() or "")
    assert client.partitions("fwd-bad")[0].latest_offset == 0


def test_entries_of_many_partitions_keep_their_placement_when_forwarded(
    cluster: LocalCluster, client: Client
) -> None:
    """Round-robin entries are placed by the node that received them; the
    leaders they are forwarded to store them where that node placed them."""
    client.create_queue("fwd-many", partitions=3, replication_factor=3)
    wait_until(lambda: all(p.leader for p in client.partitions("fwd-many")), 30)
    entries = [queue_pb2.SendEntry(body=b"m%d" % i) for i in range(9)]
    resp = _send(
        cluster, cluster.specs[0].address, queue_pb2.SendRequest(queue="fwd-many", entries=entries)
    )
    by_part: dict[int, list[bytes]] = {}
    for entry, r in zip(entries, resp.results, strict=True):
        by_part.setdefault(r.partition, []).append(entry.body)
    assert sorted(len(v) for v in by_part.values()) == [3, 3, 3]
    for part, bodies in by_part.items():
        stored = client.read("fwd-many", part, 0, max_messages=10).messages
        assert [m.body for m in stored] == bodies
