"""The API door: a grpc.aio server interceptor that authenticates and
authorizes every QueueService and AdminService call before its servicer
runs, so a refused call reads and writes nothing.

- ``authorization: Bearer <token>`` -> an Identity (security/identity.py);
  missing or invalid -> UNAUTHENTICATED. With ``[tls] client_cert_principals``
  a call without a token is the principal its verified client certificate
  names (which must exist); a token, when given, still decides.
- The operation each method needs and the field naming its queue come from
  ``core/access.RPC_OPERATIONS``; no grant -> PERMISSION_DENIED naming both.
  Subscribe is checked on every request of its stream that names a queue.
- ListQueues shows a principal only the queues it holds a grant on.
- Manage and admin operations, and every refusal, go to the audit log.
- Quotas and usage (server/api/usage.py ``Meter``): a Send a client makes
  here is charged to its principal's quota before the servicer runs; every
  metered call a client makes here is counted once it answers OK. Calls
  another node forwards (node-signed) were metered on that node.

Other services (health, reflection) pass untouched. The caller's
``authorization`` value is kept in ``CALLER_AUTHORIZATION`` for the call's
task, so a forwarded request (server/peers.py) carries the same credential
and the leader's node checks the same principal again.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from raft_queue.core import access
from raft_queue.errors import PermissionDenied, QueueError, Unauthenticated, Unavailable
from raft_queue.observability import metrics
from raft_queue.security.audit import AuditLog
from raft_queue.security.identity import CERTIFIED, Authenticator, Identity
from raft_queue.security.node_identity import VERIFIED_NODE
from raft_queue.security.tls import CertIdentity, identity_of
from raft_queue.server.api.status import abort_with
from raft_queue.server.api.usage import METERED

if TYPE_CHECKING:
    from raft_queue.server.control.metadata_barrier import MetadataBarrier
    from raft_queue.server.node import Node

log = logging.getLogger(__name__)

GUARDED = ("/raft_queue.v1.QueueService/", "/raft_queue.v1.AdminService/")
AUTHORIZATION = "authorization"
_LIST_QUEUES = "/raft_queue.v1.QueueService/ListQueues"
_SEND = "/raft_queue.v1.QueueService/Send"
SEND_STREAM = "/raft_queue.v1.QueueService/SendStream"

#: The current call's ``authorization`` value (None outside an API call).
CALLER_AUTHORIZATION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "raftq_caller_authorization", default=None
)
#: The current call's principal (its identity's name; "" outside an API call).
CALLER_PRINCIPAL: contextvars.ContextVar[str] = contextvars.ContextVar(
    "raftq_caller_principal", default=""
)


def _authorization(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION:
            return str(value)
    return ""


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(
        self, authenticator: Authenticator, audit: AuditLog | None = None, meter: Any = None
    ) -> None:
        self._auth = authenticator
        self._audit = audit
        self.meter = meter
        self.barrier: MetadataBarrier | None = None  # set by the node (main.py)
        self.cert_principals = False  # [tls] client_cert_principals (door_for)
        self._certs: dict[bytes, CertIdentity | None] = {}
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        if not method.startswith(GUARDED):
            return await continuation(details)
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = await continuation(details)
            if handler is None:
                return None
            wrapped = self._wrap(method, handler)
            self._wrapped[method] = wrapped  # the servicer's handlers never change
        return wrapped

    def close(self) -> None:
        if self._audit is not None:
            self._audit.close()

    def page_authorizer(self) -> Callable[[str], bool] | None:
        """The status page's access check (observability/http.py): a token
        proving a superuser, i.e. an admin token (``admin_tokens_file``; a
        principal's grants, even ``admin`` on ``*``, do not open it: the page
        shows every queue and node). None (an open page) only when the door
        is open (``security.insecure``). Asyncio thread, as the HTTP server."""
        if self._auth.insecure:
            return None

        def authorize(token: str) -> bool:
            try:
                return self._auth.authenticate(f"Bearer {token}").superuser
            except Unauthenticated:
                return False

        return authorize

    # ---- checks --------------------------------------------------------------------
    def _audit_line(
        self, who: str, op: str, method: str, queue: str, result: str, context: Any,
        target: str = "",
    ) -> None:  # fmt: skip
        if self._audit is not None:
            peer = context.peer() or ""
            self._audit.record(who, op, method, queue, result, peer, target)

    async def _admit(self, method: str, op: str, queue: str | None, context: Any) -> Identity:
        """The caller's identity if it may do ``op`` on ``queue`` (None: only
        authenticate); else the call ends with UNAUTHENTICATED /
        PERMISSION_DENIED (audited). Keeps the caller's credential for
        forwarding (CALLER_AUTHORIZATION)."""
        authorization = _authorization(context)
        cert = self._certificate(authorization, context)
        identity, refusal = self._judge(authorization, cert, op, queue)
        # Perhaps a grant or token this node's view has not applied yet
        # (server/control/metadata_barrier.py): look again once caught up;
        # UNAVAILABLE (retried) when the view cannot be vouched for, never a
        # refusal that may be false (as right after a restart).
        if refusal is not None and (authorization or cert) and self.barrier is not None:
            try:
                await self.barrier.vouch()
            except Unavailable as why:
                self._audit_line("", op, method, queue or "", "unavailable", context)
                await abort_with(context, why)
            identity, refusal = self._judge(authorization, cert, op, queue)
        if refusal is not None:
            name = identity.name if identity is not None else ""
            denied = identity is not None
            self._audit_line(
                name, op, method, queue or "", "denied" if denied else "unauthenticated", context
            )
            if self.meter is not None:
                self.meter.rejected_auth(name, queue or "")
            metrics.count_rejection("auth")
            await abort_with(context, refusal)
        assert identity is not None
        # A caller admitted by certificate is vouched for by this node when
        # its call is forwarded (the leader honours it on node-signed calls only).
        CALLER_AUTHORIZATION.set(authorization or (CERTIFIED + identity.name if cert else ""))
        CALLER_PRINCIPAL.set(identity.name)
        return identity

    def _certificate(self, authorization: str, context: Any) -> CertIdentity | None:
        """Who the verified client certificate names, when it is the credential:
        ``[tls] client_cert_principals`` on, no token, not a node's call."""
        if not self.cert_principals or authorization or VERIFIED_NODE.get() is not None:
            return None
        pems = (context.auth_context() or {}).get("x509_pem_cert") or []
        if not pems:
            return None
        pem = pems[0]
        if pem not in self._certs:  # parsed once per certificate, not per call
            if len(self._certs) >= 1024:
                self._certs.clear()
            self._certs[pem] = identity_of(pem)
        return self._certs[pem]

    def _judge(
        self, authorization: str | None, cert: CertIdentity | None, op: str, queue: str | None
    ) -> tuple[Identity | None, QueueError | None]:
        """(identity, None) when admitted; else (identity or None, the refusal)."""
        try:
            if cert is not None:
                identity = self._auth.authenticate_certificate(cert.kind, cert.name)
            else:
                identity = self._auth.authenticate(authorization, VERIFIED_NODE.get())
        except Unauthenticated as exc:
            return None, exc
        if queue is not None and not identity.allows(op, queue):
            return identity, _denied(identity, op, queue)
        return identity, None

    # ---- wrapping --------------------------------------------------------------------
    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if handler.unary_unary is not None:
            load, dump = handler.request_deserializer, handler.response_serializer
            if self.meter is not None and method in METERED:  # sizes for usage, for free
                load = self.meter.sized_deserializer(load)
                dump = self.meter.counting_serializer(dump)
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=load,
                response_serializer=dump,
            )
        if handler.stream_stream is not None:
            behave = self._send_stream if method == SEND_STREAM else self._stream
            return grpc.stream_stream_rpc_method_handler(
                behave(method, handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # no such shapes in our services; guarded all the same by review

    def _unary(self, method: str, inner: Any) -> Any:
        op, field = access.rpc_operation(method)
        audited = op in (access.MANAGE, access.ADMIN)
        listing = method == _LIST_QUEUES  # any principal; filtered below
        creating = method == _SEND  # SendRequest.create: also needs ``manage``

        async def behavior(request: Any, context: Any) -> Any:
            queue = getattr(request, field) if field else ""
            identity = await self._admit(method, op, None if listing else queue, context)
            if creating and request.create and not identity.allows(access.MANAGE, queue):
                # A Send that may create its queue is a manage operation too
                # (server/dataplane/autocreate.py): nothing is sent or created.
                self._audit_line(identity.name, access.MANAGE, method, queue, "denied", context)
                metrics.count_rejection("auth")
                await abort_with(context, _denied(identity, access.MANAGE, queue))
            if not audited:
                if self.meter is not None and VERIFIED_NODE.get() is None:  # a client's call
                    response = await self._metered(identity.name, method, inner, request, context)
                else:
                    response = await inner(request, context)
                return _visible(identity, response) if listing else response
            target = _target(request)
            try:
                response = await inner(request, context)
            except BaseException:
                code = context.code() if callable(getattr(context, "code", None)) else None
                result = code.name if isinstance(code, grpc.StatusCode) else "error"
                self._audit_line(identity.name, op, method, queue, result, context, target)
                raise
            self._audit_line(identity.name, op, method, queue, "ok", context, target)
            return response

        return behavior

    async def _metered(self, who: str, method: str, inner: Any, request: Any, context: Any) -> Any:
        """A client's call taken here: quota first (nothing applied when over),
        usage counted once it answered OK."""
        try:
            size = self.meter.before(who, method, request)
        except QueueError as exc:
            await abort_with(context, exc)
        response = await inner(request, context)
        code = context.code() if callable(getattr(context, "code", None)) else None
        if code in (None, grpc.StatusCode.OK):
            self.meter.after(who, method, request, response, size)
        return response

    def _stream(self, method: str, inner: Any) -> Any:
        """Subscribe: authenticated at once; each request that names a queue
        is checked before the servicer sees it (the first one does)."""
        op, field = access.rpc_operation(method)

        async def behavior(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            identity = await self._admit(method, op, None, context)

            async def checked() -> AsyncIterator[Any]:
                async for request in requests:
                    queue = getattr(request, field, "") if field else ""
                    if queue and not identity.allows(op, queue):
                        self._audit_line(identity.name, op, method, queue, "denied", context)
                        metrics.count_rejection("auth")
                        raise _denied(identity, op, queue)
                    yield request

            async for response in inner(checked(), context):
                yield response

        return behavior

    def _send_stream(self, method: str, inner: Any) -> Any:
        """SendStream: authenticated at once; each request is judged by the
        stream's gate (server/api/send_stream.py), answered in the stream."""
        from raft_queue.server.api.send_stream import SEND_GATE, StreamGate

        async def behavior(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            await self._admit(method, access.SEND, None, context)
            authorization = _authorization(context)
            credential = (authorization, self._certificate(authorization, context))
            metered = self.meter is not None and VERIFIED_NODE.get() is None
            SEND_GATE.set(StreamGate(self, credential, context, metered))
            async for response in inner(requests, context):
                yield response

        return behavior


def _target(request: Any) -> str:
    """What an admin call acts on, for the audit line (a principal, a node...)."""
    for name in ("principal", "name", "node", "to_node", "queue"):
        value = getattr(request, name, "")
        if isinstance(value, str) and value:
            return value
    return ""


def _denied(identity: Identity, op: str, queue: str) -> QueueError:
    try:
        identity.check(op, queue)
    except PermissionDenied as exc:
        return exc
    return PermissionDenied(f"principal {identity.name!r} may not {op}")  # pragma: no cover


def _visible(identity: Identity, response: Any) -> Any:
    """ListQueues: only the queues ``identity`` holds a grant on."""
    if identity.superuser:
        return response
    keep = [q for q in response.queues if identity.sees(q.name)]
    del response.queues[:]
    response.queues.extend(keep)
    return response


def door_for(node: Node) -> AuthInterceptor:
    """The interceptor for ``node`` (a server.node.Node): its admin tokens,
    its secret (node tokens), its view (principals) and its audit log in
    ``data_dir/audit.log``. Logs a warning when the door is open
    (``insecure``) or has no admin token to bootstrap with."""
    from pathlib import Path

    from raft_queue.security.audit import FILE_NAME
    from raft_queue.security.tokens import load_admin_hashes
    from raft_queue.server.api.usage import Meter

    security = node.config.security
    admins = (
        load_admin_hashes(security.admin_tokens_file) if security.admin_tokens_file else frozenset()
    )
    if security.insecure:
        log.warning("security.insecure = true: clients without a token are served as 'anonymous'")
    elif not admins:
        log.warning("no security.admin_tokens_file: no client can administer this cluster")
    authenticator = Authenticator(lambda: node.view, admins, node.secret, security.insecure)
    meter = Meter(lambda: node.view)
    door = AuthInterceptor(authenticator, AuditLog(Path(node.config.data_dir) / FILE_NAME), meter)
    door.cert_principals = node.config.tls.client_cert_principals
    return door
