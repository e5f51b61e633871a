"""Ingest CSV, JSON (lines) or Parquet files into a raft_queue queue, once.

    spark-submit spark/jobs/ingest_files.py --bootstrap h1:7101 --queue orders \\
        --input /data/orders/ --format csv --key-column customer_id

Each row becomes one message: ``--value-column`` as the body, or the whole
row as JSON. The sinkId is derived from the queue and the input paths, so
re-running the same ingest (after a crash, or by mistake) within the queue's
dedup window stores nothing twice.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from spark.jobs import session as job

FORMATS = ("csv", "json", "parquet")


def parse_args(argv: list[str] | None) -> Any:
    p = job.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--queue", required=True, help="target queue")
    p.add_argument("--input", required=True, nargs="+", help="files, directories or globs")
    p.add_argument("--format", choices=FORMATS, help="default: from the first input's extension")
    p.add_argument("--value-column", help="body column; default: the whole row as JSON")
    p.add_argument("--key-column", help="key column (same key, same partition, in order)")
    p.add_argument("--header-columns", default="", help="comma-separated columns sent as headers")
    p.add_argument("--no-csv-header", action="store_true", help="CSV files have no header line")
    p.add_argument("--sink-id", help="dedup scope; default: derived from queue and inputs")
    p.add_argument("--create-partitions", type=int, help="create the queue if missing")
    p.add_argument("--dedup-window-ms", type=int, help="for a queue this job creates")
    args = p.parse_args(argv)
    args.format = args.format or _guess_format(args.input[0], p)
    return args


def _guess_format(path: str, parser: Any) -> str:
    ext = os.path.splitext(path.rstrip("/"))[1].lstrip(".").lower()
    ext = {"jsonl": "json", "ndjson": "json", "pq": "parquet"}.get(ext, ext)
    if ext not in FORMATS:
        parser.error(f"cannot tell the format of {path!r}: give --format")
    return ext


def to_messages(df: Any, args: Any) -> Any:
    """The DataFrame in the sink's shape: value, and key / headers when asked."""
    from pyspark.sql import functions as F

    value = (
        F.col(args.value_column).cast("string")
        if args.value_column
        else F.to_json(F.struct(*[F.col(c) for c in df.columns]))
    )
    cols = [value.alias("value")]
    if args.key_column:
        cols.append(F.col(args.key_column).cast("string").alias("key"))
    names = [c.strip() for c in args.header_columns.split(",") if c.strip()]
    if names:
        pairs = [
            F.struct(F.lit(n).alias("key"), F.col(n).cast("binary").alias("value")) for n in names
        ]
        cols.append(F.array(*pairs).alias("headers"))
    return df.select(*cols)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    job.ensure_queue(args.bootstrap, args.queue, args.create_partitions, args.dedup_window_ms)
    spark = job.session("raftq-ingest-files")
    reader = spark.read.format(args.format)
    if args.format == "csv":
        reader = reader.option("header", str(not args.no_csv_header).lower())
    df = reader.load(args.input)
    paths = sorted(os.path.abspath(p) for p in args.input)
    sink_id = args.sink_id or job.stable_id("ingest", [args.queue, *paths])
    print(f"ingest {', '.join(args.input)} ({args.format}) -> {args.queue}, sinkId {sink_id}")
    messages = to_messages(df, args)
    rows = messages.count()  # a second pass over the input, for the progress line
    print(f"read {rows} rows in {df.rdd.getNumPartitions()} tasks; publishing")
    new, seconds = job.publish(messages, args.bootstrap, args.queue, sink_id)
    print(
        f"done: {rows} rows, {new} new messages in {args.queue} "
        f"({rows - new} already there), {seconds:.1f} s, {job.rate(rows, seconds)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
