"""Concurrent queue clients whose every operation is recorded in a chaos.history History.

Threads (each one logical process at a time, see chaos.history):

- senders: ``send`` of a unique payload id (also the body and the dedup id) with a key.
  Sender 0 uses the SDK's own retries (the product's path: any error is ``info``,
  since an earlier retry may have landed); the others send with ``retries=0`` and retry
  themselves with the same dedup id, recording each attempt, so an error the server
  calls definite (NotLeader, Unavailable, ...) is a ``fail`` the checker can hold it to.
- receivers: ``receive`` (leases with a short visibility timeout), then ``ack`` of most
  of what they got; the rest expire and are delivered again (at-least-once).
- readers: offset ``read`` of every partition, moving forward, sometimes re-reading an
  earlier range (checks holes, monotonic reads, one value per offset).

A timeout after a request was sent is ``info``, never ``fail``. ``final_drain`` and
``final_reads`` are the campaign's last phase, once every fault has healed.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chaos.history import History, Op, Process
from raft_queue import errors

# Errors after which the server cannot have applied the request (see errors.py):
# OutcomeUnknown and Internal (and anything not a QueueError) are not in this list.
DEFINITE: tuple[type[BaseException], ...] = (
    errors.InvalidArgument,
    errors.NotFound,
    errors.AlreadyExists,
    errors.FailedPrecondition,
    errors.NotLeader,
    errors.Unavailable,
    errors.ResourceExhausted,
    errors.OutOfRange,
)

ClientFactory = Callable[..., Any]
DRAIN_VISIBILITY_MS = 60_000  # final-phase leases: long, the drain acks at once


@dataclass(frozen=True)
class WorkloadConfig:
    queue: str = "chaos"
    senders: int = 3
    receivers: int = 2
    readers: int = 1
    keys: int = 16
    visibility_ms: int = 4000
    request_timeout_s: float = 3.0
    send_attempts: int = 6
    ack_ratio: float = 0.85
    receive_max: int = 10
    read_max: int = 200


class Workload:
    """Runs the client threads until ``stop()``; ``make_client(**kw)`` builds an SDK Client."""

    def __init__(
        self, history: History, make_client: ClientFactory, config: WorkloadConfig, seed: int
    ) -> None:
        self.history = history
        self.make_client = make_client
        self.config = config
        self.seed = seed
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._clients: list[Any] = []
        self.errors: list[str] = []  # unexpected exceptions in a worker (a bug here)

    def start(self) -> Workload:
        c = self.config
        plan: list[tuple[str, Callable[[int], None]]] = []
        plan += [(f"send-{w}", self._send_loop) for w in range(c.senders)]
        plan += [(f"recv-{w}", self._receive_loop) for w in range(c.receivers)]
        plan += [(f"read-{w}", self._read_loop) for w in range(c.readers)]
        for w, (name, target) in enumerate(plan):
            thread = threading.Thread(target=self._guard, args=(target, w), name=name, daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every worker (each finishes its current request, bounded by its timeout)."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        for client in self._clients:
            client.close()

    def _client(self, retries: int = 0) -> Any:
        client = self.make_client(timeout_s=self.config.request_timeout_s, retries=retries)
        self._clients.append(client)
        return client

    def _guard(self, target: Callable[[int], None], w: int) -> None:
        try:
            target(w)
        except Exception as exc:  # a workload bug must not silently stop traffic
            self.errors.append(f"{threading.current_thread().name}: {exc!r}")

    def _pause(self, rng: random.Random, base_s: float = 0.05) -> None:
        self._stop.wait(rng.uniform(0, base_s))

    # ---- senders -------------------------------------------------------------------
    def _send_loop(self, w: int) -> None:
        rng = random.Random(self.seed * 7919 + w)
        sdk_retries = w == 0
        client = self._client(retries=3 if sdk_retries else 0)
        proc = self.history.process()
        for seq in range(10**9):
            if self._stop.is_set():
                return
            payload, key = f"s{w}-{seq}", f"k{rng.randrange(self.config.keys)}"
            if sdk_retries:
                send_once(proc, client, self.config.queue, payload, key, dedup_id=None)
                continue
            for attempt in range(self.config.send_attempts):
                outcome = send_once(proc, client, self.config.queue, payload, key, payload)
                if outcome == "ok" or self._stop.is_set():
                    break
                self._stop.wait(min(1.0, 0.05 * 2**attempt) * rng.random())

    # ---- receivers -----------------------------------------------------------------
    def _receive_loop(self, w: int) -> None:
        rng = random.Random(self.seed * 104729 + w)
        client = self._client()
        proc = self.history.process()
        c = self.config
        while not self._stop.is_set():
            got = receive_once(proc, client, c.queue, c.receive_max, c.visibility_ms, 500)
            if not got:
                self._pause(rng, 0.2)
                continue
            chosen = [r for r in got if rng.random() < c.ack_ratio]
            if chosen:
                ack_once(proc, client, c.queue, chosen)

    # ---- readers -------------------------------------------------------------------
    def _read_loop(self, w: int) -> None:
        rng = random.Random(self.seed * 15485863 + w)
        client = self._client()
        proc = self.history.process()
        cursors: dict[int, int] = {}
        partitions = partition_count(client, self.config.queue, self._stop)
        while not self._stop.is_set() and partitions:
            for part in range(partitions):
                start = cursors.get(part, 0)
                if rng.random() < 0.1:
                    start = rng.randrange(start + 1)  # re-read an earlier range
                page = read_once(proc, client, self.config.queue, part, start, self.config.read_max)
                if page is not None:
                    cursors[part] = max(cursors.get(part, 0), page["next"])
            self._pause(rng, 0.3)


# ---- one recorded operation each ---------------------------------------------------------


def send_once(
    proc: Process, client: Any, queue: str, payload: str, key: str, dedup_id: str | None
) -> str:
    """One recorded send; returns its completion type (ok, fail or info).

    With ``dedup_id`` None the SDK retries internally and makes its own dedup id, so
    only ``ok`` and ``info`` are possible (an earlier internal attempt may have landed).
    """
    definite = DEFINITE if dedup_id is not None else (errors.InvalidArgument,)
    try:
        with proc.operation("send", payload, definite=definite, queue=queue, key=key) as op:
            result = client.send(queue, payload.encode(), key=key, dedup_id=dedup_id)
            op.ok(partition=result.partition, offset=result.offset, duplicate=result.duplicate)
        return "ok"
    except definite:
        return "fail"
    except Exception:
        return "info"


def _records(messages: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "partition": m.partition,
            "offset": m.offset,
            "payload": m.body.decode(errors="replace"),
            "key": m.key,
            "receipt": m.receipt,
        }
        for m in messages
    ]


def receive_once(
    proc: Process,
    client: Any,
    queue: str,
    max_messages: int,
    visibility_ms: int,
    wait_ms: int,
    f: str = "receive",
) -> list[dict[str, Any]] | None:
    """One recorded receive (``f="drain"`` in the final phase); None on error."""
    try:
        with proc.operation(f, None, definite=(errors.InvalidArgument,), queue=queue) as op:
            got = client.receive(
                queue, max_messages=max_messages, visibility_ms=visibility_ms, wait_ms=wait_ms
            )
            records = _records(got)
            op.ok(records)
        return records
    except Exception:
        return None


def ack_once(proc: Process, client: Any, queue: str, records: list[dict[str, Any]]) -> int:
    """One recorded ack of ``records``' leases; the ok value lists only the receipts the
    server accepted (a repeat of an ack that landed reports not_found). Returns that count."""
    try:
        with proc.operation("ack", records, queue=queue) as op:
            results = client.ack(queue, [r["receipt"] for r in records])
            accepted = {res.receipt for res in results if res.ok}
            done = [r for r in records if r["receipt"] in accepted]
            op.ok(done)
        return len(done)
    except Exception:
        return 0


def read_once(
    proc: Process, client: Any, queue: str, partition: int, offset: int, max_messages: int
) -> dict[str, Any] | None:
    """One recorded offset read; returns the ok value plus ``next``, or None on error.

    A read changes nothing, so an error is recorded as ``fail``: the process keeps its
    id, which keeps its monotonic-read checks going.
    """
    start = {"partition": partition, "offset": offset}
    op = proc.invoke("read", start, queue=queue)
    try:
        page = client.read(queue, partition, offset, max_messages=max_messages)
    except Exception as exc:
        proc.fail(op, error=f"{type(exc).__name__}: {exc}")
        return None
    records = [[m.offset, m.body.decode(errors="replace")] for m in page.messages]
    value = {**start, "records": records, "high": page.latest_offset}
    proc.ok(op, value)
    return {**value, "next": page.next_offset}


def partition_count(client: Any, queue: str, stop: threading.Event, timeout_s: float = 60) -> int:
    """The queue's partition count, retried until known (0 if stopped or timed out)."""
    deadline = time.monotonic() + timeout_s
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            return len(client.partitions(queue))
        except errors.QueueError:
            stop.wait(0.5)
    return 0


