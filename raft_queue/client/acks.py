"""Background acks: ``client.ack(queue, receipts, wait=False)``.

The contract of nats-py's ``msg.ack()`` and AMQP's ``basic_ack``: the call
returns at once, without waiting for the ack to be committed. The receipts
wait here and leave by the first of:

- the client's next ``receive`` of that queue, which carries them
  (``ReceiveRequest.ack``, with ``ack_background``): the server proposes
  them ahead of the new lease and answers without waiting for their
  commit, so a consume loop pays one round trip per batch and no Raft
  round for its acks (their refusals are then not known: ``refused``
  counts those of flushes only);
- a timer, ``flush_ms`` after the first receipt waiting (one Ack call per
  queue, from this module's thread);
- ``flush()`` and ``Client.close()``, which send everything and wait.

What can happen to a background ack (docs/semantics.md, "Background acks"):
if the process dies before the flush, or the flush fails, the receipts are
never acked; their messages become visible again when the lease's
visibility timeout ends and are delivered again (at-least-once, as an
un-acked NATS or RabbitMQ message). Nothing is lost. A flush that fails is
counted (``failed``) and logged, never retried blind: the lease may have
moved on. An ack refused as stale (the lease had expired and the message
was received again) is counted in ``refused``.

Thread-safe: any thread may ``add``; one daemon thread runs the timer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from raft_queue.errors import QueueError

log = logging.getLogger(__name__)

# Wait at most this long for a receive to carry the receipts before an Ack
# call of their own (nats-py flushes its pending writes in about as long).
FLUSH_MS = 10
# Receipts one receive or one Ack call carries at most.
CARRY_MAX = 1000

# (queue, receipts) -> how many were refused (not ok); raises QueueError.
SendAcks = Callable[[str, list[str]], int]


class BackgroundAcks:
    def __init__(self, send: SendAcks, flush_ms: int = FLUSH_MS) -> None:
        self._send = send
        self._delay_s = max(0, flush_ms) / 1000
        self._lock = threading.Lock()
        self._waiting: dict[str, list[str]] = {}
        self._wake = threading.Event()
        self._closed = False
        self._closing = threading.Event()  # ends the timer's wait at close
        self._thread: threading.Thread | None = None
        self.sent = 0  # receipts acked by a flush or a receive that carried them
        self.refused = 0  # answered not ok (stale, already settled)
        self.failed = 0  # in a flush that failed as a whole: their messages come back

    def add(self, queue: str, receipts: list[str]) -> None:
        """Queue ``receipts`` (already checked) for a background ack."""
        if not receipts:
            return
        with self._lock:
            if self._closed:
                raise QueueError("client closed: background acks are no longer taken")
            self._waiting.setdefault(queue, []).extend(receipts)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="raftq-background-acks", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def take(self, queue: str, limit: int = CARRY_MAX) -> list[str]:
        """Up to ``limit`` receipts of ``queue`` for a receive to carry."""
        with self._lock:
            waiting = self._waiting.get(queue)
            if not waiting:
                return []
            taken, rest = waiting[:limit], waiting[limit:]
            if rest:
                self._waiting[queue] = rest
            else:
                del self._waiting[queue]
            return taken

    def give_back(self, queue: str, receipts: list[str]) -> None:
        """Receipts a receive took and could not deliver (it failed): the
        timer sends them (if that receive did apply them, the repeat is
        answered "not found", counted in ``refused``)."""
        if receipts:
            with self._lock:
                self._waiting.setdefault(queue, [])[:0] = receipts
            self._wake.set()

    def carried(self, sent: int, refused: int) -> None:
        with self._lock:
            self.sent += sent - refused
            self.refused += refused

    def flush(self) -> None:
        """Send every waiting receipt now (the caller's thread) and wait."""
        while True:
            with self._lock:
                if not self._waiting:
                    return
                queue = next(iter(self._waiting))
            self._flush_queue(queue)

    def close(self) -> None:
        """Flush, stop the timer thread, refuse further ``add``s."""
        self.flush()
        with self._lock:
            self._closed = True
            thread = self._thread
        self._closing.set()
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def _flush_queue(self, queue: str) -> None:
        receipts = self.take(queue)
        if not receipts:
            return
        try:
            refused = self._send(queue, receipts)
        except QueueError as exc:
            with self._lock:
                self.failed += len(receipts)
            log.warning(
                "background ack of %d receipts of %r failed (their messages will be "
                "delivered again after their visibility timeout): %s",
                len(receipts),
                queue,
                exc,
            )
            return
        self.carried(len(receipts), refused)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                if self._closed:
                    return
                self._wake.clear()
            # The first receipt is at most flush_ms old when it leaves: a
            # receive in the meantime takes it along instead.
            self._closing.wait(self._delay_s)
            try:
                self.flush()
            except Exception:  # never let the timer thread die
                log.exception("background ack flush failed")
