"""The asyncio SDK client: ``AsyncClient``, the same surface as ``Client``, awaited.

Both run the same flows (``calls.py``); only the transport differs (grpc.aio
channels, awaited retries). Every method of ``Client`` except ``redrive``
exists here and returns an awaitable of the same result; ``subscribe`` returns
an ``AsyncSubscription`` to use with ``async with`` / ``async for``::

    async with AsyncClient("127.0.0.1:7101") as c:
        await c.send("orders", b"hello")
        for m in await c.receive("orders", max_messages=10, wait_ms=5000):
            await c.ack("orders", m)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypeVar

import grpc

from raft_queue.client.aio_subscription import AsyncSubscription
from raft_queue.client.calls import Call, Flow
from raft_queue.client.client import Surface, parse_bootstrap
from raft_queue.client.credentials import call_metadata, resolve_token
from raft_queue.client.errors import from_rpc_error
from raft_queue.client.partitioner import RoundRobin
from raft_queue.client.retry import Backoff, Retrier
from raft_queue.client.routing import CHANNEL_OPTIONS, AnyNode, Router
from raft_queue.client.tls import ClientTls, aio_factory
from raft_queue.errors import QueueError

T = TypeVar("T")


def aio_channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


class AsyncClient(Surface):
    """A connection to a raft_queue cluster for asyncio code (one event loop)."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "127.0.0.1:7101",
        timeout_s: float = 10.0,
        retries: int = 5,
        *,
        backoff: Backoff | None = None,
        token: str | None = None,
        tls: bool = False,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> None:
        # TLS arguments as Client's (client/tls.py).
        factory = aio_factory(ClientTls.of(tls, ca_file, cert_file, key_file))
        self._router = Router(parse_bootstrap(bootstrap), channel_factory=factory)
        self._router.metadata = call_metadata(resolve_token(token))
        self._retrier = Retrier(retries, timeout_s, backoff)
        self._round_robin = RoundRobin()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel. Idempotent; later calls raise FailedPrecondition."""
        await asyncio.gather(*(ch.close() for ch in self._router.detach()))

    async def _run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` as ``Client._run`` does, awaiting each call."""
        try:
            call = next(flow)
            while True:
                try:
                    response = await self._call(call)
                except QueueError as exc:
                    call = flow.throw(exc)
                else:
                    call = flow.send(response)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _call(self, call: Call) -> Any:
        target = call.to or AnyNode()
        router = self._router

        async def attempt(timeout_s: float) -> Any:
            address = target.address(router)
            stub = router.admin_stub(address) if call.admin else router.queue_stub(address)
            try:
                return await getattr(stub, call.rpc)(
                    call.request, timeout=timeout_s, metadata=router.metadata
                )
            except grpc.RpcError as exc:
                err = from_rpc_error(exc, mutating=call.mutating)
                target.failed(router, address, err)
                raise err from exc

        return await self._retrier.run_async(
            attempt, idempotent=call.idempotent, extra_s=call.extra_s
        )

    def subscribe(
        self,
        queue: str,
        prefetch: int = 10,
        visibility_ms: int | None = None,
        consumer: str = "",
        auto_grant: bool = True,
    ) -> AsyncSubscription:
        """Push delivery, as ``Client.subscribe``: ``async for`` over the result;
        at most ``prefetch`` unacked when you ack each before the next."""
        stub = self._router.queue_stub(self._router.any_address())
        return AsyncSubscription(
            stub, queue, prefetch, visibility_ms, consumer, auto_grant, self._router.metadata
        )
