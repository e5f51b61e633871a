"""Partition commands: what the leader proposes and every replica applies.

Frozen, slotted dataclasses validated on construction, so a bad field is
rejected (``InvalidArgument`` naming it) before it reaches Raft. Everything
that depends on time carries ``now_ms``, stamped by the leader. Their byte
form (the Raft wire format) is ``codec.encode`` / ``codec.decode``, also
importable from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from raft_queue.core import validate as v
from raft_queue.core.dedup_carry import SeedDedup as SeedDedup  # a move's dedup windows
from raft_queue.core.lease_carry import CarryLeases as CarryLeases  # a move's leases
from raft_queue.core.records import NewRecord as NewRecord  # commands carry records
from raft_queue.core.segments import Summary
from raft_queue.core.wire import U32_MAX, U64_MAX
from raft_queue.errors import InvalidArgument

if TYPE_CHECKING:
    from raft_queue.core.codec import decode as decode
    from raft_queue.core.codec import encode as encode

ORDERINGS = ("none", "fifo")
# A request id (the SDK's per-Send idempotency key) is kept as a table key.
MAX_REQUEST_ID_BYTES = 64


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """Per-partition copy of the queue settings that ``apply`` depends on.

    ``retention_ms == 0`` keeps records until acked (then compacts them);
    ``retention_bytes == 0`` means no size bound; ``max_receives == 0`` means
    unlimited; ``dedup_window_ms == 0`` disables dedup. ``delay_ms`` is the
    queue's minimum delivery delay (a record's own delay can only add to it).
    ``sealed``: the partition was split (core/placement_keys.py); every Append
    from then on is refused (PartitionSealed), whatever the sender believed.
    ``fenced``: the queue is moving to another cluster (manager/moves.py):
    every Append is refused as when sealed, and Lease leases nothing, so
    from this entry on the partition's unfinished records only change by
    acks, nacks and expiry of leases given before it.
    """

    ordering: str = "none"
    visibility_timeout_ms: int = 30_000
    max_receives: int = 0
    dedup_window_ms: int = 300_000
    retention_ms: int = 0
    retention_bytes: int = 0
    delay_ms: int = 0
    sealed: bool = False
    fenced: bool = False

    def __post_init__(self) -> None:
        if self.ordering not in ORDERINGS:
            raise InvalidArgument("ordering", f"must be one of {ORDERINGS}")
        v.uint32("visibility_timeout_ms", self.visibility_timeout_ms)
        v.uint32("max_receives", self.max_receives)
        v.uint64("dedup_window_ms", self.dedup_window_ms)
        v.uint64("retention_ms", self.retention_ms)
        v.uint64("retention_bytes", self.retention_bytes)
        v.delay("delay_ms", self.delay_ms, v.MAX_QUEUE_DELAY_MS)


@dataclass(frozen=True, slots=True)
class ReceiptRef:
    """What a receipt names inside one partition: the record and the lease
    epoch it was given (epochs start at 1; a later lease bumps it)."""

    offset: int
    epoch: int

    def __post_init__(self) -> None:
        offset, epoch = self.offset, self.epoch
        if (
            type(offset) is int
            and type(epoch) is int
            and 0 <= offset <= U64_MAX
            and 0 < epoch <= U32_MAX
        ):
            return  # valid (the usual case, checked inline: one per receipt)
        v.uint64("offset", offset)
        v.uint32("epoch", epoch)
        if epoch == 0:
            raise InvalidArgument("epoch", "must be >= 1")


@dataclass(frozen=True, slots=True)
class ReceiptRun:
    """``count`` receipts for the consecutive offsets ``start, start + 1, ...``,
    all of lease ``epoch``: how receipts travel in commands (the leader merges
    a receipt list into runs; a replica settles a run as one range). Settling
    a run is settling its receipts in offset order."""

    start: int
    count: int
    epoch: int

    def __post_init__(self) -> None:
        start, count, epoch = self.start, self.count, self.epoch
        if (
            type(start) is int
            and type(count) is int
            and type(epoch) is int
            and start >= 0
            and count > 0
            and start + count - 1 <= U64_MAX
            and 0 < epoch <= U32_MAX
        ):
            return
        v.uint64("offset", start)
        v.uint64("count", count)
        v.uint32("epoch", epoch)
        if epoch == 0:
            raise InvalidArgument("epoch", "must be >= 1")
        if count == 0 or start + count - 1 > U64_MAX:
            raise InvalidArgument("count", "must be >= 1 and stay below 2**64")


Receipts: TypeAlias = tuple[ReceiptRun, ...]


def receipt_runs(receipts: Any) -> tuple[ReceiptRun, ...]:
    """``receipts`` (ReceiptRefs and/or ReceiptRuns, in order) as the fewest
    runs: neighbours of one epoch with consecutive offsets are merged. Order
    is kept, so settling the runs is settling the receipts one by one."""
    v.tuple_of("receipts", receipts, (ReceiptRef, ReceiptRun))
    runs: list[ReceiptRun] = []
    start = count = epoch = -1
    for item in receipts:
        if type(item) is ReceiptRef:
            s, n, e = item.offset, 1, item.epoch
        else:
            s, n, e = item.start, item.count, item.epoch
        if e == epoch and s == start + count:
            count += n
            continue
        if count > 0:
            runs.append(ReceiptRun(start, count, epoch))
        start, count, epoch = s, n, e
    if count > 0:
        runs.append(ReceiptRun(start, count, epoch))
    return tuple(runs)


def _normalize_receipts(cmd: Any) -> None:
    receipts = cmd.receipts
    if type(receipts) is tuple and all(type(r) is ReceiptRun for r in receipts):
        merged = receipt_runs(receipts)
        if len(merged) == len(receipts):
            return
    object.__setattr__(cmd, "receipts", receipt_runs(receipts))


@dataclass(frozen=True, slots=True)
class Configure:
    """Replace the partition's config (the metadata group's queue settings)."""

    config: PartitionConfig

    def __post_init__(self) -> None:
        if not isinstance(self.config, PartitionConfig):
            raise InvalidArgument("config", "must be a PartitionConfig")


def _request_id(value: Any) -> None:
    if type(value) is not bytes or len(value) > MAX_REQUEST_ID_BYTES:
        raise InvalidArgument("request_id", f"must be at most {MAX_REQUEST_ID_BYTES} bytes")


@dataclass(frozen=True, slots=True)
class Append:
    """Store ``records`` at the next offsets. ``request_id`` (b"": none) makes
    the whole Append idempotent within the dedup window: a repeat of the id
    stores nothing and returns the first one's offsets as duplicates (the
    SDK's per-Send id, as Kafka's idempotent producer). Records' own
    ``dedup_id``s are checked one by one as before."""

    records: tuple[NewRecord, ...]
    now_ms: int
    request_id: bytes = b""

    def __post_init__(self) -> None:
        v.tuple_of("records", self.records, NewRecord)
        v.uint64("now_ms", self.now_ms)
        _request_id(self.request_id)


@dataclass(frozen=True, slots=True)
class AppendBlobs:
    """An ``Append`` whose records are given as their blobs (``records.to_blob``
    / ``records.plain_blob``): the leader's send path builds them straight from
    the request, with no NewRecord per message. It encodes to exactly the bytes
    of the equivalent Append (same tag, so nothing changes on the wire or on
    disk), and ``decode`` gives that Append back. Replicas do not look inside
    the blobs (only their framing is checked), so build blobs only with the
    functions above; a ``summary`` given must be the blobs' own."""

    blobs: tuple[bytes, ...]
    now_ms: int
    request_id: bytes = b""
    summary: Summary | None = None  # the blobs' ``segments.summarize``, if known

    def __post_init__(self) -> None:
        if type(self.blobs) is not tuple:
            raise InvalidArgument("blobs", "must be a tuple of bytes")
        v.uint64("now_ms", self.now_ms)
        _request_id(self.request_id)


