"""The load of chaos/move_campaign.py: producers and consumers of one queue.

Producers send keyed messages one at a time (payload ``key/n``, unique in the
run); consumers receive up to 20, then ack them; every call is recorded in a
``chaos.history.History`` (an exception is an ``info``: outcome unknown, and
the thread goes on as a new process, as Jepsen's clients do).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos.consuming import consume_recorded
from chaos.history import History


@dataclass
class Load:
    """Producers and consumers of one queue, recorded in ``history``: ``connect()``
    makes each thread's client, ``seen(message, client)`` records a delivery."""

    history: History
    queue: str
    keys: list[str]
    connect: Callable[[], Any]
    seen: Callable[[Any, Any], dict[str, Any]]
    stop_sends: threading.Event = field(default_factory=threading.Event)
    stop_receives: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, producers: int = 2, consumers: int = 2) -> Load:
        for i in range(producers):
            self._spawn(self._produce, self.keys[i::producers])
        for _ in range(consumers):
            self._spawn(self._consume)
        return self

    def _spawn(self, fn: Any, *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _produce(self, keys: list[str]) -> None:
        client, h, q = self.connect(), self.history, self.queue
        process, n = h.new_process_id(), 0
        while not self.stop_sends.is_set():
            for key in keys:
                payload = f"{key}/{n:05d}"
                op = h.invoke(process, "send", payload, queue=q, key=key)
                try:
                    client.send(q, payload, key=key)
                except Exception as exc:  # outcome unknown: a new process goes on
                    h.complete(op, "info", error=repr(exc))
                    process = h.new_process_id()
                    continue
                h.complete(op, "ok")
            n += 1
        client.close()

    def _consume(self) -> None:
        client = self.connect()
        consume_recorded(self.history, client, self.queue, self.stop_receives, 20,
                         seen=lambda m: self.seen(m, client))  # fmt: skip
        client.close()

    def drain(self) -> None:
        client, h = self.connect(), self.history
        drain = h.invoke(h.new_process_id(), "drain", queue=self.queue)
        left = client.receive(self.queue, max_messages=100, wait_ms=1000)
        h.complete(drain, "ok", [self.seen(m, client) for m in left])
        client.close()


def finish(loads: list[Load], history: History, timeout_s: float) -> list[str]:
    """Stop sending, wait (bounded) until every message sent was delivered and
    its ack tried, then drain. Returns the stacks of client threads still stuck
    in a call 20 s after being told to stop (a liveness finding, not a loss)."""
    for load in loads:
        load.stop_sends.set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not _sent(history) <= _ack_tried(history):
        time.sleep(0.5)
    for load in loads:
        load.stop_receives.set()
    stuck, join_by = [], time.monotonic() + 20
    for t in [t for load in loads for t in load.threads]:
        t.join(max(0.1, join_by - time.monotonic()))
        frame = sys._current_frames().get(t.ident or -1)
        if t.is_alive() and frame is not None:
            stuck.append("".join(traceback.format_stack(frame)[-6:]))
    for load in loads:
        load.drain()
    return stuck


def _sent(history: History) -> set[str]:
    return {o["value"] for o in list(history.ops) if o["f"] == "send" and o["type"] == "ok"}


def _ack_tried(history: History) -> set[str]:
    """Payloads some ack was sent for (a lost check needs them delivered, no more:
    an ack whose call hangs or ends unknown must not hold the run)."""
    ops = list(history.ops)
    return {r["payload"] for o in ops if o["f"] == "ack" for r in o["value"] or []}
