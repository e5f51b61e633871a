"""What ``PartitionMachine.apply`` and its read methods return.

Results never travel through Raft: every replica computes them locally and
only the leader's reach the client, so they have no codec. Frozen and
slotted like the commands; tuples, never lists, so they can be compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from raft_queue.core.records import StoredRecord

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
    items: tuple[AppendItem, ...]  # one per appended record, same order


@dataclass(frozen=True, slots=True)
class LeasedMessage:
    record: StoredRecord
    epoch: int  # goes into the receipt; a later lease of the record bumps it
    receive_count: int  # leases of this record so far, this one included
    deadline_ms: int  # invisible to other leases until then


@dataclass(frozen=True, slots=True)
class LeaseResult:
    messages: tuple[LeasedMessage, ...]  # in offset order


@dataclass(frozen=True, slots=True)
class ReceiptsResult:
    outcomes: tuple[str, ...]  # OK, STALE or NOT_FOUND, one per receipt


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
    bytes: int  # stored size of the retained records (see records.stored_value)
    oldest_timestamp_ms: int  # of the oldest retained record not finished (0: none)


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


Result: TypeAlias = (
    None | AppendResult | LeaseResult | ReceiptsResult | ExpireResult | int | tuple["Result", ...]
)
