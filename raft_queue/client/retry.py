"""Retries: exponential backoff with full jitter, bounded by attempts and a time budget.

Policy (the caller's contract):

- only ``QueueError.retryable`` errors are retried;
- ``OutcomeUnknown`` is retried only when the call is idempotent (sends carry
  dedup ids, acks are receipts): otherwise the caller must decide;
- ``NotLeader`` carrying a leader address is retried at once (the caller has
  re-routed, there is nothing to wait for), unless the previous attempt was
  redirected too (two nodes pointing at each other mid-election); without an
  address (an election runs, or the node has not heard from the leader since
  it started) it backs off like ``Unavailable`` and does not use up
  ``retries``: an election ends, so only the deadline ends the wait (as
  Kafka's producer retries until ``delivery.timeout.ms``); five quick
  retries (~0.8 s of backoff) gave up on a metadata election that took 1.3 s;
- at most ``retries`` retries and never past ``timeout_s`` from the first
  attempt; the last error is raised as is;
- ``OverQuota`` (RESOURCE_EXHAUSTED with ``retry-after-ms``) waits what the
  server said (plus up to 10 % jitter) and does not use up ``retries``: only
  the deadline ends it, with an OverQuota saying how long it retried.

Full jitter (sleep uniform in [0, min(max, base * 2**n)]) as in AWS's
"Exponential Backoff and Jitter": clients that failed together do not retry
together.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from raft_queue.errors import NotLeader, OutcomeUnknown, OverQuota, QueueError

T = TypeVar("T")

# Every attempt gets at least this much time: a retry that could not finish
# an RPC is not worth sending, so we give up instead of sleeping into the deadline.
_MIN_ATTEMPT_S = 0.05


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry ``n`` (0-based): uniform in [0, min(max_s, base_s * 2**n)]."""

    base_s: float = 0.05
    max_s: float = 1.0

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        ceiling = min(self.max_s, self.base_s * (2 ** min(attempt, 30)))
        return rng.uniform(0.0, ceiling)


class Retrier:
    """Runs one logical call as attempts; ``sleep``, ``clock`` and ``rng`` are seams for tests."""

    def __init__(
        self,
        retries: int = 5,
        timeout_s: float = 10.0,
        backoff: Backoff | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.retries = retries
        self.timeout_s = timeout_s
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.clock = clock
        self.rng = rng or random.Random()

    def run(
        self,
        attempt: Callable[[float], T],
        *,
        idempotent: bool = True,
        extra_s: float = 0.0,
    ) -> T:
        """Call ``attempt(timeout_s_for_this_attempt)`` until it returns or must give up.

        ``extra_s`` extends the budget for calls that wait on purpose (long
        polls), so a 20 s receive is not cut by a 10 s client timeout.
        """
        started = self.clock()
        deadline = started + self.timeout_s + extra_s
        retry = 0
        redirected = False
        while True:
            remaining = deadline - self.clock()
            try:
                return attempt(max(remaining, _MIN_ATTEMPT_S))
            except OverQuota as exc:
                delay = self._quota_wait_or_raise(exc, started, deadline)
            except QueueError as exc:
                delay = self._delay_or_raise(exc, retry, deadline, idempotent, redirected)
                redirected = isinstance(exc, NotLeader) and bool(exc.leader)
                retry += 1
            if delay > 0:
                self.sleep(delay)

    async def run_async(
        self,
        attempt: Callable[[float], Awaitable[T]],
        *,
        idempotent: bool = True,
        extra_s: float = 0.0,
    ) -> T:
        """``run`` for coroutines (asyncio client): the same policy, awaited sleeps."""
        started = self.clock()
        deadline = started + self.timeout_s + extra_s
        retry, redirected = 0, False
        while True:
            try:
                return await attempt(max(deadline - self.clock(), _MIN_ATTEMPT_S))
            except OverQuota as exc:
                delay = self._quota_wait_or_raise(exc, started, deadline)
            except QueueError as exc:
                delay = self._delay_or_raise(exc, retry, deadline, idempotent, redirected)
                redirected = isinstance(exc, NotLeader) and bool(exc.leader)
                retry += 1
            if delay > 0:
                await asyncio.sleep(delay)

    def _quota_wait_or_raise(self, exc: OverQuota, started: float, deadline: float) -> float:
        """The server's retry-after (with jitter), or OverQuota when waiting
        it would pass the deadline."""
        wait = max(exc.retry_after_ms, 1) / 1000 * (1.0 + 0.1 * self.rng.random())
        now = self.clock()
        if now + wait + _MIN_ATTEMPT_S > deadline:
            raise OverQuota(
                f"{exc.message}; retried for {now - started:.1f} s (the call's "
                f"{self.timeout_s:g} s budget): raise the quota or send more slowly",
                exc.retry_after_ms,
            ) from exc
        return wait

    def _delay_or_raise(
        self, exc: QueueError, retry: int, deadline: float, idempotent: bool, redirected: bool
    ) -> float:
        """How long to wait before the next attempt; re-raises ``exc`` when giving up."""
        electing = isinstance(exc, NotLeader) and not exc.leader
        if not exc.retryable or (retry >= self.retries and not electing):
            raise exc
        if isinstance(exc, OutcomeUnknown) and not idempotent:
            raise exc
        remaining = deadline - self.clock()
        if remaining < 2 * _MIN_ATTEMPT_S:
            raise exc
        if isinstance(exc, NotLeader) and exc.leader and not redirected:
            return 0.0
        return min(self.backoff.delay_s(retry, self.rng), remaining - _MIN_ATTEMPT_S)
