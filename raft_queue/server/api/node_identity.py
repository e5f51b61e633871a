"""Node identity on the gRPC door: the server interceptor that refuses
unsigned node-to-node calls, and the signed calls a node makes.

Guarded calls:

- every ``NodeService`` method;
- a ``QueueService`` call carrying the forwarded marker (``raftq-forwarded``),
  which tells the receiving node to serve it without another hop: only a
  node may send it, so the marker needs a node signature too.

A guarded call without a valid, fresh signature (security/node_identity.py)
ends with UNAUTHENTICATED before its handler runs, and a Heartbeat must name
the node that signed it (n2 cannot heartbeat as n3). Other calls pass
untouched and unread: the interceptor costs the hot path one metadata scan.

The signature covers the exact request bytes, so the guarded handler is
rebuilt to take the raw bytes, check them, then deserialize: nothing is
serialized twice. On the sending side ``SignedCall`` serializes once, signs
those bytes and sends them as they are.

With ``security.insecure = true`` there is no key: nothing is signed and
nothing is checked (the node warns at every start).

Independent of the client-token interceptor (it guards QueueService and
AdminService for clients); both go in ``grpc.aio.server(interceptors=[...])``.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import node_pb2, queue_pb2
from raft_queue.security.node_identity import (
    VERIFIED_NODE,
    NodeAuthError,
    NodeSigner,
    NodeVerifier,
)
from raft_queue.server.api.status import abort_with

log = logging.getLogger(__name__)

FORWARDED_KEY = "raftq-forwarded"
NODE_SERVICE = "/" + node_pb2.DESCRIPTOR.services_by_name["NodeService"].full_name + "/"
QUEUE_SERVICE = "/" + queue_pb2.DESCRIPTOR.services_by_name["QueueService"].full_name + "/"

# Requests whose field must equal the signing node's id.
IDENTITY_FIELDS = {NODE_SERVICE + "Heartbeat": "node", NODE_SERVICE + "FlushUsage": "node"}

Clock = Callable[[], float]


def guarded(method: str, metadata: Sequence[tuple[str, Any]]) -> bool:
    """Whether a call needs a node signature."""
    if method.startswith(NODE_SERVICE):
        return True
    return method.startswith(QUEUE_SERVICE) and any(k == FORWARDED_KEY for k, _ in metadata)


class NodeIdentityInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses guarded calls without a valid node signature (UNAUTHENTICATED)."""

    def __init__(self, verifier: NodeVerifier | None, clock: Clock = time.time) -> None:
        self._verifier = verifier
        self._clock = clock

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        metadata = tuple(details.invocation_metadata or ())
        if self._verifier is None or handler is None or not guarded(details.method, metadata):
            return handler
        if handler.unary_unary is None:  # no node call streams
            return _refusal(handler, f"{details.method} takes no node calls")
        return _checked(handler, self._verifier, details.method, metadata, self._clock)


def _refusal(handler: grpc.RpcMethodHandler, reason: str) -> grpc.RpcMethodHandler:
    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await abort_with(context, errors.Unauthenticated(reason))

    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.stream_stream_rpc_method_handler(refuse)


def _checked(
    handler: grpc.RpcMethodHandler,
    verifier: NodeVerifier,
    method: str,
    metadata: Sequence[tuple[str, Any]],
    clock: Clock,
) -> grpc.RpcMethodHandler:
    """``handler`` taking raw bytes: signature checked, then deserialized."""
    inner, deserialize = handler.unary_unary, handler.request_deserializer
    identity_field = IDENTITY_FIELDS.get(method)

    async def behavior(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            node_id = verifier.verify(metadata, method, raw, clock())
            request = deserialize(raw) if deserialize is not None else raw
            if identity_field and getattr(request, identity_field) != node_id:
                raise NodeAuthError(f"node {node_id!r} signed a call naming another node")
            VERIFIED_NODE.set(node_id)
        except NodeAuthError as exc:
            log.warning("refused %s from %s: %s", method, context.peer(), exc.reason)
            await abort_with(context, errors.Unauthenticated(exc.reason))
        except DecodeError:
            await abort_with(context, errors.InvalidArgument("request", "undecodable"))
        except Exception as exc:  # a bug here: INTERNAL with an error id, no text
            await abort_with(context, exc)
        result = inner(request, context)
        return await result if inspect.isawaitable(result) else result

    return grpc.unary_unary_rpc_method_handler(
        behavior, request_deserializer=None, response_serializer=handler.response_serializer
    )


class SignedCall:
    """One unary method of one channel, called like a generated stub's
    method; the request is serialized once and signed by ``signer`` (when
    there is one: an insecure node sends it unsigned)."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        path: str,
        response_cls: Any,
        signer: NodeSigner | None,
        clock: Clock = time.time,
    ) -> None:
        self._call = channel.unary_unary(
            path, request_serializer=None, response_deserializer=response_cls.FromString
        )
        self._path, self._signer, self._clock = path, signer, clock

    def __call__(
        self,
        request: Any,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> Any:
        data = request.SerializeToString()
        if self._signer is not None:
            metadata = (*metadata, *self._signer.metadata(self._path, data, self._clock()))
        return self._call(data, timeout=timeout, metadata=tuple(metadata))


def response_class(service: Any, method: str) -> Any:
    """The generated response class of ``method`` of ``service`` (a
    ServiceDescriptor of a generated ``*_pb2`` module)."""
    return GetMessageClass(service.methods_by_name[method].output_type)


class NodeStub:
    """NodeService of one node, every call signed: ``stub.Heartbeat(req, timeout=3)``."""

    def __init__(
        self, channel: grpc.aio.Channel, signer: NodeSigner | None, clock: Clock = time.time
    ) -> None:
        service = node_pb2.DESCRIPTOR.services_by_name["NodeService"]
        for name in service.methods_by_name:
            call = SignedCall(
                channel, NODE_SERVICE + name, response_class(service, name), signer, clock
            )
            setattr(self, name, call)

    def __getattr__(self, name: str) -> Any:  # for mypy: methods are set in __init__
        raise AttributeError(name)
