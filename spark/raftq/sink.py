"""The ``raftq`` sink: batch and streaming writes that never store a row twice.

Exactly-once here means: every row of a committed Spark batch is in the queue
once, however often Spark retries a task or replays a micro-batch after a
crash. Each row is sent with a deterministic dedup id

    ``{sinkId}:{batchId}:{task partition}:{row index in the task}``

and to a deterministic partition (the ``partition`` column, else the key's
hash, else ``(task + row) % partitions``), and the queue stores a dedup id
once per partition within its ``dedup_window_ms``. A retry or replay
resends the same rows with the same ids and partitions, so the queue
answers "duplicate" instead of appending. This needs the rows of a replayed
batch to arrive in the same tasks in the same order (true for the raftq and
file sources and deterministic transformations) and the replay to happen
within the dedup window (raise ``dedup_window_ms`` on the queue to cover
your longest outage; ``replay_risk`` warns when it can tell).

Rows are published during the write phase (executors), so a reader may see a
failed batch's rows before its replay completes it; it never sees them twice.
Kafka's sink, for comparison, is at-least-once.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from spark.raftq import broker
from spark.raftq.lanes import Lanes
from spark.raftq.options import OptionError, SinkOptions, sink_options
from spark.raftq.rows import OutRow, out_rows

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's MicroBatchExecution on every task
# Entries per Send RPC (one RPC per chunk): the SDK's MAX_BATCH, under the
# server's limit (limits.max_batch_messages, 10,000 by default).
SEND_CHUNK = 1000
_TEXT = (StringType, BinaryType)
_INT = (IntegerType, LongType, ShortType, ByteType)


@dataclass
class Published(WriterCommitMessage):
    """What one task sent: ``duplicates`` rows were already stored (a retry or replay)."""

    task: int
    rows: int
    duplicates: int
    seconds: float = 0.0


def check_schema(schema: StructType, opts: SinkOptions) -> None:
    """Fail the write on the driver, before any task, if the DataFrame cannot be published."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    have = ", ".join(schema.fieldNames()) or "none"
    if "value" not in fields:
        raise OptionError(f"raftq sink: the DataFrame needs a 'value' column; its columns: {have}")
    problems = []
    for name, allowed in (("value", _TEXT), ("key", _TEXT), ("queue", (StringType,))):
        if name in fields and not isinstance(fields[name], allowed):
            problems.append(f"{name} must be string or binary, not {fields[name].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], _INT):
        problems.append(f"partition must be an integer, not {fields['partition'].simpleString()}")
    if "headers" in fields and not _headers_type_ok(fields["headers"]):
        problems.append(
            "headers must be array<struct<key: string, value: binary>> or map<string, binary>"
        )
    if opts.queue is None and "queue" not in fields and "topic" not in fields:
        problems.append("set option queue, or give the DataFrame a 'queue' column")
    if problems:
        raise OptionError("raftq sink: " + "; ".join(problems))


def _headers_type_ok(t: Any) -> bool:
    if isinstance(t, MapType):
        return isinstance(t.keyType, StringType) and isinstance(t.valueType, _TEXT)
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in t.elementType.fields}
    return isinstance(inner.get("key"), StringType) and isinstance(inner.get("value"), _TEXT)


def stream_sink_id(opts: SinkOptions) -> str:
    """``sinkId``, else a hash of the checkpoint location (stable across restarts).

    Moving the checkpoint changes the hash: set sinkId explicitly for jobs
    whose checkpoint may move.
    """
    if opts.sink_id:
        return opts.sink_id
    if not opts.checkpoint:
        raise OptionError("raftq sink: a stream needs option sinkId or checkpointLocation")
    where = opts.checkpoint
    if "://" not in where:
        where = os.path.abspath(where)
    return "ck-" + hashlib.sha256(where.encode("utf-8")).hexdigest()[:16]


def replay_risk(checkpoint: str | None, window_ms: int, now_s: float | None = None) -> str | None:
    """A warning if restarting from ``checkpoint`` replays a batch older than the dedup window.

    Spark replays batch N when ``offsets/N`` exists without ``commits/N``.
    Rows it had already published before the window ended would be stored
    again. Only local checkpoints can be inspected; others return None.
    """
    if window_ms <= 0:
        return "the queue's dedup_window_ms is 0: writes are at-least-once, not exactly-once"
    if not checkpoint or ("://" in checkpoint and not checkpoint.startswith("file:")):
        return None
    root = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
    planned = [int(p.name) for p in (root / "offsets").glob("[0-9]*") if p.name.isdigit()]
    if not planned or (root / "commits" / str(max(planned))).exists():
        return None
    batch = max(planned)
    age_s = (now_s or time.time()) - (root / "offsets" / str(batch)).stat().st_mtime
    if age_s * 1000 <= window_ms:
        return None
    return (
        f"batch {batch} is replayed {age_s:.0f} s after it was planned, more than the queue's "
        f"dedup window ({window_ms / 1000:.0f} s): rows it published then may be stored twice. "
        "Raise the queue's dedup_window_ms to cover the longest outage."
    )


