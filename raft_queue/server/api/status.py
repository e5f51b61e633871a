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
- ``raftq-leader``: the leader's gRPC address, for ``NotLeader`` when known;
- ``raftq-error-id``: for INTERNAL, the id under which the node logged it;
- ``raftq-manager`` and ``raftq-cluster``: for a NotFound of a queue this
  cluster does not hold when an external manager manages it, the manager's
  addresses and this cluster's name there (server/control/redirects.py).

INTERNAL answers never carry exception text or a traceback (they can hold
paths, keys, library internals): the details are a fixed sentence with an
error id, and the node logs the exception with its traceback under that id,
so an operator given the id finds the cause (as Stripe's request ids).
"""

from __future__ import annotations

import logging
import secrets
from typing import NoReturn

import grpc

from raft_queue import errors

log = logging.getLogger(__name__)

ERROR_KEY = "raftq-error"
FIELD_KEY = "raftq-field"
LEADER_KEY = "raftq-leader"
RETRY_AFTER_KEY = "retry-after-ms"  # OverQuota: when the same request would pass
ERROR_ID_KEY = "raftq-error-id"
MANAGER_KEY = "raftq-manager"  # NotFound: the queue may be under this external manager
CLUSTER_KEY = "raftq-cluster"  # ... which knows this cluster by this name

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
    errors.PartitionSealed: grpc.StatusCode.FAILED_PRECONDITION,  # refresh the partition map
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.OutcomeUnknown: grpc.StatusCode.UNAVAILABLE,
    errors.OutOfRange: grpc.StatusCode.OUT_OF_RANGE,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.OverQuota: grpc.StatusCode.RESOURCE_EXHAUSTED,  # with retry-after-ms
    errors.Internal: grpc.StatusCode.INTERNAL,
    errors.OldEntryFormat: grpc.StatusCode.INTERNAL,
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


def internal_details(error_id: str) -> str:
    """The fixed text of every INTERNAL answer."""
    return f"internal error (error id {error_id or 'none'}); the node's log has the details"


def to_status(exc: BaseException, error_id: str = "") -> tuple[grpc.StatusCode, str, Trailers]:
    """Map an exception to ``(code, details, trailing_metadata)``.

    ``details`` is the error's message (for InvalidArgument it starts with the
    field name), except for INTERNAL (any non-QueueError is a bug, named
    ``Internal``): the fixed ``internal_details(error_id)``, never the
    exception's text. Pure: no logging, so it can be used to build statuses
    ahead of time.
    """
    if not isinstance(exc, errors.QueueError):
        return _internal("Internal", error_id)
    code = _code_for(exc)
    if code == grpc.StatusCode.INTERNAL:
        return _internal(type(exc).__name__, error_id)
    trailers: list[tuple[str, str]] = [(ERROR_KEY, type(exc).__name__)]
    if isinstance(exc, errors.InvalidArgument):
        trailers.append((FIELD_KEY, _ascii(exc.field)))
    if isinstance(exc, errors.NotLeader) and exc.leader:
        trailers.append((LEADER_KEY, _ascii(exc.leader)))
    if isinstance(exc, errors.OverQuota):
        trailers.append((RETRY_AFTER_KEY, str(max(1, exc.retry_after_ms))))
    if isinstance(exc, errors.NotFound) and exc.manager:
        trailers.extend(((MANAGER_KEY, _ascii(exc.manager)), (CLUSTER_KEY, _ascii(exc.cluster))))
    return code, exc.message, tuple(trailers)


def _internal(name: str, error_id: str) -> tuple[grpc.StatusCode, str, Trailers]:
    trailers = ((ERROR_KEY, name), *(((ERROR_ID_KEY, error_id),) if error_id else ()))
    return grpc.StatusCode.INTERNAL, internal_details(error_id), trailers


def status_logged(exc: BaseException) -> tuple[grpc.StatusCode, str, Trailers]:
    """``to_status``; an INTERNAL one is a bug: logged with its traceback
    under a fresh error id, which the answer carries instead of the text."""
    code, details, trailers = to_status(exc)
    if code != grpc.StatusCode.INTERNAL:
        return code, details, trailers
    error_id = secrets.token_hex(6)
    log.error("internal error %s answered as INTERNAL", error_id, exc_info=exc)
    return to_status(exc, error_id)


async def abort_with(context: grpc.aio.ServicerContext, exc: BaseException) -> NoReturn:
    """End the current grpc.aio call with the status for ``exc``. Never returns."""
    code, details, trailers = status_logged(exc)
    await context.abort(code, details, trailers)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


def abort_with_sync(context: grpc.ServicerContext, exc: BaseException) -> NoReturn:
    """The same for a thread-pool (``grpc.server``) servicer, as used by test fakes."""
    code, details, trailers = status_logged(exc)
    context.set_trailing_metadata(trailers)
    context.abort(code, details)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover
