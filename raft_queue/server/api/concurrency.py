"""The concurrent-call guard: at most ``limits.max_concurrent_rpcs`` calls of
QueueService and AdminService in progress on this node.

A call counts from its start to its end, so a long poll (Receive with
wait_ms) and a Subscribe stream count for as long as they stay open. One
more is refused at once with RESOURCE_EXHAUSTED naming the limit (retryable:
the SDK backs off and tries again), counted as a ``limits`` rejection; it
never queues (grpc's own ``maximum_concurrent_rpcs`` answers with a text
that names nothing). NodeService (the cluster's own calls),
QueueService calls a node forwards (signed, checked by the node-identity
guard that runs before this one: the client's call on the node it reached
already counted),
health and reflection are exempt, so a node at its limit still serves the
cluster and its probes.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from raft_queue import errors
from raft_queue.config import Limits
from raft_queue.observability import metrics
from raft_queue.server.api.node_identity import FORWARDED_KEY
from raft_queue.server.api.status import abort_with

GUARDED = ("/raft_queue.v1.QueueService/", "/raft_queue.v1.AdminService/")


class ConcurrencyLimit(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, max_calls: int) -> None:
        self.max_calls = max_calls
        self.active = 0  # the event loop's thread only: no lock
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(GUARDED):
            return handler
        metadata = handler_call_details.invocation_metadata or ()
        if any(key == FORWARDED_KEY for key, _ in metadata):
            return handler  # a node's call (signed: api/node_identity.py)
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _refusal(self) -> errors.ResourceExhausted:
        metrics.count_rejection("limits")
        return errors.ResourceExhausted(
            f"{self.active} calls in progress on this node "
            f"(limits.max_concurrent_rpcs {self.max_calls}); retry later"
        )

    def _wrap(self, handler: Any) -> Any:
        kinds = (
            ("unary_unary", grpc.unary_unary_rpc_method_handler, False),
            ("stream_unary", grpc.stream_unary_rpc_method_handler, False),
            ("unary_stream", grpc.unary_stream_rpc_method_handler, True),
            ("stream_stream", grpc.stream_stream_rpc_method_handler, True),
        )
        for name, make, streams in kinds:
            behavior = getattr(handler, name)
            if behavior is not None:
                wrap = self._stream if streams else self._unary
                return make(
                    wrap(behavior),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

    def _unary(self, behavior: Any) -> Any:
        async def guarded(request: Any, context: Any) -> Any:
            if self.active >= self.max_calls:
                await abort_with(context, self._refusal())
            self.active += 1
            try:
                response = behavior(request, context)
                if inspect.isawaitable(response):
                    response = await response
                return response
            finally:
                self.active -= 1

        return guarded

    def _stream(self, behavior: Any) -> Any:
        async def guarded(request: Any, context: Any) -> AsyncIterator[Any]:
            if self.active >= self.max_calls:
                await abort_with(context, self._refusal())
            self.active += 1
            try:
                result = behavior(request, context)
                if hasattr(result, "__aiter__"):
                    async for item in result:
                        yield item
                elif inspect.isawaitable(result):
                    await result
                else:
                    for item in result:
                        yield item
            finally:
                self.active -= 1

        return guarded


def server_options(limits: Limits) -> list[tuple[str, int]]:
    """The gRPC server's options: requests and answers of at most
    ``limits.max_request_bytes`` (a larger one ends RESOURCE_EXHAUSTED, from
    grpc itself, before any handler runs)."""
    return [
        ("grpc.max_send_message_length", limits.max_request_bytes),
        ("grpc.max_receive_message_length", limits.max_request_bytes),
    ]