def _partition_for_key(key: str, partitions: Any) -> int:
    """The one placement rule (raft_queue/core/placement_keys.py): murmur2
    over ``partitions`` (a count, or a split queue's key ranges)."""
    from raft_queue.core.placement_keys import partition_for_key

    return partition_for_key(key, partitions)


def _placement(row: OutRow, partitions: Any, task: int, index: int) -> int:
    """The row's partition, the same on every retry (dedup is per partition).
    ``partitions``: the count of a queue never split, else its key ranges
    (``broker.key_placement``): keyless rows then rotate over the open ones."""
    count = partitions if isinstance(partitions, int) else partitions.version
    if row.partition is not None:
        if not 0 <= row.partition < count:
            raise ValueError(f"raftq: partition {row.partition} not in [0, {count})")
        return int(row.partition)
    if row.key:
        return _partition_for_key(row.key, partitions)
    if isinstance(partitions, int):
        return (task + index) % partitions
    writable = partitions.writable()
    return int(writable[(task + index) % len(writable)])


def publish_task(
    opts: SinkOptions, sink_id: str, batch: str, batches: Iterator[pa.RecordBatch]
) -> Published:
    """Executor side: send this task's rows with their deterministic ids, in order per partition."""
    from pyspark import TaskContext

    from raft_queue.client import OutgoingMessage

    context = TaskContext.get()
    task = context.partitionId() if context else 0
    prefix = f"{sink_id}:{batch}:{task}:"
    sizes: dict[str, Any] = {}
    pending: dict[tuple[str, int], list[Any]] = {}
    index = 0
    started = time.monotonic()
    with broker.connect_for(opts) as client:
        lanes = Lanes(lambda queue, messages: broker.publish(client, queue, messages))
        try:
            for row in (r for b in batches for r in out_rows(b)):
                queue = opts.queue or row.queue
                if not queue:
                    raise ValueError(f"raftq: row {index} of task {task} has no queue")
                if queue not in sizes:
                    sizes[queue] = broker.key_placement(client, queue)
                part = _placement(row, sizes[queue], task, index)
                dedup_id = prefix + str(index)
                chunk = pending.setdefault((queue, part), [])
                chunk.append(OutgoingMessage(row.value, row.key, row.headers, dedup_id, 0, part))
                index += 1
                if len(chunk) >= SEND_CHUNK:
                    lanes.submit(queue, part, pending.pop((queue, part)))
            for (queue, part), chunk in pending.items():
                lanes.submit(queue, part, chunk)
            duplicates = lanes.close()
        finally:
            lanes.shutdown()
    return Published(task, index, duplicates, time.monotonic() - started)


def _summary(what: str, messages: list[Any]) -> str:
    done = [m for m in messages if isinstance(m, Published)]
    rows = sum(m.rows for m in done)
    dups = sum(m.duplicates for m in done)
    busy = sum(m.seconds for m in done)
    again = f", {dups} already stored (replay or retry, not stored again)" if dups else ""
    speed = f" ({rows / busy:,.0f} rows/s per task)" if busy > 0 else ""
    return f"raftq sink: {what}: {rows} rows from {len(done)} tasks{speed}{again}"


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("raftq")``: idempotent per (sinkId, batchId).

    Without ``sinkId`` the id is random per write: task retries never
    duplicate, but re-running the job does. Give ``sinkId`` (and in
    ``foreachBatch``, ``batchId``) to make re-runs idempotent too.
    """

    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("raftq sink: queues are append-only: use mode('append')")
        self.opts = sink_options(options)
        check_schema(schema, self.opts)
        self.sink_id = self.opts.sink_id or "w-" + uuid.uuid4().hex[:16]
        self.batch = self.opts.batch_id or "0"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return publish_task(self.opts, self.sink_id, self.batch, iterator)

    def commit(self, messages: list[Any]) -> None:
        print(_summary(f"{self.sink_id} batch {self.batch} committed", messages), file=sys.stderr)

    def abort(self, messages: list[Any]) -> None:
        print(
            _summary(f"{self.sink_id} batch {self.batch} ABORTED", messages)
            + "; rows already sent stay: re-run with the same sinkId to finish without duplicates",
            file=sys.stderr,
        )


class StreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("raftq")``: exactly-once per (sinkId, micro-batch id).

    Executors learn the batch id from the task's local property
    ``streaming.sql.batchId`` (``write()`` is not given it).
    """

    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        self.opts = sink_options(options)
        check_schema(schema, self.opts)
        self.sink_id = stream_sink_id(self.opts)
        if self.opts.queue:
            with broker.connect_for(self.opts) as client:
                window = broker.dedup_window_ms(client, self.opts.queue)
            warning = replay_risk(self.opts.checkpoint, window)
            if warning:
                print(f"raftq sink WARNING: {warning}", file=sys.stderr)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if batch is None:
            raise RuntimeError("raftq sink: no micro-batch id on this task (continuous mode?)")
        return publish_task(self.opts, self.sink_id, batch, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        print(_summary(f"{self.sink_id} batch {batchId} committed", messages), file=sys.stderr)

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        print(_summary(f"{self.sink_id} batch {batchId} ABORTED", messages), file=sys.stderr)
