"""Storage: the LogStore protocol and its two implementations.

``MemoryStore`` (tests, fakes) and ``LmdbStore`` (one LMDB environment per
partition replica) pass the same contract suite
(``tests/unit/test_storage_contract.py``).
"""

from raft_queue.storage.base import LogStore
from raft_queue.storage.lmdb_store import LmdbStore
from raft_queue.storage.memory_store import MemoryStore

__all__ = ["LmdbStore", "LogStore", "MemoryStore"]
