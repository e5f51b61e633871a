"""What the API door costs per call (docs/benchmarks.md, "What authentication
costs"): one process runs a grpc.aio server with a trivial Send servicer and a
client, alternately without and with ``AuthInterceptor``, and reports the CPU
time per call of each (process CPU, so other processes' load matters less than
for wall time). ``python -m raft_queue.bench.door_cost [CALLS] [ROUNDS]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.core import metadata as meta
from raft_queue.security.audit import AuditLog
from raft_queue.security.identity import Authenticator
from raft_queue.security.tokens import new_token, token_hash
from raft_queue.server.api.auth import AuthInterceptor


class _Trivial(queue_pb2_grpc.QueueServiceServicer):
    async def Send(self, request: Any, context: Any) -> Any:  # noqa: N802
        return queue_pb2.SendResponse()


async def _round(door: bool, calls: int, token: str, view: meta.MetadataMachine) -> float:
    """CPU microseconds per Send call, with or without the door."""
    interceptors = []
    if door:
        audit = AuditLog(Path(tempfile.mkdtemp(prefix="raftq-door-")) / "audit.log")
        interceptors = [AuthInterceptor(Authenticator(lambda: view), audit)]
    server = grpc.aio.server(interceptors=interceptors)
    queue_pb2_grpc.add_QueueServiceServicer_to_server(_Trivial(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    metadata = (("authorization", f"Bearer {token}"),)
    entry = queue_pb2.SendEntry(body=b"x" * 100)
    request = queue_pb2.SendRequest(queue="orders.eu", entries=[entry])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        for _ in range(200):  # warm up: channel, caches
            await stub.Send(request, metadata=metadata)
        start = time.process_time()
        for _ in range(calls):
            await stub.Send(request, metadata=metadata)
        spent = time.process_time() - start
    await server.stop(None)
    return spent / calls * 1e6


async def measure(calls: int = 3000, rounds: int = 7) -> dict[str, float]:
    view = meta.MetadataMachine()
    token = new_token()
    view.apply(meta.CreatePrincipal("bench", token_hash(token)))
    view.apply(meta.GrantAccess("bench", "orders.*", ("send",)))
    without, with_door = [], []
    for _ in range(rounds):
        without.append(await _round(False, calls, token, view))
        with_door.append(await _round(True, calls, token, view))
    paired = [b - a for a, b in zip(without, with_door, strict=True)]
    return {
        "without_us": statistics.median(without),
        "with_us": statistics.median(with_door),
        "door_us": statistics.median(paired),
    }


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    calls, rounds = (int(args[0]) if args else 3000), (int(args[1]) if len(args) > 1 else 7)
    result = asyncio.run(measure(calls, rounds))
    print(
        f"CPU per call: {result['without_us']:.1f} us without the door, "
        f"{result['with_us']:.1f} us with it; door: {result['door_us']:.1f} us (paired median)"
    )


if __name__ == "__main__":
    main()
