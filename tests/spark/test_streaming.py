"""Streaming reads and writes: rate limits, restarts from the checkpoint, crash replays."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.spark.queues import raftq, read_queue, send_spread

pytestmark = pytest.mark.spark

TIMEOUT_S = 120


def _stream(spark: Any, cluster: Any, queue: str, **options: Any) -> Any:
    reader = spark.readStream.format("raftq").option("bootstrap", cluster.bootstrap)
    reader = reader.option("queue", queue).option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _collect_batches(spark, cluster, queue, ck: Path, **options) -> list[tuple[int, list]]:
    """Run an AvailableNow query to the end; each micro-batch's (id, sorted (partition, offset))."""
    batches: list[tuple[int, list]] = []

    def keep(df: Any, batch_id: int) -> None:
        rows = df.select("partition", "offset").collect()
        batches.append((batch_id, sorted((r.partition, r.offset) for r in rows)))

    query = (
        _stream(spark, cluster, queue, **options)
        .writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S), "stream did not finish"
    return sorted(batches)


def test_max_offsets_per_trigger_makes_even_batches_and_a_restart_resumes_exactly(
    spark, cluster, client, make_queue, tmp_path
):
    queue = make_queue(partitions=3)
    send_spread(client, queue, per_partition=10, partitions=3)
    ck = tmp_path / "ck"
    first = _collect_batches(spark, cluster, queue, ck, maxOffsetsPerTrigger=12)
    assert [(i, len(rows)) for i, rows in first] == [(0, 12), (1, 12), (2, 6)]
    assert [sum(1 for p, _ in rows if p == 0) for _, rows in first] == [4, 4, 2]

    send_spread(client, queue, per_partition=5, partitions=3, tag="late")
    second = _collect_batches(spark, cluster, queue, ck, maxOffsetsPerTrigger=12)
    assert [(i, len(rows)) for i, rows in second] == [(3, 12), (4, 3)]
    seen = [pos for _, rows in first + second for pos in rows]
    assert sorted(seen) == [(p, o) for p in range(3) for o in range(15)]  # no gap, no repeat


def _pipe(spark, cluster, source: str, target: str, ck: Path) -> Any:
    """source -> target through the raftq sink, 15 records per micro-batch, to the end."""
    query = (
        _stream(spark, cluster, source, maxOffsetsPerTrigger=15)
        .select("key", "value")
        .writeStream.format("raftq")
        .option("bootstrap", cluster.bootstrap)
        .option("queue", target)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S), "stream did not finish"
    return query


def test_stream_write_replayed_after_a_crash_before_commit_stores_nothing_twice(
    spark, cluster, client, make_queue, tmp_path
):
    source, target = make_queue(partitions=3), make_queue(partitions=2)
    send_spread(client, source, per_partition=10, partitions=3)
    ck = tmp_path / "ck"
    _pipe(spark, cluster, source, target, ck)
    assert len(read_queue(client, target)) == 30

    # The crash: batch 1 was written to the queue but its commit marker never landed.
    (ck / "commits" / "1").unlink()
    (ck / "commits" / ".1.crc").unlink(missing_ok=True)
    query = _pipe(spark, cluster, source, target, ck)

    replayed = [p for p in query.recentProgress if p["batchId"] == 1]
    assert replayed and replayed[0]["numInputRows"] == 15, "batch 1 was not replayed"
    stored = read_queue(client, target)
    assert len(stored) == 30
    assert sorted(m.body for m in stored) == sorted(m.body for m in read_queue(client, source))


def test_stream_without_a_value_column_fails_at_start(spark, cluster, make_queue, tmp_path):
    source, target = make_queue(partitions=1), make_queue(partitions=1)
    df = _stream(spark, cluster, source).select("key")
    with pytest.raises(Exception, match="needs a 'value' column; its columns: key"):
        query = (
            df.writeStream.format("raftq")
            .option("bootstrap", cluster.bootstrap)
            .option("queue", target)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(TIMEOUT_S)
    shutil.rmtree(tmp_path / "ck", ignore_errors=True)


def test_batch_write_rerun_with_the_same_sink_id_is_idempotent(spark, cluster, client, make_queue):
    target = make_queue(partitions=3)
    df = spark.createDataFrame(
        [(f"k{i % 6}", f"v{i}", i % 3 if i % 10 == 0 else None) for i in range(200)],
        "key string, value string, partition int",
    )

    def write() -> None:
        (
            df.write.format("raftq")
            .option("bootstrap", cluster.bootstrap)
            .option("queue", target)
            .option("sinkId", "rerun-test")
            .mode("append")
            .save()
        )

    write()
    write()  # the job "crashed" after writing and was run again
    stored = read_queue(client, target)
    assert len(stored) == 200
    from raft_queue.client.partitioner import partition_for_key

    for m in stored:
        i = int(m.body[1:])
        assert m.partition == (i % 3 if i % 10 == 0 else partition_for_key(m.key, 3))


def test_batch_write_without_a_value_column_fails_before_any_task(spark, cluster, make_queue):
    target = make_queue(partitions=1)
    df = spark.createDataFrame([("a", "b")], "key string, body string")
    with pytest.raises(Exception, match="needs a 'value' column; its columns: key, body"):
        df.write.format("raftq").option("bootstrap", cluster.bootstrap).option(
            "queue", target
        ).mode("append").save()
    assert raftq(spark, cluster, queue=target).load().count() == 0
