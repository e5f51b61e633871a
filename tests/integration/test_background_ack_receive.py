"""A Receive that carries background acks (``ReceiveRequest.ack_background``,
issue 17's W4) answers on its lease's commit, not on the carried Ack's.

The acks are still proposed before the lease (and applied in log order on
every replica); only the answer no longer waits for their commit, which was
one synced Raft round per consume loop on W4's path
(docs/benchmarks.md, "W4: a push path"). Real 3-node clusters, real gRPC.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.client import Client, OutgoingMessage
from raft_queue.testing.cluster import LocalCluster
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base: Path = tmp_path_factory.mktemp("bgack")
    with LocalCluster(base / "cluster", nodes=3) as c:
        c.start()
        c.wait_ready(60)
        yield c


def _leaders(c: Client, queue: str) -> list[str]:
    wait_for(lambda: all(p.leader for p in c.partitions(queue)), timeout_s=30)
    return [p.leader for p in sorted(c.partitions(queue), key=lambda p: p.partition)]


def _two_leader_nodes(c: Client, queue: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """A queue of 3 single-replica partitions, and two of them, (partition,
    leader node), on different nodes: a node paused (SIGSTOP) then holds up
    only its own partition, with no election in between."""
    c.create_queue(queue, partitions=3, replication_factor=1)
    leaders = _leaders(c, queue)
    for pa, la in enumerate(leaders):
        for pb, lb in enumerate(leaders):
            if la != lb:
                return (pa, la), (pb, lb)
    pytest.skip(f"every partition on one node: {leaders}")


def _node_index(cluster: LocalCluster, node_id: str) -> int:
    return [n.node_id for n in cluster.specs].index(node_id)


@pytest.mark.parametrize("background", [True, False])
def test_a_receive_answers_without_waiting_for_its_background_acks(
    cluster: LocalCluster, background: bool
) -> None:
    """The carried ack goes to a partition whose leader node is paused
    (SIGSTOP): its forward cannot finish. With ``ack_background`` the
    Receive still answers with the other partition's message at once; a
    Receive whose acks are confirmed waits for them (the control case). The
    ack applies once the node is back."""
    queue = f"bg{int(background)}"
    with cluster.client(timeout_s=20.0) as c:
        (part0, lead0), (part1, lead1) = _two_leader_nodes(c, queue)
        c.send_batch(queue, [OutgoingMessage(b"p1", partition=part1)])
        held = c.receive(queue, max_messages=1, wait_ms=2000)
        assert [m.partition for m in held] == [part1]
        c.send_batch(queue, [OutgoingMessage(b"p0", partition=part0)])
        paused = _node_index(cluster, lead1)
        request = queue_pb2.ReceiveRequest(
            queue=queue,
            max_messages=1,
            wait_ms=2000,
            ack=[held[0].receipt],
            ack_background=background,
        )
        md = (("authorization", f"Bearer {cluster.token}"),)
        address = cluster.specs[_node_index(cluster, lead0)].address
        with grpc.insecure_channel(address) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            cluster.pause(paused)
            try:
                t0 = time.monotonic()
                future = stub.Receive.future(request, timeout=30, metadata=md)
                try:
                    response = future.result(timeout=3.0)
                    took: float | None = time.monotonic() - t0
                except grpc.FutureTimeoutError:
                    took = None
            finally:
                cluster.resume(paused)
            if not background:
                assert took is None, "a Receive with confirmed acks answered before their commit"
                response = future.result(timeout=30)
        assert [m.body for m in response.messages] == [b"p0"]
        if background:
            assert took is not None and took < 3.0
            assert not response.acks.failed  # not confirmed: no results
        # Either way the carried ack applies: p1 is gone for good.
        wait_for(lambda: c.get_queue(queue).messages == 1, timeout_s=30)


def test_a_consume_loop_with_background_acks_keeps_fifo_key_order_and_loses_nothing(
    cluster: LocalCluster,
) -> None:
    """Keyed FIFO queue, a producer sending while a named consumer long-polls
    in a loop with background acks (the acks ride the next Receive without
    being waited for; the lingering and standing leases ride the Appends):
    every message exactly once, each key's in order, and nothing waits out
    the 60 s visibility timeout (the whole run takes seconds)."""
    queue = "bgfifo"
    n, keys = 300, 7
    with Client(cluster.bootstrap, token=cluster.token, timeout_s=20.0) as c:
        c.create_queue(
            queue, partitions=1, replication_factor=3, ordering="fifo", visibility_timeout_ms=60_000
        )
        _leaders(c, queue)
        errors: list[BaseException] = []

        def produce() -> None:
            try:
                with Client(cluster.bootstrap, token=cluster.token, timeout_s=20.0) as p:
                    for i in range(0, n, 5):
                        batch = [
                            OutgoingMessage(b"%d" % j, key=f"k{j % keys}")
                            for j in range(i, min(n, i + 5))
                        ]
                        p.send_batch(queue, batch)
                        time.sleep(0.005)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        producer = threading.Thread(target=produce)
        t0 = time.monotonic()
        producer.start()
        seen: dict[str, list[int]] = defaultdict(list)
        got = 0
        while got < n and time.monotonic() - t0 < 40:
            batch = c.receive(queue, max_messages=50, wait_ms=1000, consumer="bgc")
            for m in batch:
                seen[m.key].append(int(m.body))
                got += 1
            if batch:
                c.ack(queue, batch, wait=False)
        producer.join(30)
        took = time.monotonic() - t0
        assert not errors
        c.flush_acks()
        everything = sorted(i for v in seen.values() for i in v)
        assert everything == list(range(n)), "a message lost or delivered twice"
        for key, order in seen.items():
            assert order == sorted(order), f"key {key} out of order: {order}"
        assert took < 30, f"the loop took {took:.1f} s: a lease waited out its timeout"
        wait_for(lambda: c.get_queue(queue).messages == 0, timeout_s=30)


def test_a_carried_background_ack_with_nothing_after_it_still_applies(
    cluster: LocalCluster,
) -> None:
    """A Receive's background acks wait for the partition's next entry to
    ride in (settling.py, HOLD_S); with no entry after them (nothing to
    lease, no producer) they are proposed alone when the hold ends, not
    left until some other traffic comes."""
    queue = "bghold"
    with Client(cluster.bootstrap, token=cluster.token, timeout_s=20.0) as c:
        c.create_queue(queue, partitions=1, replication_factor=3)
        _leaders(c, queue)
        c.send_batch(queue, [OutgoingMessage(b"only")])
        got = c.receive(queue, max_messages=1, wait_ms=2000, consumer="hold")
        assert [m.body for m in got] == [b"only"]
        c.ack(queue, got, wait=False)
        t0 = time.monotonic()
        assert c.receive(queue, max_messages=1, wait_ms=0, consumer="hold") == []
        wait_for(lambda: c.get_queue(queue).messages == 0, timeout_s=10)
        assert time.monotonic() - t0 < 2.0, "the held ack waited for other traffic"
