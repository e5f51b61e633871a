"""Bounds on what a client can make a node hold, and limits that mean what
they say ([limits], docs/operations.md "Limits"), on real node processes over
real gRPC: each refusal names its limit and writes nothing.

Raft entries are counted with the partition's commit index (GetPartitions),
memory with the node process's VmRSS.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.testing.cluster import LocalCluster
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration

MIB = 1 << 20
POLLS = int(os.environ.get("BOUNDS_POLLS", "2000"))
SETUP_S = 120  # how long the 2,000 polls may take to stand (see _polls_and_one_send)
POLL_WAIT_MS = (SETUP_S + 60) * 1000  # each outlives the setup: none ends and is opened again
RECEIVE_BYTES = 100_000
SMALL = {
    "max_concurrent_rpcs": 24,
    "max_standing_polls_per_partition": 10,
    "max_standing_polls_per_consumer": 2,
    "max_subscribe_credit": 100,
    "max_receive_bytes": RECEIVE_BYTES,
}
OPTIONS = [
    ("grpc.max_send_message_length", 64 * MIB),
    ("grpc.max_receive_message_length", 64 * MIB),
]


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One node, default bounds (room for 2,000 long polls on a partition)."""
    base: Path = tmp_path_factory.mktemp("bounds-wide")
    # Long waits: 2,000 polls take a loaded 2-core machine a while to open.
    # One principal (the admin token) holds them all: its per-principal cap too.
    limits = {"max_wait_ms": POLL_WAIT_MS, "max_long_polls_per_principal": POLLS + 100}
    with LocalCluster(base / "c", nodes=1, limits=limits) as c:
        c.start()
        c.wait_ready(60)
        yield c


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One node with small bounds, to reach each of them."""
    base: Path = tmp_path_factory.mktemp("bounds-small")
    with LocalCluster(base / "c", nodes=1, limits=SMALL) as c:
        c.start()
        c.wait_ready(60)
        yield c


def make_queue(c: LocalCluster, name: str, **config: Any) -> None:
    with c.client() as client:
        client.create_queue(name, partitions=1, replication_factor=1, **config)
        wait_for(lambda: client.partitions(name)[0].leader != "", timeout_s=30)


def metric(c: LocalCluster, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(c.specs[0].metrics_url + "/metrics", timeout=10).read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m and all(part in m.group(1).split(",") for part in want.split(",") if part):
            total += float(m.group(2))
    return total


def settled_entries(c: LocalCluster, queue: str, quiet_s: float = 1.0) -> int:
    """The commit index once it stopped moving for ``quiet_s`` (at most 15 s):
    a send sets off an ``Expire`` ~0.1 s later (its timer), which a loaded
    machine can push past any fixed sleep; counted after it, a lone send and a
    send with 2,000 polls waiting are compared like for like."""
    last, since = entries(c, queue), time.monotonic()
    deadline = since + 15.0
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = entries(c, queue)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last


def entries(c: LocalCluster, queue: str) -> int:
    """The partition's Raft commit index: one per entry."""
    channel, s = stub(c)
    try:
        got = s.GetPartitions(
            queue_pb2.GetPartitionsRequest(queue=queue), metadata=md(c), timeout=10
        )
    finally:
        channel.close()
    return int(got.partitions[0].commit_index)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def stub(c: LocalCluster) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(c.specs[0].address, options=OPTIONS)
    return channel, queue_pb2_grpc.QueueServiceStub(channel)


def md(c: LocalCluster) -> tuple[tuple[str, str], ...]:
    """The admin token every call of a test client carries (docs/security.md)."""
    return (("authorization", f"Bearer {c.token}"),)


def field_of(err: grpc.RpcError) -> str:
    return dict(err.trailing_metadata() or ()).get("raftq-field", "")


# ---- 2,000 long polls on one partition -------------------------------------------------


