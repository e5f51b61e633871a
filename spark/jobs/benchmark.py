"""Measure the raftq data source: rows/s of a batch write, then of a batch read, of N messages.

    spark-submit --master local[2] spark/jobs/benchmark.py --bootstrap h1:7101 \\
        --messages 1000000 --size 100

Generates ``--messages`` bodies of ``--size`` bytes with ``spark.range``,
writes them to a fresh queue through the sink (exactly-once dedup ids
included), then reads the queue back into Spark's ``noop`` sink (every row
materialised, nothing stored). Prints one line per phase; the figures in
docs/spark.md come from this job.
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

from spark.jobs import session as job
from spark.raftq import broker


def parse_args(argv: list[str] | None) -> Any:
    p = job.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="how many messages")
    p.add_argument("--size", type=int, default=100, help="body bytes per message")
    p.add_argument("--partitions", type=int, default=4, help="queue partitions")
    p.add_argument("--tasks", type=int, default=4, help="Spark tasks for the write")
    p.add_argument("--durability", default="fsync", choices=("fsync", "quorum", "leader"))
    p.add_argument("--queue", help="default: a new queue bench-<random>")
    p.add_argument("--no-warmup", dest="warmup", action="store_false", help="measure cold")
    return p.parse_args(argv)


def bodies(spark: Any, messages: int, size: int, tasks: int) -> Any:
    """``messages`` rows of exactly ``size`` bytes: a zero-padded counter, then filler."""
    from pyspark.sql import functions as F

    digits = min(12, size)
    counter = F.lpad(F.col("id").cast("string"), digits, "0")
    return spark.range(0, messages, numPartitions=tasks).select(
        F.concat(counter, F.lit("x" * (size - digits))).alias("value")
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    queue = args.queue or f"bench-{uuid.uuid4().hex[:8]}"
    with broker.connect(args.bootstrap) as client:
        client.create_queue(queue, partitions=args.partitions, durability=args.durability)
    spark = job.session("raftq-benchmark")
    n = args.messages
    print(f"queue {queue}: {args.partitions} partitions, {args.durability}; {n} x {args.size} B")
    if args.warmup:  # JVM JIT and Python worker start-up are not what is measured
        measure(spark, args, queue, min(n, 2000), quiet=True)
    measure(spark, args, queue, n)
    return 0


def measure(spark: Any, args: Any, queue: str, n: int, quiet: bool = False) -> None:
    """Write ``n`` new messages to ``queue``, then read the whole queue back; print rows/s."""
    frame = bodies(spark, n, args.size, args.tasks)
    new, seconds = job.publish(frame, args.bootstrap, queue, f"bench-{uuid.uuid4().hex[:8]}")
    if not quiet:
        print(f"write: {new} messages in {seconds:.1f} s = {job.rate(new, seconds)}")
    total = job.stored(args.bootstrap, queue)
    started = time.monotonic()
    df = spark.read.format("raftq").option("bootstrap", args.bootstrap).option("queue", queue)
    df = df.option("token", job.token())
    df.load().write.format("noop").mode("overwrite").save()
    seconds = time.monotonic() - started
    if not quiet:
        print(f"read: {total} messages in {seconds:.1f} s = {job.rate(total, seconds)}")


if __name__ == "__main__":
    sys.exit(main())