# ---- final phase (faults healed) ----------------------------------------------------------


def final_drain(
    history: History, client: Any, queue: str, visibility_ms: int, timeout_s: float = 120.0
) -> tuple[int, bool]:
    """Receive and ack until the queue stays empty past every lease's deadline.

    Leases taken by the workload (and not acked) come back after ``visibility_ms``, so
    the queue counts as drained after that long without a delivery. Returns (records
    drained, drained) where drained is False if ``timeout_s`` ran out first.
    """
    proc = history.process()
    deadline = time.monotonic() + timeout_s
    quiet_needed_s = visibility_ms / 1000 + 2.0
    last_seen = time.monotonic()
    total = 0
    while time.monotonic() < deadline:
        got = receive_once(proc, client, queue, 100, DRAIN_VISIBILITY_MS, 500, f="drain")
        if got is None:  # an error is not an empty queue
            last_seen = time.monotonic()
            time.sleep(0.2)
        elif got:
            total += len(got)
            last_seen = time.monotonic()
            ack_once(proc, client, queue, got)
        elif time.monotonic() - last_seen > quiet_needed_s:
            return total, True
    return total, False


def final_reads(
    history: History, client: Any, queue: str, partitions: int, timeout_s: float = 120.0
) -> tuple[int, bool]:
    """Read every partition from offset 0 to its end; returns (records read, complete)."""
    proc = history.process()
    deadline = time.monotonic() + timeout_s
    total = 0
    for part in range(partitions):
        offset, end = 0, None
        while end is None or offset < end:
            if time.monotonic() > deadline:
                return total, False
            page = read_once(proc, client, queue, part, offset, 1000)
            if page is None:
                time.sleep(0.2)
                continue
            total += len(page["records"])
            end = page["high"]
            if page["next"] == offset and offset < end:
                return total, False  # a gap the server will not read past: report it
            offset = page["next"]
    return total, True


