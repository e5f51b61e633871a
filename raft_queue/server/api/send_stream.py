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
RECEIVE_METHOD = "/raft_queue.v1.QueueService/ReceiveStream"
_SEND = "/raft_queue.v1.QueueService/Send"  # the quota and usage of a Send
_RECEIVE = "/raft_queue.v1.QueueService/Receive"  # the usage of a Receive
SEND_LABEL = "QueueService/Send"  # the RPC metrics each request on the stream counts under

#: The open stream's gate, set by the door for the stream's task (SendStream
#: and ReceiveStream: server/api/receive_stream.py).
SEND_GATE: contextvars.ContextVar[StreamGate | None] = contextvars.ContextVar(
    "raftq_send_gate", default=None
)

#: What a gated stream's requests are judged and metered as: (operation,
#: the stream's method for the audit log, the unary method for quota/usage).
GATED_STREAMS: dict[str, tuple[str, str, str]] = {
    METHOD: (access.SEND, METHOD, _SEND),
    RECEIVE_METHOD: (access.RECEIVE, RECEIVE_METHOD, _RECEIVE),
}


class StreamGate:
    """The door's checks of each request on one admitted stream. The
    credential is judged again for every request (a few microseconds: a
    token hash and a grant lookup, what a unary Send pays), so a token or
    grant revoked while the stream is open stops its next request."""

    def __init__(
        self,
        door: AuthInterceptor,
        credential: tuple[str, Any],
        context: Any,
        metered: bool,
        method: str = METHOD,
    ) -> None:
        self.door = door
        self.authorization, self.cert = credential
        self.context = context
        self.meter = door.meter if metered else None
        self.principal = ""
        self.op, self.method, self.metered_as = GATED_STREAMS[method]

    async def admit(self, request: Any) -> int:
        """Raise Unauthenticated / PermissionDenied / OverQuota (nothing
        charged) or Unavailable (grants not vouched for); else the request's
        size for ``done``."""
        queue = request.queue
        create = self.op == access.SEND and request.create
        op, identity, refusal = self._judge(queue, create)
        if refusal is not None and self.door.barrier is not None:
            await self.door.barrier.vouch()  # a grant this view has not applied yet?
            op, identity, refusal = self._judge(queue, create)
        if refusal is not None:
            name = identity.name if identity is not None else ""
            result = "denied" if identity is not None else "unauthenticated"
            self.door._audit_line(name, op, self.method, queue, result, self.context)
            if self.door.meter is not None:
                self.door.meter.rejected_auth(name, queue)
            metrics.count_rejection("auth")
            raise refusal
        assert identity is not None
        self.principal = identity.name
        if self.meter is None:
            return 0
        REQUEST_BYTES.set(request.ByteSize())
        return int(self.meter.before(identity.name, self.metered_as, request))

    def done(self, request: Any, response: Any, size: int) -> None:
        if self.meter is not None:  # counted here: the stream's serializer is not the meter's
            self.meter.after(self.principal, self.metered_as, request, response, size, False)

    def _judge(
        self, queue: str, create: bool
    ) -> tuple[str, Identity | None, errors.QueueError | None]:
        """(operation checked, identity, refusal or None)."""
        identity, refusal = self.door._judge(self.authorization, self.cert, self.op, queue)
        # A Send that may create its queue is a manage operation too.
        if refusal is None and create and identity and not identity.allows(access.MANAGE, queue):
            return access.MANAGE, identity, _denied(identity, access.MANAGE, queue)
        return self.op, identity, refusal


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


class GatedStream:
    """The loop of a stream the door gated (SendStream, ReceiveStream): each
    request judged by the gate, handled as its unary call, answered in order
    (a failure as data, the stream going on) and counted in the RPC metrics
    as that unary call (its code, its time)."""

    name = ""  # the RPC, for the refusal of a stream the door did not admit
    label = ""  # the unary call's RPC metrics label
    answer_type: Any = None  # SendStreamResponse, ReceiveStreamResponse

    def __init__(self, barrier: Any) -> None:
        self.barrier = barrier

    async def handle(self, request: Any) -> Any:
        """The unary call's response to ``request`` (judged and admitted)."""
        raise NotImplementedError

    async def serve(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        gate = SEND_GATE.get()
        if gate is None:  # the door did not admit this stream
            raise errors.Unauthenticated(f"{self.name}: the stream was not authenticated")
        async for request in requests:
            yield await self.one(gate, request)

    async def one(self, gate: StreamGate, request: Any) -> Any:
        started = time.perf_counter()
        answer = await self._answer(gate, request)
        code = answer.error.code if answer.HasField("error") else 0
        count_request(self.label, code, time.perf_counter() - started)
        return answer

    async def _answer(self, gate: StreamGate, request: Any) -> Any:
        try:
            size = await gate.admit(request)
            out = await self.handle(request)
        except errors.NotFound as exc:  # from a view that may be behind: vouch first
            try:
                why: BaseException = await self.barrier.vouch_miss(exc)
            except Exception as vouched:
                why = vouched
            return self.answer_type(error=error_pb(why))
        except Exception as exc:
            return self.answer_type(error=error_pb(exc))
        gate.done(request, out, size)
        return self.answer_type(response=out)


class SendStreamServer(GatedStream):
    """QueueService.SendStream's loop, over the unary Send's parts."""

    name = "SendStream"
    label = SEND_LABEL
    answer_type = queue_pb2.SendStreamResponse

    def __init__(self, autocreate: AutoCreate, sender: Sender, barrier: Any) -> None:
        super().__init__(barrier)
        self.autocreate = autocreate
        self.sender = sender

    async def one(self, gate: StreamGate, request: Any) -> Any:
        _stage("s.intercept")  # a stream's request: no interceptors (stage_report)
        _stage("s.handler")
        answer = await super().one(gate, request)
        _stage("s.reply")
        return answer

    async def handle(self, request: Any) -> Any:
        q = await self.autocreate.queue_for_send(request, False)
        results = await self.sender.send(q, send_entries(request), False, request.request_id)
        return sending.response(results, request.results_as_runs)
