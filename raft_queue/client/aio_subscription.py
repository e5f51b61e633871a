"""Push delivery for asyncio: ``AsyncClient.subscribe``, the awaited twin of
``Subscription`` (client/subscription.py), with the same credit rules.

    async with client.subscribe("orders", prefetch=10) as sub:
        async for m in sub:
            await handle(m)
            await client.ack("orders", [m.receipt])
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.client.errors import from_rpc_error
from raft_queue.client.models import Message, message_from_pb
from raft_queue.errors import InvalidArgument


class AsyncSubscription:
    """An open Subscribe stream on grpc.aio. ``async for`` for messages;
    ``await close()`` ends it (unacked leases expire normally)."""

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
        self._first: Any = queue_pb2.SubscribeRequest(
            queue=queue_name, consumer=consumer, credit=prefetch
        )
        if visibility_ms is not None:
            self._first.visibility_ms = visibility_ms
        self._auto_grant = auto_grant
        self._delivered = 0
        self._closed = False
        self._call = stub.Subscribe(metadata=metadata)

    async def _write(self, request: Any) -> None:
        try:
            await self._call.write(request)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, mutating=True) from exc

    async def grant(self, credit: int) -> None:
        """Allow ``credit`` more messages (when ``auto_grant`` is off)."""
        if credit > 0:
            await self._write(queue_pb2.SubscribeRequest(credit=credit))

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Message:
        if self._first is not None:
            first, self._first = self._first, None
            await self._write(first)
        elif self._auto_grant and self._delivered:
            await self.grant(1)  # the previous message is handled: one more
        try:
            pb = await self._call.read()
        except asyncio.CancelledError:
            if self._closed:  # close() from another task ended the stream
                raise StopAsyncIteration from None
            raise
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                raise StopAsyncIteration from exc
            raise from_rpc_error(exc, mutating=True) from exc
        if pb is grpc.aio.EOF or self._closed:
            raise StopAsyncIteration
        self._delivered += 1
        return message_from_pb(pb)

    async def close(self) -> None:
        """End the stream; unacked leases expire normally."""
        self._closed = True
        self._call.cancel()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
