"""observability/ on real sockets, in-process: the RPC metrics interceptor on a
real grpc.aio server, the HTTP listener on loopback."""

from __future__ import annotations

import asyncio
import json
import logging

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.observability import logs
from raft_queue.observability.http import HttpServer
from raft_queue.observability.metrics import RPC_DURATION, RPC_REQUESTS
from raft_queue.server.api.metrics import MetricsInterceptor

pytestmark = pytest.mark.integration

METHOD = "/raft_queue.v1.QueueService/Receive"
LABEL = "QueueService/Receive"


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logs.JsonFormatter("n9"))
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


async def _serve_and_call(capture: Capture) -> list[grpc.StatusCode]:
    log = logging.getLogger("raft_queue.test_interceptor")

    async def receive(
        request: queue_pb2.ReceiveRequest, context: grpc.aio.ServicerContext
    ) -> object:
        log.warning("serving %s", request.consumer)
        if request.consumer == "missing":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such queue")
        if request.consumer == "bug":
            raise RuntimeError("boom")
        return queue_pb2.ReceiveResponse()

    handler = grpc.method_handlers_generic_handler(
        "raft_queue.v1.QueueService",
        {"Receive": grpc.unary_unary_rpc_method_handler(
            receive, request_deserializer=queue_pb2.ReceiveRequest.FromString,
            response_serializer=queue_pb2.ReceiveResponse.SerializeToString)},
    )  # fmt: skip
    server = grpc.aio.server(interceptors=[MetricsInterceptor()])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    codes = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(
                METHOD,
                request_serializer=queue_pb2.ReceiveRequest.SerializeToString,
                response_deserializer=queue_pb2.ReceiveResponse.FromString,
            )
            for consumer in ("ok", "missing", "bug"):
                request = queue_pb2.ReceiveRequest(queue="orders", consumer=consumer)
                try:
                    await call(request, metadata=(("x-request-id", f"req-{consumer}"),))
                    codes.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code())
    finally:
        await server.stop(None)
    return codes


def _count(code: str) -> float:
    return RPC_REQUESTS.labels(LABEL, code)._value.get()


def test_calls_are_counted_by_code_timed_and_logged_with_their_context() -> None:
    before = {c: _count(c) for c in ("OK", "NOT_FOUND", "UNKNOWN")}
    capture = Capture()
    logging.getLogger("raft_queue.test_interceptor").addHandler(capture)
    logs._json_enabled = True  # as logs.setup(log_format="json") does
    try:
        codes = asyncio.run(_serve_and_call(capture))
    finally:
        logs._json_enabled = False
        logging.getLogger("raft_queue.test_interceptor").removeHandler(capture)
    assert codes == [grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNKNOWN]
    for code in ("OK", "NOT_FOUND", "UNKNOWN"):
        assert _count(code) == before[code] + 1, code
    hist = RPC_DURATION.labels(LABEL, "OK")
    assert sum(b.get() for b in hist._buckets) >= 1
    assert [(line["request_id"], line["queue"], line["node"]) for line in capture.lines] == [
        ("req-ok", "orders", "n9"), ("req-missing", "orders", "n9"), ("req-bug", "orders", "n9"),
    ]  # fmt: skip


async def _status() -> dict[str, object]:
    return {"node": "n1", "nodes": []}


def test_the_http_server_answers_on_a_real_socket() -> None:
    async def run() -> tuple[bytes, bytes]:
        srv = HttpServer(_status, lambda: {"ready": True}, lambda t: t == "good")
        port = await srv.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\n")
        denied = await reader.read()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /api/status HTTP/1.1\r\nAuthorization: Bearer good\r\n\r\n")
        allowed = await reader.read()
        await srv.close()
        return denied, allowed

    denied, allowed = asyncio.run(run())
    assert denied.startswith(b"HTTP/1.1 401")
    assert allowed.startswith(b"HTTP/1.1 200")
    assert json.loads(allowed.split(b"\r\n\r\n", 1)[1]) == {"node": "n1", "nodes": []}
