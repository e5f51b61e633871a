"""The ``raftq`` Spark data source: batch and streaming reads (writes are in ``sink.py``).

Where things run: ``RaftQueueDataSource.schema()`` and the readers'
planning methods (``partitions``, ``initialOffset``, ``latestOffset``) run on
the driver, in Python workers; ``read()`` runs on executors, on a pickled
copy of the reader. Readers therefore hold only parsed options and open a
client inside each call (``broker.connect``).

Offsets are Kafka-shaped JSON in the checkpoint (``spark.offsets``); every
queue partition is one Spark task (more with ``minPartitions``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark import offsets as off
from spark.raftq import broker, rows
from spark.raftq.options import SourceOptions, source_options


class RaftQueueDataSource(DataSource):
    """Format ``raftq``: Kafka's source and sink options and schema, ``queue`` for ``topic``."""

    @classmethod
    def name(cls) -> str:
        return "raftq"

    def schema(self) -> str:
        # Called when a read is defined (load()): parsing here makes bad options fail early.
        parsed = source_options(self.options, streaming=False)
        return rows.read_schema(parsed.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return StreamReader(source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark.raftq.sink import BatchWriter

        return BatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        from spark.raftq.sink import StreamWriter

        return StreamWriter(self.options, schema, overwrite)


@dataclass
class QueueSlice(InputPartition):
    """Records ``[start, end)`` of one queue partition: what one Spark task reads."""

    queue: str
    partition: int
    start: int
    end: int

    def as_range(self) -> off.Range:
        return off.Range(self.queue, self.partition, self.start, self.end)


def _slices(ranges: list[off.Range]) -> list[InputPartition]:
    return [QueueSlice(r.queue, r.partition, r.start, r.end) for r in ranges]


def _read_slice(opts: SourceOptions, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Executor side: stream one slice as Arrow batches, one per Read RPC."""
    if not isinstance(part, QueueSlice):  # Spark's placeholder when there is nothing to read
        return
    with broker.connect_for(opts) as client:
        for batch in broker.fetch(client, part.as_range(), opts.fetch_size, opts.fail_on_data_loss):
            yield rows.to_record_batch(batch, opts.include_headers)


def _start_offsets(client: Any, opts: SourceOptions, shape: off.Layout) -> off.Offsets:
    """startingTimestamp if given (it wins, as in Kafka), else startingOffsets."""
    if opts.starting_ms is not None:
        return broker.offsets_for_time(client, shape, opts.starting_ms)
    start = off.resolve(opts.starting, shape, "startingOffsets")
    return off.check_retained(start, shape, opts.fail_on_data_loss)


class BatchReader(DataSourceReader):
    """``spark.read``: the offsets are fixed once, when the query is planned."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        with broker.connect_for(opts) as client:
            shape = broker.layout(client, opts.queues)
            start = _start_offsets(client, opts, shape)
            if opts.ending_ms is not None:
                end = broker.offsets_for_time(client, shape, opts.ending_ms)
            else:
                end = off.resolve(opts.ending, shape, "endingOffsets")
        try:
            planned = off.ranges(start, end)
        except off.OffsetError as exc:
            raise ValueError(f"raftq: {exc}") from exc
        return _slices(off.split_ranges(planned, opts.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_slice(self.opts, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: Spark checkpoints the offsets this reader proposes.

    The driver-side instance lives for the whole query in one Python process,
    so it may keep the AvailableNow target. A restart resumes from the
    checkpoint (``initialOffset`` is only asked for a new query).
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.target: off.Offsets | None = None

    def _shape(self) -> off.Layout:
        with broker.connect_for(self.opts) as client:
            return broker.layout(client, self.opts.queues)

    def initialOffset(self) -> dict:  # noqa: N802
        with broker.connect_for(self.opts) as client:
            shape = broker.layout(client, self.opts.queues)
            return _start_offsets(client, self.opts, shape)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        m = self.opts.max_offsets_per_trigger
        return ReadMaxRows(m) if m else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Freeze the end: partitions or records that appear later wait for the next run."""
        self.target = off.latest_of(self._shape())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        """Where the next micro-batch ends: the log's end, capped by AvailableNow and the limit."""
        shape = self._shape()
        begin = off.with_new_partitions(start, shape)
        begin = off.check_retained(begin, shape, self.opts.fail_on_data_loss)
        end = off.cap(off.latest_of(shape), self.target)
        end = {q: {p: max(o, begin[q][p]) for p, o in parts.items()} for q, parts in end.items()}
        if isinstance(limit, ReadMaxRows):
            end = off.rate_limit(begin, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> dict:  # noqa: N802
        return off.latest_of(self._shape())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = start
        if any(p not in start.get(q, {}) for q, parts in end.items() for p in parts):
            begin = off.with_new_partitions(start, self._shape())
        return _slices(off.split_ranges(off.ranges(begin, end), self.opts.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_slice(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint, not the broker, owns a stream's progress."""
