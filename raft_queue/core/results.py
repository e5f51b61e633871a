"""What ``PartitionMachine.apply`` and its read methods return.

Results never travel through Raft: every replica computes them locally and
only the leader's reach the client, so they have no codec. Frozen and
slotted like the commands; tuples, never lists, so they can be compared.

They are cheap to build, because every replica builds them and followers
drop them: O(1) per run of offsets, not one object per record. An Append
says (first offset, count); a Lease lists spans of a stored segment (the
leader's server code turns them into messages, ``LeaseResult.messages``
decodes them for everyone else); outcomes of receipts are run-length
encoded. Each keeps a per-record view (``items``, ``messages``,
``outcomes``) built on demand.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeAlias

from raft_queue.core.records import StoredRecord
from raft_queue.core.segments import Segment

# ReceiptsResult outcomes, one per receipt.
OK = "ok"
STALE = "stale"  # the record was leased again since this receipt was issued
NOT_FOUND = "not_found"  # acked, dead, removed by retention or purge, or never leased


@dataclass(frozen=True, slots=True)
class AppendItem:
    offset: int
    duplicate: bool  # dedup_id seen within the window: offset is the original's


@dataclass(frozen=True, slots=True)
class AppendResult:
    """One item per record of the Append, in order: the offsets ``first,
    first + 1, ...`` with one ``duplicate`` flag (the usual case, O(1)), or,
    when records differ (some of them duplicates), ``listed``. Build it with
    ``of`` from items, or directly in the compact form; equal results compare
    equal whatever the form (``of`` picks the compact one when it can)."""

    first: int
    count: int
    duplicate: bool = False
    listed: tuple[AppendItem, ...] | None = None

    @classmethod
    def of(cls, items: Iterable[AppendItem]) -> AppendResult:
        items = tuple(items)
        if not items:
            return cls(0, 0)
        first, dup = items[0].offset, items[0].duplicate
        if all(it.offset == first + k and it.duplicate == dup for k, it in enumerate(items)):
            return cls(first, len(items), dup)
        return cls(0, len(items), False, items)

    @property
    def items(self) -> tuple[AppendItem, ...]:
        if self.listed is not None:
            return self.listed
        dup = self.duplicate
        return tuple(AppendItem(o, dup) for o in range(self.first, self.first + self.count))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AppendResult):
            return NotImplemented
        return self.items == other.items

    def __hash__(self) -> int:
        return hash(self.items)


@dataclass(frozen=True, slots=True)
class LeasedMessage:
    record: StoredRecord
    epoch: int  # goes into the receipt; a later lease of the record bumps it
    receive_count: int  # leases of this record so far, this one included
    deadline_ms: int  # invisible to other leases until then


@dataclass(frozen=True, slots=True)
class LeasedSpan:
    """Records ``offset .. offset + count - 1`` of one stored segment, leased
    with one epoch, receive count and deadline. ``segment`` is the stored
    value as read (``segments.Segment(base, segment)`` reads it); the caller
    owns it and must not expect more than those records to be leased."""

    segment: bytes
    base: int
    offset: int
    count: int
    epoch: int
    receive_count: int
    deadline_ms: int

    def records(self) -> list[StoredRecord]:
        i = self.offset - self.base
        return Segment(self.base, self.segment).records(i, i + self.count)


@dataclass(frozen=True, slots=True)
class LeaseResult:
    spans: tuple[LeasedSpan, ...]  # in offset order

    @property
    def messages(self) -> tuple[LeasedMessage, ...]:
        """One LeasedMessage per record, decoded (in offset order)."""
        return tuple(
            LeasedMessage(rec, s.epoch, s.receive_count, s.deadline_ms)
            for s in self.spans
            for rec in s.records()
        )

    def __len__(self) -> int:
        return sum(s.count for s in self.spans)


@dataclass(frozen=True, slots=True)
class ReceiptsResult:
    """OK, STALE or NOT_FOUND for each receipt, in request order, as runs
    ``(outcome, how many)``; neighbouring runs always differ, so equal
    outcomes give equal results."""

    runs: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, outcomes: Iterable[str]) -> ReceiptsResult:
        runs: list[tuple[str, int]] = []
        for outcome in outcomes:
            if runs and runs[-1][0] == outcome:
                runs[-1] = (outcome, runs[-1][1] + 1)
            else:
                runs.append((outcome, 1))
        return cls(tuple(runs))

    @property
    def outcomes(self) -> tuple[str, ...]:
        return tuple(outcome for outcome, n in self.runs for _ in range(n))


@dataclass(frozen=True, slots=True)
class ExpireResult:
    removed: int  # records dropped from the front of the log
    dead: tuple[int, ...]  # dead offsets not yet forgotten, ascending


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: tuple[StoredRecord, ...]
    next_offset: int  # where the next read continues
    earliest_offset: int
    latest_offset: int  # the next offset to be assigned


@dataclass(frozen=True, slots=True)
class PartitionStats:
    earliest_offset: int
    latest_offset: int
    messages: int  # retained, not acked and not dead
    in_flight: int  # leased, deadline not passed
    delayed: int  # waiting out a nack delay, or set aside by Lease for its delay
    dead: int  # dead, waiting for ForgetDead
    bytes: int  # stored size of the retained records (see segments: 8 + blob each)
    oldest_timestamp_ms: int  # of the oldest retained record not finished (0: none)
    sealed: bool = False  # split: its config refuses every Append
    fenced: bool = False  # moving to another cluster: no Append, no Lease


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    time_ms: int  # leader's clock when leased
    consumer: str  # Lease.consumer
    deadline_ms: int  # deadline as granted


@dataclass(frozen=True, slots=True)
class History:
    """Where one record stands and its recent leases (GetHistory, DLQ headers)."""

    state: str  # queued | in_flight | delayed | blocked | dead | done
    receive_count: int
    deliveries: tuple[LeaseEvent, ...]  # oldest first, the last HISTORY_LIMIT
    # For a move's export (not compared: GetHistory's answer is the above).
    epoch: int = field(default=0, compare=False)  # the current (or last) lease's; 0: never
    # in_flight: deadline; delayed: visible at; queued: when its own send delay ends (0: none)
    at_ms: int = field(default=0, compare=False)


Result: TypeAlias = (
    None | AppendResult | LeaseResult | ReceiptsResult | ExpireResult | int | tuple["Result", ...]
)