@dataclass(frozen=True, slots=True)
class Lease:
    """Lease up to ``max_records`` visible records; ``visibility_ms == 0``
    means the partition's ``visibility_timeout_ms``."""

    consumer: str
    max_records: int
    visibility_ms: int
    now_ms: int

    def __post_init__(self) -> None:
        v.text("consumer", self.consumer, v.MAX_GROUP_BYTES)
        v.uint32("max_records", self.max_records)
        v.uint32("visibility_ms", self.visibility_ms)
        v.uint64("now_ms", self.now_ms)


@dataclass(frozen=True, slots=True)
class Ack:
    """Finish the leases; ``receipts`` may be given as ReceiptRefs and are kept
    as ReceiptRuns (``receipt_runs``), as for Nack and ChangeVisibility."""

    receipts: Receipts
    now_ms: int

    def __post_init__(self) -> None:
        _normalize_receipts(self)
        v.uint64("now_ms", self.now_ms)


@dataclass(frozen=True, slots=True)
class Nack:
    """End the leases now; the records are visible again after ``delay_ms``."""

    receipts: Receipts
    delay_ms: int
    now_ms: int

    def __post_init__(self) -> None:
        _normalize_receipts(self)
        v.delay("delay_ms", self.delay_ms, v.MAX_DELAY_MS)
        v.uint64("now_ms", self.now_ms)


