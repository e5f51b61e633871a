"""QueueError <-> gRPC status: server/api/status.py one way, client/errors.py back.

Every QueueError class must have an explicit mapping, and what the server
sends must come back to the client as the same class, message, field and
leader hint, over a real gRPC wire.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent import futures

import grpc
import pytest

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.client.errors import ERROR_CLASSES, from_rpc_error
from raft_queue.server.api import status

C = grpc.StatusCode

EXPECTED_CODES = {
    errors.QueueError: C.INTERNAL,
    errors.InvalidArgument: C.INVALID_ARGUMENT,
    errors.ConfigError: C.INVALID_ARGUMENT,
    errors.NotFound: C.NOT_FOUND,
    errors.AlreadyExists: C.ALREADY_EXISTS,
    errors.FailedPrecondition: C.FAILED_PRECONDITION,
    errors.NotLeader: C.FAILED_PRECONDITION,
    errors.PartitionSealed: C.FAILED_PRECONDITION,
    errors.Unavailable: C.UNAVAILABLE,
    errors.OutcomeUnknown: C.UNAVAILABLE,
    errors.OutOfRange: C.OUT_OF_RANGE,
    errors.Unauthenticated: C.UNAUTHENTICATED,
    errors.ResourceExhausted: C.RESOURCE_EXHAUSTED,
    errors.OverQuota: C.RESOURCE_EXHAUSTED,
    errors.Internal: C.INTERNAL,
    errors.OldEntryFormat: C.INTERNAL,
    errors.VersionMismatch: C.FAILED_PRECONDITION,
    errors.Unauthenticated: C.UNAUTHENTICATED,
    errors.PermissionDenied: C.PERMISSION_DENIED,
}


def all_error_classes() -> list[type[errors.QueueError]]:
    found, pending = [], [errors.QueueError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: c.__name__)


def sample(cls: type[errors.QueueError]) -> errors.QueueError:
    """One instance of ``cls`` with every attribute the wire must carry set."""
    if issubclass(cls, errors.InvalidArgument):
        return cls("visibility_ms", "must be <= 43200000")
    if issubclass(cls, errors.NotLeader):
        return cls("partition orders/3 is led elsewhere", leader="10.0.0.7:7101")
    if issubclass(cls, errors.OverQuota):
        return cls("over quota for principal 'a' on queue 'q'", retry_after_ms=250)
    return cls(f"something {cls.__name__} happened")


class FakeRpcError(grpc.RpcError):
    """What a sync stub raises: a grpc.Call with code, details and trailers."""

    def __init__(self, code: grpc.StatusCode, details: str, trailers=()) -> None:
        super().__init__(details)
        self._code, self._details, self._trailers = code, details, tuple(trailers)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        return self._trailers


def assert_same_error(got: errors.QueueError, sent: errors.QueueError) -> None:
    assert type(got) is type(sent)
    if EXPECTED_CODES[type(sent)] == C.INTERNAL:  # a fixed text: never the exception's
        assert got.message.startswith("internal error (error id ")
        assert sent.message not in got.message
    else:
        assert got.message == sent.message
    assert getattr(got, "field", None) == getattr(sent, "field", None)
    assert getattr(got, "leader", None) == getattr(sent, "leader", None)
    assert getattr(got, "retry_after_ms", None) == getattr(sent, "retry_after_ms", None)


# ---- server side -------------------------------------------------------------


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda c: c.__name__)
def test_every_error_class_has_an_explicit_status_code(cls):
    assert cls in status.STATUS_CODES, f"add {cls.__name__} to server/api/status.py"
    assert cls in EXPECTED_CODES, f"add {cls.__name__} to this test's expectations"
    code, _details, _trailers = status.to_status(sample(cls))
    assert code == EXPECTED_CODES[cls]


def test_every_status_names_the_error_class_in_a_trailer():
    for cls in all_error_classes():
        _code, _details, trailers = status.to_status(sample(cls))
        assert (status.ERROR_KEY, cls.__name__) in trailers


def test_invalid_argument_names_the_field_in_details_and_trailer():
    code, details, trailers = status.to_status(errors.InvalidArgument("queue", "empty name"))
    assert code == C.INVALID_ARGUMENT
    assert details == "queue: empty name"
    assert dict(trailers)[status.FIELD_KEY] == "queue"


def test_not_leader_carries_the_leader_address_only_when_known():
    _, _, known = status.to_status(errors.NotLeader("not leader", leader="h:1"))
    _, _, unknown = status.to_status(errors.NotLeader("not leader"))
    assert dict(known)[status.LEADER_KEY] == "h:1"
    assert dict(known)[status.ERROR_KEY] == "NotLeader"
    assert status.LEADER_KEY not in dict(unknown)


def test_outcome_unknown_is_unavailable_but_named():
    code, _, trailers = status.to_status(errors.OutcomeUnknown("timed out after append"))
    assert code == C.UNAVAILABLE
    assert dict(trailers)[status.ERROR_KEY] == "OutcomeUnknown"


def test_unexpected_exception_is_internal_without_its_text():
    code, details, trailers = status.to_status(KeyError("/srv/secret/path"), error_id="ab12")
    assert code == C.INTERNAL
    assert "KeyError" not in details and "/srv/secret/path" not in details
    assert "ab12" in details
    assert dict(trailers)[status.ERROR_KEY] == "Internal"
    assert dict(trailers)[status.ERROR_ID_KEY] == "ab12"


def test_non_ascii_field_is_escaped_into_valid_metadata():
    _, _, trailers = status.to_status(errors.InvalidArgument("héaders.ключ", "bad"))
    value = dict(trailers)[status.FIELD_KEY]
    assert value.isascii() and value.isprintable()


def test_async_abort_with_passes_code_details_and_trailers():
    class Aborted(Exception):
        pass

    class FakeAioContext:
        async def abort(self, code, details, trailing_metadata=()):
            self.seen = (code, details, trailing_metadata)
            raise Aborted

    context = FakeAioContext()
    with pytest.raises(Aborted):
        asyncio.run(status.abort_with(context, errors.NotFound("queue x")))
    assert context.seen[0] == C.NOT_FOUND
    assert context.seen[1] == "queue x"
    assert (status.ERROR_KEY, "NotFound") in context.seen[2]


# ---- client side --------------------------------------------------------------


def test_client_knows_every_error_class_by_name():
    assert set(ERROR_CLASSES) == {c.__name__ for c in all_error_classes()}


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda c: c.__name__)
def test_to_status_then_from_rpc_error_round_trips(cls):
    sent = sample(cls)
    code, details, trailers = status.to_status(sent)
    got = from_rpc_error(FakeRpcError(code, details, trailers))
    assert_same_error(got, sent)


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (C.INVALID_ARGUMENT, "max_messages: must be <= 1000", errors.InvalidArgument),
        (C.NOT_FOUND, "queue missing", errors.NotFound),
        (C.ALREADY_EXISTS, "queue exists", errors.AlreadyExists),
        (C.FAILED_PRECONDITION, "stale", errors.FailedPrecondition),
        (C.OUT_OF_RANGE, "offset 3 < 10", errors.OutOfRange),
        (C.RESOURCE_EXHAUSTED, "rate limited", errors.ResourceExhausted),
        (C.INTERNAL, "bug", errors.Internal),
        (C.UNKNOWN, "exception in handler", errors.Internal),
        (C.UNIMPLEMENTED, "no such method", errors.Internal),
        (C.PERMISSION_DENIED, "no grant", errors.PermissionDenied),
        (C.UNAUTHENTICATED, "no token", errors.Unauthenticated),
    ],
)
def test_status_without_trailer_falls_back_on_the_code(code, details, expected):
    assert type(from_rpc_error(FakeRpcError(code, details))) is expected


def test_fallback_invalid_argument_recovers_the_field_from_details():
    err = from_rpc_error(FakeRpcError(C.INVALID_ARGUMENT, "max_messages: must be <= 1000"))
    assert err.field == "max_messages"
    assert err.message == "max_messages: must be <= 1000"


def test_failed_precondition_with_leader_trailer_is_not_leader():
    err = from_rpc_error(FakeRpcError(C.FAILED_PRECONDITION, "x", [("raftq-leader", "h:2")]))
    assert isinstance(err, errors.NotLeader)
    assert err.leader == "h:2"


def test_connect_failure_is_unavailable_even_for_writes():
    details = "failed to connect to all addresses; last error: Connection refused"
    assert type(from_rpc_error(FakeRpcError(C.UNAVAILABLE, details))) is errors.Unavailable


@pytest.mark.parametrize(
    ("code", "details"),
    [(C.DEADLINE_EXCEEDED, "Deadline Exceeded"), (C.UNAVAILABLE, "Socket closed")],
)
def test_lost_call_is_outcome_unknown_for_writes_and_unavailable_for_reads(code, details):
    rpc_error = FakeRpcError(code, details)
    assert type(from_rpc_error(rpc_error, mutating=True)) is errors.OutcomeUnknown
    assert type(from_rpc_error(rpc_error, mutating=False)) is errors.Unavailable


def test_grpc_message_size_limit_is_not_retryable():
    details = "Received message larger than max (70000000 vs. 67108864)"
    err = from_rpc_error(FakeRpcError(C.RESOURCE_EXHAUSTED, details))
    assert isinstance(err, errors.InvalidArgument)
    assert not err.retryable


# ---- over a real wire ----------------------------------------------------------


class RaisingService(queue_pb2_grpc.QueueServiceServicer):
    """GetQueue(name=<class name>) fails with a sample of that QueueError class."""

    def GetQueue(self, request, context):
        cls = ERROR_CLASSES.get(request.name)
        exc = sample(cls) if cls else RuntimeError("not a QueueError")
        status.abort_with_sync(context, exc)


@pytest.fixture(scope="module")
def raising_stub():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    queue_pb2_grpc.add_QueueServiceServicer_to_server(RaisingService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield queue_pb2_grpc.QueueServiceStub(channel)
    channel.close()
    server.stop(None)


def test_every_error_class_survives_a_real_grpc_call(raising_stub):
    for cls in all_error_classes():
        with pytest.raises(grpc.RpcError) as caught:
            raising_stub.GetQueue(queue_pb2.GetQueueRequest(name=cls.__name__), timeout=5)
        assert_same_error(from_rpc_error(caught.value), sample(cls))


def test_unexpected_server_exception_reaches_the_client_as_internal_with_an_id_only(
    raising_stub, caplog
):
    with (
        caplog.at_level(logging.ERROR, logger=status.log.name),
        pytest.raises(grpc.RpcError) as caught,
    ):
        raising_stub.GetQueue(queue_pb2.GetQueueRequest(name="nope"), timeout=5)
    err = from_rpc_error(caught.value)
    assert type(err) is errors.Internal
    assert "RuntimeError" not in err.message and "not a QueueError" not in err.message
    assert "Traceback" not in err.message
    error_id = dict(caught.value.trailing_metadata())[status.ERROR_ID_KEY]
    assert error_id in err.message
    # The node's log has the exception and its traceback, under the same id.
    (logged,) = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged.exc_info and "not a QueueError" in str(logged.exc_info[1])


def test_refused_connection_is_unavailable():
    with grpc.insecure_channel("127.0.0.1:1") as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetQueue(queue_pb2.GetQueueRequest(name="q"), timeout=5)
    assert type(from_rpc_error(caught.value, mutating=True)) is errors.Unavailable