# ---- checks that rely on how this workload behaves -------------------------------------


LEASE_MARGIN_NS = 300_000_000  # clock stamping slack when comparing lease windows


def lease_and_read_checks(ops: list[Op], visibility_ms: dict[str, int]) -> dict[str, list[Any]]:
    """Two checks chaos.checker leaves out, from invoke/complete times (one machine, one
    clock):

    - double_lease: a record delivered again before its previous lease could have
      expired (the workload never nacks). A lease taken by a receive invoked at t ends no
      earlier than t + visibility, so a later delivery completed before that is a second
      concurrent lease (as a deposed leader granting leases would cause).
    - stale_read: an offset read that missed a send acknowledged before the read was
      invoked (its ``high`` <= that offset): reads at the leader must be linearizable.
    """
    invoked: dict[Any, int] = {}
    acked: dict[Any, int] = {}  # partition -> highest acknowledged offset so far
    seen_at_invoke: dict[Any, dict[Any, int]] = {}
    leases: dict[tuple[Any, int], list[tuple[int, int, str, int]]] = defaultdict(list)
    stale: list[Any] = []
    for op in ops:
        proc = op["process"]
        if op["type"] == "invoke":
            invoked[proc] = op["time_ns"]
            seen_at_invoke[proc] = dict(acked)
            continue
        if op["type"] != "ok":
            continue
        if op["f"] == "send" and op.get("partition") is not None:
            acked[op["partition"]] = max(acked.get(op["partition"], -1), op["offset"])
        elif op["f"] in visibility_ms:
            for r in op["value"] or []:
                slot = (r["partition"], r["offset"])
                leases[slot].append((invoked[proc], op["time_ns"], op["f"], op["index"]))
        elif op["f"] == "read":
            v, before = op["value"], seen_at_invoke.get(proc, {})
            missed = before.get(v["partition"], -1)
            if v.get("high") is not None and v["high"] <= missed:
                stale.append(
                    {"op": op["index"], **v, "records": len(v["records"]), "acked": missed}
                )
    return {"double_lease": _double_leases(leases, visibility_ms), "stale_read": stale}


def _double_leases(
    leases: dict[tuple[Any, int], list[tuple[int, int, str, int]]], visibility_ms: dict[str, int]
) -> list[Any]:
    found = []
    for (part, offset), got in leases.items():
        got.sort(key=lambda g: g[1])
        for (inv1, _, f1, op1), (_, done2, _, op2) in zip(got, got[1:], strict=False):
            if done2 < inv1 + visibility_ms[f1] * 1_000_000 - LEASE_MARGIN_NS:
                found.append(
                    {"partition": part, "offset": offset, "first_op": op1, "second_op": op2}
                )
    return found
