"""Node-to-node gRPC: channels to other nodes and one-hop forwarding.

A request for a partition led elsewhere is forwarded to the leader's node
with the metadata ``raftq-forwarded: 1`` and this node's signature (the
receiver honours the marker only when signed: server/api/node_identity.py);
a forwarded request is never forwarded again (one hop), so a stale route
ends in NotLeader for the client, which re-routes. Remote errors pass
through unchanged (code, details, trailers).

Node-to-node calls (NodeService) and forwards are signed here and only here:
every stub that reaches another node comes from ``Peers``.

Credentials: a forwarded request also carries the caller's own
``authorization`` (server/api/auth.py keeps it for the call), so the leader's
node checks the same principal again; work the node starts itself carries
only its signature, which the door takes as the node's own identity.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import admin_pb2_grpc, queue_pb2, queue_pb2_grpc
from raft_queue.errors import Unavailable
from raft_queue.security.node_identity import NodeSigner
from raft_queue.server.api.auth import AUTHORIZATION, CALLER_AUTHORIZATION
from raft_queue.server.api.node_identity import (
    FORWARDED_KEY,
    QUEUE_SERVICE,
    NodeStub,
    SignedCall,
    response_class,
)
from raft_queue.server.callcancel import settle

FORWARDED = (FORWARDED_KEY, "1")
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
        signer: NodeSigner | None = None,
        clock: Callable[[], float] = time.time,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._dial = dial
        # Signs NodeService calls and forwards; None on an insecure node.
        self._signer = signer
        self._clock = clock
        self._nodes: dict[str, NodeStub] = {}
        self._forwards: dict[tuple[str, str], SignedCall] = {}
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

    def _forward_metadata(self) -> tuple[tuple[str, str], ...]:
        """The marker, plus the caller's credential when a client's call is
        being forwarded (none for work this node started itself: its
        signature, added by SignedCall, names it)."""
        caller = CALLER_AUTHORIZATION.get()
        return (FORWARDED, (AUTHORIZATION, caller)) if caller else (FORWARDED,)

    def node(self, address: str) -> NodeStub:
        """NodeService on ``address``, every call signed by this node."""
        stub = self._nodes.get(address)
        if stub is None:
            stub = NodeStub(self._channel(address), self._signer, self._clock)
            self._nodes[address] = stub
        return stub

    def _forward_call(self, address: str, method: str) -> SignedCall:
        call = self._forwards.get((address, method))
        if call is None:
            service = queue_pb2.DESCRIPTOR.services_by_name["QueueService"]
            call = SignedCall(
                self._channel(address),
                QUEUE_SERVICE + method,
                response_class(service, method),
                self._signer,
                self._clock,
            )
            self._forwards[(address, method)] = call
        return call

    async def forward(
        self,
        address: str,
        method: str,
        request: Any,
        timeout_s: float,
        late: Callable[[Any], None] | None = None,
        withdraw: Callable[[], None] | None = None,
        extra_metadata: tuple[tuple[str, str], ...] = (),
    ) -> Any:
        """Call QueueService.``method`` on ``address`` as a forwarded request.
        ``late``: gets the response if it arrives after the caller was
        cancelled; ``withdraw``: called instead of cancelling the RPC
        (callcancel.settle)."""
        if not address:
            raise Unavailable("no leader known for this request yet")
        call = self._forward_call(address, method)
        try:
            # settle: cancelled (a long poll another partition beat), the call
            # is cancelled in gRPC Core only, not leaking grpc#43360's ~1 KB
            metadata = self._forward_metadata() + extra_metadata
            return await settle(call(request, timeout=timeout_s, metadata=metadata), late, withdraw)
        except grpc.aio.AioRpcError as err:
            raise RemoteError(err) from err

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
        self._nodes.clear()
        self._forwards.clear()


async def abort_remote(context: grpc.aio.ServicerContext, exc: RemoteError) -> None:
    err = exc.err
    # grpc.aio hands back a Metadata object; abort() takes a tuple of pairs.
    await context.abort(err.code(), err.details() or "", tuple(err.trailing_metadata() or ()))
