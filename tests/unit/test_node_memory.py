"""A node's memory stays bounded: the soak's leak (docs/reliability.md, "Soak").

grpc.aio's server leaves every call in a reference cycle that only the cyclic
garbage collector frees. ``tune_gc`` freezes what a started node holds and
sets how many net allocations pass between young collections: that number
bounds the dead calls a node carries. At 50,000 (the old setting) a node
under the soak's load kept ~37,000 dead objects for ~110 s at a time and its
RSS grew 1.7 MiB a minute. These tests count objects, not seconds or bytes:
real calls through a real in-process grpc.aio server (loopback), then how
much garbage a full collection still finds.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from raft_queue.observability import memtrace
from raft_queue.server.main import GC_GEN0_THRESHOLD, tune_gc

CALLS = 3_000
# At least 5 objects per call go to the cyclic collector (below), so 3,000
# calls leave >= 15,000 without a young collection in between.
MOST_GARBAGE_LEFT = 10_000


async def _calls(n: int) -> None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for _ in range(n):
                await stub.Check(health_pb2.HealthCheckRequest())
    finally:
        await server.stop(None)


@pytest.fixture
def node_gc() -> Iterator[None]:
    """The GC as a serving node has it (tune_gc); put back afterwards."""
    before = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.enable()
    tune_gc()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        if not was_enabled:
            gc.disable()


def test_a_grpc_aio_call_is_cyclic_garbage() -> None:
    """Why a collection is needed at all: with the collector off, every call
    leaves objects that only it frees (grpc 1.85: 5 per call). If this fails,
    grpc.aio no longer makes cycles and GC_GEN0_THRESHOLD may be revisited."""
    gc.collect()
    gc.disable()
    try:
        asyncio.run(_calls(500))
        found = gc.collect()
    finally:
        gc.enable()
    assert found >= 5 * 500


def test_a_serving_node_keeps_little_dead_grpc_garbage(node_gc: None) -> None:
    assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD
    asyncio.run(_calls(CALLS))
    left = gc.collect()
    assert left <= MOST_GARBAGE_LEFT, (
        f"{left} dead objects after {CALLS} calls: young collections come too "
        f"rarely (gen0 threshold {gc.get_threshold()[0]})"
    )


def test_memtrace_reports_rss_heap_and_gc(caplog: pytest.LogCaptureFixture) -> None:
    """The debug switch's report (RAFTQ_TRACEMALLOC), without tracemalloc."""
    trace = memtrace.MemTrace(period_s=3600, frames=0, referrers=("_HandlerCallDetails",))
    with caplog.at_level(logging.WARNING, logger="raft_queue.memtrace"):
        trace.report()  # the first report is the baseline
        asyncio.run(_calls(20))
        trace.report()
    text = caplog.text
    assert "memtrace rss rss=" in text and "anon=" in text and "file=" in text
    assert "memtrace gen counts=" in text
    assert "memtrace gc " in text
    assert "memtrace held _HandlerCallDetails" in text
    assert memtrace.proc_status()["VmRSS"] > 0
