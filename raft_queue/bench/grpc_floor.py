"""The latency floor of our stack on this machine (issue 17): what one W1
send cannot go below, whatever raft_queue does between the wire and the disk.

Three micro-benchmarks, each one request in flight, ``--n`` round trips,
p50/p99 in ms:

- ``unary``: a ``grpc.aio`` server in its own process (as a node is), and a
  synchronous grpcio client calling one unary method per request, as the
  SDK's ``Client`` does (``channel.unary_unary``, timeout and metadata given);
- ``stream``: the same server answering on one long-lived bidi stream
  (request iterator fed through a queue, answers read with ``next``), the
  shape a streaming Send takes in the sync SDK;
- ``fdatasync``: append 100 bytes to a file and ``os.fdatasync`` it, in the
  directory given (the disk the nodes' journals live on).

Both gRPC benchmarks carry a real ``SendRequest`` / ``SendResponse`` of one
100-byte entry and a bearer token in the metadata, and no interceptor: they
are the floor under our door, not a copy of it. Modes are interleaved in
``--rounds`` rounds in the same minutes and the medians of the rounds'
percentiles are printed (the machine is shared; single runs are noise).

    python -m raft_queue.bench.grpc_floor --rounds 3 --n 2000 --dir /tmp
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.bench.measure import print_round_medians, round_medians

_UNARY = "/floor.Echo/Unary"
_STREAM = "/floor.Echo/Stream"
_METADATA = (("authorization", "Bearer " + "x" * 40),)


# ---- the server (its own process) ----------------------------------------------------


def _answer(request: Any) -> Any:
    return queue_pb2.SendResponse(
        results=[queue_pb2.SendResult(partition=0, offset=len(request.entries))]
    )


async def _serve(port: int) -> None:
    async def unary(request: Any, context: Any) -> Any:
        return _answer(request)

    async def stream(requests: Any, context: Any) -> Any:
        async for request in requests:
            yield _answer(request)

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=queue_pb2.SendRequest.FromString,
            response_serializer=queue_pb2.SendResponse.SerializeToString,
        ),
        "Stream": grpc.stream_stream_rpc_method_handler(
            stream,
            request_deserializer=queue_pb2.SendRequest.FromString,
            response_serializer=queue_pb2.SendResponse.SerializeToString,
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Echo", handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


def start_server(port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "raft_queue.bench.grpc_floor", "--serve", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the echo server did not start")
    return proc


# ---- the client side ---------------------------------------------------------------------


def _request() -> Any:
    return queue_pb2.SendRequest(
        queue="floor", entries=[queue_pb2.SendEntry(body=b"x" * 100)], request_id=os.urandom(16)
    )


def _timed(n: int, once: Callable[[], object]) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        once()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def bench_unary(channel: grpc.Channel, n: int) -> list[float]:
    call = channel.unary_unary(
        _UNARY,
        request_serializer=queue_pb2.SendRequest.SerializeToString,
        response_deserializer=queue_pb2.SendResponse.FromString,
    )
    return _timed(n, lambda: call(_request(), timeout=10, metadata=_METADATA))


def bench_stream(channel: grpc.Channel, n: int) -> list[float]:
    call = channel.stream_stream(
        _STREAM,
        request_serializer=queue_pb2.SendRequest.SerializeToString,
        response_deserializer=queue_pb2.SendResponse.FromString,
    )
    outbox: queue.Queue[Any] = queue.Queue()

    def requests() -> Iterator[Any]:
        while (item := outbox.get()) is not None:
            yield item

    answers = call(requests(), metadata=_METADATA)

    def once() -> object:
        outbox.put(_request())
        return next(answers)

    once()  # the stream is open before the clock starts
    try:
        return _timed(n, once)
    finally:
        outbox.put(None)
        answers.cancel()


def bench_fdatasync(directory: str, n: int) -> list[float]:
    fd, path = tempfile.mkstemp(prefix="floor-", dir=directory)
    try:
        record = b"x" * 100

        def once() -> None:
            os.write(fd, record)
            os.fdatasync(fd)

        return _timed(n, once)
    finally:
        os.close(fd)
        os.unlink(path)


def run(rounds: int, n: int, directory: str, port: int) -> dict[str, dict[str, Any]]:
    server = start_server(port)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        bench_unary(channel, 200)  # warm: connection, first-call paths
        per_mode: dict[str, list[list[float]]] = {"unary": [], "stream": [], "fdatasync": []}
        for _ in range(rounds):
            for mode in ("unary", "stream", "fdatasync"):
                if mode == "unary":
                    samples = bench_unary(channel, n)
                elif mode == "stream":
                    samples = bench_stream(channel, n)
                else:
                    samples = bench_fdatasync(directory, n)
                per_mode[mode].append(samples)
    finally:
        channel.close()
        server.kill()
        server.wait()
    return round_medians(per_mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raft_queue.bench.grpc_floor")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=2000, help="round trips per mode and round")
    parser.add_argument("--dir", default=".", help="where to fdatasync (the journals' disk)")
    parser.add_argument("--port", type=int, default=17590)
    parser.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.serve))
        return 0
    result = run(args.rounds, args.n, args.dir, args.port)
    print_round_medians(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
