"""Push delivery: ``Client.subscribe`` over the Subscribe stream, credit-based.

The server sends at most as many messages as the client granted in total
(Reactive Streams' request(n)). ``Subscription`` grants ``prefetch`` at
start and one more each time you ask for the next message, so with the usual
loop (ack, then ask for the next) you never hold more than ``prefetch``
unacked messages. Leases are ordinary: ack or nack through the client; the
leases of a closed or dropped stream expire after their visibility timeout
and the messages are delivered again (nothing is lost).

    with client.subscribe("orders", prefetch=10) as sub:
        for m in sub:
            handle(m)
            client.ack("orders", [m.receipt])
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.client.errors import from_rpc_error
from raft_queue.client.models import Message, message_from_pb
from raft_queue.errors import InvalidArgument

_CLOSE = object()


class Subscription:
    """An open Subscribe stream. Iterate for messages; ``close()`` ends it."""

    def __init__(
        self,
        stub: Any,
        queue_name: str,
        prefetch: int,
        visibility_ms: int | None,
        consumer: str,
        auto_grant: bool,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        if prefetch < 1:
            raise InvalidArgument("prefetch", "must be at least 1")
        self._requests: queue.Queue[Any] = queue.Queue()
        first = queue_pb2.SubscribeRequest(queue=queue_name, consumer=consumer, credit=prefetch)
        if visibility_ms is not None:
            first.visibility_ms = visibility_ms
        self._requests.put(first)
        self._auto_grant = auto_grant
        self._delivered = 0
        self._responses = stub.Subscribe(self._request_stream(), metadata=metadata)

    def _request_stream(self) -> Iterator[Any]:
        while True:
            item = self._requests.get()
            if item is _CLOSE:
                return
            yield item

    def grant(self, credit: int) -> None:
        """Allow ``credit`` more messages (when ``auto_grant`` is off)."""
        if credit > 0:
            self._requests.put(queue_pb2.SubscribeRequest(credit=credit))

    def __iter__(self) -> Iterator[Message]:
        try:
            for pb in self._responses:
                if self._auto_grant and self._delivered:
                    self.grant(1)  # the previous message is handled: one more
                self._delivered += 1
                yield message_from_pb(pb)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise from_rpc_error(exc, mutating=True) from exc

    def close(self) -> None:
        """End the stream; unacked leases expire normally."""
        self._requests.put(_CLOSE)
        self._responses.cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
