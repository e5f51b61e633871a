"""Forwarded Receives are withdrawn, never cancelled (``NodeService.WithdrawPoll``).

A node forwards a client's long poll to every other node leading a
partition of the queue and keeps the first answer with messages
(receiving.py). Cancelling the other calls lost messages: when a call is
cancelled after the serving node finished (its leases applied, its response
on the way), the caller's cancel discards the response and neither side
knows, so those messages stayed leased to nobody for their whole visibility
timeout. Measured in the soak (400 messages/s, three nodes, no restart):
150-220 messages per 45 s, every one of them leased by a forwarded Receive
that returned normally on the serving node and never reached its caller
(the serving node's handler traced returning them, the caller's call
cancelled). Each stalled the partition's log for 30 s: acked records behind
it could not be trimmed, and the retained records (~30 s of traffic) were
most of what the LMDB files held and grew by.

So a caller never cancels a forwarded Receive. When it stops waiting, it
asks the serving node to end the poll (``WithdrawPoll`` with the poll's id,
sent with the Receive as ``raftq-poll-id`` metadata), and gives back
whatever the call still brings (``callcancel.settle``'s ``late``). The
serving node ends the poll in its own process, where a cancelled poll gives
its leases back itself (receiving.py), and answers it empty.

Correctness needs only the second half (the call always completes, so its
leases always come back); the withdrawal ends a standing poll early instead
of at its deadline. A withdrawal that arrives before its poll (the Receive
still in flight) is remembered for ``TOMBSTONE_S``, so that poll ends at once.

The asyncio loop's thread only: no lock.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

POLL_ID_KEY = "raftq-poll-id"
TOMBSTONE_S = 30.0


def new_poll_id() -> str:
    return uuid.uuid4().hex


def poll_id_of(context: Any) -> str:
    """The ``raftq-poll-id`` of a forwarded Receive; "" if it has none."""
    for key, value in context.invocation_metadata() or ():
        if key == POLL_ID_KEY:
            return str(value)
    return ""


class ForwardedPolls:
    """The forwarded Receives running on this node, by poll id."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._withdrawn: set[str] = set()  # running, and withdrawn
        self._early: dict[str, float] = {}  # withdrawn before they arrived: monotonic time

    def __len__(self) -> int:
        return len(self._running)

    async def run(self, poll_id: str, work: Coroutine[Any, Any, T]) -> T | None:
        """``await work``; None if the poll was withdrawn (before or while
        it ran). Cancelling the caller (the RPC ended) cancels ``work``."""
        if self._early.pop(poll_id, None) is not None:
            work.close()
            return None
        task = asyncio.ensure_future(work)
        self._running[poll_id] = task
        try:
            return await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if poll_id in self._withdrawn and not (me is not None and me.cancelling()):
                return None
            raise
        finally:
            self._running.pop(poll_id, None)
            self._withdrawn.discard(poll_id)

    def withdraw(self, poll_id: str) -> bool:
        """End poll ``poll_id``; whether it was running here."""
        task = self._running.get(poll_id)
        if task is not None:
            self._withdrawn.add(poll_id)
            task.cancel()
            return True
        now = time.monotonic()
        if len(self._early) >= 1024:
            self._early = {k: t for k, t in self._early.items() if now - t < TOMBSTONE_S}
        self._early[poll_id] = now
        return False
