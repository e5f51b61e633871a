"""Subscribe: push delivery over a bidirectional stream, credit-based.

The client's first message names the queue (and optionally visibility and
consumer id); every message may grant more credit, which adds up. The server
long-polls (``Receiver``) for at most the credit left and sends what it
leases, so it never sends more than was granted. Messages are leased exactly
as by Receive: the client acks through Ack/Nack, and the leases of a stream
that drops expire after their visibility timeout (none is lost). A lease
taken while the stream is being cancelled is given back at once.

The credit a stream holds (granted, not yet used) is capped by
``limits.max_subscribe_credit``: a grant that would pass it is refused
(INVALID_ARGUMENT naming the limit; the stream ends) and never added.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.observability import metrics
from raft_queue.server.cluster import Cluster
from raft_queue.server.dataplane.receiving import Receiver

MAX_PUSH_BATCH = 100


class Subscriber:
    def __init__(self, cluster: Cluster, receiver: Receiver) -> None:
        self.cluster = cluster
        self.receiver = receiver
        self.limits = cluster.node.config.limits

    async def serve(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        """Yield leased messages as credit allows, until the client goes away."""
        first = await _first(requests)
        q = self.cluster.node.queue_spec(first.queue)
        template = queue_pb2.ReceiveRequest(queue=q.name, consumer=first.consumer)
        if first.HasField("visibility_ms"):
            template.visibility_ms = first.visibility_ms
        cap = self.limits.max_subscribe_credit
        credit = [_checked(0, first.credit, cap)]
        granted = asyncio.Event()
        reader = asyncio.ensure_future(_read_credit(requests, credit, granted, cap))
        try:
            while True:
                if reader.done() and not reader.cancelled() and reader.exception() is not None:
                    raise reader.exception()  # type: ignore[misc]
                if credit[0] <= 0:
                    if reader.done():
                        return  # no credit left and the client will grant no more
                    granted.clear()
                    await granted.wait()
                    continue
                request = queue_pb2.ReceiveRequest()
                request.CopyFrom(template)
                request.max_messages = min(credit[0], MAX_PUSH_BATCH)
                request.wait_ms = self.limits.max_wait_ms
                messages = await _unless_refused(
                    self.receiver.receive(request, forwarded=False), reader
                )
                metrics.count_received(request.queue, messages)
                for message in messages:
                    credit[0] -= 1
                    yield message
        finally:
            reader.cancel()


async def _first(requests: Any) -> Any:
    async for request in requests:
        if not request.queue:
            raise errors.InvalidArgument("queue", "the first Subscribe message names the queue")
        return request
    raise errors.InvalidArgument("queue", "the stream ended before naming a queue")


async def _unless_refused(receive: Any, reader: asyncio.Future[None]) -> Any:
    """``receive``'s messages; if the credit reader fails meanwhile (a grant
    over the cap), the long poll is cancelled (its leases go back) and the
    reader's error ends the stream at once."""
    task = asyncio.ensure_future(receive)
    await asyncio.wait({task, reader}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        return task.result()
    if reader.cancelled() or reader.exception() is None:
        return await task  # the client half-closed: finish this poll
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise reader.exception()  # type: ignore[misc]


def _checked(held: int, grant: int, cap: int) -> int:
    """The credit held after ``grant``; over ``cap`` is refused."""
    if held + grant > cap:
        metrics.count_rejection("limits")
        raise errors.InvalidArgument(
            "credit",
            f"{held} held + {grant} granted is over limits.max_subscribe_credit {cap}",
        )
    return held + grant


async def _read_credit(requests: Any, credit: list[int], granted: asyncio.Event, cap: int) -> None:
    try:
        async for request in requests:
            if request.credit:
                credit[0] = _checked(credit[0], request.credit, cap)
                granted.set()
    finally:
        granted.set()
