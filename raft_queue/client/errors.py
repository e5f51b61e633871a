"""gRPC error -> QueueError: the reverse of ``server/api/status.py``, held once by the client.

The server names the error class in the ``raftq-error`` trailer (plus
``raftq-field``, ``raftq-leader``, and ``raftq-manager``/``raftq-cluster``
on a redirecting NotFound), so the exact class, field and leader
hint survive the wire. Statuses without that trailer come from gRPC itself
or from a proxy; they are mapped from the status code, and transport
failures are split by whether the request may have reached a server:

- it never left (connection refused, DNS failure): ``Unavailable``, safe to retry;
- it may have been applied (deadline exceeded, connection lost mid-call):
  ``OutcomeUnknown`` for mutating calls, ``Unavailable`` for reads (there is
  no outcome to be unsure about).
"""

from __future__ import annotations

import grpc

from raft_queue import errors

ERROR_KEY = "raftq-error"
FIELD_KEY = "raftq-field"
LEADER_KEY = "raftq-leader"
RETRY_AFTER_KEY = "retry-after-ms"
MANAGER_KEY = "raftq-manager"  # NotFound: a redirect to the external manager
CLUSTER_KEY = "raftq-cluster"

# Substrings of gRPC's own UNAVAILABLE details meaning "no connection was made".
_NOT_SENT_MARKERS = (
    "failed to connect",
    "connection refused",
    "dns resolution failed",
    "name resolution",
    "no address",
    "channel is in state transient_failure",
)

_BY_CODE: dict[grpc.StatusCode, type[errors.QueueError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: errors.AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: errors.Unavailable,
    grpc.StatusCode.OUT_OF_RANGE: errors.OutOfRange,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhausted,
    # Refusals the caller must fix (a token, a grant), not retry.
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
}


def _all_error_classes() -> dict[str, type[errors.QueueError]]:
    """Every QueueError class by name, so a trailer can name any of them."""
    found: dict[str, type[errors.QueueError]] = {}
    pending: list[type[errors.QueueError]] = [errors.QueueError]
    while pending:
        cls = pending.pop()
        found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return found


ERROR_CLASSES = _all_error_classes()


def _trailers(exc: grpc.RpcError) -> dict[str, str]:
    getter = getattr(exc, "trailing_metadata", None)
    pairs = getter() if callable(getter) else None
    return {str(k): v if isinstance(v, str) else repr(v) for k, v in (pairs or ())}


def _code_and_details(exc: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    details = details_fn() if callable(details_fn) else str(exc)
    return code or grpc.StatusCode.UNKNOWN, details or ""


def _invalid_argument(
    cls: type[errors.QueueError], details: str, field: str | None
) -> errors.QueueError:
    """Rebuild InvalidArgument(field, message) from details ``"field: message"``."""
    if field is None:
        head, sep, _ = details.partition(": ")
        field = head if sep and head and " " not in head else "request"
    prefix = f"{field}: "
    message = details[len(prefix) :] if details.startswith(prefix) else details
    return cls(field, message)  # type: ignore[call-arg]


def _build(
    cls: type[errors.QueueError], details: str, trailers: dict[str, str]
) -> errors.QueueError:
    """Instantiate ``cls`` with the constructor its signature asks for."""
    if issubclass(cls, errors.InvalidArgument):
        return _invalid_argument(cls, details, trailers.get(FIELD_KEY))
    if issubclass(cls, errors.NotLeader):
        return cls(details, leader=trailers.get(LEADER_KEY, ""))
    if issubclass(cls, errors.OverQuota):
        after = trailers.get(RETRY_AFTER_KEY, "")
        return cls(details, retry_after_ms=int(after) if after.isdigit() else 0)
    built = cls(details)
    if isinstance(built, errors.NotFound) and trailers.get(MANAGER_KEY):
        # A redirect (server/control/redirects.py): client/redirect.py follows it.
        built.manager, built.cluster = trailers[MANAGER_KEY], trailers.get(CLUSTER_KEY, "")
    return built


def _transport_error(code: grpc.StatusCode, details: str, mutating: bool) -> errors.QueueError:
    """A status gRPC made up itself (no server trailer): was the request sent?"""
    lowered = details.lower()
    if code == grpc.StatusCode.UNAVAILABLE and any(m in lowered for m in _NOT_SENT_MARKERS):
        return errors.Unavailable(f"unavailable: {details}")
    cls = errors.OutcomeUnknown if mutating else errors.Unavailable
    return cls(f"{code.name.lower()}: {details}")


def from_rpc_error(exc: grpc.RpcError, *, mutating: bool = True) -> errors.QueueError:
    """Map a failed call to the QueueError the server raised (or the closest one).

    ``mutating``: whether the call may change state; decides whether a lost
    or timed-out call is ``OutcomeUnknown`` or plain ``Unavailable``.
    """
    code, details = _code_and_details(exc)
    return from_status(code, details, _trailers(exc), mutating=mutating)


def from_status(
    code: grpc.StatusCode, details: str, trailers: dict[str, str], *, mutating: bool = True
) -> errors.QueueError:
    """``from_rpc_error`` for a status that came as data (a SendStream
    answer's ``error``: code, details and the same trailers)."""
    named = ERROR_CLASSES.get(trailers.get(ERROR_KEY, ""))
    if named is not None:
        return _build(named, details, trailers)
    if code == grpc.StatusCode.FAILED_PRECONDITION and LEADER_KEY in trailers:
        return errors.NotLeader(details, leader=trailers[LEADER_KEY])
    if code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    ):
        return _transport_error(code, details, mutating)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details.lower():
        # gRPC's own message-size limit: retrying the same bytes cannot help.
        return errors.InvalidArgument("message", details)
    cls = _BY_CODE.get(code, errors.Internal)
    return _build(
        cls, details if cls is not errors.Internal else f"{code.name}: {details}", trailers
    )
