"""The SDK's asyncio client, Producer and Consumer against a real cluster."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from raft_queue.aio import AsyncClient
from raft_queue.client import Client, Consumer, Producer
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "sdk")


def test_the_asyncio_client_has_the_same_surface(cluster: LocalCluster) -> None:
    async def scenario() -> None:
        async with AsyncClient(cluster.bootstrap, timeout_s=20.0, token=cluster.token) as c:
            await c.create_queue("aio", partitions=2, replication_factor=3)
            sent = await c.send("aio", b"hello", dedup_id="a-1")
            again = await c.send("aio", b"hello", dedup_id="a-1")
            assert again.duplicate and again.offset == sent.offset
            (m,) = await c.receive("aio", max_messages=5, wait_ms=5000)
            assert m.body == b"hello"
            assert (await c.ack("aio", m))[0].ok
            assert (await c.get_queue("aio")).messages == 0

    asyncio.run(scenario())


def test_the_producer_batches_and_returns_futures(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20.0) as client:
        client.create_queue("prod", partitions=3, replication_factor=3)
        with Producer(client, "prod", linger_ms=20, batch_size=100) as producer:
            futures = [producer.send(b"m%03d" % i, key=f"k{i % 7}") for i in range(250)]
            producer.flush(30)
            results = [f.result(1) for f in futures]
        assert len({(r.partition, r.offset) for r in results}) == 250
        stored = sum(p.latest_offset for p in client.partitions("prod"))
        assert stored == 250


def test_the_consumer_extends_a_slow_handlers_lease_and_acks(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20.0) as client:
        client.create_queue("cons", partitions=1, replication_factor=3)
        client.send("cons", b"slow")
        seen: list[int] = []
        consumer = Consumer(client, "cons", visibility_ms=1000, wait_ms=1000)

        def handle(m) -> None:
            seen.append(m.receive_count)
            time.sleep(2.5)  # 2.5 x the visibility timeout
            consumer.stop()

        worker = threading.Thread(target=consumer.run, args=(handle,))
        worker.start()
        time.sleep(1.5)
        with Client(cluster.bootstrap, token=cluster.token) as other:
            assert other.receive("cons", wait_ms=0) == []  # still leased
        worker.join(20)
        assert seen == [1]
        assert client.receive("cons", wait_ms=1500) == []  # acked
