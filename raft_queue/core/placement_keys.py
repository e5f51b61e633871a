"""Key -> partition, and how a queue's key space grows by splits (pure).

The one home of the placement rule: the SDK (client/partitioner.py), the
server's send path and the Spark sink all call ``partition_for_key``.

**The hash.** Kafka's murmur2 (``Utils.murmur2``, ``toPositive``): the same
in every process (Python's salted ``hash()`` is never used), and a key lands
on the partition number Kafka's default partitioner gives it, which helps
users who mirror topics. ``key_hash(key)`` is the 31-bit positive value.

**Hash classes, not intervals.** A queue created with N partitions places a
key on ``key_hash(key) % N``, so partition i owns the residue class
``h ≡ i (mod N)``. Each partition of a layout owns one class
``(modulus, residue)``. A split of ``(m, r)`` seals it and gives two children,
``(2m, r)`` and ``(2m, r + m)``: their union is exactly the parent's class
(``h % 2m`` is ``r`` or ``r + m`` iff ``h % m == r``), so nothing placed
before a split ever moves, a key that was on the parent goes to exactly one
child, and an unsplit queue (``Layout.initial``) is today's rule bit for bit.
(Kinesis splits contiguous intervals; ours are classes because the existing
rule is a modulus, and no existing queue may be re-placed.)

**Numbers and states.** Children get the next partition numbers (a queue of
T partitions splitting p adds T and T+1). A partition is ``open`` (takes
sends), ``splitting`` (its children exist and are electing their leaders; it
still takes the sends of its whole range, so no send waits on an election),
``sealed`` (split: no more sends; its messages are still received, acked and
read) or ``drained`` (sealed, and none of its messages is left to deliver:
no visible, delayed or in-flight one). Partitions are never removed or
merged (merging may come later).

**Gating (FIFO queues).** A child is *gated* while any ancestor is not
drained: no message of a gated partition is leased, so a key's messages in
the children are never delivered before the parent's are acked (or
dead-lettered, or expired). Non-FIFO queues promise no order, so they are
never gated. The gate is per partition, not per key: one slow key of the
parent holds back the children's every key until it is acked (per-key gates
would need the parent's outstanding keys; see docs/semantics.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

HASH_BITS = 31  # key_hash is in [0, 2**31)
_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24

STATES = ("open", "splitting", "sealed", "drained")
SENDABLE = ("open", "splitting")  # states that take sends
_NEXT = {"splitting": "sealed", "sealed": "drained"}  # the only moves after a split


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


def key_hash(key: str | bytes) -> int:
    """The key's position in the hash space: murmur2 of its UTF-8 bytes, made positive."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    return murmur2(data) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class KeyRange:
    """What partition ``partition`` owns: hashes ``h`` with ``h % modulus ==
    residue``; ``parent`` is the partition it was split from (-1: none)."""

    partition: int
    modulus: int
    residue: int
    parent: int = -1
    state: str = "open"

    def owns(self, h: int) -> bool:
        return h % self.modulus == self.residue


