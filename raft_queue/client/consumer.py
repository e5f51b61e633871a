"""Consumer: iterate messages, ack on success, extend leases while a handler works.

As SQS consumer libraries do with heartbeats: while ``handle`` runs, a timer
extends the message's lease (``change_visibility``) every half visibility
timeout, so a slow handler does not see its message delivered to someone
else. The message is acked when the handler returns and nacked (visible again
after ``retry_delay_ms``) when it raises; the exception is passed to
``on_error`` (default: re-raised after the nack).

``background_acks=True``: each ack is a background ack (``ack(wait=False)``,
client/acks.py): it rides the next receive, so the loop pays one round
trip per batch; a crash before it leaves means a redelivery after the
visibility timeout (docs/semantics.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from raft_queue.client.models import Message

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
        """Extend the lease while the block runs; ack after it, nack if it raises."""
        done = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(message, done), daemon=True)
        beat.start()
        try:
            yield message
        except BaseException:
            done.set()
            beat.join()
            self.client.nack(self.queue, message, delay_ms=self.retry_delay_ms)
            raise
        done.set()
        beat.join()
        self.client.ack(self.queue, message, wait=not self.background_acks)

    def _heartbeat(self, message: Message, done: threading.Event) -> None:
        period_s = max(self.visibility_ms / 2000, 0.05)
        while not done.wait(period_s):
            self.client.change_visibility(self.queue, message, self.visibility_ms)

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
