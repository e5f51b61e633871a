"""QueueError -> gRPC status: the one place on the server that knows grpc.StatusCode.

Servicers catch ``QueueError`` (and anything unexpected) at the edge and call
``abort_with(context, exc)``. The choices follow etcd: not-leader is
FAILED_PRECONDITION with the leader's address in a trailer, no quorum is
UNAVAILABLE, bad input is INVALID_ARGUMENT naming the field, limits are
RESOURCE_EXHAUSTED.

Every status we send carries trailing metadata so the client can rebuild the
exact error class without parsing text (``client/errors.py`` is the reverse
map):

- ``raftq-error``: the QueueError class name (``Internal`` for anything else);
- ``raftq-field``: the offending field, for ``InvalidArgument`` and subclasses;
- ``raftq-leader``: the leader's gRPC address, for ``NotLeader`` when known.
"""

from __future__ import annotations

import logging
from typing import NoReturn

import grpc

from raft_queue import errors

log = logging.getLogger(__name__)

ERROR_KEY = "raftq-error"
FIELD_KEY = "raftq-field"
LEADER_KEY = "raftq-leader"

Trailers = tuple[tuple[str, str], ...]

# Looked up along the exception's MRO, so a subclass without its own entry
# inherits its parent's code; tests assert every class has an explicit entry.
STATUS_CODES: dict[type[errors.QueueError], grpc.StatusCode] = {
    errors.QueueError: grpc.StatusCode.INTERNAL,
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.ConfigError: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.NotLeader: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.OutcomeUnknown: grpc.StatusCode.UNAVAILABLE,
    errors.OutOfRange: grpc.StatusCode.OUT_OF_RANGE,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.Internal: grpc.StatusCode.INTERNAL,
    # A server running against the wrong dependency version cannot serve until
    # it is redeployed: the system is not in a state to run the request.
    errors.VersionMismatch: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
}


def _ascii(value: str) -> str:
    """Metadata values must be printable ASCII; escape anything else."""
    text = value.encode("ascii", "backslashreplace").decode("ascii")
    return "".join(ch if " " <= ch <= "~" else "?" for ch in text)


def _code_for(exc: errors.QueueError) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        code = STATUS_CODES.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


def to_status(exc: BaseException) -> tuple[grpc.StatusCode, str, Trailers]:
    """Map an exception to ``(code, details, trailing_metadata)``.

    ``details`` is the error's message (for InvalidArgument it starts with the
    field name). A non-QueueError is a bug: INTERNAL, named ``Internal``.
    Pure: no logging, so it can be used to build statuses ahead of time.
    """
    if not isinstance(exc, errors.QueueError):
        details = f"internal error: {type(exc).__name__}: {exc}"
        return grpc.StatusCode.INTERNAL, details, ((ERROR_KEY, "Internal"),)
    trailers: list[tuple[str, str]] = [(ERROR_KEY, type(exc).__name__)]
    if isinstance(exc, errors.InvalidArgument):
        trailers.append((FIELD_KEY, _ascii(exc.field)))
    if isinstance(exc, errors.NotLeader) and exc.leader:
        trailers.append((LEADER_KEY, _ascii(exc.leader)))
    return _code_for(exc), exc.message, tuple(trailers)


def _log_unexpected(exc: BaseException, code: grpc.StatusCode) -> None:
    """Internal errors are bugs: keep their traceback in the node's log."""
    if code == grpc.StatusCode.INTERNAL:
        log.error("internal error answered as INTERNAL", exc_info=exc)


async def abort_with(context: grpc.aio.ServicerContext, exc: BaseException) -> NoReturn:
    """End the current grpc.aio call with the status for ``exc``. Never returns."""
    code, details, trailers = to_status(exc)
    _log_unexpected(exc, code)
    await context.abort(code, details, trailers)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


def abort_with_sync(context: grpc.ServicerContext, exc: BaseException) -> NoReturn:
    """The same for a thread-pool (``grpc.server``) servicer, as used by test fakes."""
    code, details, trailers = to_status(exc)
    _log_unexpected(exc, code)
    context.set_trailing_metadata(trailers)
    context.abort(code, details)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover
