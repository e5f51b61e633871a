"""Node-to-node gRPC: channels to other nodes and one-hop forwarding.

A request for a partition led elsewhere is forwarded to the leader's node
with the metadata ``raftq-forwarded: 1``; a forwarded request is never
forwarded again (one hop), so a stale route ends in NotLeader for the client,
which re-routes. Remote errors pass through unchanged (code, details,
trailers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import admin_pb2_grpc, queue_pb2_grpc
from raft_queue.errors import Unavailable

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
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._dial = dial
        # TLS (server/tls.py) when the node's [tls] is on: every call below
        # then checks the other node's certificate against the cluster CA.
        self._credentials = credentials

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            target = self._dial(address) or address
            if self._credentials is None:
                ch = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
            else:
                options: list[tuple[str, Any]] = list(CHANNEL_OPTIONS)
                if target != address:
                    # Through a fault proxy, still check the certificate of
                    # the node we mean to reach, not the proxy's address.
                    host = address.rpartition(":")[0].strip("[]")
                    options.append(("grpc.ssl_target_name_override", host))
                ch = grpc.aio.secure_channel(target, self._credentials, options=options)
            self._channels[address] = ch
        return ch

    def queue(self, address: str) -> queue_pb2_grpc.QueueServiceStub:
        return queue_pb2_grpc.QueueServiceStub(self._channel(address))

    def admin(self, address: str) -> admin_pb2_grpc.AdminServiceStub:
        return admin_pb2_grpc.AdminServiceStub(self._channel(address))

    async def forward(self, address: str, method: str, request: Any, timeout_s: float) -> Any:
        """Call QueueService.``method`` on ``address`` as a forwarded request."""
        if not address:
            raise Unavailable("no leader known for this request yet")
        call = getattr(self.queue(address), method)
        try:
            return await call(request, timeout=timeout_s, metadata=(FORWARDED,))
        except grpc.aio.AioRpcError as err:
            raise RemoteError(err) from err

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


async def abort_remote(context: grpc.aio.ServicerContext, exc: RemoteError) -> None:
    err = exc.err
    # grpc.aio hands back a Metadata object; abort() takes a tuple of pairs.
    await context.abort(err.code(), err.details() or "", tuple(err.trailing_metadata() or ()))