@dataclass(frozen=True, slots=True)
class Release:
    """Undo leases that never reached a consumer (a lingering or cancelled
    long poll's): the records are visible again at once, with the receive
    count and delivery history they had before the lease, and the undone
    lease's receipts are stale. A lease that already ended (expired,
    nacked) is left as it is."""

    receipts: Receipts
    now_ms: int

    def __post_init__(self) -> None:
        _normalize_receipts(self)
        v.uint64("now_ms", self.now_ms)


@dataclass(frozen=True, slots=True)
class ChangeVisibility:
    """Set the lease deadline to ``now_ms + visibility_ms`` (as SQS's
    ChangeMessageVisibility; 0 ends the lease now)."""

    receipts: Receipts
    visibility_ms: int
    now_ms: int

    def __post_init__(self) -> None:
        _normalize_receipts(self)
        v.uint32("visibility_ms", self.visibility_ms)
        v.uint64("now_ms", self.now_ms)


@dataclass(frozen=True, slots=True)
class CommitOffset:
    """Store ``offset`` (the next offset to read) for a consumer group."""

    group: str
    offset: int
    reset: bool = False

    def __post_init__(self) -> None:
        v.text("group", self.group, v.MAX_GROUP_BYTES)
        if not self.group:
            raise InvalidArgument("group", "must not be empty")
        v.uint64("offset", self.offset)
        v.boolean("reset", self.reset)


@dataclass(frozen=True, slots=True)
class Expire:
    now_ms: int

    def __post_init__(self) -> None:
        v.uint64("now_ms", self.now_ms)


@dataclass(frozen=True, slots=True)
class Purge:
    now_ms: int

    def __post_init__(self) -> None:
        v.uint64("now_ms", self.now_ms)


@dataclass(frozen=True, slots=True)
class ForgetDead:
    """The leader has forwarded these dead records to the dead-letter queue."""

    offsets: tuple[int, ...]

    def __post_init__(self) -> None:
        v.tuple_of("offsets", self.offsets, int)
        for offset in self.offsets:
            v.uint64("offsets", offset)


@dataclass(frozen=True, slots=True)
class Batch:
    """Many commands in one Raft entry (group commit), applied in order in
    one transaction; the result is the tuple of their results. Not nested."""

    commands: tuple[Command, ...]

    def __post_init__(self) -> None:
        v.tuple_of("commands", self.commands, _SIMPLE)


Command: TypeAlias = (
    Configure
    | Append
    | AppendBlobs
    | Lease
    | Ack
    | Nack
    | Release
    | ChangeVisibility
    | CommitOffset
    | Expire
    | Purge
    | ForgetDead
    | SeedDedup
    | CarryLeases
    | Batch
)
_SIMPLE = (
    Configure,
    Append,
    AppendBlobs,
    Lease,
    Ack,
    Nack,
    Release,
    ChangeVisibility,
    CommitOffset,
    Expire,
    Purge,
    ForgetDead,
    SeedDedup,
    CarryLeases,
)


def __getattr__(name: str) -> Any:
    """``commands.encode`` / ``commands.decode`` (PEP 562): the codec needs
    these classes, so it lives in ``codec`` and is loaded on first use."""
    if name in ("encode", "decode"):
        from raft_queue.core import codec

        return getattr(codec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
