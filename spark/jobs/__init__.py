"""``spark-submit``-able jobs on the ``raftq`` data source; each answers ``--help``.

- ``ingest_files.py``: CSV / JSON / Parquet files -> a queue (idempotent re-runs).
- ``archive_parquet.py``: a queue -> Parquet partitioned by date, streaming, checkpointed.
- ``replay_range.py``: a time range of one queue -> another queue (idempotent re-runs).
"""
