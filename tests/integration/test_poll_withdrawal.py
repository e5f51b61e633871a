"""A forwarded Receive is withdrawn, never cancelled, so no lease is lost
(server/dataplane/withdrawals.py; docs/reliability.md, "Soak").

Before: the node a client's long poll reached cancelled its forwarded polls
on the other leader nodes once one answered. A forwarded poll that had
already answered (leases applied, response sent) lost its messages to the
cancel: leased to nobody for the whole visibility timeout, about 3 a second
under the soak's load, and the log could not be trimmed past them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import admin_pb2, node_pb2_grpc, queue_pb2, queue_pb2_grpc
from raft_queue.client import Client
from raft_queue.security.node_identity import NodeSigner
from raft_queue.security.secret import load_secret
from raft_queue.server.dataplane.withdrawals import POLL_ID_KEY
from raft_queue.server.peers import FORWARDED
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster
from tests.integration.test_long_poll_routes import lead

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "withdrawal")


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0, retries=20) as c:
        yield c


def test_mixed_long_polls_over_three_leader_nodes_lose_no_lease(
    client: Client, cluster: LocalCluster
) -> None:
    """Two consumers long-poll a queue led by all three nodes while 400
    messages a second arrive: every message comes once, on its first lease,
    and soon. A lost lease shows as a message missing after the drain (it is
    invisible for 30 s) or delivered again (receive_count 2)."""
    name = "mixed"
    client.create_queue(name, partitions=3, replication_factor=3)
    lead(client, name, {0: "n1", 1: "n2", 2: "n3"})
    sent: set[bytes] = set()
    seen: list[tuple[bytes, int]] = []
    stop = threading.Event()
    lock = threading.Lock()

    def send() -> None:
        with cluster.client(timeout_s=20.0, retries=20) as c:
            k = 0
            while not stop.wait(0.025):
                bodies = [b"m-%06d" % (k + i) for i in range(10)]
                c.send_batch(name, bodies)
                k += 10
                with lock:
                    sent.update(bodies)

    def receive(until: threading.Event) -> None:
        with cluster.client(timeout_s=20.0, retries=20) as c:
            while not until.is_set():
                got = c.receive(name, max_messages=50, wait_ms=500, visibility_ms=30_000)
                if got:
                    c.ack(name, [m.receipt for m in got])
                with lock:
                    seen.extend((m.body, m.receive_count) for m in got)

    done = threading.Event()
    threads = [threading.Thread(target=send)]
    threads += [threading.Thread(target=receive, args=(done,)) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(15)
    stop.set()
    threads[0].join(30)
    deadline = time.monotonic() + 10  # a lost lease stays invisible for 30 s
    while time.monotonic() < deadline:
        with lock:
            if sent <= {body for body, _ in seen}:
                break
        time.sleep(0.2)
    done.set()
    for t in threads[1:]:
        t.join(30)
    missing = sent - {body for body, _ in seen}
    again = [body for body, count in seen if count > 1]
    assert len(sent) > 1000
    assert not missing, f"{len(missing)} of {len(sent)} messages not received within 10 s"
    assert not again, f"{len(again)} messages delivered again (a lease lost): {again[:5]}"


def test_a_withdrawn_forwarded_poll_ends_at_once_and_holds_nothing(
    client: Client, cluster: LocalCluster
) -> None:
    """n1 forwards a long poll to n2 (leader of p1), then withdraws it: the
    poll answers empty at once, and leaves no standing lease that would take
    the next message (a Receive right after it gets it)."""
    name = "withdrawn"
    client.create_queue(name, partitions=2, replication_factor=3)
    lead(client, name, {0: "n1", 1: "n2"})
    signer = NodeSigner(load_secret(cluster.secret_path), "n1")
    request = queue_pb2.ReceiveRequest(queue=name, max_messages=10, wait_ms=15_000)
    path = "/raft_queue.v1.QueueService/Receive"
    signature = signer.metadata(path, request.SerializeToString(), time.time())
    metadata = (FORWARDED, (POLL_ID_KEY, "poll-1"), *signature)
    with grpc.insecure_channel(cluster.specs[1].address) as channel:
        future = queue_pb2_grpc.QueueServiceStub(channel).Receive.future(
            request, timeout=30, metadata=metadata
        )
        time.sleep(0.5)  # it stands on n2
        assert not future.done()
        withdraw = admin_pb2.WithdrawPollRequest(poll_id="poll-1")
        node_path = "/raft_queue.v1.NodeService/WithdrawPoll"
        node_sig = signer.metadata(node_path, withdraw.SerializeToString(), time.time())
        started = time.monotonic()
        answer = node_pb2_grpc.NodeServiceStub(channel).WithdrawPoll(
            withdraw, timeout=10, metadata=node_sig
        )
        assert answer.found
        assert list(future.result(timeout=5).messages) == []
        assert time.monotonic() - started < 2.0
    client.send(name, b"after", partition=1)
    got = client.receive(name, max_messages=10, wait_ms=2_000)
    assert [m.body for m in got] == [b"after"]
    assert got[0].receive_count == 1
