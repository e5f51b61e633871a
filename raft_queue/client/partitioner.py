"""The SDK's face of the placement rule (raft_queue/core/placement_keys.py).

Key hashing and split layouts live in ``core/`` so that the SDK, the server
and the Spark sink place a key by one rule; this module re-exports it and
adds the one stateful piece the SDK needs: round robin for keyless messages.
"""

from __future__ import annotations

import itertools
import threading

from raft_queue.core.placement_keys import Layout, key_hash, murmur2, partition_for_key

__all__ = ["Layout", "RoundRobin", "key_hash", "murmur2", "partition_for_key"]


class RoundRobin:
    """Per-queue rotation for keyless messages over the open partitions; thread safe.

    Starts every queue at its first open partition so that a single-threaded
    producer's placement is reproducible.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, itertools.count[int]] = {}

    def next(self, queue: str, partitions: int | Layout) -> int:
        with self._lock:
            turn = next(self._counters.setdefault(queue, itertools.count()))
        if isinstance(partitions, Layout):
            writable = partitions.writable()
            return writable[turn % len(writable)]
        return turn % partitions
