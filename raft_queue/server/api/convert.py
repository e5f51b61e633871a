"""Between protobuf messages and our types: validation of requests happens here,
before anything is submitted, so bad input never reaches the Raft log."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from raft_queue import config, errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.config import MAX_MESSAGE_DELAY_MS, Limits, QueueSpec
from raft_queue.core.commands import MAX_REQUEST_ID_BYTES, NewRecord, PartitionConfig
from raft_queue.core.records import BARE_HEAD, plain_blob, to_blob
from raft_queue.core.results import LeaseResult
from raft_queue.core.segments import HAS_DEDUP, HAS_KEY, SEALED, Segment, Summary, summarize
from raft_queue.observability import metrics
from raft_queue.server.api.answer import LeasedRun, open_answer
from raft_queue.server.dataplane import bounds
from raft_queue.server.dataplane.receipts import Receipts

MAX_DEDUP_ID = 128
MAX_KEY = 1024
MAX_DELAY_MS = MAX_MESSAGE_DELAY_MS
MAX_VISIBILITY_MS = 12 * 3600 * 1000

DURABILITY = {
    "fsync": queue_pb2.DURABILITY_FSYNC,
    "quorum": queue_pb2.DURABILITY_QUORUM,
    "leader": queue_pb2.DURABILITY_LEADER,
}
ORDERING = {"none": queue_pb2.ORDERING_NONE, "fifo": queue_pb2.ORDERING_FIFO}
_SPEC_FIELDS = (
    "encryption",
    "partitions",
    "replication_factor",
    "visibility_timeout_ms",
    "max_receives",
    "dead_letter_queue",
    "retention_ms",
    "retention_bytes",
    "max_message_bytes",
    "dedup_window_ms",
    "delay_ms",
)


def check_queue_name(name: str, field: str = "name") -> str:
    """The one queue-name rule (config.check_queue_name), checked at the
    front: a bad name never costs a Raft round."""
    config.check_queue_name(name, field)
    return name


def spec_from_pb(pb: queue_pb2.QueueConfig, base: QueueSpec | None = None) -> QueueSpec:
    """QueueSpec from the fields set in ``pb`` over ``base`` (defaults if None)."""
    changes: dict[str, Any] = {}
    for name in _SPEC_FIELDS:
        if pb.HasField(name):
            changes[name] = getattr(pb, name)
    if pb.HasField("durability"):
        changes["durability"] = _enum_name(pb.durability, DURABILITY, "config.durability")
    if pb.HasField("ordering"):
        changes["ordering"] = _enum_name(pb.ordering, ORDERING, "config.ordering")
    try:
        return (base or QueueSpec()).with_updates(**changes)
    except errors.InvalidArgument as exc:
        raise errors.InvalidArgument(f"config.{exc.field}", exc.message.split(": ", 1)[-1]) from exc


def _enum_name(value: int, table: Mapping[str, int], field: str) -> str:
    for name, number in table.items():
        if number == value:
            return name
    raise errors.InvalidArgument(field, f"unknown value {value}")


def spec_to_pb(spec: QueueSpec) -> queue_pb2.QueueConfig:
    pb = queue_pb2.QueueConfig(
        durability=DURABILITY[spec.durability], ordering=ORDERING[spec.ordering]
    )
    for name in _SPEC_FIELDS:
        setattr(pb, name, getattr(spec, name))
    return pb


def partition_config(
    spec: QueueSpec, sealed: bool = False, fenced: bool = False
) -> PartitionConfig:
    return PartitionConfig(
        sealed=sealed,
        fenced=fenced,
        ordering=spec.ordering,
        visibility_timeout_ms=spec.visibility_timeout_ms,
        max_receives=spec.max_receives,
        dedup_window_ms=spec.dedup_window_ms,
        retention_ms=spec.retention_ms,
        retention_bytes=spec.retention_bytes,
        delay_ms=spec.delay_ms,
    )


def new_record(
    i: int, entry: queue_pb2.SendEntry, spec: QueueSpec, limits: Limits | None = None
) -> NewRecord:
    field = f"entries[{i}]"
    if len(entry.body) > spec.max_message_bytes:
        metrics.count_rejection("limits")
        raise errors.InvalidArgument(
            f"{field}.body",
            f"{len(entry.body)} bytes is over the queue's max_message_bytes "
            f"{spec.max_message_bytes}",
        )
    if len(entry.dedup_id) > MAX_DEDUP_ID:
        raise errors.InvalidArgument(f"{field}.dedup_id", f"longer than {MAX_DEDUP_ID} characters")
    if len(entry.key) > MAX_KEY:
        raise errors.InvalidArgument(f"{field}.key", f"longer than {MAX_KEY} characters")
    if entry.delay_ms > MAX_DELAY_MS:
        raise errors.InvalidArgument(
            f"{field}.delay_ms",
            f"{entry.delay_ms} ms: at most {MAX_DELAY_MS} ms (3653 days, 10 years)",
        )
    if spec.ordering == "fifo" and not entry.key:
        raise errors.InvalidArgument(f"{field}.key", "a fifo queue needs a key on every message")
    if entry.headers:
        bounds.check_headers(field, entry, spec, limits or _DEFAULT_LIMITS)
    headers = tuple(sorted((k, bytes(v)) for k, v in entry.headers.items()))
    try:
        return NewRecord(
            body=bytes(entry.body),
            key=entry.key,
            headers=headers,
            dedup_id=entry.dedup_id,
            delay_ms=entry.delay_ms,
        )
    except errors.InvalidArgument as exc:  # name the entry, not just the record field
        raise errors.InvalidArgument(
            f"{field}.{exc.field}", exc.message.split(": ", 1)[-1]
        ) from exc


def record_blobs(
    entries: Sequence[queue_pb2.SendEntry],
    indexes: Sequence[int],
    spec: QueueSpec,
    limits: Limits | None = None,
) -> tuple[tuple[bytes, ...], Summary]:
    """The record blobs (``records.to_blob``) of ``entries[i]`` for ``i`` in
    ``indexes``, validated exactly as ``new_record`` validates, and their
    ``segments.Summary``: what an ``AppendBlobs`` carries. The bulk case (no
    headers, no delay, short fields) is packed directly, without a NewRecord
    per message, and summed up as it goes."""
    max_body = spec.max_message_bytes
    keyless_ok = spec.ordering != "fifo"
    out: list[bytes] = []
    add = out.append
    flags = 0
    general = False
    for i in indexes:
        entry = entries[i]
        body, key, dedup_id = entry.body, entry.key, entry.dedup_id
        bare = not (key or dedup_id or entry.delay_ms or entry.headers)
        if bare and keyless_ok and len(body) <= max_body:  # the SDK's bulk case
            add(BARE_HEAD + body)  # == plain_blob(body, "", "")
            continue
        if (
            len(body) <= max_body
            and len(dedup_id) <= MAX_DEDUP_ID
            and len(key) <= MAX_KEY
            and (key or keyless_ok)
            and not entry.delay_ms
            and not entry.headers
        ):
            add(plain_blob(body, key, dedup_id))
            if key:
                flags |= HAS_KEY
            if dedup_id:
                flags |= HAS_DEDUP
        else:  # the general path names the failing field
            add(to_blob(new_record(i, entry, spec, limits)))
            general = True
    blobs = tuple(out)
    return blobs, summarize(blobs) if general else Summary(len(blobs), flags, 0)


_DEFAULT_LIMITS = Limits()


def check_request_id(request_id: bytes) -> bytes:
    if len(request_id) > MAX_REQUEST_ID_BYTES:
        raise errors.InvalidArgument(
            "request_id", f"{len(request_id)} bytes; at most {MAX_REQUEST_ID_BYTES}"
        )
    return request_id


def message_pb(
    queue: str, partition: int, rec: Any, receipt: str = "", count: int = 0, make: Any = None
) -> Any:
    """The Message of ``rec``; made by ``make`` (in a Receive's
    answer) if given."""
    message = make or queue_pb2.Message
    if rec.headers:
        return message(
            queue=queue,
            partition=partition,
            offset=rec.offset,
            body=rec.body,
            key=rec.key,
            headers=dict(rec.headers),
            timestamp_ms=rec.timestamp_ms,
            receipt=receipt,
            receive_count=count,
            dedup_id=rec.dedup_id,
        )
    # No headers= (an empty map argument costs as much as the rest): receive
    # builds up to 1000 of these per call.
    return message(
        queue=queue,
        partition=partition,
        offset=rec.offset,
        body=rec.body,
        key=rec.key,
        timestamp_ms=rec.timestamp_ms,
        receipt=receipt,
        receive_count=count,
        dedup_id=rec.dedup_id,
    )


def lease_messages(
    queue: str,
    partition: int,
    uid: int,
    result: LeaseResult,
    receipts: Receipts,
    opener: Callable[[Segment, int, int], list[Any]] | None = None,
) -> list[Any]:
    """The Messages (with receipts, made by ``receipts``) of a Lease's result:
    one per leased record, in offset order. Records of a segment without
    keys, dedup ids and headers are sliced straight out of it (the bulk of a
    drain); in a Receive that answers with runs (``answer.Answer``), they are
    RunItems of one LeasedRun per span, never made into Messages."""
    out: list[Any] = []
    add = out.append
    answer = open_answer()
    runs = answer is not None and answer.runs
    message = answer.response.messages.add if answer is not None else queue_pb2.Message
    for span in result.spans:
        seg = Segment(span.base, span.segment)
        i = span.offset - span.base
        count, ts = span.receive_count, seg.timestamp_ms
        if seg.flags:
            if seg.flags & SEALED:  # encrypted at rest: ``opener`` decrypts (NodeCrypto)
                if opener is None:
                    raise errors.Internal("a sealed segment without an opener")
                recs = opener(seg, i, i + span.count)
                if not seg.flags & (HAS_KEY | HAS_DEDUP):  # as the bodies-only path below
                    if runs and not any(map(_HEADERS, recs)):
                        bodies = list(map(_BODY, recs))
                        out += _run(queue, partition, uid, span, bodies, ts, receipts).items()
                        continue
                    handles = _receipts(receipts, queue, uid, partition, span)
                    _add_bare(out, queue, partition, recs, handles, count, message)
                    continue
            else:
                recs = seg.records(i, i + span.count)
            handles = _receipts(receipts, queue, uid, partition, span)
            for rec, receipt in zip(recs, handles, strict=True):
                add(message_pb(queue, partition, rec, receipt, count, message))
            continue
        bodies = seg.bodies(i, i + span.count)
        if runs:
            out += _run(queue, partition, uid, span, bodies, ts, receipts).items()
            continue
        handles = _receipts(receipts, queue, uid, partition, span)
        for offset, body, receipt in zip(
            range(span.offset, span.offset + span.count), bodies, handles, strict=True
        ):
            add(
                message(
                    queue=queue,
                    partition=partition,
                    offset=offset,
                    body=body,
                    timestamp_ms=ts,
                    receipt=receipt,
                    receive_count=count,
                )
            )
    return out


def _receipts(receipts: Receipts, queue: str, uid: int, partition: int, span: Any) -> list[str]:
    return receipts.span(queue, uid, partition, span.offset, span.count, span.epoch)


_HEADERS = attrgetter("headers")
_BODY = attrgetter("body")


def _run(
    queue: str, partition: int, uid: int, span: Any, bodies: Any, ts: int, receipts: Receipts
) -> LeasedRun:
    parts = receipts.run_parts(queue, uid, partition, span.offset, span.count, span.epoch)
    return LeasedRun(queue, partition, span.offset, bodies, ts, span.receive_count, parts)


def _add_bare(
    out: list[Any], queue: str, partition: int, recs: Any, handles: Any, count: int, message: Any
) -> None:
    """Messages of records without keys and dedup ids (headers are rare)."""
    for rec, receipt in zip(recs, handles, strict=True):
        if rec.headers:
            out.append(message_pb(queue, partition, rec, receipt, count, message))
            continue
        out.append(
            message(
                queue=queue,
                partition=partition,
                offset=rec.offset,
                body=rec.body,
                timestamp_ms=rec.timestamp_ms,
                receipt=receipt,
                receive_count=count,
            )
        )


def check_range(value: int, lo: int, hi: int, field: str) -> int:
    if not lo <= value <= hi:
        raise errors.InvalidArgument(field, f"{value} is outside [{lo}, {hi}]")
    return value


def history_pb(history: Any) -> Any:
    """GetHistoryResponse from the machine's delivery history of one record."""
    return queue_pb2.GetHistoryResponse(
        state=history.state,
        receive_count=history.receive_count,
        deliveries=[
            queue_pb2.Delivery(time_ms=d.time_ms, consumer=d.consumer, deadline_ms=d.deadline_ms)
            for d in history.deliveries
        ],
    )
