"""Quotas (pure): what a principal may send per second, and the token bucket
that enforces it. Time is an input (``now_s``, a monotonic reading), so the
arithmetic is tested with a fake clock.

A quota names a principal and, optionally, one queue (``queue == ""``: every
queue the principal sends to, together). It allows ``messages_per_s`` and
``bytes_per_s`` (0: no limit on that measure) with bursts of ``burst_s``
seconds' worth of either. A bucket starts full.

Per-node share (server/api/quota.py applies it): a node only sees the
requests it takes, so each message a node admits costs ``k`` tokens, where
``k`` is the number of nodes that lead (by preference) the partitions of the
queue it is sent to. The SDK sends each message straight to its partition's
leader, so with traffic spread over partitions each of the ``k`` nodes sees
1/k of it at k times the price: the cluster as a whole admits the quota,
never k times it. (Skewed traffic gets less, never more.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from raft_queue import errors
from raft_queue.config import check_name

MAX_RATE = 10**12
MAX_BURST_S = 3600.0


@dataclass(frozen=True, slots=True)
class Quota:
    principal: str
    queue: str  # "" = the principal's total over every queue
    messages_per_s: int
    bytes_per_s: int
    burst_s: float = 1.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.principal, self.queue)


def check_quota(q: Quota) -> Quota:
    """``q`` if valid, else InvalidArgument naming the bad field."""
    check_name("principal", q.principal)
    if q.queue:
        check_name("queue", q.queue)
    for name in ("messages_per_s", "bytes_per_s"):
        value = getattr(q, name)
        if not isinstance(value, int) or not 0 <= value <= MAX_RATE:
            raise errors.InvalidArgument(name, f"must be an integer in 0..{MAX_RATE}")
    if not q.messages_per_s and not q.bytes_per_s:
        raise errors.InvalidArgument("messages_per_s", "set messages_per_s, bytes_per_s or both")
    burst = q.burst_s
    if not isinstance(burst, int | float) or not math.isfinite(burst):
        raise errors.InvalidArgument("burst_s", "must be a number of seconds")
    if not 0.001 <= burst <= MAX_BURST_S:
        raise errors.InvalidArgument("burst_s", f"must be in 0.001..{MAX_BURST_S} seconds")
    return q


def to_plain(q: Quota) -> list[object]:
    return [q.principal, q.queue, q.messages_per_s, q.bytes_per_s, q.burst_s]


def from_plain(obj: list[object]) -> Quota:
    principal, queue, mps, bps, burst = obj
    return Quota(str(principal), str(queue), int(mps), int(bps), float(burst))  # type: ignore[call-overload,arg-type]


@dataclass(slots=True)
class Bucket:
    """A token bucket: ``rate`` tokens a second, holding at most
    ``rate * burst_s`` (and never less than one request's worth, so a request
    bigger than the burst still passes once the bucket is full)."""

    rate: float
    burst_s: float
    tokens: float = 0.0
    last_s: float | None = None  # None: never used (full on first use)
    capacity: float = field(init=False)

    def __post_init__(self) -> None:
        self.capacity = self.rate * self.burst_s

    def _refill(self, now_s: float) -> None:
        if self.last_s is None:
            self.tokens, self.last_s = self.capacity, now_s
            return
        elapsed = max(0.0, now_s - self.last_s)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.last_s = max(self.last_s, now_s)

    def wait_s(self, cost: float, now_s: float) -> float:
        """Seconds until ``cost`` tokens are there (0: now). Takes nothing."""
        self._refill(now_s)
        need = min(cost, max(self.capacity, 1.0))
        if self.tokens >= need:
            return 0.0
        return (need - self.tokens) / self.rate

    def take(self, cost: float, now_s: float) -> None:
        """Take ``cost`` tokens (after ``wait_s`` said 0); may go below zero
        for a request bigger than the bucket, which later ones then repay."""
        self._refill(now_s)
        self.tokens -= cost


@dataclass(slots=True)
class Limiter:
    """The buckets of one quota (messages and/or bytes)."""

    quota: Quota
    messages: Bucket | None = None
    bytes: Bucket | None = None

    def __post_init__(self) -> None:
        q = self.quota
        self.messages = Bucket(q.messages_per_s, q.burst_s) if q.messages_per_s else None
        self.bytes = Bucket(q.bytes_per_s, q.burst_s) if q.bytes_per_s else None

    def wait_s(self, messages: float, nbytes: float, now_s: float) -> float:
        wait = 0.0
        if self.messages is not None:
            wait = self.messages.wait_s(messages, now_s)
        if self.bytes is not None:
            wait = max(wait, self.bytes.wait_s(nbytes, now_s))
        return wait

    def take(self, messages: float, nbytes: float, now_s: float) -> None:
        if self.messages is not None:
            self.messages.take(messages, now_s)
        if self.bytes is not None:
            self.bytes.take(nbytes, now_s)


def admit(limiters: list[Limiter], messages: float, nbytes: float, now_s: float) -> float:
    """0.0 and the tokens taken from every limiter, or the seconds to wait
    (the longest) and nothing taken: all or nothing. The caller multiplies
    ``messages`` and ``nbytes`` by its per-node share ``k`` (module doc)."""
    wait = max((lim.wait_s(messages, nbytes, now_s) for lim in limiters), default=0.0)
    if wait > 0:
        return wait
    for lim in limiters:
        lim.take(messages, nbytes, now_s)
    return 0.0
