"""The node-identity interceptor on a real in-process grpc.aio server
(loopback): NodeService and forwarded QueueService calls need a node
signature; everything else passes untouched; an insecure node checks nothing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import admin_pb2, node_pb2_grpc, queue_pb2, queue_pb2_grpc
from raft_queue.security.node_identity import NodeSigner, NodeVerifier
from raft_queue.server.api.node_identity import (
    FORWARDED_KEY,
    NODE_SERVICE,
    NodeIdentityInterceptor,
    NodeStub,
    SignedCall,
)

SECRET = b"\x09" * 32
C = grpc.StatusCode


class Nodes(node_pb2_grpc.NodeServiceServicer):
    async def Heartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        return admin_pb2.HeartbeatResponse(metadata_version=7)


class Queues(queue_pb2_grpc.QueueServiceServicer):
    async def GetQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        marked = any(k == FORWARDED_KEY for k, _ in context.invocation_metadata())
        return queue_pb2.QueueInfo(name=f"{request.name}:{'forwarded' if marked else 'client'}")


async def _run(secret: bytes | None, calls: Any) -> list[Any]:
    verifier = NodeVerifier(secret) if secret else None
    server = grpc.aio.server(interceptors=[NodeIdentityInterceptor(verifier)])
    node_pb2_grpc.add_NodeServiceServicer_to_server(Nodes(), server)
    queue_pb2_grpc.add_QueueServiceServicer_to_server(Queues(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            out = []
            for call in calls:
                try:
                    out.append(await call(channel))
                except grpc.aio.AioRpcError as err:
                    out.append(err.code())
            return out
    finally:
        await server.stop(None)


def _heartbeat(signer: NodeSigner | None, node: str) -> Any:
    async def call(channel: Any) -> Any:
        stub = NodeStub(channel, signer)
        answer = await stub.Heartbeat(admin_pb2.HeartbeatRequest(node=node), timeout=5)
        return answer.metadata_version

    return call


def _get_queue(signer: NodeSigner | None, marked: bool) -> Any:
    async def call(channel: Any) -> Any:
        path = "/raft_queue.v1.QueueService/GetQueue"
        get = SignedCall(channel, path, queue_pb2.QueueInfo, signer)
        md = ((FORWARDED_KEY, "1"),) if marked else ()
        return (await get(queue_pb2.GetQueueRequest(name="q"), timeout=5, metadata=md)).name

    return call


def test_node_calls_need_the_signature_of_the_node_they_name() -> None:
    n2, stranger = NodeSigner(SECRET, "n2"), NodeSigner(b"\x01" * 32, "n2")
    got = asyncio.run(
        _run(
            SECRET,
            [
                _heartbeat(n2, "n2"),
                _heartbeat(None, "n2"),
                _heartbeat(stranger, "n2"),
                _heartbeat(n2, "n3"),
            ],
        )
    )
    assert got == [7, C.UNAUTHENTICATED, C.UNAUTHENTICATED, C.UNAUTHENTICATED]


def test_a_stale_signature_is_refused() -> None:
    old = NodeSigner(SECRET, "n2")

    async def call(channel: Any) -> Any:
        data = admin_pb2.HeartbeatRequest(node="n2").SerializeToString()
        md = old.metadata(NODE_SERVICE + "Heartbeat", data, time.time() - 61)
        raw = channel.unary_unary(NODE_SERVICE + "Heartbeat")
        return await raw(data, metadata=md, timeout=5)

    assert asyncio.run(_run(SECRET, [call])) == [C.UNAUTHENTICATED]


def test_the_forwarded_marker_needs_a_node_signature_and_other_calls_pass() -> None:
    n1 = NodeSigner(SECRET, "n1")
    got = asyncio.run(
        _run(
            SECRET,
            [_get_queue(None, False), _get_queue(None, True), _get_queue(n1, True)],
        )
    )
    assert got == ["q:client", C.UNAUTHENTICATED, "q:forwarded"]


@pytest.mark.parametrize("signer", [None, NodeSigner(SECRET, "n2")])
def test_an_insecure_node_checks_nothing(signer: NodeSigner | None) -> None:
    got = asyncio.run(_run(None, [_heartbeat(signer, "n3"), _get_queue(signer, True)]))
    assert got == [7, "q:forwarded"]
