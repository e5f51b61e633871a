"""ReceiveStream: Receive on one long-lived bidi stream (issue 17).

A consume loop with one Receive in flight pays, per unary Receive, a call
set-up, the door's four interceptors and the call's end (status and
trailers); on one stream per client and node it pays them once, as a
producer does on SendStream (server/api/send_stream.py, whose security model
this shares):

- **at open**: every interceptor runs as for any call; the door
  authenticates the caller and hands the servicer a ``StreamGate`` for this
  identity (``SEND_GATE``); a stream that reaches the servicer without one is
  refused (UNAUTHENTICATED).
- **per request**: ``StreamGate.admit`` checks the ``receive`` grant on the
  request's queue (after a metadata barrier when refused, as the door does);
  ``done`` counts usage as a unary Receive's (its messages, the acks it
  carried, the answer's size).
- **the Receive itself** is QueueService.Receive's (``QueueService.receive``):
  the principal's long-poll cap, leases, the acks it carries, fan-out to
  the other partitions' leaders.

Each request is answered in order by one ReceiveStreamResponse; a request
that fails gets the status a unary Receive would end with in ``error``, and
the stream goes on. Requests on one stream are handled one after the other
(the SDK keeps one in flight per stream). A stream cancelled or broken while
a Receive waits cancels that Receive as a unary call's cancellation would:
what it leased is given back (dataplane/receiving.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.server.api.send_stream import GatedStream

RECEIVE_LABEL = "QueueService/Receive"  # the RPC metrics each request on the stream counts under


class ReceiveStreamServer(GatedStream):
    """QueueService.ReceiveStream's loop, over the unary Receive's parts."""

    name = "ReceiveStream"
    label = RECEIVE_LABEL
    answer_type = queue_pb2.ReceiveStreamResponse

    def __init__(self, receive: Callable[[Any], Awaitable[Any]], barrier: Any) -> None:
        super().__init__(barrier)
        self.receive = receive  # QueueService.receive: a client's Receive, not forwarded

    async def handle(self, request: Any) -> Any:
        return await self.receive(request)
