"""A Receive's answer, built while its leases come in.

Messages are made in place in the answer's ``ReceiveResponse`` (no copy of
each at the end), and for a client that asked for runs
(``ReceiveRequest.runs``) a lease's records without key, headers or dedup id
are not made into Messages at all: they go out as one ``MessageRun`` (bodies,
and the shared fields and receipt written once). Inside the Receive flow each
such record is a ``RunItem``, which answers what that flow asks of a Message
(partition, body, receipt, size), so bounds, give-backs and metrics need not
know which form a message has.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from operator import is_, itemgetter, methodcaller
from types import MappingProxyType
from typing import Any

from raft_queue._proto.raft_queue.v1 import queue_pb2

_NO_HEADERS: Any = MappingProxyType({})
_new_tuple = tuple.__new__


class LeasedRun:
    """Records ``offset ..`` of one lease span, all without key, headers and
    dedup id: their bodies, and the fields and receipt parts they share."""

    __slots__ = (
        "queue", "partition", "offset", "bodies", "timestamp_ms", "receive_count",
        "head", "tail", "extra", "size", "listed",
    )  # fmt: skip

    def __init__(
        self,
        queue: str,
        partition: int,
        offset: int,
        bodies: Sequence[bytes],
        timestamp_ms: int,
        receive_count: int,
        receipt: tuple[str, str],
    ) -> None:
        self.queue, self.partition, self.offset = queue, partition, offset
        self.bodies = bodies
        self.timestamp_ms, self.receive_count = timestamp_ms, receive_count
        self.head, self.tail = receipt
        # what a record costs a Message beyond its body, at most (``RunItem.ByteSize``)
        self.extra = 64 + len(queue) + len(self.head) + len(self.tail)
        self.size = sum(map(len, bodies)) + self.extra * len(bodies)  # of every record
        self.listed: list[RunItem] = []

    def items(self) -> list[RunItem]:
        """A RunItem per record (kept: ``runs_response`` finds whole runs by them)."""
        self.listed = [_new_tuple(RunItem, (self, i)) for i in range(len(self.bodies))]
        return self.listed


class RunItem(tuple[LeasedRun, int]):
    """Record ``i`` of a LeasedRun, ``(run, i)``, standing for its Message in
    the Receive flow."""

    __slots__ = ()
    key = ""
    dedup_id = ""
    headers = _NO_HEADERS

    @property
    def queue(self) -> str:
        return self[0].queue

    @property
    def partition(self) -> int:
        return self[0].partition

    @property
    def offset(self) -> int:
        return self[0].offset + self[1]

    @property
    def body(self) -> bytes:
        return self[0].bodies[self[1]]

    @property
    def timestamp_ms(self) -> int:
        return self[0].timestamp_ms

    @property
    def receive_count(self) -> int:
        return self[0].receive_count

    @property
    def receipt(self) -> str:
        run = self[0]
        return f"{run.head}{run.offset + self[1]}{run.tail}"

    def ByteSize(self) -> int:  # noqa: N802 (a Message's, for bounds.within_bytes)
        """At least what this record costs as a Message on the wire."""
        run = self[0]
        return len(run.bodies[self[1]]) + run.extra

    def message(self) -> Any:
        """The Message this record stands for."""
        return queue_pb2.Message(
            queue=self.queue,
            partition=self.partition,
            offset=self.offset,
            body=self.body,
            timestamp_ms=self.timestamp_ms,
            receipt=self.receipt,
            receive_count=self.receive_count,
        )


class Answer:
    """A Receive's answer: Messages are made in place in ``response.messages``
    (``convert.lease_messages`` in this request's context), so the answer
    needs no copy of each (a third of a Message's cost); with ``runs``, bare
    records are RunItems and leave as MessageRuns. ``close`` hands the
    response out as made when the messages to return are exactly those made
    in it, in order; else (some given back, others forwarded from another
    node, runs) a new response holds them."""

    __slots__ = ("response", "runs")

    def __init__(self, runs: bool = False) -> None:
        self.response: Any = queue_pb2.ReceiveResponse()
        self.runs = runs

    def close(self, messages: Sequence[Any], acks: Any) -> Any:
        """The ReceiveResponse of ``messages`` and ``acks``; nothing is made
        in this answer after (late leases make their own Messages)."""
        response, self.response = self.response, None
        if self.runs and RunItem in set(map(type, messages)):
            return runs_response(messages, acks)
        made = response.messages
        if len(made) != len(messages) or not all(map(is_, messages, made)):
            return queue_pb2.ReceiveResponse(messages=_messages(messages), acks=acks)
        if acks is not None:
            response.acks.CopyFrom(acks)
        return response


def runs_response(messages: Sequence[Any], acks: Any) -> Any:
    """The ReceiveResponse of ``messages`` (Messages and RunItems, in answer
    order): each stretch of consecutive records of one run is a MessageRun,
    every other one a Message."""
    response = queue_pb2.ReceiveResponse(acks=acks)
    add_run, add_message = response.runs.add, response.messages.append
    n, total = 0, len(messages)
    while n < total:
        m = messages[n]
        if type(m) is not RunItem:
            add_message(m)
            n += 1
            continue
        run, first = m
        whole = run.listed
        if first == 0 and messages[n : n + len(whole)] == whole:  # C: the usual, a whole run
            end = len(whole)
        else:
            end = first + 1
            while n + end - first < total and messages[n + end - first] == (run, end):
                end += 1
        _add_run(add_run, run, first, end, n)
        n += end - first
    return response


def _add_run(add: Any, run: LeasedRun, first: int, end: int, at: int) -> None:
    bodies = run.bodies if first == 0 and end == len(run.bodies) else run.bodies[first:end]
    add(
        partition=run.partition,
        offset=run.offset + first,
        bodies=bodies,
        timestamp_ms=run.timestamp_ms,
        receive_count=run.receive_count,
        receipt_head=run.head,
        receipt_tail=run.tail,
        at=at,
    )


def answered(response: Any) -> int:
    """How many messages a ReceiveResponse carries (its Messages and runs)."""
    return len(response.messages) + sum(len(run.bodies) for run in response.runs)


_WIRE_SIZE = methodcaller("ByteSize")
_RUN_OF = itemgetter(0)


def answer_bytes(messages: Sequence[Any]) -> int:
    """At least what ``messages`` (Messages and RunItems) cost an answer."""
    kinds = set(map(type, messages))
    if kinds == {RunItem}:  # runs only (a drain): the sizes of the runs, whole
        return sum(run.size for run in set(map(_RUN_OF, messages)))
    return sum(map(_WIRE_SIZE, messages))


def _messages(messages: Sequence[Any]) -> list[Any]:
    """``messages`` as Messages (RunItems made into theirs)."""
    return [m.message() if type(m) is RunItem else m for m in messages]


#: The answer of the Receive this task serves (QueueService.Receive sets it).
ANSWER: contextvars.ContextVar[Answer | None] = contextvars.ContextVar(
    "raftq_receive_answer", default=None
)


def open_answer() -> Answer | None:
    """This task's Receive answer, if one is open (not yet closed)."""
    answer = ANSWER.get()
    return answer if answer is not None and answer.response is not None else None
