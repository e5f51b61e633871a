"""A cancelled forwarded call leaks nothing and still cancels the remote
handler (server/callcancel.py, grpc#43360; docs/reliability.md, "Soak").

Real grpc.aio calls over loopback to a server in another process (so the
glibc heap measured is the client's alone): each call is started, the task
awaiting it is cancelled while the server still sleeps, and glibc's bytes in
use (mallinfo2) are compared before and after. Bytes per call, not time.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from raft_queue.observability.memtrace import malloc_heap
from raft_queue.server.callcancel import settle

CALLS = 1_000
WARMUP = 200

_SERVER = textwrap.dedent(
    """
    import asyncio, grpc
    cancelled = 0
    async def slow(request, context):
        global cancelled
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return b""
    async def count(request, context):
        return str(cancelled).encode()
    async def main():
        server = grpc.aio.server()
        handlers = {
            "Slow": grpc.unary_unary_rpc_method_handler(slow),
            "Count": grpc.unary_unary_rpc_method_handler(count),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()
    asyncio.run(main())
    """
)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    if not malloc_heap():
        pytest.skip("not glibc: no mallinfo2")
    proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield f"127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.kill()
        proc.wait()


async def _cancel_one(channel: grpc.aio.Channel, wrap: Any) -> None:
    call = channel.unary_unary("/t.S/Slow")(b"", timeout=30)
    task = asyncio.ensure_future(wrap(call))
    await asyncio.sleep(0.002)  # the request is out, the server sleeps
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _plain(call: Any) -> Any:
    return await call  # what Peers.forward did before settle


async def _bytes_per_cancelled_call(address: str, wrap: Any) -> tuple[float, int]:
    async with grpc.aio.insecure_channel(address) as channel:
        for _ in range(WARMUP):
            await _cancel_one(channel, wrap)
        await asyncio.sleep(0.2)
        gc.collect()
        before = malloc_heap()["in_use"]
        for _ in range(CALLS):
            await _cancel_one(channel, wrap)
        await asyncio.sleep(0.2)  # Core finishes the last cancellations
        gc.collect()
        grown = (malloc_heap()["in_use"] - before) / CALLS
        await asyncio.sleep(0.5)
        count = await channel.unary_unary("/t.S/Count")(b"", timeout=10)
    return grown, int(count)


def test_settle_cancels_without_leaking(server: str) -> None:
    grown, remote_cancelled = asyncio.run(_bytes_per_cancelled_call(server, settle))
    assert grown < 100, f"{grown:.0f} bytes of glibc heap left per cancelled call"
    # The remote handler is cancelled as before (a forwarded long poll gives
    # its leases back when its caller goes away). A call cancelled before its
    # handler started is never counted there: most, not all (1,145 of 1,200).
    assert remote_cancelled >= 0.8 * (WARMUP + CALLS)


def test_grpc_still_leaks_when_the_awaiting_task_is_cancelled(server: str) -> None:
    # The control: grpc#43360 is still there (~960 bytes per call in grpcio
    # 1.85.3). If this fails, grpc fixed it and settle can go.
    grown, _ = asyncio.run(_bytes_per_cancelled_call(server, _plain))
    assert grown > 500, f"only {grown:.0f} bytes per call: grpc#43360 fixed?"
