"""Key -> partition in the SDK: the placement rule of ``core/partitioner.py``
(Kafka's murmur2, shared with the server), and round robin for keyless
messages (see ``RoundRobin``).
"""

from __future__ import annotations

import itertools
import threading

from raft_queue.core.partitioner import murmur2, partition_for_key

__all__ = ["RoundRobin", "murmur2", "partition_for_key"]


class RoundRobin:
    """Per-queue rotation for keyless messages; thread safe.

    Starts every queue at partition 0 so that a single-threaded producer's
    placement is reproducible.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, itertools.count[int]] = {}

    def next(self, queue: str, partitions: int) -> int:
        with self._lock:
            counter = self._counters.setdefault(queue, itertools.count())
            return next(counter) % partitions
