"""Producer: batches sends in the background (linger and batch size), one future per message.

As Kafka's producer: ``send`` returns at once with a future; a background
thread sends what has queued when ``batch_size`` messages are waiting or the
oldest has waited ``linger_ms``, as one ``send_batch`` (one RPC per partition
leader). The client's retries of an RPC never duplicate a message (each
Send RPC carries a request id its retries repeat); give messages your own
``dedup_id`` to make re-sends across calls idempotent too. ``flush`` waits
for everything queued so far; ``close`` flushes and stops the thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING

from raft_queue.client.models import OutgoingMessage, SendResult
from raft_queue.errors import FailedPrecondition, InvalidArgument

if TYPE_CHECKING:
    from raft_queue.client.client import Client


class Producer:
    def __init__(
        self, client: Client, queue: str, linger_ms: int = 5, batch_size: int = 500
    ) -> None:
        if linger_ms < 0 or batch_size < 1:
            raise InvalidArgument("linger_ms", "linger_ms >= 0 and batch_size >= 1 required")
        self.client, self.queue = client, queue
        self.linger_s, self.batch_size = linger_ms / 1000, batch_size
        self._cond = threading.Condition()
        self._queued: list[tuple[OutgoingMessage, Future[SendResult], float]] = []
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="raftq-producer", daemon=True)
        self._thread.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send(
        self,
        body: bytes | str,
        key: str = "",
        headers: Mapping[str, bytes | str] | None = None,
        dedup_id: str | None = None,
        delay_ms: int = 0,
    ) -> Future[SendResult]:
        """Queue one message; the future holds its SendResult or the QueueError."""
        message = OutgoingMessage(body, key, headers, dedup_id, delay_ms)
        fut: Future[SendResult] = Future()
        with self._cond:
            if self._closed:
                raise FailedPrecondition("producer is closed")
            self._queued.append((message, fut, time.monotonic()))
            self._cond.notify_all()
        return fut

    def flush(self, timeout_s: float | None = None) -> None:
        """Until every message queued before this call was sent (or failed)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._queued or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("producer flush timed out")
                self._cond.wait(left)

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _next_batch(self) -> list[tuple[OutgoingMessage, Future[SendResult], float]] | None:
        """Block until a batch is due (full, or its oldest lingered); None once closed."""
        with self._cond:
            while True:
                if self._queued:
                    due = self._queued[0][2] + self.linger_s
                    full = len(self._queued) >= self.batch_size
                    if full or self._closed or time.monotonic() >= due:
                        batch = self._queued[: self.batch_size]
                        del self._queued[: self.batch_size]
                        self._busy = True
                        return batch
                    self._cond.wait(due - time.monotonic())
                elif self._closed:
                    return None
                else:
                    self._cond.wait()

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                results = self.client.send_batch(self.queue, [m for m, _, _ in batch])
            except Exception as exc:
                for _, fut, _ in batch:
                    fut.set_exception(exc)
            else:
                for (_, fut, _), result in zip(batch, results, strict=True):
                    fut.set_result(result)
            with self._cond:
                self._busy = False
                self._cond.notify_all()
