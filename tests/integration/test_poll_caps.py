"""The per-principal long-poll cap (``limits.max_long_polls_per_principal``,
docs/operations.md "Limits") on a real node process over real gRPC: a
principal at its cap is refused with RESOURCE_EXHAUSTED naming the limit
before anything is leased, whatever queues and consumer ids it uses, while
another principal is still served.
"""

from __future__ import annotations

import asyncio
import re
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

CAP = 3
QUEUES = [f"pc{i}" for i in range(CAP + 1)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base: Path = tmp_path_factory.mktemp("poll-caps")
    # The per-partition and per-consumer bounds stay far above what the test
    # holds: only the per-principal cap can refuse.
    limits = {"max_long_polls_per_principal": CAP, "max_standing_polls_per_consumer": 64}
    with LocalCluster(base / "c", nodes=1, limits=limits) as c:
        c.start()
        c.wait_ready(60)
        yield c


def tokens(c: LocalCluster) -> dict[str, str]:
    with c.client() as admin:
        for q in QUEUES:
            admin.create_queue(q, partitions=1, replication_factor=1)
            wait_for(lambda q=q: admin.partitions(q)[0].leader != "", timeout_s=30)
        out = {}
        for name in ("alice", "bob"):
            out[name] = str(admin.create_principal(name).token)
            for q in QUEUES:
                admin.add_grant(name, q, ["send", "receive", "read"])
        return out


def receives_in_flight(c: LocalCluster) -> float:
    text = urllib.request.urlopen(c.specs[0].metrics_url + "/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"raftq_rpc_in_flight\{(.*)\} (\S+)$", line)
        if m and 'method="QueueService/Receive"' in m.group(1):
            total += float(m.group(2))
    return total


def test_long_polls_over_the_principal_cap_are_refused_before_anything_is_leased(
    cluster: LocalCluster,
) -> None:
    tok = tokens(cluster)

    def md(who: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {tok[who]}"),)

    async def run() -> dict[str, Any]:
        channel = grpc.aio.insecure_channel(cluster.specs[0].address)
        s = queue_pb2_grpc.QueueServiceStub(channel)
        # Alice's CAP long polls on CAP empty queues, each with its own consumer
        # id: no partition or consumer bound is near.
        held = [
            s.Receive(
                queue_pb2.ReceiveRequest(queue=QUEUES[i], wait_ms=15_000, consumer=f"a{i}"),
                metadata=md("alice"),
                timeout=30,
            )
            for i in range(CAP)
        ]
        tasks = [asyncio.ensure_future(call) for call in held]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while receives_in_flight(cluster) < CAP and loop.time() < deadline:
            await asyncio.sleep(0.1)
        assert receives_in_flight(cluster) >= CAP, "alice's polls did not start"
        last = QUEUES[CAP]  # one message waits there
        await s.Send(
            queue_pb2.SendRequest(queue=last, entries=[queue_pb2.SendEntry(body=b"m")]),
            metadata=md("bob"),
            timeout=10,
        )
        out: dict[str, Any] = {}
        try:
            await s.Receive(
                queue_pb2.ReceiveRequest(queue=last, wait_ms=2000, consumer="a-new"),
                metadata=md("alice"),
                timeout=10,
            )
            out["refused"] = None
        except grpc.aio.AioRpcError as err:
            out["refused"] = err
        # Bob is another principal: served, and the message was never leased.
        out["bob"] = await s.Receive(
            queue_pb2.ReceiveRequest(queue=last, wait_ms=2000), metadata=md("bob"), timeout=10
        )
        # Alice without wait_ms is not a long poll: served (nothing left: empty).
        out["alice_now"] = await s.Receive(
            queue_pb2.ReceiveRequest(queue=last), metadata=md("alice"), timeout=10
        )
        for call in held:
            call.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Her polls ended: she may poll again.
        await s.Send(
            queue_pb2.SendRequest(queue=last, entries=[queue_pb2.SendEntry(body=b"n")]),
            metadata=md("bob"),
            timeout=10,
        )
        out["alice_again"] = await s.Receive(
            queue_pb2.ReceiveRequest(queue=last, wait_ms=5000), metadata=md("alice"), timeout=10
        )
        await channel.close()
        return out

    out = asyncio.run(run())
    refused = out["refused"]
    assert refused is not None, "a long poll over the principal's cap must be refused"
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limits.max_long_polls_per_principal" in (refused.details() or "")
    assert "alice" in (refused.details() or "")
    got = out["bob"].messages
    assert [m.body for m in got] == [b"m"]
    assert got[0].receive_count == 1, "the refused poll must not have leased it"
    assert list(out["alice_now"].messages) == []
    assert [m.body for m in out["alice_again"].messages] == [b"n"]
