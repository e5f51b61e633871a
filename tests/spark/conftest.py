"""One Spark session (local[2]) and one 3-node cluster for the whole tests/spark run.

Starting a JVM costs 10-60 s and a cluster a few seconds, so both are
session-scoped; each test makes its own queues (``make_queue``). The
environment must be set before the first SparkSession: Spark binds to
SPARK_LOCAL_IP, and its Python workers run PYSPARK_PYTHON (this venv, which
has pyarrow and raft_queue).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

try:
    import pyspark  # noqa: F401
except ImportError:  # the spark extra is not installed: keep only the pure tests
    collect_ignore_glob = ["test_[!o]*.py"]


@pytest.fixture(scope="session")
def spark(cluster: Any) -> Iterator[Any]:
    """After ``cluster``: the JVM and its Python workers start with RAFTQ_TOKEN
    in their environment, as after a user's `export RAFTQ_TOKEN`."""
    from pyspark.sql import SparkSession

    from spark.raftq import RaftQueueDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("raftq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "10s")
        # Python <-> JVM local sockets time out after 15 s by default; a busy
        # 2-core CI machine has been seen to need longer (CANNOT_OPEN_SOCKET).
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RaftQueueDataSource)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from raft_queue.testing.cluster import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("raftq") / "cluster", nodes=3)
    # As a user would `export RAFTQ_TOKEN`: the jobs (subprocesses) and readers
    # without a token option find it there (tests/spark/queues.py passes it as one).
    os.environ["RAFTQ_TOKEN"] = c.token
    c.start()
    try:
        c.wait_ready(60)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def client(cluster: Any) -> Iterator[Any]:
    with cluster.client() as c:
        yield c


@pytest.fixture
def make_queue(client: Any) -> Callable[..., str]:
    """``make_queue(partitions=3, **config)`` -> a fresh queue's name."""

    def make(partitions: int = 3, **config: Any) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_queue(name, partitions=partitions, **config)
        return name

    return make
