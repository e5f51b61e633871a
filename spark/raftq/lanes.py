"""Ordered, parallel sends for one Spark task: partitions in parallel, each one in order.

A task's rows go to several queue partitions, usually led by different
nodes. Sending one chunk at a time leaves the task waiting on each leader's
fsync in turn; here every (queue, partition) is pinned to one of a few
single-thread lanes, so chunks of one partition keep their order (as a
Kafka producer with one request in flight per partition) while different
partitions' RPCs overlap, and the task thread keeps encoding rows
meanwhile. The SDK client is thread-safe and shared by the lanes.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

Send = Callable[[str, Sequence[Any]], int]  # (queue, messages) -> duplicates


class Lanes:
    """At most ``depth`` chunks queued per lane; ``close()`` waits and re-raises the first error.

    Called from one thread (the task's). A failed chunk fails the task, and
    Spark's retry resends everything with the same dedup ids.
    """

    def __init__(self, send: Send, lanes: int = 4, depth: int = 2) -> None:
        self._send = send
        self._pools = [ThreadPoolExecutor(1, thread_name_prefix="raftq-lane") for _ in range(lanes)]
        self._pending: list[deque[Future[int]]] = [deque() for _ in range(lanes)]
        self._depth = depth
        self.duplicates = 0

    def submit(self, queue: str, partition: int, messages: Sequence[Any]) -> None:
        """Queue ``messages`` (all for one partition) behind that partition's earlier ones."""
        lane = zlib.crc32(f"{queue}/{partition}".encode()) % len(self._pools)
        pending = self._pending[lane]
        while len(pending) >= self._depth:  # back-pressure: bound memory per task
            self.duplicates += pending.popleft().result()
        pending.append(self._pools[lane].submit(self._send, queue, messages))

    def close(self) -> int:
        """Wait for every chunk; the total of duplicates reported by the sends."""
        for pending in self._pending:
            while pending:
                self.duplicates += pending.popleft().result()
        self.shutdown()
        return self.duplicates

    def shutdown(self) -> None:
        """Drop chunks not started and stop the threads (after an error); idempotent."""
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
