"""Splits in the metadata machine (pure): how SplitPartitions and
SetPartitionState change a queue's record (core/placement_keys.py has the
key-range rule itself). Each function checks everything before returning
the new values, so a rejected command changes nothing on any replica.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from raft_queue import errors
from raft_queue.config import MAX_PARTITIONS
from raft_queue.core.metadata_commands import SetPartitionState, SplitPartitions
from raft_queue.core.metadata_records import PartitionAssignment, QueueRecord
from raft_queue.core.placement_keys import KeyRange, Layout, apply_splits


def split(
    record: QueueRecord, current: tuple[PartitionAssignment, ...], cmd: SplitPartitions
) -> tuple[QueueRecord, tuple[PartitionAssignment, ...]]:
    """The record and assignments after ``cmd`` (replica checks are the caller's)."""
    _check_uid(record, cmd.uid)
    total = record.spec.partitions + 2 * len(cmd.parents)
    if not cmd.parents:
        raise errors.InvalidArgument("partitions", "no partition to split")
    if total > MAX_PARTITIONS:
        raise errors.InvalidArgument("partitions", f"{total} partitions; at most {MAX_PARTITIONS}")
    try:
        layout = apply_splits(record.layout, cmd.parents)
    except (ValueError, IndexError) as exc:
        raise errors.InvalidArgument("partitions", str(exc)) from exc
    numbers = [a.partition for a in cmd.assignments]
    if numbers != list(range(record.spec.partitions, total)):
        raise errors.Internal("split assignments must number the children in order")
    for a in cmd.assignments:
        if len(a.replicas) != record.spec.replication_factor:
            raise errors.Internal(f"partition {a.partition}: wrong replica count")
    spec = replace(record.spec, partitions=total)
    return replace(record, spec=spec, ranges=layout.ranges), (*current, *cmd.assignments)


def set_state(record: QueueRecord, cmd: SetPartitionState) -> QueueRecord:
    """splitting -> sealed -> drained (the same state again: no change)."""
    _check_uid(record, cmd.uid)
    layout = record.layout
    if not 0 <= cmd.partition < layout.version:
        raise errors.InvalidArgument("partition", f"{cmd.partition} out of range")
    try:
        return replace(record, ranges=layout.with_state(cmd.partition, cmd.state).ranges)
    except ValueError as exc:
        raise errors.FailedPrecondition(str(exc)) from exc


def same_definition(existing: QueueRecord, config: Any) -> bool:
    """A create repeated after splits: the same spec as created (the
    partition count it was created with), so the retry is still idempotent."""
    if existing.spec == config:
        return True
    roots = sum(1 for r in existing.layout.ranges if r.parent < 0)
    return bool(existing.ranges) and replace(existing.spec, partitions=roots) == config


def ranges_to_plain(ranges: tuple[KeyRange, ...]) -> list[list[Any]]:
    return [[r.partition, r.modulus, r.residue, r.parent, r.state] for r in ranges]


def ranges_from_plain(rows: list[list[Any]]) -> tuple[KeyRange, ...]:
    ranges = tuple(KeyRange(int(p), int(m), int(r), int(parent), str(s))
                   for p, m, r, parent, s in rows)  # fmt: skip
    if ranges:
        Layout(ranges)  # checks the numbering
    return ranges


def _check_uid(record: QueueRecord, uid: int) -> None:
    if uid and uid != record.uid:
        raise errors.FailedPrecondition(f"queue {record.name!r} was re-created (uid)")
