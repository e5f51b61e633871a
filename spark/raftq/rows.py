"""Rows in and out of the queue as Arrow record batches (no Python row objects).

Reads emit one ``pyarrow.RecordBatch`` per Read RPC in the exact shape of
``READ_SCHEMA`` (Spark checks the Arrow types against the declared schema);
writes take Spark's Arrow batches column by column. Kafka's conventions:
a missing key or no headers is null; ``timestampType`` is 1
(LogAppendTime: the leader stamps each record when it appends it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

READ_SCHEMA = (
    "key binary, value binary, queue string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_SCHEMA = ", headers array<struct<key: string, value: binary>>"
LOG_APPEND_TIME = 1

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("queue", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
]


def read_schema(include_headers: bool) -> str:
    return READ_SCHEMA + (HEADERS_SCHEMA if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema(_FIELDS + ([("headers", _HEADERS)] if include_headers else []))


def to_record_batch(messages: Sequence[Any], include_headers: bool) -> pa.RecordBatch:
    """SDK ``Message``s of one partition -> one Arrow batch in the declared schema."""
    n = len(messages)
    columns = [
        [m.key.encode("utf-8") if m.key else None for m in messages],
        [m.body for m in messages],
        [m.queue for m in messages],
        [m.partition for m in messages],
        [m.offset for m in messages],
        [m.timestamp_ms * 1000 for m in messages],
        [LOG_APPEND_TIME] * n,
    ]
    if include_headers:
        columns.append([_headers_out(m.headers) for m in messages])
    schema = arrow_schema(include_headers)
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _headers_out(headers: dict[str, bytes]) -> list[dict[str, Any]] | None:
    """Sorted by key: the server keeps headers in a map, so stored order is not kept."""
    if not headers:
        return None
    return [{"key": k, "value": headers[k]} for k in sorted(headers)]


@dataclass(frozen=True, slots=True)
class OutRow:
    """One row to publish, before its partition and dedup id are fixed."""

    queue: str | None
    partition: int | None
    key: str
    value: bytes
    headers: dict[str, bytes] | None


def out_rows(batch: pa.RecordBatch) -> Iterator[OutRow]:
    """The rows of a Spark Arrow batch with the sink's columns normalised.

    value: string or binary, null becomes empty; key: string or UTF-8 binary,
    null becomes ""; queue (or Kafka's topic); headers: array<struct<key, value>>
    or map<string, _>.
    """
    names = set(batch.schema.names)
    n = batch.num_rows
    values = batch.column("value").to_pylist()
    keys = batch.column("key").to_pylist() if "key" in names else [None] * n
    headers = batch.column("headers").to_pylist() if "headers" in names else [None] * n
    queue_col = "queue" if "queue" in names else "topic" if "topic" in names else None
    queues = batch.column(queue_col).to_pylist() if queue_col else [None] * n
    parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
    for value, key, head, queue, part in zip(values, keys, headers, queues, parts, strict=True):
        yield OutRow(queue, part, _key_in(key), _bytes(value), _headers_in(head))


def _bytes(value: bytes | str | None) -> bytes:
    if value is None:
        return b""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _key_in(key: bytes | str | None) -> str:
    """Keys are strings in raft_queue; a binary key must be UTF-8."""
    if key is None or isinstance(key, str):
        return key or ""
    try:
        return bytes(key).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"raftq: key {bytes(key)[:32]!r} is not UTF-8 (keys are strings)") from exc


def _headers_in(headers: Any) -> dict[str, bytes] | None:
    """array<struct<key, value>> (Kafka's shape) or map<string, _> -> dict; later keys win."""
    if not headers:
        return None
    pairs = (
        ((h["key"], h["value"]) for h in headers)
        if isinstance(headers[0], dict)
        else iter(headers)  # a map arrives as (key, value) tuples
    )
    return {str(k): _bytes(v) for k, v in pairs if k is not None}
