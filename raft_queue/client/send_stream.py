"""Sends on one long-lived SendStream per node (issue 17), for the sync Client.

A unary Send pays a call set-up each time; on an open bidi stream a request
is one message each way (``python -m raft_queue.bench.grpc_floor``: 0.62 ->
0.40 ms p50 for a bare round trip on this machine). ``SendStreams.send``
carries one Send attempt on the stream to ``address`` when that stream is
free, and answers None otherwise (a second thread's send, a node that does
not serve SendStream): the caller then makes the unary call. So a producer
with one message in flight uses the stream, and concurrent senders keep
their parallelism through unary calls.

What an attempt on the stream raises is what the unary Send would: a
request's own failure comes back as data (its status code, details and
``raftq-*`` trailers: ``client/errors.from_status``), and leaves the stream
open; a broken stream (node gone, cancelled, timed out, ended) raises what
a broken unary call raises (``from_rpc_error``: OutcomeUnknown when the
request may have been stored) and is dropped, so the retry (same request
id, deduplicated by the server) opens a new one or goes unary. Retries,
backoff and NOT_LEADER hints stay the Retrier's and the target's
(``Client._call``): this module only carries one attempt.

Threads: any thread may call ``send``; a stream carries one request at a
time (its ``busy`` lock). Timeouts: a watchdog thread (one per client,
started with the first stream) cancels a stream whose request has passed its
deadline, as a unary call's deadline would end it; it wakes every
``WATCH_S`` while streams are open, and ends when none is. Idle streams: a
stream with nothing sent for ``IDLE_S`` is closed, since a node counts an
open stream as a call in progress (``limits.max_concurrent_rpcs``,
server/api/concurrency.py) for as long as it stays open: a producer that
went quiet must not hold one of them (nor the node's coroutine and HTTP/2
stream). The next send opens a new one (one call set-up).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from raft_queue.client.errors import from_rpc_error, from_status
from raft_queue.client.routing import Router
from raft_queue.errors import OutcomeUnknown

WATCH_S = 0.05  # how late a timed-out stream attempt may end
IDLE_S = 10.0  # a stream unused this long is closed


class _Stream:
    """One open SendStream: requests in through a queue, answers read in order."""

    def __init__(self, stub: Any, metadata: Any) -> None:
        self.busy = threading.Lock()
        self.deadline = 0.0  # monotonic; 0: nothing in flight
        self.used = time.monotonic()  # when the last request ended
        self.timed_out = False
        self.closed = False
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._answers = stub.SendStream(self._requests(), metadata=metadata)

    def _requests(self) -> Iterator[Any]:
        while (request := self._outbox.get()) is not None:
            yield request

    def call(self, request: Any, timeout_s: float) -> Any:
        """The answer to ``request`` (a SendStreamResponse); grpc.RpcError or
        StopIteration when the stream broke."""
        self.deadline = time.monotonic() + timeout_s
        try:
            self._outbox.put(request)
            return next(self._answers)
        finally:
            self.deadline = 0.0
            self.used = time.monotonic()

    def close(self) -> None:
        self.closed = True
        self._outbox.put(None)
        self._answers.cancel()


class SendStreams:
    """The client's SendStreams, one per node address."""

    def __init__(self, router: Router, idle_s: float | None = None) -> None:
        self._router = router
        self._idle_s = IDLE_S if idle_s is None else idle_s
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._unsupported: set[str] = set()  # nodes that answered UNIMPLEMENTED
        self._closed = False
        self._watchdog: threading.Thread | None = None

    def send(self, address: str, request: Any, timeout_s: float) -> Any | None:
        """The SendResponse of one attempt on ``address``'s stream; None when
        the stream is busy or the node does not serve it (make the unary call).
        Raises the QueueError of the request, or of a broken stream."""
        stream = self._stream(address)
        if stream is None or not stream.busy.acquire(blocking=False):
            return None
        if stream.closed:  # closed idle after we found it: nothing was sent
            stream.busy.release()
            return None
        try:
            answer = stream.call(request, timeout_s)
        except grpc.RpcError as exc:
            self._drop(address, stream)
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:  # nothing was sent: go unary
                with self._lock:
                    self._unsupported.add(address)
                return None
            if stream.timed_out:
                why = f"deadline exceeded ({timeout_s:.2f} s) on the send stream"
                raise OutcomeUnknown(why) from exc
            raise from_rpc_error(exc, mutating=True) from exc
        except StopIteration:
            self._drop(address, stream)
            raise OutcomeUnknown("the send stream ended before answering") from None
        finally:
            stream.busy.release()
        if answer.HasField("error"):
            err = answer.error
            code = _CODES.get(err.code, grpc.StatusCode.UNKNOWN)
            raise from_status(code, err.details, dict(err.trailers), mutating=True)
        return answer.response

    def close(self) -> None:
        with self._lock:
            self._closed = True
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.close()

    def _stream(self, address: str) -> _Stream | None:
        with self._lock:
            if self._closed or address in self._unsupported:
                return None
            stream = self._streams.get(address)
            if stream is None:
                stub = self._router.queue_stub(address)
                stream = self._streams[address] = _Stream(stub, self._router.metadata)
                if self._watchdog is None:
                    self._watchdog = threading.Thread(
                        target=self._watch, name="raftq-send-streams", daemon=True
                    )
                    self._watchdog.start()
            return stream

    def _drop(self, address: str, stream: _Stream) -> None:
        with self._lock:
            if self._streams.get(address) is stream:
                del self._streams[address]
        stream.close()

    def _watch(self) -> None:
        """Cancel streams whose request is past its deadline and close idle
        ones, until the client is closed or no stream is open."""
        while True:
            time.sleep(WATCH_S)
            with self._lock:
                if self._closed or not self._streams:
                    self._watchdog = None
                    return
                streams = list(self._streams.items())
            now = time.monotonic()
            for address, stream in streams:
                deadline = stream.deadline
                if deadline and now > deadline:
                    stream.timed_out = True
                    stream.close()
                elif now - stream.used > self._idle_s and stream.busy.acquire(blocking=False):
                    try:  # busy held: no send can start on it while it closes
                        self._drop(address, stream)
                    finally:
                        stream.busy.release()


_CODES = {code.value[0]: code for code in grpc.StatusCode}
