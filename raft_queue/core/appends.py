"""Append: the records of one command become one segment of the log.

The hot path of every replica. The command's body (``segments``) is stored
as it came, behind the timestamp: one put for the whole Append, whatever
its size, plus a dedup row if it carries a request id. Only an Append whose
records carry their own dedup ids is looked into record by record (each id
is checked; a duplicate is left out and the segment rebuilt without it).
"""

from __future__ import annotations

from raft_queue.core import dedup
from raft_queue.core.codec import AppendParts, split_append
from raft_queue.core.records import check_blob
from raft_queue.core.results import AppendItem, AppendResult
from raft_queue.core.segments import (
    HAS_DEDUP,
    RECORD_OVERHEAD,
    SEALED,
    encode_body,
    segment_blobs,
    segment_value,
)
from raft_queue.core.state import RECORDS, View, u64
from raft_queue.core.wire import Malformed
from raft_queue.errors import InvalidArgument, PartitionSealed


def append(view: View, data: bytes) -> AppendResult:
    """Apply the encoded Append ``data``. Dense offsets; ``timestamp_ms`` is
    ``now_ms``, raised if needed to the previous Append's so timestamps never
    decrease (retention, delay and dedup walk the log in time order)."""
    parts = split_append(data)
    if view.cfg.sealed or view.cfg.fenced:
        return _sealed(view, parts.request_id)
    c = view.c
    ts = c.last_ts = max(parts.now_ms, c.last_ts)
    view.at(ts)
    request_id = parts.request_id if view.cfg.dedup_window_ms else b""
    if request_id:
        seen = dedup.seen_request(view, request_id)
        if seen is not None:
            return seen
    first = c.next_offset
    if parts.body.summary.flags & HAS_DEDUP and view.cfg.dedup_window_ms:
        result = _append_checked(view, data, parts, ts)
    else:
        count = parts.body.summary.records
        if count:
            _store(view, first, segment_value(ts, data, parts.body_at), count)
            c.stored_bytes += RECORD_OVERHEAD * count + len(data) - parts.body.data_at
        result = AppendResult(first, count)
    if request_id:
        dedup.record_request(view, request_id, first, ts, result)
    return result


def _sealed(view: View, request_id: bytes) -> AppendResult:
    """A split partition takes no Append; but the retry of one it stored
    before the seal (same request id, within the window) gets its first
    answer, so a send whose answer was lost across the seal is not stored
    again on a child. Changes nothing."""
    seen = dedup.seen_request(view, request_id) if request_id and view.cfg.dedup_window_ms else None
    if seen is not None:
        return seen
    raise PartitionSealed("this partition was split (sealed); refresh the partition map")


def _store(view: View, first: int, value: bytes, count: int) -> None:
    view.txn.put(RECORDS, u64(first), value)
    view.c.next_offset = first + count


def _append_checked(view: View, data: bytes, parts: AppendParts, ts: int) -> AppendResult:
    """Records with dedup ids: each id seen within the window returns its
    original offset and is not stored; the others are, as one segment."""
    blobs = segment_blobs(data, parts.body)
    c = view.c
    offset = first = c.next_offset
    items: list[AppendItem] = []
    kept: list[bytes] = []
    for blob in blobs:
        try:
            dedup_id = check_blob(blob)
        except Malformed as exc:
            raise InvalidArgument("command", f"malformed Append: {exc}") from exc
        original = dedup.lookup_or_record(view, dedup_id, offset, ts) if dedup_id else None
        if original is not None:
            items.append(AppendItem(original, True))
            continue
        kept.append(blob)
        items.append(AppendItem(offset, False))
        offset += 1
    if kept:
        if len(kept) == len(blobs):
            body = data[parts.body_at :]
        elif parts.body.summary.flags & SEALED:  # sealed record by record (``sealing``)
            body = encode_body(kept, parts.body.summary._replace(records=len(kept)))
        else:
            body = encode_body(kept)
        _store(view, first, segment_value(ts, body, 0), len(kept))
        c.stored_bytes += RECORD_OVERHEAD * len(kept) + sum(map(len, kept))
    return AppendResult.of(items)
