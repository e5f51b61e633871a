"""The raftq format over TLS: a batch write and read against a TLS cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raft_queue.testing.cluster import LocalCluster
from tests.spark.queues import read_queue

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("spark-tls") / "cluster", nodes=3, tls=True)
    c.start()
    try:
        c.wait_ready(60)
        yield c
    finally:
        c.stop()


def test_write_and_read_over_tls(spark: Any, tls_cluster: LocalCluster, tmp_path: Path) -> None:
    ca = tls_cluster.client_options()["ca_file"]
    with tls_cluster.client() as client:
        client.create_queue("sparktls", partitions=2, replication_factor=3)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], ["key", "value"])
    (
        df.write.format("raftq")
        .option("bootstrap", tls_cluster.bootstrap)
        .option("tls", "true")
        .option("caFile", ca)
        .option("queue", "sparktls")
        .mode("append")
        .save()
    )
    with tls_cluster.client() as client:
        assert sorted(m.body for m in read_queue(client, "sparktls")) == sorted(
            f"v{i}".encode() for i in range(20)
        )
    rows = (
        spark.read.format("raftq")
        .option("bootstrap", tls_cluster.bootstrap)
        .option("tls", "true")
        .option("caFile", ca)
        .option("queue", "sparktls")
        .load()
        .collect()
    )
    assert sorted(bytes(r.value) for r in rows) == sorted(f"v{i}".encode() for i in range(20))
