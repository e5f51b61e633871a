"""PySpark Python data source ``raftq`` (pyspark >= 4.2): read and write raft_queue queues.

    spark.dataSource.register(RaftQueueDataSource)   # or install the wheel: see pyspark_raftq
    spark.read.format("raftq").option("bootstrap", "h:7101").option("queue", "orders").load()

Modules: ``options`` (parsing, no I/O), ``broker`` (the only user of the SDK),
``rows`` (Arrow in and out), ``source`` (readers), ``sink`` (exactly-once writers).
``RaftQueueDataSource`` is imported on first use, so ``spark.raftq.broker``
and ``spark.raftq.options`` load without pyspark.
"""

from typing import Any

__all__ = ["RaftQueueDataSource"]


def __getattr__(name: str) -> Any:
    if name == "RaftQueueDataSource":
        from spark.raftq.source import RaftQueueDataSource

        return RaftQueueDataSource
    raise AttributeError(f"module 'spark.raftq' has no attribute {name!r}")
