"""The queues' data keys in the metadata state (pure): rotation, master-key
rewrapping, and their end with the queue (crypto-shredding: a deleted queue's
wrapped keys leave the state, and the next snapshot no longer holds them).

A queue's keys are kept in id order; the last is the current one (it seals
new batches), the others stay for reading older ones.
"""

from __future__ import annotations

from typing import Any

from raft_queue import errors
from raft_queue.core.metadata_records import DataKey, QueueRecord

Keys = dict[str, tuple[DataKey, ...]]


def add(keys: Keys, record: QueueRecord, uid: int, key: DataKey) -> tuple[DataKey, ...]:
    """Append ``key`` as the queue's current key (its id must be the next)."""
    if uid != record.uid:
        raise errors.FailedPrecondition(f"queue {record.name!r} was re-created (uid)")
    have = keys.get(record.name, ())
    expected = have[-1].key_id + 1 if have else 1
    if key.key_id != expected:
        raise errors.FailedPrecondition(
            f"data key id {key.key_id} of queue {record.name!r}: the next id is {expected}; retry"
        )
    _check(key)
    keys[record.name] = (*have, key)
    return keys[record.name]


def rewrap(
    keys: Keys, record: QueueRecord, uid: int, new: tuple[DataKey, ...]
) -> tuple[DataKey, ...]:
    """Replace every key's wrapping (same ids, same order)."""
    if uid != record.uid:
        raise errors.FailedPrecondition(f"queue {record.name!r} was re-created (uid)")
    have = keys.get(record.name, ())
    if [k.key_id for k in have] != [k.key_id for k in new]:
        raise errors.FailedPrecondition(
            f"queue {record.name!r}: data keys changed while rewrapping; retry"
        )
    for key in new:
        _check(key)
    keys[record.name] = tuple(new)
    return keys[record.name]


def _check(key: DataKey) -> None:
    if not key.master_id or not key.wrapped:
        raise errors.InvalidArgument("data_key", "master_id and wrapped are required")
    try:
        bytes.fromhex(key.wrapped)
    except ValueError as exc:
        raise errors.InvalidArgument("data_key.wrapped", "must be hex") from exc


def to_plain(keys: Keys) -> dict[str, Any]:
    return {
        name: [[k.key_id, k.master_id, k.wrapped] for k in keys[name]]
        for name in sorted(keys)
        if keys[name]
    }


def from_plain(obj: dict[str, Any]) -> Keys:
    return {
        str(name): tuple(DataKey(int(i), str(m), str(w)) for i, m, w in items)
        for name, items in obj.items()
    }
