"""Node-to-node gRPC: channels to other nodes and one-hop forwarding.

A request for a partition led elsewhere is forwarded to the leader's node
with the metadata ``raftq-forwarded: 1``; a forwarded request is never
forwarded again (one hop), so a stale route ends in NotLeader for the client,
which re-routes. Remote errors pass through unchanged (code, details,
trailers).

Credentials: a forwarded request carries the caller's own ``authorization``
(server/api/auth.py keeps it for the call), so the leader's node checks the
same principal again; the node's own calls (heartbeats, status, metadata
polls, work it starts itself) carry the node's credential.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import admin_pb2_grpc, queue_pb2_grpc
from raft_queue.errors import Unavailable
from raft_queue.server.api.auth import AUTHORIZATION, CALLER_AUTHORIZATION

FORWARDED = ("raftq-forwarded", "1")
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


def is_forwarded(context: grpc.aio.ServicerContext) -> bool:
    return any(k == FORWARDED[0] for k, _ in (context.invocation_metadata() or ()))


class RemoteError(Exception):
    """A forwarded call failed on the remote node; re-raised to our caller as is."""

    def __init__(self, err: grpc.aio.AioRpcError) -> None:
        super().__init__(err.details())
        self.err = err


class Peers:
    """Channels to other nodes by gRPC address (asyncio thread only)."""

    def __init__(
        self,
        dial: Callable[[str], str | None] = lambda a: None,
        credentials: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._dial = dial
        self._credentials = credentials  # the node's own (server/api/auth.node_credentials)

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            target = self._dial(address) or address
            ch = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
            self._channels[address] = ch
        return ch

    def queue(self, address: str) -> queue_pb2_grpc.QueueServiceStub:
        return queue_pb2_grpc.QueueServiceStub(self._channel(address))

    def admin(self, address: str) -> Any:
        """AdminService calls as this node (its credential on every call)."""
        return _WithMetadata(admin_pb2_grpc.AdminServiceStub(self._channel(address)),
                             self._credentials)  # fmt: skip

    def _forward_metadata(self) -> tuple[tuple[str, str], ...]:
        caller = CALLER_AUTHORIZATION.get()
        if caller is None:  # work this node started itself (not a client's call)
            return (FORWARDED, *self._credentials)
        return (FORWARDED, (AUTHORIZATION, caller)) if caller else (FORWARDED,)

    async def forward(self, address: str, method: str, request: Any, timeout_s: float) -> Any:
        """Call QueueService.``method`` on ``address`` as a forwarded request."""
        if not address:
            raise Unavailable("no leader known for this request yet")
        call = getattr(self.queue(address), method)
        try:
            return await call(request, timeout=timeout_s, metadata=self._forward_metadata())
        except grpc.aio.AioRpcError as err:
            raise RemoteError(err) from err

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


class _WithMetadata:
    """A stub whose every method call carries ``metadata``."""

    def __init__(self, stub: Any, metadata: tuple[tuple[str, str], ...]) -> None:
        self._stub = stub
        self._metadata = metadata

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)
        return lambda request, **kw: method(request, metadata=self._metadata, **kw)


async def abort_remote(context: grpc.aio.ServicerContext, exc: RemoteError) -> None:
    err = exc.err
    # grpc.aio hands back a Metadata object; abort() takes a tuple of pairs.
    await context.abort(err.code(), err.details() or "", tuple(err.trailing_metadata() or ()))
