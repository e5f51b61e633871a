"""Archive a queue to Parquet continuously, partitioned by date (UTC).

    spark-submit spark/jobs/archive_parquet.py --bootstrap h1:7101 --queue orders \\
        --output s3a://archive/orders --checkpoint s3a://archive/_checkpoints/orders

A streaming query from the ``raftq`` source to Spark's Parquet file sink:
both are exactly-once through the checkpoint, so a restart (same
``--checkpoint``) continues where the last committed batch ended, with no
gap and no duplicate file rows. ``--available-now`` drains what is there and
exits (for cron-style runs and backfills).
"""

from __future__ import annotations

import sys
from typing import Any

from spark.jobs import session as job


def parse_args(argv: list[str] | None) -> Any:
    p = job.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--queue", required=True, help="queue(s) to archive, comma-separated")
    p.add_argument("--output", required=True, help="Parquet directory (any Hadoop path)")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory; keep it per output")
    p.add_argument("--starting-offsets", default="earliest", help="for a new checkpoint only")
    p.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch")
    p.add_argument("--interval", default="30 seconds", help="micro-batch trigger interval")
    p.add_argument("--available-now", action="store_true", help="archive what is there, exit")
    p.add_argument("--timezone", default="UTC", help="time zone of the date partitions")
    return p.parse_args(argv)


def archive_frame(spark: Any, args: Any) -> Any:
    """The raftq stream with a ``date`` column; key as text (keys are strings in raft_queue)."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("raftq")
        .option("bootstrap", args.bootstrap)
        .option("token", job.token())
        .option("queue", args.queue)
        .option("startingOffsets", args.starting_offsets)
        .option("includeHeaders", "true")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    df = reader.load()
    return df.select(
        F.col("key").cast("string").alias("key"),
        "value",
        "headers",
        "queue",
        "partition",
        "offset",
        "timestamp",
        F.date_format(F.from_utc_timestamp("timestamp", args.timezone), "yyyy-MM-dd").alias("date"),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = job.session("raftq-archive-parquet")
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # so from_utc_timestamp shifts from UTC
    writer = (
        archive_frame(spark, args)
        .writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .partitionBy("date")
        .queryName(f"archive-{args.queue.replace(',', '-')}")
    )
    writer = (
        writer.trigger(availableNow=True)
        if args.available_now
        else writer.trigger(processingTime=args.interval)
    )
    print(f"archiving {args.queue} -> {args.output} (checkpoint {args.checkpoint})")
    totals = job.run_stream(writer.start(), every_s=2.0 if args.available_now else 10.0)
    print(
        f"done: {totals['rows']:.0f} rows in {totals['batches']:.0f} batches, "
        f"{totals['seconds']:.1f} s, {job.rate(totals['rows'], totals['seconds'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
