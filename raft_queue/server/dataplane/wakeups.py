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
from collections.abc import Callable, Sequence

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
