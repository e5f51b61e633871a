"""What every job in ``spark/jobs`` shares: the session, the queue's counters, progress lines.

Jobs parse their arguments before importing pyspark, so ``--help`` answers
without starting a JVM. ``session()`` reuses a running session (tests and
notebooks) and registers ``raftq`` explicitly, which also covers
``--py-files`` and editable installs where Spark's ``pyspark_*``
auto-discovery does not see the package.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Iterable
from typing import Any

from spark.raftq import broker


def token() -> str:
    """The caller's token (--token is not a job flag: $RAFTQ_TOKEN or the
    profile file, client/credentials.py), resolved here on the driver and
    handed to the source/sink as an option, since Spark's Python workers
    need not share the driver's environment."""
    from raft_queue.client.credentials import resolve_token

    return resolve_token() or ""


DEFAULT_BOOTSTRAP = "127.0.0.1:7101"


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, help="cluster nodes, h:p,h:p")
    return parser


def session(app_name: str) -> Any:
    """The active SparkSession (or a new one named ``app_name``) with ``raftq`` registered."""
    from pyspark.sql import SparkSession

    from spark.raftq import RaftQueueDataSource

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    spark.dataSource.register(RaftQueueDataSource)
    return spark


def stable_id(prefix: str, parts: Iterable[str]) -> str:
    """A sinkId derived from a job's inputs: re-running the same job is then idempotent."""
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:16]
    return f"{prefix}-{digest}"


def stored(bootstrap: str, queue: str) -> int:
    """Records appended to ``queue`` so far (sum of partitions' latest offsets)."""
    with broker.connect(bootstrap) as client:
        shape = broker.layout(client, [queue])[queue]
    return sum(b.latest for b in shape.values())


def publish(df: Any, bootstrap: str, queue: str, sink_id: str) -> tuple[int, float]:
    """Write ``df`` to ``queue`` idempotently (per ``sink_id``): (new messages, seconds).

    "New" counts the queue's growth, so it assumes no other producer meanwhile;
    rows the queue already held under the same dedup ids are not stored again.
    """
    before = stored(bootstrap, queue)
    started = time.monotonic()
    (
        df.write.format("raftq")
        .option("bootstrap", bootstrap)
        .option("token", token())
        .option("queue", queue)
        .option("sinkId", sink_id)
        .mode("append")
        .save()
    )
    return stored(bootstrap, queue) - before, time.monotonic() - started


def ensure_queue(bootstrap: str, queue: str, partitions: int | None, dedup_window_ms: int | None):
    """Create ``queue`` if it is missing and ``partitions`` is given; else it must exist."""
    from raft_queue.errors import NotFound

    with broker.connect(bootstrap) as client:
        try:
            return client.get_queue(queue)
        except NotFound as exc:
            if not partitions:
                msg = f"queue {queue!r} does not exist (give --create-partitions N)"
                raise SystemExit(msg) from exc
            print(f"creating queue {queue} with {partitions} partitions")
            extra = {"dedup_window_ms": dedup_window_ms} if dedup_window_ms else {}
            return client.create_queue(queue, partitions=partitions, **extra)


def run_stream(query: Any, every_s: float = 10.0) -> dict[str, float]:
    """Print one line per micro-batch until ``query`` ends (Ctrl-C stops it cleanly)."""
    seen: set[int] = set()
    totals = {"batches": 0, "rows": 0}
    started = time.monotonic()
    try:
        while True:
            done = query.awaitTermination(every_s)
            for p in query.recentProgress:
                if p["batchId"] in seen or not p.get("numInputRows"):
                    continue
                seen.add(p["batchId"])
                totals["batches"] += 1
                totals["rows"] += p["numInputRows"]
                rate = p.get("processedRowsPerSecond") or 0.0
                print(f"batch {p['batchId']}: {p['numInputRows']} rows ({rate:.0f} rows/s)")
            if done:
                break
    except KeyboardInterrupt:
        print("stopping (Ctrl-C): the checkpoint keeps the progress")
        query.stop()
    totals["seconds"] = time.monotonic() - started
    return totals


def rate(rows: float, seconds: float) -> str:
    return f"{rows / seconds:,.0f} rows/s" if seconds > 0 else "n/a"
