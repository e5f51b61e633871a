"""The raftq source and sink on a queue spanning two clusters under the external
manager (option ``manager``; docs/operations.md, "Two levels of manager"): a
real local Spark session writes keyed rows through the manager's mapping and
reads them back, batch and stream, with global partition numbers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raft_queue.client.managed import ManagedClient
from raft_queue.core.placement_keys import partition_for_key
from raft_queue.testing.cluster import LocalCluster, _private_write
from raft_queue.testing.managers import ManagerCluster

pytestmark = pytest.mark.spark

QUEUE = "spark-managed"
PARTITIONS = 4  # 2 on each cluster, spread round-robin by the manager
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def fleet(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerCluster]:
    """The session's cluster as c1, a second 3-node cluster c2 and a 3-node
    manager, all with the session cluster's admin token (as `raftq dev up
    --clusters` makes one token for the fleet), so RAFTQ_TOKEN serves all."""
    base = Path(tmp_path_factory.mktemp("managed"))
    c2 = LocalCluster(base / "c2", nodes=3)
    managers = ManagerCluster(base / "mgr", managers=3)
    for where in (c2.base_dir, managers.base_dir):
        where.mkdir(parents=True, exist_ok=True)
        _private_write(where / "admin.token", cluster.token + "\n")
    try:
        c2.start()
        managers.start()
        c2.wait_ready(90)
        managers.wait_ready(60)
        with managers.admin() as admin:
            admin.add_cluster("c1", cluster.bootstrap.split(","), cluster.token)
            admin.add_cluster("c2", c2.bootstrap.split(","), c2.token)
        yield managers
    finally:
        managers.stop()
        c2.stop()


def _reader(spark: Any, managers: ManagerCluster, fmt: Any) -> Any:
    return fmt.format("raftq").option("manager", managers.bootstrap).option("queue", QUEUE)


def test_a_job_writes_and_reads_a_queue_spanning_two_clusters(
    spark: Any, fleet: ManagerCluster, tmp_path: Path
) -> None:
    with ManagedClient(fleet.bootstrap, fleet.token) as managed:
        managed.create_queue(QUEUE, PARTITIONS, clusters=["c1", "c2"], retention_ms=3_600_000)
        homes = {h.cluster for h in managed.homes(QUEUE)}
        assert homes == {"c1", "c2"}  # the queue really spans both
    rows = [(f"key-{i}", f"v{i}") for i in range(200)]
    df = spark.createDataFrame(rows, "key string, value string")
    (
        df.write.format("raftq")
        .option("manager", fleet.bootstrap)
        .option("queue", QUEUE)
        .option("sinkId", "managed-sink")
        .mode("append")
        .save()
    )
    got = _reader(spark, fleet, spark.read).load().collect()
    assert len(got) == 200
    assert {r.partition for r in got} == set(range(PARTITIONS))
    for r in got:  # keys placed by the SDK's one rule over the global partitions
        assert r.partition == partition_for_key(bytes(r.key), PARTITIONS)
    assert sorted(bytes(r.value).decode() for r in got) == sorted(v for _, v in rows)

    batches: list[Any] = []
    query = (
        _reader(spark, fleet, spark.readStream)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(lambda d, _i: batches.extend(d.collect()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(TIMEOUT_S), "stream did not finish"
    streamed = sorted((r.partition, r.offset) for r in batches)
    assert streamed == sorted((r.partition, r.offset) for r in got)