class Layout:
    """A queue's partitions as key ranges, partition ``i`` at index ``i``.

    Immutable; ``version`` (the partition count) grows with every split, so a
    client holding an older layout knows it is older.
    """

    __slots__ = ("ranges", "_children", "_roots")

    def __init__(self, ranges: Sequence[KeyRange]) -> None:
        self.ranges = tuple(ranges)
        if not self.ranges or any(r.partition != i for i, r in enumerate(self.ranges)):
            raise ValueError("a layout needs partitions 0..n-1 in order")
        children: dict[int, list[int]] = {}
        for r in self.ranges:
            if r.parent >= 0:
                children.setdefault(r.parent, []).append(r.partition)
        self._children = children
        self._roots = sum(1 for r in self.ranges if r.parent < 0)

    @classmethod
    def initial(cls, partitions: int) -> Layout:
        """An unsplit queue of ``partitions``: partition i owns ``h % n == i``."""
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        return cls([KeyRange(i, partitions, i) for i in range(partitions)])

    @property
    def version(self) -> int:
        return len(self.ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and other.ranges == self.ranges

    def __hash__(self) -> int:
        return hash(self.ranges)

    def __repr__(self) -> str:
        return f"Layout({list(self.ranges)!r})"

    @property
    def split(self) -> bool:
        """True once any partition was split (else ``initial(version)``)."""
        return self._roots != len(self.ranges)

    def writable(self) -> tuple[int, ...]:
        """The partitions sends go to (open or splitting), in number order."""
        return tuple(r.partition for r in self.ranges if r.state in SENDABLE)

    def is_open(self, partition: int) -> bool:
        """True if ``partition`` takes sends (open, or splitting)."""
        return 0 <= partition < len(self.ranges) and self.ranges[partition].state in SENDABLE

    def partition_for_hash(self, h: int) -> int:
        """The partition taking sends for ``h``: the root ``h % roots``, then
        down the children whose class holds ``h``."""
        part = h % self._roots
        while self.ranges[part].state not in SENDABLE:
            kids = self._children.get(part)
            if not kids:  # sealed with no children: a malformed layout
                raise ValueError(f"partition {part} is sealed and has no children")
            part = next(k for k in kids if self.ranges[k].owns(h))
        return part

    def gated(self) -> frozenset[int]:
        """Partitions with an ancestor not yet drained (FIFO queues lease none
        of their messages until it is)."""
        out = set()
        for r in self.ranges:
            parent = r.parent
            while parent >= 0:
                if self.ranges[parent].state != "drained":
                    out.add(r.partition)
                    break
                parent = self.ranges[parent].parent
        return frozenset(out)

    def children(self, partition: int) -> tuple[int, ...]:
        return tuple(self._children.get(partition, ()))

    def with_split(self, parent: int) -> Layout:
        """``parent`` splitting, and its two children appended (numbers T, T+1)."""
        old = self.ranges[parent]
        if old.state != "open":
            raise ValueError(f"partition {parent} is {old.state}; only an open one splits")
        if old.modulus * 2 > 1 << HASH_BITS:
            raise ValueError(f"partition {parent}'s range is as small as the hash allows")
        n, m = len(self.ranges), old.modulus
        low = KeyRange(n, 2 * m, old.residue, parent)
        high = KeyRange(n + 1, 2 * m, old.residue + m, parent)
        ranges = list(self.ranges)
        ranges[parent] = replace(old, state="splitting")
        return Layout([*ranges, low, high])

    def with_state(self, partition: int, state: str) -> Layout:
        """``partition`` moved on: splitting -> sealed -> drained (the same
        state again: no change). ValueError for any other move."""
        old = self.ranges[partition].state
        if state != old and _NEXT.get(old) != state:
            raise ValueError(f"partition {partition} is {old}; it cannot become {state}")
        ranges = list(self.ranges)
        ranges[partition] = replace(ranges[partition], state=state)
        return Layout(ranges)


def partition_for_key(key: str | bytes, partitions: int | Layout) -> int:
    """The partition of ``key``: among ``partitions`` (>= 1) of an unsplit
    queue, or in a ``Layout`` (its open partition owning the key's hash)."""
    if isinstance(partitions, Layout):
        return partitions.partition_for_hash(key_hash(key))
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return key_hash(key) % partitions


def plan_splits(layout: Layout, splits: int) -> list[int]:
    """The parents of ``splits`` splits, in order: each time the open
    partition owning the largest class (smallest modulus; then the lowest
    number), children included, so a queue grows as evenly as it can."""
    parents = []
    for _ in range(splits):
        candidates = [r for r in layout.ranges if r.state == "open"]
        parent = min(candidates, key=lambda r: (r.modulus, r.partition)).partition
        parents.append(parent)
        layout = layout.with_split(parent)
    return parents


def apply_splits(layout: Layout, parents: Iterable[int]) -> Layout:
    for parent in parents:
        layout = layout.with_split(parent)
    return layout


def splits_for(current: int, wanted: int) -> int:
    """How many splits take a queue of ``current`` partitions to ``wanted``:
    each seals one and adds two, so the count grows by two per split.
    Raises ValueError (the text says why) if ``wanted`` cannot be reached."""
    if wanted < current:
        raise ValueError(
            f"{wanted} < {current}: partitions are never removed (merging is not supported)"
        )
    if (wanted - current) % 2:
        raise ValueError(
            f"each split seals one partition and adds two, so from {current} a queue "
            f"grows to {current + 2}, {current + 4}, ...; not {wanted}"
        )
    return (wanted - current) // 2
