"""Spark integration of raft_queue: the ``raftq`` data source and jobs built on it.

- ``spark.offsets``: pure offset resolution and rate-limit splitting (no Spark needed).
- ``spark.raftq``: the PySpark Python data source (format ``raftq``).
- ``spark.jobs``: ``spark-submit``-able jobs (ingest files, archive to Parquet, replay).

Imports only ``raft_queue.client`` from the rest of the project. Importing this
package imports neither pyspark nor grpc.
"""
