"""The raftq source and sink on a queue grown by a split (docs/semantics.md,
"Growing a queue: splits"): the children are partitions like any other, a
stream running across the split picks them up from their first offset, and
the sink places keys by the key ranges, never on the sealed parent."""

from __future__ import annotations

from typing import Any

import pytest

from raft_queue import OutgoingMessage
from raft_queue.client.models import layout_from_infos
from raft_queue.core.placement_keys import partition_for_key
from tests.spark.queues import raftq, read_queue
from tests.spark.test_streaming import _collect_batches

pytestmark = pytest.mark.spark

RETAINED = {"retention_ms": 3_600_000}  # acked or not, the records stay readable


def _send_keyed(client: Any, queue: str, tag: str, n: int = 30) -> None:
    client.send_batch(queue, [OutgoingMessage(f"{tag}-{i}", key=f"k{i}") for i in range(n)])


def test_batch_and_stream_reads_cover_parent_and_children(
    spark, cluster, client, make_queue, tmp_path
):
    queue = make_queue(partitions=1, **RETAINED)
    _send_keyed(client, queue, "before")
    ck = tmp_path / "ck"
    first = _collect_batches(spark, cluster, queue, ck)
    assert sorted(pos for _, rows in first for pos in rows) == [(0, o) for o in range(30)]
    client.update_queue(queue, partitions=3)  # 0 sealed; children 1 and 2
    _send_keyed(client, queue, "after")
    second = _collect_batches(spark, cluster, queue, ck)
    late = sorted(pos for _, rows in second for pos in rows)
    assert {p for p, _ in late} == {1, 2} and len(late) == 30
    assert all(o < 30 for _, o in late)  # the children from their offset 0, nothing repeated
    rows = raftq(spark, cluster, queue=queue).load().collect()
    truth = read_queue(client, queue)
    assert sorted((r.partition, r.offset, r.value) for r in rows) == [
        (m.partition, m.offset, m.body) for m in truth
    ]
    assert len(rows) == 60


def test_the_sink_places_keys_by_the_split_ranges(spark, cluster, client, make_queue):
    target = make_queue(partitions=2)
    client.update_queue(target, partitions=4)  # 0 splits into 2 and 3
    df = spark.createDataFrame(
        [(f"key-{i}", f"v{i}") for i in range(120)], "key string, value string"
    )
    (
        df.write.format("raftq")
        .option("bootstrap", cluster.bootstrap)
        .option("queue", target)
        .option("sinkId", "split-sink")
        .mode("append")
        .save()
    )
    layout = layout_from_infos(client.partitions(target))
    stored = read_queue(client, target)
    assert len(stored) == 120
    assert {m.partition for m in stored} == {1, 2, 3}
    for m in stored:
        assert m.partition == partition_for_key(m.key, layout)
