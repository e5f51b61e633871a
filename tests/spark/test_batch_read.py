"""Batch reads of the raftq format against a real 3-node cluster."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from raft_queue import OutgoingMessage
from tests.spark.queues import raftq, read_queue, send_spread

pytestmark = pytest.mark.spark


def _sent(client: Any, queue: str) -> list[Any]:
    """Messages with keys, some headers, one without key, spread over 3 partitions."""
    messages = [
        OutgoingMessage(
            f"body-{i}".encode(),
            key=f"key-{i % 5}" if i % 7 else "",
            headers={"n": str(i).encode(), "src": b"test"} if i % 2 else None,
            partition=i % 3,
        )
        for i in range(60)
    ]
    client.send_batch(queue, messages)
    return read_queue(client, queue)


def test_batch_read_returns_every_record_with_kafkas_schema(spark, cluster, client, make_queue):
    queue = make_queue(partitions=3)
    truth = _sent(client, queue)
    df = raftq(spark, cluster, queue=queue, includeHeaders="true").load()
    assert df.columns == [
        "key",
        "value",
        "queue",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert df.rdd.getNumPartitions() == 3
    got = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert len(got) == 60
    for row, m in zip(got, truth, strict=True):
        assert (row.queue, row.partition, row.offset) == (queue, m.partition, m.offset)
        assert row.key == (m.key.encode() if m.key else None)
        assert row.value == m.body
        assert row.timestampType == 1
        assert int(row.timestamp.timestamp() * 1000) == m.timestamp_ms
        headers = {h.key: h.value for h in row.headers} if row.headers else {}
        assert headers == m.headers


def test_offsets_json_and_min_partitions_pick_and_split_ranges(spark, cluster, client, make_queue):
    queue = make_queue(partitions=3)
    send_spread(client, queue, per_partition=20, partitions=3)
    df = raftq(
        spark,
        cluster,
        subscribe=queue,
        startingOffsets=json.dumps({queue: {"0": 5, "2": -1}}),
        endingOffsets=json.dumps({queue: {"0": 15}}),
        minPartitions=6,
    ).load()
    rows = df.select("partition", "offset").collect()
    by_part: dict[int, list[int]] = {}
    for r in rows:
        by_part.setdefault(r.partition, []).append(r.offset)
    assert sorted(by_part[0]) == list(range(5, 15))
    assert sorted(by_part[1]) == list(range(20))
    assert 2 not in by_part
    assert df.rdd.getNumPartitions() >= 5


def test_timestamps_select_records_by_append_time(spark, cluster, client, make_queue):
    queue = make_queue(partitions=2)
    for wave in range(3):
        send_spread(client, queue, per_partition=5, partitions=2, tag=f"w{wave}")
        time.sleep(0.05)
    stamps = sorted({m.timestamp_ms for m in read_queue(client, queue)})
    lo, hi = stamps[len(stamps) // 3], stamps[2 * len(stamps) // 3]
    truth = {m.body for m in read_queue(client, queue) if lo <= m.timestamp_ms < hi}
    df = raftq(spark, cluster, topic=queue, startingTimestamp=lo, endingTimestamp=hi).load()
    assert {r.value for r in df.select("value").collect()} == truth
    assert truth


def test_a_time_is_found_with_one_read_per_partition(client, make_queue):
    """startingTimestamp uses the server's offset-by-time Read (ReadRequest.
    timestamp_ms), not a client-side binary search of one-record reads."""
    from spark.raftq import broker

    queue = make_queue(partitions=2)
    for wave in range(4):
        send_spread(client, queue, per_partition=5, partitions=2, tag=f"w{wave}")
        time.sleep(0.05)
    stamps = sorted({m.timestamp_ms for m in read_queue(client, queue)})
    at = stamps[len(stamps) // 2]
    reads: list[Any] = []

    class Counting:
        def read(self, *args: Any, **kwargs: Any) -> Any:
            reads.append(kwargs.get("timestamp_ms"))
            return client.read(*args, **kwargs)

    shape = broker.layout(client, [queue])
    got = broker.offsets_for_time(Counting(), shape, at)
    truth: dict[str, int] = {}
    for m in sorted(read_queue(client, queue), key=lambda m: m.offset, reverse=True):
        if m.timestamp_ms >= at:
            truth[str(m.partition)] = m.offset
    for p, bounds in shape[queue].items():
        truth.setdefault(str(p), bounds.latest)
    assert got == {queue: truth}
    assert reads == [at, at]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "no-such-queue"}, "queue 'no-such-queue' does not exist"),
        ({"queue": "QUEUE", "startingOffsets": '{"QUEUE": {"0": '}, "startingOffsets: not"),
        ({"queue": "QUEUE", "subscribe": "QUEUE"}, "give only one of queue, subscribe"),
        ({"queue": "QUEUE", "endingOffsets": '{"QUEUE": {"9": 1}}'}, "no partition \\[9\\]"),
    ],
)
def test_bad_read_options_fail_the_query_with_a_clear_message(
    spark, cluster, make_queue, options, message
):
    queue = make_queue(partitions=1)
    options = {k: v.replace("QUEUE", queue) for k, v in options.items()}
    with pytest.raises(Exception, match=message):
        raftq(spark, cluster, **options).load().collect()
