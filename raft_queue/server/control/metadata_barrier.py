"""Read your own writes of the metadata, for the token door.

A grant, principal or token is written on the metadata leader; another node
sees it once its view applied that entry (a voter: its replica, a heartbeat
or so later; a non-voter: its next copy). A client that adds a grant and at
once uses it may reach a node whose view is a little behind, and would be
refused for a right it has. So before the door refuses a credential it does
not know, or an operation the caller holds no grant for, it asks the
metadata leader for its version and waits (up to ``timeout_s``) until this
node's view has it, then looks once more (``AuthInterceptor._admit``).
Only refusals pay this, one small signed call; concurrent refusals share it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from raft_queue._proto.raft_queue.v1 import admin_pb2

if TYPE_CHECKING:
    from raft_queue.server.node import Node
    from raft_queue.server.peers import Peers

log = logging.getLogger(__name__)

NO_IMAGE = 2**64 - 1  # a known_version no view reaches: the answer leaves the image out


class MetadataBarrier:
    def __init__(self, node: Node, peers: Peers, timeout_s: float = 2.0, poll_s: float = 0.02):
        self.node = node
        self.peers = peers
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._running: asyncio.Task[bool] | None = None

    async def catch_up(self) -> bool:
        """True if this node's view advanced to the leader's version as it was
        when asked (then a refusal is worth a second look)."""
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._catch_up())
        return await asyncio.shield(self._running)

    async def _catch_up(self) -> bool:
        node = self.node
        if node.metadata is not None and node.metadata.is_leader():
            return False  # the leader's view is the newest there is
        address = node.metadata_leader_address()
        if not address or address == node.address:
            return False
        start = node.view.version
        try:
            answer: Any = await self.peers.node(address).GetMetadata(
                admin_pb2.GetMetadataRequest(known_version=NO_IMAGE), timeout=self.timeout_s
            )
        except Exception as exc:  # the leader is away: refuse on what we know
            log.debug("metadata barrier: %s", exc)
            return False
        if answer.version <= start:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while node.view.version < answer.version and loop.time() < deadline:
            await asyncio.sleep(self.poll_s)
        return node.view.version > start
