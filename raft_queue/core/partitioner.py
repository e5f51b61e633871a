"""Key -> partition: the one placement rule of the SDK and the server.

Kafka's default partitioner (murmur2), stable across processes. Every
producer must put a key on the same partition, or per-key order (FIFO
queues) breaks; so the hash must never depend on the process: Python's
``hash()`` is salted per process and is never used. We use Kafka's murmur2
(``Utils.murmur2`` and ``toPositive(h) % n``) so a key lands on the same
partition number as with Kafka's default partitioner, which helps users who
mirror topics. The SDK (client/partitioner.py, which adds round robin for
keyless messages) and the server's send path (server/dataplane/sending.py)
both call this module: one rule, written once.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as a signed int (same values as Java)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = data[whole:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: str | bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions`` (>= 1); the UTF-8 bytes are hashed."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    data = key.encode("utf-8") if isinstance(key, str) else key
    return (murmur2(data) & 0x7FFFFFFF) % partitions
