"""A long poll over partitions led by several nodes keeps watching every one
of them while leaders settle or move: the first-election race
(docs/internals.md, "Long polls across nodes").

The node a client's Receive reaches (the origin) serves its own leaders and
holds one forwarded long poll open on every other leader node. Before the
fix, a forwarded poll ended early and empty whenever its node's view of
*any* leader changed (as when a replica of a new partition first hears of
its leader, ~0.5 s after creation), and the origin dropped it: that node's
partitions went unwatched for the rest of the poll, and a message sent to
them was missed. Both halves are tested here on a real 3-node cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.client import Client
from raft_queue.security.node_identity import NodeSigner
from raft_queue.security.secret import load_secret
from raft_queue.server.peers import FORWARDED
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "pollroutes")


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0) as c:
        yield c


def lead(client: Client, queue: str, leaders: dict[int, str]) -> None:
    """Make ``leaders[p]`` lead partition p (a transfer where needed)."""
    now = {p.partition: p.leader for p in client.partitions(queue)}
    for part, node in leaders.items():
        if now.get(part) != node:
            client.transfer_leader(queue, part, node)

    def settled() -> bool:
        got = {p.partition: p.leader for p in client.partitions(queue)}
        return all(got.get(p) == n for p, n in leaders.items())

    wait_until(settled, 30, 0.1)


def token(cluster: LocalCluster) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {cluster.token}"),)


def poll_in_thread(target, request, metadata) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        with grpc.insecure_channel(target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            resp = stub.Receive(request, timeout=30, metadata=metadata)
        out["bodies"] = [m.body for m in resp.messages]
        out["at"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_a_forwarded_long_poll_outlasts_a_leader_change_on_other_nodes(
    client: Client, cluster: LocalCluster
) -> None:
    """n2 serves a forwarded poll for its partition p1; p2 moving from n3 to
    n1 changes nothing n2 leads, so the poll must keep waiting and take the
    message sent to p1 after the move."""
    name = "fwd"
    client.create_queue(name, partitions=3, replication_factor=3)
    lead(client, name, {0: "n1", 1: "n2", 2: "n3"})
    request = queue_pb2.ReceiveRequest(queue=name, max_messages=10, wait_ms=15_000)
    # As n1 forwards it: the marker counts only with n1's node signature.
    signature = NodeSigner(load_secret(cluster.secret_path), "n1").metadata(
        "/raft_queue.v1.QueueService/Receive", request.SerializeToString(), time.time()
    )
    t, out = poll_in_thread(cluster.specs[1].address, request, (FORWARDED, *signature))
    time.sleep(0.5)
    lead(client, name, {2: "n1"})
    time.sleep(0.5)  # n2's view has moved on (it hosts a replica of p2)
    assert "bodies" not in out, f"the forwarded poll ended early: {out}"
    sent_at = time.monotonic()
    client.send(name, b"after-the-move", partition=1)
    t.join(20)
    assert out.get("bodies") == [b"after-the-move"]
    assert out["at"] - sent_at < 0.5


def test_a_long_poll_sends_again_a_forwarded_poll_that_ended_early(
    client: Client, cluster: LocalCluster
) -> None:
    """The origin n1 forwards to n2 and n3. p3 moving from n3 to n2 ends n2's
    forwarded poll (its own leaders changed), while n1's plan (which nodes
    lead) stays the same: n1 must poll n2 again, or p1's message is missed."""
    name = "again"
    client.create_queue(name, partitions=4, replication_factor=3)
    lead(client, name, {0: "n1", 1: "n2", 2: "n3", 3: "n3"})
    request = queue_pb2.ReceiveRequest(queue=name, max_messages=10, wait_ms=15_000)
    t, out = poll_in_thread(cluster.specs[0].address, request, token(cluster))
    time.sleep(0.5)
    lead(client, name, {3: "n2"})
    time.sleep(0.5)
    assert "bodies" not in out, f"the long poll ended early: {out}"
    sent_at = time.monotonic()
    client.send(name, b"after-the-move", partition=1)
    t.join(20)
    assert out.get("bodies") == [b"after-the-move"]
    assert out["at"] - sent_at < 0.5


def test_a_node_that_has_not_heard_from_a_new_leader_still_routes_to_it(
    cluster: LocalCluster, client: Client
) -> None:
    """A replica of a new partition may hear of its leader a few hundred ms
    after the election (it started later); meanwhile its node routes to the
    preferred replica instead of refusing with "no leader known"."""
    for i in range(6):
        name = f"fresh{i}"
        client.create_queue(name, partitions=3, replication_factor=3)
        wait_until(lambda name=name: all(p.leader for p in client.partitions(name)), 30)
        entries = [queue_pb2.SendEntry(body=b"m%d" % p, partition=p) for p in range(3)]
        for spec in cluster.specs:
            with grpc.insecure_channel(spec.address) as channel:
                stub = queue_pb2_grpc.QueueServiceStub(channel)
                request = queue_pb2.SendRequest(queue=name, entries=entries)
                stub.Send(request, timeout=20, metadata=token(cluster))
        assert sum(p.latest_offset for p in client.partitions(name)) == 9
