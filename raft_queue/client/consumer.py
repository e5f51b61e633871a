"""Consumer: iterate messages, ack on success, extend leases while a handler works.

As SQS consumer libraries do with heartbeats: while ``handle`` runs, the
message's lease is extended (``change_visibility``) every half visibility
timeout, so a slow handler does not see its message delivered to someone
else. One thread per Consumer does it for every message in progress, in one
ChangeVisibility per due batch (``LeaseKeeper``): a thread per message cost
its start and join, 235 µs a message on a busy 2-core machine, and one call
per message per period. The message is acked when the handler returns and
nacked (visible again after ``retry_delay_ms``) when it raises; the
exception is passed to ``on_error`` (default: re-raised after the nack).

``background_acks=True``: each ack is a background ack (``ack(wait=False)``,
client/acks.py): it rides the next receive, so the loop pays one round
trip per batch; a crash before it leaves means a redelivery after the
visibility timeout (docs/semantics.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from raft_queue.client.models import Message, ReceiptResult

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from raft_queue.client.client import Client


class Consumer:
    def __init__(
        self,
        client: Client,
        queue: str,
        batch: int = 10,
        wait_ms: int = 20_000,
        visibility_ms: int = 30_000,
        consumer: str = "",
        retry_delay_ms: int = 0,
        background_acks: bool = False,
    ) -> None:
        self.client, self.queue = client, queue
        self.batch, self.wait_ms = batch, wait_ms
        self.visibility_ms, self.consumer = visibility_ms, consumer
        self.retry_delay_ms = retry_delay_ms
        self.background_acks = background_acks
        self._stop = threading.Event()
        self._keeper = LeaseKeeper(self._extend, max(visibility_ms / 2000, 0.05))

    def stop(self) -> None:
        """Make ``messages``/``run`` return after the current message."""
        self._stop.set()

    def messages(self) -> Iterator[Message]:
        """Leased messages, long-polling, until ``stop``; the caller acks."""
        while not self._stop.is_set():
            got = self.client.receive(
                self.queue, self.batch, self.visibility_ms, self.wait_ms, self.consumer
            )
            yield from got

    @contextmanager
    def processing(self, message: Message) -> Iterator[Message]:
        """Extend the lease while the block runs; ack after it, nack if it
        raises. Any number of threads may process messages at once."""
        held = self._keeper.hold(message)
        try:
            yield message
        except BaseException:
            self._keeper.release(held)
            self.client.nack(self.queue, message, delay_ms=self.retry_delay_ms)
            raise
        self._keeper.release(held)
        self.client.ack(self.queue, message, wait=not self.background_acks)

    def _extend(self, messages: list[Message]) -> list[ReceiptResult]:
        return self.client.change_visibility(self.queue, messages, self.visibility_ms)

    def run(
        self,
        handle: Callable[[Message], None],
        on_error: Callable[[Message, Exception], None] | None = None,
    ) -> None:
        """Handle messages until ``stop``: ack each on success, nack on error."""
        for message in self.messages():
            try:
                with self.processing(message):
                    handle(message)
            except Exception as exc:
                if on_error is None:
                    raise
                on_error(message, exc)
            if self._stop.is_set():
                return


class LeaseKeeper:
    """Extends the leases of the messages it holds every ``period_s``, from
    one thread, in one ``extend(messages)`` call per batch of due messages.

    ``release`` returns only once no extension of that message is under
    way, so nothing extends a lease after the caller's ack or nack. A lease
    the server no longer holds (its result not ok) is dropped; an error of
    the whole call (the cluster unreachable) is logged and retried at the
    next period. The thread starts with the first ``hold`` and ends after
    IDLE_S with nothing held."""

    IDLE_S = 10.0

    def __init__(
        self, extend: Callable[[list[Message]], list[ReceiptResult]], period_s: float
    ) -> None:
        self._extend = extend
        self._period_s = period_s
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Message]] = {}  # key -> (monotonic due, message)
        self._extending: set[int] = set()
        self._next_key = 0
        self._thread: threading.Thread | None = None

    def hold(self, message: Message) -> int:
        with self._cond:
            key, self._next_key = self._next_key, self._next_key + 1
            self._due[key] = (time.monotonic() + self._period_s, message)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="raftq-lease-keeper", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        return key

    def release(self, key: int) -> None:
        with self._cond:
            self._due.pop(key, None)
            while key in self._extending:
                self._cond.wait()

    def _run(self) -> None:
        while True:
            batch = self._wait_due()
            if batch is None:
                return
            results: list[ReceiptResult] = []
            try:
                results = self._extend([message for _key, message in batch])
            except Exception:
                log.warning("extending %d leases failed; retried", len(batch), exc_info=True)
            finally:  # even if the thread dies here, no release() waits for good
                with self._cond:
                    for (key, _message), result in zip(batch, results, strict=False):
                        if not result.ok:
                            self._due.pop(key, None)  # lost: extending again cannot help
                    self._extending.clear()
                    self._cond.notify_all()

    def _wait_due(self) -> list[tuple[int, Message]] | None:
        """The held messages now due (marked as being extended, due again a
        period later), or None (the thread ends) after IDLE_S with none."""
        with self._cond:
            idle_since = time.monotonic()
            while True:
                now = time.monotonic()
                # Those due within half a period too: one call for messages
                # held a moment apart (each is still extended at least every
                # period, so well within its visibility timeout).
                soon = now + self._period_s / 2
                batch = [(k, m) for k, (due, m) in self._due.items() if due <= soon]
                if batch:
                    for key, message in batch:
                        self._due[key] = (now + self._period_s, message)
                    self._extending.update(key for key, _ in batch)
                    return batch
                if self._due:
                    idle_since = now
                    self._cond.wait(min(due for due, _ in self._due.values()) - now)
                elif now - idle_since >= self.IDLE_S:
                    self._thread = None
                    return None
                else:
                    self._cond.wait(idle_since + self.IDLE_S - now)
