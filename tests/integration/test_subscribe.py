"""Push delivery (Subscribe) on a real cluster: credit bounds what is in
flight, acks go through Ack, a dropped stream's leases expire normally."""

from __future__ import annotations

import threading
import time

import pytest

from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration


def test_a_subscription_delivers_every_message_once_with_acks(cluster: LocalCluster) -> None:
    with cluster.client() as client:
        client.create_queue("push", partitions=3, replication_factor=3)
        sent = {b"push-%03d" % i for i in range(60)}
        client.send_batch("push", sorted(sent))
        got: list[bytes] = []
        with client.subscribe("push", prefetch=5) as sub:
            for m in sub:
                got.append(m.body)
                assert client.ack("push", [m.receipt])[0].ok
                if len(got) == len(sent):
                    break
        assert sorted(got) == sorted(sent)


def test_the_server_never_sends_more_than_the_credit_granted(cluster: LocalCluster) -> None:
    with cluster.client() as client:
        client.create_queue("credit", partitions=2, replication_factor=3)
        client.send_batch("credit", [b"c%02d" % i for i in range(20)])
        sub = client.subscribe("credit", prefetch=3, auto_grant=False)
        got: list = []

        def pull() -> None:
            for m in sub:
                got.append(m)

        t = threading.Thread(target=pull, daemon=True)
        t.start()
        time.sleep(2.0)
        assert len(got) == 3, f"credit 3 but {len(got)} messages pushed"
        stats = client.get_queue("credit")
        assert stats.in_flight == 3
        sub.grant(4)
        deadline = time.monotonic() + 10
        while len(got) < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        assert len(got) == 7
        sub.close()
        t.join(5)


def test_leases_of_a_dropped_stream_expire_and_are_delivered_again(
    cluster: LocalCluster,
) -> None:
    with cluster.client() as client:
        client.create_queue("drop", partitions=1, replication_factor=3)
        client.send("drop", b"only")
        with client.subscribe("drop", prefetch=1, visibility_ms=1500) as sub:
            first = next(iter(sub))
        assert first.body == b"only"
        assert client.receive("drop", max_messages=1, wait_ms=0) == []  # still leased
        again = client.receive("drop", max_messages=1, wait_ms=5000)
        assert [m.body for m in again] == [b"only"]
        assert again[0].receive_count == 2


def test_the_asyncio_client_subscribes_with_the_same_credit_rules(
    cluster: LocalCluster,
) -> None:
    import asyncio

    from raft_queue.aio import AsyncClient

    async def run() -> None:
        async with AsyncClient(cluster.bootstrap, timeout_s=20.0, token=cluster.token) as c:
            await c.create_queue("apush", partitions=2, replication_factor=3)
            sent = {b"a%02d" % i for i in range(12)}
            await c.send_batch("apush", sorted(sent))
            # credit 3 without grants: exactly 3 arrive, then nothing
            sub = c.subscribe("apush", prefetch=3, auto_grant=False)
            held = [await sub.__anext__() for _ in range(3)]
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sub.__anext__(), 1.5)
            assert (await c.get_queue("apush")).in_flight == 3
            await c.ack("apush", [m.receipt for m in held])
            await sub.close()
            # auto grant, ack each: the rest, each once
            got = [m.body for m in held]
            async with c.subscribe("apush", prefetch=2) as sub2:
                async for m in sub2:
                    got.append(m.body)
                    assert (await c.ack("apush", [m.receipt]))[0].ok
                    if len(got) == len(sent):
                        break
            assert sorted(got) == sorted(sent)

    asyncio.run(run())
