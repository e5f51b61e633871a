"""Read your own writes of the metadata: a node's view may be behind its leader.

A node answers from its own copy of the metadata (its view). A change is
written on the metadata leader; another node's view has it once it applied
that entry (a voter: its replica, a heartbeat or so later; a non-voter: its
next copy). Right after a restart it is further behind: a voter's view is its
snapshot until a leader tells it the commit index (which pysyncobj keeps
volatile, replication/journal.py), and a new leader's lacks what earlier
terms committed until its own first entry applies (Raft section 8). So a
view that lacks something proves nothing by itself.

One rule (``vouch``): before a node answers from a lack in its view, it
vouches that its view holds every change the metadata leader had committed
when asked: it asks the leader for its version (one small signed call, no
image; the leader answers ``leader_ready`` once its own term's first entry
applied) and waits until its view has it. When it cannot (no leader known,
the leader unreachable or still catching up itself, the view not caught up
within ``timeout_s``) it answers UNAVAILABLE naming why, which clients
retry: never a final answer that may be false. Used by

- "does not exist" (``vouch_miss``): a NotFound read from the view
  (``errors.NotFound.found_now`` set, e.g. ``Node.queue_spec``) becomes
  NOT_FOUND only once vouched for; if the thing turns up while catching up,
  the answer is UNAVAILABLE too (retry: it is there now); a queue still
  missing from a managed cluster's view is answered with a redirect to its
  manager (redirects.py), never before the view is vouched for;
- the token door (``AuthInterceptor._admit``): before it refuses a
  credential it does not know, or an operation the caller holds no grant
  for, it vouches and looks once more;
- a metadata leader deciding from its view (``Queues.create``);
- readiness (observability/health.py): not ready until vouched once.
- the node's first reconcile (``Node.reconcile_forever``): partition
  replicas open from a vouched view (at most ``FIRST_OPEN_WAIT_S`` later),
  so none gets the peers of an assignment a move has since changed.

Only misses and refusals pay this; a found queue pays nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.server.control.redirects import redirected

if TYPE_CHECKING:
    from raft_queue.server.node import Node
    from raft_queue.server.peers import Peers

NO_IMAGE = 2**64 - 1  # a known_version no view reaches: the answer leaves the image out
BEHIND = "this node's metadata view may be behind (e.g. just after a restart)"


def view_miss(exc: errors.NotFound, found_now: Callable[[], bool]) -> errors.NotFound:
    """Mark ``exc`` as read from the metadata view; ``found_now`` looks again."""
    exc.found_now = found_now
    return exc


class MetadataBarrier:
    def __init__(self, node: Node, peers: Peers, timeout_s: float = 2.0, poll_s: float = 0.02):
        self.node = node
        self.peers = peers
        self.timeout_s = timeout_s
        self.poll_s = poll_s

    # ---- "does not exist" ------------------------------------------------------------------
    async def vouch_miss(self, exc: errors.NotFound) -> errors.QueueError:
        """What to answer for ``exc``: itself when it is not a view miss or the
        view is vouched for and still lacks it; else Unavailable (see the
        module doc)."""
        if exc.found_now is None:
            return exc
        try:
            await self.vouch()
        except errors.Unavailable as why:
            return why
        if exc.found_now():
            return errors.Unavailable(f"{exc.message} in {BEHIND}; it has caught up: retry")
        return redirected(exc, self.node.view)  # a managed cluster names its manager

    async def vouch(self) -> None:
        """Return once this node's view holds every metadata change committed
        when asked; Unavailable naming why it cannot (bounded by timeout_s)."""
        node = self.node
        # Until a leader is known: another node, or this one (right after a
        # start this node may be the one that wins the election).
        await self._until(lambda: _leads(node) or _other(node))
        if _leads(node):
            if not await self._until(node.metadata_leader_ready):
                raise errors.Unavailable(
                    f"{BEHIND}: it leads the metadata group but is still "
                    "applying what earlier terms committed; retry"
                )
            return
        address = _other(node)
        if not address:
            raise errors.Unavailable(
                f"{BEHIND} and no metadata leader is known yet (an election is running); retry"
            )
        try:
            answer = await self._ask(address)
        except Exception as exc:
            raise errors.Unavailable(
                f"{BEHIND} and the metadata leader {address} did not answer "
                f"({type(exc).__name__}); retry"
            ) from exc
        if not answer.leader_ready:
            raise errors.Unavailable(
                f"{BEHIND} and {address} cannot vouch for its own "
                "(no longer leader, or still catching up); retry"
            )
        if not await self._until(lambda: node.view.version >= answer.version):
            raise errors.Unavailable(
                f"{BEHIND}: version {node.view.version}, the leader's {answer.version}; "
                "still catching up, retry"
            )

    # ---- helpers ------------------------------------------------------------------------------
    async def _ask(self, address: str) -> Any:
        request = admin_pb2.GetMetadataRequest(known_version=NO_IMAGE)
        return await self.peers.node(address).GetMetadata(request, timeout=self.timeout_s)

    async def _until(self, done: Callable[[], Any]) -> bool:
        """Poll ``done`` until true or ``timeout_s``; whether it became true."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while not done():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(self.poll_s)
        return True


def _leads(node: Node) -> bool:
    return node.metadata is not None and bool(node.metadata.is_leader())


def _other(node: Node) -> str:
    """The metadata leader's gRPC address when it is another node, else ""."""
    address = node.metadata_leader_address()
    return address if address != node.address else ""
