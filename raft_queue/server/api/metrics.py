"""The RPC metrics interceptor: every call's method, status code and latency.

``grpc.aio.server(interceptors=[..., MetricsInterceptor()])``: independent
of any other interceptor (auth, ...) in the list. Per call it counts
``raftq_rpc_requests_total{method,code}``, observes
``raftq_rpc_duration_seconds{method,code}`` once, and keeps
``raftq_rpc_in_flight{method}``. The method label is ``Service/Method``
(bounded by the protos). With JSON logs it also sets the log context
(request id, queue, partition: observability/logs.py) for the task serving
the call.

The code is what the handler's context holds when it returns or raises
(``abort_with`` sets it), OK when it returned without one, CANCELLED when the
client went away, UNKNOWN for anything else.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from raft_queue.observability import logs
from raft_queue.observability.metrics import RPC_DURATION, RPC_IN_FLIGHT, RPC_REQUESTS
from raft_queue.observability.stagetrace import mark as _stage

REQUEST_ID_KEY = "x-request-id"  # taken from the caller's metadata when present


def _code_name(context: Any, exc: BaseException | None) -> str:
    code = context.code()
    if code is None or isinstance(code, int):  # grpc.aio may keep the raw int
        if isinstance(exc, asyncio.CancelledError):
            return "CANCELLED"
        if exc is not None and not isinstance(exc, grpc.aio.AbortError):
            return "UNKNOWN"
        if isinstance(code, int):
            return str(_INT_CODES.get(code, "UNKNOWN"))
        return "OK"
    return str(code.name)


_INT_CODES = {c.value[0]: c.name for c in grpc.StatusCode}


# Bound children per method and (method, code): labels() takes a lock and
# builds a key each call; a dict probe does not.
_GAUGES: dict[str, Any] = {}
_DONE: dict[tuple[str, str], tuple[Any, Any]] = {}


def _finished(method: str, code: str) -> tuple[Any, Any]:
    pair = _DONE.get((method, code))
    if pair is None:
        pair = (RPC_REQUESTS.labels(method, code), RPC_DURATION.labels(method, code))
        _DONE[(method, code)] = pair
    return pair


def count_request(method: str, code: int, seconds: float) -> None:
    """One request that rode a stream (SendStream's sends), counted as its
    unary method would be (``method``: ``QueueService/Send``; ``code``: the
    status code's number, 0 for OK), so rates, errors and latency read the
    same whichever way the SDK sent it."""
    counter, histogram = _finished(method, str(_INT_CODES.get(code, "UNKNOWN")))
    counter.inc()
    histogram.observe(seconds)


class _Call:
    """One call's bookkeeping (start time, in-flight gauge)."""

    __slots__ = ("gauge", "method", "start")

    def __init__(self, method: str) -> None:
        self.method = method
        gauge = _GAUGES.get(method)
        if gauge is None:
            gauge = _GAUGES[method] = RPC_IN_FLIGHT.labels(method)
        self.gauge = gauge
        gauge.inc()
        self.start = time.perf_counter()

    def done(self, context: Any, exc: BaseException | None) -> None:
        self.gauge.dec()
        counter, histogram = _finished(self.method, _code_name(context, exc))
        counter.inc()
        histogram.observe(time.perf_counter() - self.start)


def _set_log_context(request: Any, context: Any) -> None:
    rid = ""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY:
            rid = str(value)[:64]
    logs.request_id.set(rid or os.urandom(6).hex())
    q = getattr(request, "queue", None)
    if isinstance(q, str) and q:
        logs.queue.set(q)
    part = getattr(request, "partition", None)
    if isinstance(part, int):
        logs.partition.set(part)


class MetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        # method -> (the handler grpc gave, our wrapper of it): built once per method.
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        _stage("s.intercept")
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        full = handler_call_details.method
        cached = self._wrapped.get(full)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = _wrap(handler, _method_label(full))
        self._wrapped[full] = (handler, wrapped)
        return wrapped


def _method_label(full: str) -> str:
    """``/raft_queue.v1.QueueService/Send`` -> ``QueueService/Send``."""
    parts = full.rsplit("/", 2)
    return f"{parts[-2].rsplit('.', 1)[-1]}/{parts[-1]}" if len(parts) >= 2 else "unknown"


def _wrap(handler: Any, method: str) -> Any:
    if handler.unary_unary is not None:
        return _unary(handler, handler.unary_unary, method, grpc.unary_unary_rpc_method_handler)
    if handler.stream_unary is not None:
        return _unary(handler, handler.stream_unary, method, grpc.stream_unary_rpc_method_handler)
    if handler.unary_stream is not None:
        return _stream(handler, handler.unary_stream, method, grpc.unary_stream_rpc_method_handler)
    return _stream(handler, handler.stream_stream, method, grpc.stream_stream_rpc_method_handler)


def _unary(handler: Any, behavior: Any, method: str, make: Any) -> Any:
    async def wrapped(request: Any, context: Any) -> Any:
        call = _Call(method)
        if logs.json_enabled():
            _set_log_context(request, context)
        try:
            response = behavior(request, context)
            if inspect.isawaitable(response):
                response = await response
        except BaseException as exc:
            call.done(context, exc)
            raise
        call.done(context, None)
        return response

    return make(
        wrapped,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _stream(handler: Any, behavior: Any, method: str, make: Any) -> Any:
    async def wrapped(request: Any, context: Any) -> AsyncIterator[Any]:
        call = _Call(method)
        if logs.json_enabled():
            _set_log_context(request, context)
        try:
            result = behavior(request, context)
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield item
            elif inspect.isawaitable(result):  # a handler writing through context.write
                await result
            else:
                for item in result:
                    yield item
        except BaseException as exc:
            call.done(context, exc)
            raise
        call.done(context, None)

    return make(
        wrapped,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
