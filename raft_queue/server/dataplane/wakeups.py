"""Wake-ups for long polls: Receive and Read wait here instead of polling.

One counter per (queue, partition). The Raft driver thread bumps it after
applying an entry that may have made something visible
(``PartitionReplica.on_wake``); asyncio waiters remember the counters they
saw before trying, and sleep until one of them moves, a timer (the earliest
lease deadline or delay) passes, or their own deadline.

No lost wake-ups: a waiter registers its future *before* re-checking the
counters, and the driver bumps the counter *before* looking for registered
waiters, so either the waiter sees the new count or the driver sees the
waiter (both run under the GIL; dict reads and writes are atomic).

Threads: ``fire`` runs on the driver thread and only increments an int and,
when someone waits, schedules ``_wake`` on the loop; everything else runs on
the asyncio loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

Key = tuple[str, int]  # (queue name, partition)


class Wakeups:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._counts: dict[Key, int] = {}
        self._waiting: dict[Key, set[asyncio.Future[None]]] = {}

    # ---- driver thread -------------------------------------------------------------
    def hook(self, key: Key) -> Callable[[], None]:
        """The function a replica calls (driver thread) after a waking apply."""

        def fire() -> None:
            self._counts[key] = self._counts.get(key, 0) + 1
            if self._waiting.get(key):
                self._loop.call_soon_threadsafe(self._wake, key)

        return fire

    # ---- asyncio loop ----------------------------------------------------------------
    def seen(self, keys: Sequence[Key]) -> tuple[int, ...]:
        """The counters now; pass them to ``wait`` after an attempt found nothing."""
        return tuple(self._counts.get(k, 0) for k in keys)

    def _wake(self, key: Key) -> None:
        for fut in self._waiting.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, keys: Sequence[Key], seen: tuple[int, ...], timeout_s: float) -> bool:
        """Until a counter of ``keys`` differs from ``seen`` (True) or
        ``timeout_s`` passes (False)."""
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = self._loop.create_future()
        for k in keys:
            self._waiting.setdefault(k, set()).add(fut)
        try:
            if self.seen(keys) != seen:
                return True
            done, _ = await asyncio.wait({fut}, timeout=timeout_s)
            return bool(done)
        finally:
            fut.cancel()
            for k in keys:
                waiting = self._waiting.get(k)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiting[k]


class Settling:
    """Concurrent Futures the driver thread resolves (standing leases), and
    optionally a loop future ``also``, watched by one task on the loop.

    A resolution reaches the task in one loop hop, as a Send's does
    (group.LoopWaiter). ``asyncio.wrap_future`` plus ``asyncio.wait`` took
    three: the Send whose entry carried the lease, resolved in the same
    apply, then ran its whole answer before the Receive that delivers its
    messages got the loop (W4: 0.33 ms p50 from the Send resumed to the
    Receive's answer; docs/benchmarks.md). Callbacks are registered once,
    however often the task waits."""

    def __init__(
        self, futures: Sequence[Future[Any]], also: asyncio.Future[Any] | None = None
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.left = len(futures)  # not yet done
        self.any = False  # one of them (or ``also``) is done
        self._first = False
        self._woke: asyncio.Future[None] | None = None
        for fut in futures:
            fut.add_done_callback(self._from_driver)
        if also is not None:
            also.add_done_callback(self._also_done)

    async def wait(self, timeout_s: float, first: bool = False) -> None:
        """Until all are done (with ``first``: one of them, or ``also``), or
        ``timeout_s`` passed; the caller reads the outcomes."""
        if self.left <= 0 or (first and self.any):
            return
        self._first = first
        self._woke = woke = self._loop.create_future()
        timer = self._loop.call_later(timeout_s, self._wake)
        try:
            await woke
        finally:
            timer.cancel()
            self._woke = None

    def _from_driver(self, _: Future[Any]) -> None:  # any thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._arrived)

    def _arrived(self) -> None:
        self.left -= 1
        self.any = True
        if self._first or self.left <= 0:
            self._wake()

    def _also_done(self, _: asyncio.Future[Any]) -> None:
        self.any = True
        self._wake()

    def _wake(self) -> None:
        if self._woke is not None and not self._woke.done():
            self._woke.set_result(None)


async def until_settled(futures: Sequence[Future[Any]], timeout_s: float) -> None:
    """Return once every one of ``futures`` (resolved by the driver thread)
    is done, or after ``timeout_s`` (``Settling``)."""
    await Settling(futures).wait(timeout_s)