async def _polls_and_one_send(c: LocalCluster, queue: str) -> dict[str, Any]:
    # Connections of their own (no shared subchannel), 250 calls each.
    local = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(c.specs[0].address, options=local) for _ in range(8)]
    stubs = [queue_pb2_grpc.QueueServiceStub(ch) for ch in channels]
    pid = c.pid(0)
    out: dict[str, Any] = {"rss_idle": rss_bytes(pid)}
    request = queue_pb2.ReceiveRequest(queue=queue, max_messages=1, wait_ms=POLL_WAIT_MS)
    calls: list[Any] = []
    tasks: list[Any] = []

    def open_one(i: int) -> None:
        timeout = POLL_WAIT_MS / 1000 + 30
        call = stubs[i % len(stubs)].Receive(request, metadata=md(c), timeout=timeout)
        calls.append(call)
        tasks.append(asyncio.ensure_future(call))

    loop = asyncio.get_running_loop()
    # Setting up, not a speed claim. The node admitted the last of the 2,000
    # at ~8 a second on a slow host until 2026-12-02: with nothing due, an
    # idle poll re-checked every RECHECK_S instead of its scaled interval, so
    # the standing polls kept the event loop busy (tests/unit/test_poll_sleep.py).
    # Now all 2,000 stand in ~2.5 s. The polls wait longer than the setup
    # (POLL_WAIT_MS): one that ended before the last stood would be opened
    # again, and wait its turn again.
    deadline = loop.time() + SETUP_S
    method = "QueueService/Receive"
    for wave in range(0, POLLS, 100):  # in waves: a burst of new streams gets some CANCELLED
        for i in range(wave, wave + 100):
            open_one(i)
        await asyncio.sleep(0.1)
    while loop.time() < deadline:
        # A call the transport cancelled before it started is opened again.
        for t in [t for t in tasks if t.done()]:
            t.exception()  # seen
            tasks.remove(t)
            open_one(len(tasks))
        if metric(c, "raftq_rpc_in_flight", method=method) >= POLLS:
            break
        await asyncio.sleep(0.5)
    out["in_flight"] = metric(c, "raftq_rpc_in_flight", method=method)
    await asyncio.sleep(1.5)  # every poll has stood (first try found nothing)
    out["rss_polls"] = rss_bytes(pid)
    idle = entries(c, queue)
    await asyncio.sleep(1.0)
    before = entries(c, queue)
    out["entries_idle"] = before - idle
    sender = queue_pb2_grpc.QueueServiceStub(channels[0])
    await sender.Send(
        queue_pb2.SendRequest(queue=queue, entries=[queue_pb2.SendEntry(body=b"x")]), metadata=md(c)
    )
    answered, cancelled = await _answers(tasks, 10.0)
    out["answered"] = answered
    out["cancelled_late"] = cancelled
    settled = await asyncio.get_running_loop().run_in_executor(None, settled_entries, c, queue)
    out["entries"] = settled - before  # the send's entry and what it set off
    out["rss_after"] = rss_bytes(pid)
    out["still_waiting"] = sum(1 for t in tasks if not t.done())
    for call in calls:
        call.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for ch in channels:
        await ch.close()
    return out


