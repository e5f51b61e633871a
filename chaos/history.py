"""A Jepsen-style history of queue operations, recorded by test clients under faults.

Every client action is two ops: an ``invoke`` when it starts and a completion when it
ends. An op is a dict (one JSON line when written to a file)::

    {"index": 7, "time_ns": 1234, "process": 2, "type": "ok", "f": "send",
     "value": "p-17", "queue": "q", "key": "k3", "partition": 0, "offset": 41}

``index`` orders ops as recorded; ``time_ns`` is monotonic nanoseconds since the
history began. ``type`` is ``invoke``, ``ok`` (it happened), ``fail`` (it definitely did
not happen) or ``info`` (unknown: a timeout, a connection reset or UNAVAILABLE after the
request may have been sent). Never record ``fail`` unless the server cannot have
applied the request: a wrong ``fail`` turns into a false "failed but seen" anomaly, a
cautious ``info`` costs nothing. A process whose op ended in ``info`` may still have
that op in flight, so it is retired and continues under a new id, as in Jepsen; this
keeps every process's ops sequential.

Operations (``f``) and their values; a completion inherits the fields of its
invocation, so ``queue`` and ``key`` need only be given once:

- ``send``: value = the payload's unique id; fields ``queue``, ``key``; on ``ok`` also
  ``partition`` and ``offset`` where the server stored it.
- ``receive`` (leases): ok value = ``[{partition, offset, payload, key, receipt?}]``.
- ``ack``: value = ``[{partition, offset, payload, receipt?}]`` (the leases acked).
- ``read`` (by offset): value = ``{partition, offset}`` (the start); ok value =
  ``{partition, offset, records: [[offset, payload], ...], high?}`` where ``high`` is the
  partition's end offset (exclusive) if the server reported it.
- ``drain`` (final phase, after faults heal): ok value = records as for ``receive``.

``receipt`` identifies one lease (the server's receipt handle or any unique string);
without it the checker cannot tell a retried ack of one lease from acks of two leases.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

Op = dict[str, Any]
Slot = tuple[str, Any, int]  # (queue, partition, offset)
OP_TYPES = ("invoke", "ok", "fail", "info")
FUNCTIONS = ("send", "receive", "ack", "read", "drain")
_SAME: Any = object()  # completion value defaults to the invocation's value


class History:
    """Thread-safe, append-only op log; mirrored to a JSON-lines file if ``path`` is given.

    Each op is flushed as it is recorded so a crashed run still leaves its history.
    """

    def __init__(
        self, path: str | Path | None = None, clock: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._clock = clock
        self._start = clock()
        self._process_ids = itertools.count()
        self._file: IO[str] | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def process(self) -> Process:
        """A new logical client process (one thread of operations at a time)."""
        return Process(self, self.new_process_id())

    def new_process_id(self) -> int:
        with self._lock:
            return next(self._process_ids)

    def invoke(self, process: int, f: str, value: Any = None, **fields: Any) -> Op:
        """Record the start of an operation; returns the op to pass to ``complete``."""
        if f not in FUNCTIONS:
            raise ValueError(f"unknown operation {f!r}; expected one of {FUNCTIONS}")
        return self._append(
            {"process": process, "type": "invoke", "f": f, "value": value, **fields}
        )

    def complete(self, invocation: Op, type_: str, value: Any = _SAME, **fields: Any) -> Op:
        """Record how ``invocation`` ended; fields not given are copied from it."""
        if type_ not in OP_TYPES[1:]:
            raise ValueError(f"completion type must be ok, fail or info, not {type_!r}")
        inherited = {k: v for k, v in invocation.items() if k not in ("index", "time_ns", "type")}
        op = {**inherited, "type": type_, **fields}
        op["value"] = invocation.get("value") if value is _SAME else value
        return self._append(op)

    @property
    def ops(self) -> list[Op]:
        """A snapshot copy, in index order."""
        with self._lock:
            return list(self._ops)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _append(self, op: Op) -> Op:
        with self._lock:
            op = {"index": len(self._ops), "time_ns": self._clock() - self._start, **op}
            self._ops.append(op)
            if self._file is not None:
                self._file.write(json.dumps(op) + "\n")
                self._file.flush()
        return op


def load(path: str | Path) -> list[Op]:
    """Read a JSON-lines history back (a torn last line from a crash is skipped)."""
    ops = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                ops.append(json.loads(line))
            except ValueError:
                continue
    return ops


class Process:
    """One logical client process. After an ``info`` completion it takes a new ``id``."""

    def __init__(self, history: History, process_id: int) -> None:
        self.history = history
        self.id = process_id

    def invoke(self, f: str, value: Any = None, **fields: Any) -> Op:
        return self.history.invoke(self.id, f, value, **fields)

    def ok(self, invocation: Op, value: Any = _SAME, **fields: Any) -> Op:
        return self.history.complete(invocation, "ok", value, **fields)

    def fail(self, invocation: Op, value: Any = _SAME, **fields: Any) -> Op:
        return self.history.complete(invocation, "fail", value, **fields)

    def info(self, invocation: Op, value: Any = _SAME, **fields: Any) -> Op:
        op = self.history.complete(invocation, "info", value, **fields)
        self.id = self.history.new_process_id()
        return op

    @contextmanager
    def operation(
        self,
        f: str,
        value: Any = None,
        *,
        definite: tuple[type[BaseException], ...] = (),
        **fields: Any,
    ) -> Iterator[Pending]:
        """Record one operation around a block; the block calls ``pending.ok(...)``.

        An exception that is an instance of ``definite`` (the request was certainly not
        applied, e.g. invalid argument, not leader) completes the op as ``fail``; any
        other exception, or leaving the block without completing, as ``info``. The
        exception is re-raised.
        """
        pending = Pending(self, self.invoke(f, value, **fields))
        try:
            yield pending
        except BaseException as exc:
            if not pending.done:
                outcome = self.fail if isinstance(exc, definite) else self.info
                outcome(pending.invocation, error=f"{type(exc).__name__}: {exc}")
            raise
        if not pending.done:
            self.info(pending.invocation, error="block ended without a completion")


class Pending:
    """An invoked operation awaiting its completion (see ``Process.operation``)."""

    def __init__(self, process: Process, invocation: Op) -> None:
        self.process, self.invocation, self.done = process, invocation, False

    def ok(self, value: Any = _SAME, **fields: Any) -> Op:
        self.done = True
        return self.process.ok(self.invocation, value, **fields)

    def fail(self, value: Any = _SAME, **fields: Any) -> Op:
        self.done = True
        return self.process.fail(self.invocation, value, **fields)

    def info(self, value: Any = _SAME, **fields: Any) -> Op:
        self.done = True
        return self.process.info(self.invocation, value, **fields)


# --- reading a history back: invocations paired with completions ----------------


@dataclass(frozen=True)
class Record:
    """A payload observed at a slot: stored by a send, delivered, or read."""

    payload: Any
    queue: str
    partition: Any
    offset: int
    key: Any = None
    receipt: Any = None
    process: Any = None
    invoked: int = -1  # index of the invoke op
    completed: int = -1  # index of the completion op

    @property
    def slot(self) -> Slot:
        return (self.queue, self.partition, self.offset)

    def where(self) -> dict[str, Any]:
        return {"queue": self.queue, "partition": self.partition, "offset": self.offset}


@dataclass(frozen=True)
class Read:
    """One ok offset read: ``records`` as returned, in order."""

    process: Any
    queue: str
    partition: Any
    start: int
    records: tuple[tuple[int, Any], ...]
    high: int | None
    index: int


@dataclass
class Facts:
    """What a history says happened, extracted once for every check."""

    attempts: dict[Any, set[str]] = field(default_factory=lambda: defaultdict(set))
    stored: list[Record] = field(default_factory=list)  # ok sends with a slot
    acked_sends: dict[Any, Record | None] = field(default_factory=dict)
    delivered: list[Record] = field(default_factory=list)  # receive and drain, in order
    reads: list[Read] = field(default_factory=list)
    acks: list[Record] = field(default_factory=list)  # ok acks
    drained: bool = False

    def observed(self) -> Iterable[Record]:
        """Every record returned to a client (delivered or read)."""
        yield from self.delivered
        for read in self.reads:
            for offset, payload in read.records:
                yield Record(payload, read.queue, read.partition, offset, process=read.process)


def extract(history_ops: Iterable[Mapping[str, Any]]) -> Facts:
    """Pair invocations with completions (per process) and collect the facts.

    An invocation never completed counts as ``info``. Raises ValueError on a process
    that invokes twice without completing or completes what it never invoked.
    """
    facts = Facts()
    open_ops: dict[Any, Mapping[str, Any]] = {}
    for op in sorted(history_ops, key=lambda o: o["index"]):
        process = op["process"]
        if op["type"] == "invoke":
            if process in open_ops:
                raise ValueError(f"process {process} invoked op {op['index']} while busy")
            open_ops[process] = op
            continue
        invocation = open_ops.pop(process, None)
        if invocation is None or invocation["f"] != op["f"]:
            raise ValueError(f"op {op['index']}: completion without a matching invocation")
        _absorb(facts, invocation, op)
    for invocation in open_ops.values():
        _absorb(facts, invocation, {**invocation, "type": "info"})
    return facts


def _absorb(facts: Facts, invocation: Mapping[str, Any], done: Mapping[str, Any]) -> None:
    op = {**invocation, **done}
    kind, f, value = op["type"], op["f"], op.get("value")
    if f == "send":
        facts.attempts[value].add(kind)
        if kind == "ok":
            stored = None
            if op.get("offset") is not None:
                stored = _record(op, invocation, {"payload": value, **op})
                facts.stored.append(stored)
            facts.acked_sends.setdefault(value, stored)
    elif kind != "ok":
        return
    elif f in ("receive", "drain"):
        facts.delivered.extend(_record(op, invocation, r) for r in value or [])
        facts.drained |= f == "drain"
    elif f == "ack":
        facts.acks.extend(_record(op, invocation, r) for r in value or [])
    elif f == "read":
        facts.reads.append(_read(op, op["value"]))


def _record(op: Mapping[str, Any], invocation: Mapping[str, Any], r: Mapping[str, Any]) -> Record:
    return Record(
        payload=r["payload"],
        queue=r.get("queue", op.get("queue", "")),
        partition=r["partition"],
        offset=int(r["offset"]),
        key=r.get("key"),
        receipt=r.get("receipt"),
        process=op["process"],
        invoked=invocation["index"],
        completed=op["index"],
    )


def _read(op: Mapping[str, Any], value: Mapping[str, Any]) -> Read:
    records = tuple((int(o), p) for o, p in value.get("records", []))
    high = value.get("high")
    return Read(
        process=op["process"],
        queue=value.get("queue", op.get("queue", "")),
        partition=value["partition"],
        start=int(value["offset"]),
        records=records,
        high=None if high is None else int(high),
        index=op["index"],
    )
