"""SendStream: Send on one long-lived bidi stream (issue 17).

A producer with one message in flight pays, per unary Send, a call set-up
and the door's four interceptors; on one stream per client and node it pays
them once (``python -m raft_queue.bench.grpc_floor``: a bare grpcio unary
round trip 0.62 ms p50 against 0.40 ms on an open stream, on this machine).

The security model is the unary Send's:

- **at open**: every interceptor runs as for any call (metrics, node
  identity, the token door, the concurrency guard); the door authenticates
  the caller (``AuthInterceptor._admit``, nothing is read before) and hands
  the servicer a ``StreamGate`` for this identity in ``SEND_GATE``. A
  stream that reaches the servicer without one is refused
  (UNAUTHENTICATED): nothing is trusted that the door did not admit.
- **per request**: ``StreamGate.admit`` checks the ``send`` grant on the
  request's queue (and ``manage`` when it asks to ``create``), after a
  metadata barrier when refused (as the door does), then charges the quota
  (clients only; OverQuota charges nothing); ``done`` counts usage.
- **the Send itself** is QueueService.Send's: ``AutoCreate`` then
  ``Sender.send`` (validation before anything is written, placement, dedup
  by request id, forwarding to the leader).

Each request is answered in order by one SendStreamResponse; a request that
fails gets the status a unary Send would end with (code, details, the
``raftq-*`` trailers: the field of an INVALID_ARGUMENT, the leader of a
NOT_LEADER) in ``error``, and the stream goes on. Requests on one stream are
handled one after the other (the SDK keeps one in flight per stream).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core import access
from raft_queue.observability import metrics
from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.server.api.metrics import count_request
from raft_queue.server.api.packed import send_entries
from raft_queue.server.api.status import status_logged
from raft_queue.server.api.usage import REQUEST_BYTES
from raft_queue.server.dataplane import sending
from raft_queue.server.peers import RemoteError

if TYPE_CHECKING:
    from raft_queue.security.identity import Identity
    from raft_queue.server.api.auth import AuthInterceptor
    from raft_queue.server.dataplane.autocreate import AutoCreate
    from raft_queue.server.dataplane.sending import Sender

METHOD = "/raft_queue.v1.QueueService/SendStream"
_SEND = "/raft_queue.v1.QueueService/Send"  # the quota and usage of a Send
SEND_LABEL = "QueueService/Send"  # the RPC metrics each request on the stream counts under

#: The open stream's gate, set by the door for the stream's task.
SEND_GATE: contextvars.ContextVar[StreamGate | None] = contextvars.ContextVar(
    "raftq_send_gate", default=None
)


class StreamGate:
    """The door's checks of each request on one admitted stream. The
    credential is judged again for every request (a few microseconds: a
    token hash and a grant lookup, what a unary Send pays), so a token or
    grant revoked while the stream is open stops its next request."""

    def __init__(
        self, door: AuthInterceptor, credential: tuple[str, Any], context: Any, metered: bool
    ) -> None:
        self.door = door
        self.authorization, self.cert = credential
        self.context = context
        self.meter = door.meter if metered else None
        self.principal = ""

    async def admit(self, request: Any) -> int:
        """Raise Unauthenticated / PermissionDenied / OverQuota (nothing
        charged) or Unavailable (grants not vouched for); else the request's
        size for ``done``."""
        queue = request.queue
        op, identity, refusal = self._judge(queue, request.create)
        if refusal is not None and self.door.barrier is not None:
            await self.door.barrier.vouch()  # a grant this view has not applied yet?
            op, identity, refusal = self._judge(queue, request.create)
        if refusal is not None:
            name = identity.name if identity is not None else ""
            result = "denied" if identity is not None else "unauthenticated"
            self.door._audit_line(name, op, METHOD, queue, result, self.context)
            if self.door.meter is not None:
                self.door.meter.rejected_auth(name, queue)
            metrics.count_rejection("auth")
            raise refusal
        assert identity is not None
        self.principal = identity.name
        if self.meter is None:
            return 0
        REQUEST_BYTES.set(request.ByteSize())
        return int(self.meter.before(identity.name, _SEND, request))

    def done(self, request: Any, response: Any, size: int) -> None:
        if self.meter is not None:
            self.meter.after(self.principal, _SEND, request, response, size)

    def _judge(
        self, queue: str, create: bool
    ) -> tuple[str, Identity | None, errors.QueueError | None]:
        """(operation checked, identity, refusal or None)."""
        identity, refusal = self.door._judge(self.authorization, self.cert, access.SEND, queue)
        # A Send that may create its queue is a manage operation too.
        if refusal is None and create and identity and not identity.allows(access.MANAGE, queue):
            return access.MANAGE, identity, _denied(identity, access.MANAGE, queue)
        return access.SEND, identity, refusal


def _denied(identity: Identity, op: str, queue: str) -> errors.QueueError:
    try:
        identity.check(op, queue)
    except errors.PermissionDenied as exc:
        return exc
    return errors.PermissionDenied(f"principal {identity.name!r} may not {op}")


def error_pb(exc: BaseException) -> Any:
    """The status a unary Send would end with, as a SendStreamError."""
    if isinstance(exc, RemoteError):  # a forwarded Send's status, passed on as is
        err = exc.err
        code, details = err.code(), err.details() or ""
        trailers = tuple(err.trailing_metadata() or ())
    else:
        code, details, trailers = status_logged(exc)
    pairs = {str(k): str(v) for k, v in trailers}
    return queue_pb2.SendStreamError(code=code.value[0], details=details, trailers=pairs)


class SendStreamServer:
    """QueueService.SendStream's loop, over the unary Send's parts."""

    def __init__(self, autocreate: AutoCreate, sender: Sender, barrier: Any) -> None:
        self.autocreate = autocreate
        self.sender = sender
        self.barrier = barrier

    async def serve(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        gate = SEND_GATE.get()
        if gate is None:  # the door did not admit this stream
            raise errors.Unauthenticated("SendStream: the stream was not authenticated")
        async for request in requests:
            yield await self.one(gate, request)

    async def one(self, gate: StreamGate, request: Any) -> Any:
        """One request, counted as a unary Send in the RPC metrics (its code, its time)."""
        _stage("s.intercept")  # a stream's request: no interceptors (stage_report)
        started = time.perf_counter()
        _stage("s.handler")
        answer = await self._answer(gate, request)
        code = answer.error.code if answer.HasField("error") else 0
        count_request(SEND_LABEL, code, time.perf_counter() - started)
        _stage("s.reply")
        return answer

    async def _answer(self, gate: StreamGate, request: Any) -> Any:
        try:
            size = await gate.admit(request)
            q = await self.autocreate.queue_for_send(request, False)
            results = await self.sender.send(q, send_entries(request), False, request.request_id)
            out = sending.response(results, request.results_as_runs)
        except errors.NotFound as exc:  # from a view that may be behind: vouch first
            try:
                why: BaseException = await self.barrier.vouch_miss(exc)
            except Exception as vouched:
                why = vouched
            return queue_pb2.SendStreamResponse(error=error_pb(why))
        except Exception as exc:
            return queue_pb2.SendStreamResponse(error=error_pb(exc))
        gate.done(request, out, size)
        return queue_pb2.SendStreamResponse(response=out)
