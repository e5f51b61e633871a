"""Lingering leases: a consumer's standing lease, kept between two of its Receives.

A consumer that receives in a loop is away from the server between two
Receives (handling its batch, sending the next request: a millisecond or
so). A message sent in that gap cost two Raft entries: its Append, then,
once the next Receive arrived, a Lease of its own. So when a Receive of a
consumer that names itself (``consumer``) returns messages, its node
leaves a standing lease for that consumer on each partition it leads
(``StandingLeases.stand(lingering=True)``) for ``limits.receive_linger_ms``.
The next Append takes it along in its own entry (replication/standing.py)
and the consumer's next Receive finds the messages already leased to it,
as a prefetching consumer of RabbitMQ or NATS finds them in its buffer.

- Only a consumer that came back within the window last time gets one: a
  slow consumer never has messages held for it.
- ``StandingLeases.claim`` serves lingering requests after every poll
  waiting now: a lingering lease never takes a message from a consumer that
  is there.
- Not taken up within the window: its leases are undone (Release: receive
  count and delivery history restored) and the messages are visible again.
- A Receive with another visibility does not take it up (the leases would
  end at a deadline it did not ask for): it is undone the same way.
- If the leader fails, the leases are in the log like any other and end at
  their visibility deadline, as a crashed consumer's do.

All of this runs on the node's asyncio loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection

from raft_queue import errors
from raft_queue.replication.partition import PartitionReplica
from raft_queue.replication.standing import Standing

Stand = tuple[int, PartitionReplica, Standing]  # (partition, its leader replica, request)
Key = tuple[str, str]  # (queue, consumer)

# Consumers remembered for "came back in time"; beyond this, those whose last
# Receive is older than the window are forgotten.
_TRACKED_MAX = 10_000


class Linger:
    """One consumer's lingering requests, one per partition led here."""

    __slots__ = ("stands", "visibility_ms", "timer")

    def __init__(self, stands: list[Stand], visibility_ms: int) -> None:
        self.stands = stands
        self.visibility_ms = visibility_ms
        self.timer: asyncio.TimerHandle | None = None

    def taken(self) -> bool:
        """Whether a lease of it was proposed (its messages are a commit away)."""
        return any(is_taken(s) for _, _, s in self.stands)

    def adopt(self, part: int, replica: PartitionReplica, timeout_s: float) -> Standing | None:
        """Hand the request on ``part`` over to a poll standing there now
        for ``timeout_s``; None if there is none (or it lapsed)."""
        for i, (p, r, s) in enumerate(self.stands):
            if p == part and r is replica:
                del self.stands[i]
                s.deadline = time.monotonic() + timeout_s  # read by claim (driver thread)
                return None if s.future.cancelled() else s
        return None


class Lingering:
    def __init__(self, window_ms: int, undo: Callable[[list[Stand]], None]) -> None:
        self.window_ms = window_ms
        self.window_s = window_ms / 1000
        self._undo = undo  # withdraws untaken requests, undoes taken leases
        self._held: dict[Key, Linger] = {}
        self._returned: dict[Key, float] = {}  # loop time of the last Receive with messages

    def take(self, key: Key, visibility_ms: int) -> Linger | None:
        """The consumer's lingering requests, now its Receive's own; None if
        it has none (or none for ``visibility_ms``: those are undone)."""
        lin = self._held.pop(key, None)
        if lin is None:
            return None
        if lin.timer is not None:
            lin.timer.cancel()
        if lin.visibility_ms != visibility_ms:
            self._undo(lin.stands)
            return None
        return lin

    def returned(
        self,
        key: Key,
        arrived: float,
        max_n: int,
        visibility_ms: int,
        local: list[tuple[int, PartitionReplica]],
        kept: Linger | None,
    ) -> None:
        """A Receive of ``key`` that arrived at ``arrived`` (loop time)
        returns messages: linger on the partitions in ``local`` (led here)
        if it arrived within the window after the consumer's previous
        Receive with messages returned (a long poll that then waited still
        counts as quick). ``kept``: what the Receive took up and did not use."""
        loop = asyncio.get_running_loop()
        quick = arrived - self._returned.get(key, -1e9) <= self.window_s
        self._remember(key, loop.time())
        if kept is not None and not kept.stands:
            kept = None
        if self.window_s <= 0 or not (quick or kept is not None):
            if kept is not None:
                self._undo(kept.stands)
            return
        lin = kept or Linger([], visibility_ms)
        lin.stands = [st for st in lin.stands if not st[2].future.cancelled()]
        for _, _, s in lin.stands:
            s.deadline = time.monotonic() + self.window_s
        # A kept lease already taken (in flight: its messages are the next
        # Receive's) does not stand any more: the partition gets a request
        # that does, for the Append after it.
        have = {(p, id(r)) for p, r, s in lin.stands if not is_taken(s)}
        lin.stands += self.stand(key[1], max_n, visibility_ms, local, have)
        # Two Receives of one consumer in flight (a consumer receiving ahead,
        # or threads sharing a client's consumer id): the other's linger,
        # held meanwhile, is undone, not dropped; else its leases, once
        # taken, stayed leased to nobody until their visibility ended.
        self._drop(key, lin)
        if lin.stands:
            self._held[key] = lin
            lin.timer = loop.call_later(self.window_s, self._expire, key, lin)

    def stand(
        self,
        consumer: str,
        max_n: int,
        visibility_ms: int,
        local: list[tuple[int, PartitionReplica]],
        have: Collection[tuple[int, int]] = (),
    ) -> list[Stand]:
        """A lingering request for ``consumer`` on each partition of ``local``
        but those in ``have`` ((partition, id(replica))), for the window."""
        stands: list[Stand] = []
        for part, replica in local:
            if (part, id(replica)) in have:
                continue
            try:
                request = replica.standing.stand(
                    consumer, max_n, visibility_ms, self.window_s, lingering=True
                )
            except errors.ResourceExhausted:
                continue  # over a standing-poll bound: no lingering here
            stands.append((part, replica, request))
        return stands

    def _drop(self, key: Key, keep: Linger) -> None:
        """Undo the linger held for ``key``, unless it is ``keep``."""
        held = self._held.get(key)
        if held is None or held is keep:
            return
        del self._held[key]
        if held.timer is not None:
            held.timer.cancel()
        self._undo(held.stands)

    def _expire(self, key: Key, lin: Linger) -> None:
        if self._held.get(key) is lin:
            del self._held[key]
            self._undo(lin.stands)

    def _remember(self, key: Key, now: float) -> None:
        if len(self._returned) >= _TRACKED_MAX:
            old = now - self.window_s
            self._returned = {k: t for k, t in self._returned.items() if t >= old}
        self._returned[key] = now


def is_taken(request: Standing) -> bool:
    """Whether ``request``'s lease was proposed (in flight) or applied."""
    fut = request.future
    return fut.running() or (fut.done() and not fut.cancelled())