async def _answers(tasks: list[Any], timeout_s: float) -> tuple[list[list[Any]], int]:
    """The messages of each poll that answered within ``timeout_s`` (until one
    did), and how many ended CANCELLED meanwhile: on a loaded machine the
    transport may still cancel a stream it had opened (as in the waves
    above), and such a poll ended without an answer: it was never given the
    message. Any other error is raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    answered: list[list[Any]] = []
    cancelled, seen = 0, set()
    while not answered and loop.time() < deadline:
        pending = [t for t in tasks if t not in seen]
        done, _ = await asyncio.wait(
            pending, timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED
        )
        for t in done:
            seen.add(t)
            exc = t.exception()
            if exc is None:
                answered.append(list(t.result().messages))
            elif isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.CANCELLED:
                cancelled += 1
            else:
                raise exc
    return answered, cancelled


def test_2000_long_polls_a_send_is_one_raft_entry_and_memory_stays_bounded(
    wide: LocalCluster,
) -> None:
    make_queue(wide, "polled")
    make_queue(wide, "quiet")
    client = wide.client()
    client.send("quiet", b"warm-up")
    time.sleep(0.5)
    start = entries(wide, "quiet")
    client.send("quiet", b"x")  # what a send costs with no poll waiting
    alone = settled_entries(wide, "quiet") - start
    got = asyncio.run(_polls_and_one_send(wide, "polled"))
    got["entries_alone"] = alone
    print("2,000 polls:", {k: v for k, v in got.items() if k != "answered"})
    assert got["in_flight"] >= POLLS
    assert [len(m) for m in got["answered"]] == [1], "exactly one poll gets the message"
    assert got["still_waiting"] == POLLS - 1 - got["cancelled_late"]
    assert got["cancelled_late"] < POLLS // 10, "the transport cancelled polls wholesale"
    # The Append and the one Lease that can use it share the send's entry: it
    # costs what a send to a queue nobody polls costs, not 2,000 Leases more.
    assert got["entries"] == alone
    assert got["rss_polls"] - got["rss_idle"] < 200 * MIB
    assert got["rss_after"] - got["rss_polls"] < 50 * MIB


# ---- byte caps on Receive and Read -------------------------------------------------------


def test_a_receive_over_the_byte_cap_is_a_partial_batch_and_the_rest_stays_visible(
    small: LocalCluster,
) -> None:
    make_queue(small, "bulky")
    # Closed at the end: an open client keeps its SendStream, one of the
    # node's max_concurrent_rpcs, which the test below counts on.
    with small.client() as client:
        bodies = [bytes([i]) * 30_000 for i in range(10)]
        client.send_batch("bulky", bodies)
        first = client.receive("bulky", max_messages=10, wait_ms=0)
        assert len(first) == 3, "3 x 30,000 bytes fit in 100,000; a 4th does not"
        seen = [m.body for m in first]
        for _ in range(10):
            more = client.receive("bulky", max_messages=10, wait_ms=1000)
            assert len(more) <= 3
            seen += [m.body for m in more]
            if len(seen) == 10:
                break
        assert sorted(seen) == sorted(bodies), "the rest stayed visible, nothing lost"
        # Each was delivered once: the leases over the cap were undone, not left to expire.
        assert all(m.receive_count == 1 for m in first)
        read = client.read("bulky", 0, offset=0, max_messages=10)
        assert len(read.messages) == 3 and read.next_offset == read.messages[-1].offset + 1


# ---- concurrent calls, standing polls, Subscribe credit ------------------------------------


async def _hold_polls(c: LocalCluster, queues: list[str], n: int) -> Any:
    channel = grpc.aio.insecure_channel(c.specs[0].address)
    s = queue_pb2_grpc.QueueServiceStub(channel)
    calls = [
        s.Receive(
            queue_pb2.ReceiveRequest(queue=queues[i % len(queues)], wait_ms=8000),
            metadata=md(c),
            timeout=15,
        )
        for i in range(n)
    ]
    tasks = [asyncio.ensure_future(call) for call in calls]
    return channel, calls, tasks


def test_calls_over_max_concurrent_rpcs_are_refused_naming_the_limit(small: LocalCluster) -> None:
    queues = ["busy0", "busy1", "busy2"]
    for q in queues:
        make_queue(small, q)

    async def run() -> tuple[Any, Any]:
        channel, calls, tasks = await _hold_polls(small, queues, SMALL["max_concurrent_rpcs"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while loop.time() < deadline:
            if metric(small, "raftq_rpc_in_flight", method="QueueService/Receive") >= len(calls):
                break
            await asyncio.sleep(0.1)
        s = queue_pb2_grpc.QueueServiceStub(channel)
        try:
            await s.GetQueue(queue_pb2.GetQueueRequest(name="busy0"), metadata=md(small), timeout=5)
            refused = None
        except grpc.aio.AioRpcError as err:
            refused = err
        for call in calls:
            call.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0.3)
        after = await s.GetQueue(
            queue_pb2.GetQueueRequest(name="busy0"), metadata=md(small), timeout=5
        )
        await channel.close()
        return refused, after

    refused, after = asyncio.run(run())
    assert refused is not None, "one call over the limit must be refused"
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limits.max_concurrent_rpcs" in (refused.details() or "")
    assert after.name == "busy0", "served again once calls ended"


def test_standing_polls_over_the_partition_and_consumer_bounds_are_refused(
    small: LocalCluster,
) -> None:
    make_queue(small, "standing")

    async def run(consumer: str, n: int) -> list[Any]:
        channel = grpc.aio.insecure_channel(small.specs[0].address)
        s = queue_pb2_grpc.QueueServiceStub(channel)
        calls = [
            s.Receive(
                queue_pb2.ReceiveRequest(queue="standing", wait_ms=3000, consumer=consumer),
                metadata=md(small),
                timeout=10,
            )
            for _ in range(n)
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        await channel.close()
        return results

    over = SMALL["max_standing_polls_per_partition"] + 3
    results = asyncio.run(run("", over))
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(refused) == 3, results
    assert all(r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for r in refused)
    assert all("limits.max_standing_polls_per_partition" in r.details() for r in refused)
    results = asyncio.run(run("one", 3))
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(refused) == 1 and "limits.max_standing_polls_per_consumer" in refused[0].details()


def test_subscribe_credit_over_the_cap_is_refused(small: LocalCluster) -> None:
    make_queue(small, "pushed")
    channel, s = stub(small)

    def stream(*credits: int) -> grpc.RpcError:
        first = queue_pb2.SubscribeRequest(queue="pushed", credit=credits[0])
        more = [queue_pb2.SubscribeRequest(credit=c) for c in credits[1:]]

        def requests() -> Iterator[Any]:
            yield first
            yield from more
            time.sleep(3)  # keep the stream open while the server reads

        with pytest.raises(grpc.RpcError) as exc:
            for _ in s.Subscribe(requests(), metadata=md(small), timeout=10):
                pass
        return exc.value

    try:
        err = stream(SMALL["max_subscribe_credit"] + 1)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "limits.max_subscribe_credit" in (err.details() or "")
        assert field_of(err) == "credit"
        err = stream(60, 60)  # each grant alone fits; the credit held would not
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "limits.max_subscribe_credit" in (err.details() or "")
    finally:
        channel.close()


# ---- limits that mean what they say -------------------------------------------------------


def test_a_16_mib_header_is_refused_naming_the_field_and_nothing_is_written(
    small: LocalCluster,
) -> None:
    make_queue(small, "headed")
    channel, s = stub(small)
    try:
        big = queue_pb2.SendEntry(body=b"b", headers={"big": b"h" * (16 * MIB)})
        with pytest.raises(grpc.RpcError) as exc:
            s.Send(
                queue_pb2.SendRequest(queue="headed", entries=[big]), metadata=md(small), timeout=30
            )
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field_of(exc.value) == "entries[0].headers"
        # Headers count toward the size: a body just under the cap plus a header is over it.
        body = b"x" * (MIB - 10)
        near = queue_pb2.SendEntry(body=body, headers={"h": b"0123456789"})
        with pytest.raises(grpc.RpcError) as exc:
            s.Send(
                queue_pb2.SendRequest(queue="headed", entries=[near]),
                metadata=md(small),
                timeout=30,
            )
        assert field_of(exc.value) == "entries[0].headers"
        many = queue_pb2.SendEntry(body=b"b", headers={f"h{i}": b"" for i in range(65)})
        with pytest.raises(grpc.RpcError) as exc:
            s.Send(
                queue_pb2.SendRequest(queue="headed", entries=[many]),
                metadata=md(small),
                timeout=30,
            )
        assert "limits.max_headers" in (exc.value.details() or "")
    finally:
        channel.close()
    with small.client() as client:
        assert client.partitions("headed")[0].latest_offset == 0, "nothing written"


def test_a_queue_cannot_allow_more_than_the_node(small: LocalCluster) -> None:
    channel, s = stub(small)
    try:
        config = queue_pb2.QueueConfig(replication_factor=1, max_message_bytes=16 * MIB)
        with pytest.raises(grpc.RpcError) as exc:
            s.CreateQueue(
                queue_pb2.CreateQueueRequest(name="huge", config=config),
                metadata=md(small),
                timeout=30,
            )
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field_of(exc.value) == "config.max_message_bytes"
        assert "limits.max_message_bytes 1048576" in (exc.value.details() or "")
        make_queue(small, "modest")
        update = queue_pb2.UpdateQueueRequest(
            name="modest", config=queue_pb2.QueueConfig(max_message_bytes=2 * MIB)
        )
        with pytest.raises(grpc.RpcError) as exc:
            s.UpdateQueue(update, metadata=md(small), timeout=30)
        assert field_of(exc.value) == "config.max_message_bytes"
    finally:
        channel.close()


def test_an_81_character_queue_name_is_refused_at_the_front(small: LocalCluster) -> None:
    channel, s = stub(small)
    before = metric(small, "raftq_raft_entries_appended_total", queue="__metadata__")
    try:
        config = queue_pb2.QueueConfig(replication_factor=1)
        with pytest.raises(grpc.RpcError) as exc:
            s.CreateQueue(
                queue_pb2.CreateQueueRequest(name="q" * 81, config=config),
                metadata=md(small),
                timeout=30,
            )
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field_of(exc.value) == "name"
    finally:
        channel.close()
    after = metric(small, "raftq_raft_entries_appended_total", queue="__metadata__")
    assert before > 0 and after == before, "no metadata Raft entry for a bad name"
