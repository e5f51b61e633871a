"""Re-publish the messages of a time range from one queue to another, once.

    spark-submit spark/jobs/replay_range.py --bootstrap h1:7101 --source orders \\
        --target orders-replay --from 2026-11-20T00:00:00Z --to 2026-11-21T00:00:00Z

The range ``[--from, --to)`` is found per partition by binary search on the
records' append timestamps (the server's offset-by-time Read), printed,
then read as a batch and written with a sinkId derived from the arguments:
running the same replay twice within the target's dedup window publishes
each message once. Keys and headers are kept, so keyed messages keep their
per-key order in the target.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

from spark import offsets as off
from spark.jobs import session as job
from spark.raftq import broker


def parse_time(text: str) -> int:
    """ISO 8601 (naive means UTC) or milliseconds since the epoch -> milliseconds."""
    if text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_args(argv: list[str] | None) -> Any:
    p = job.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--source", required=True, help="queue to read")
    p.add_argument("--target", required=True, help="queue to publish to")
    p.add_argument("--target-bootstrap", help="target cluster, if not the source's")
    p.add_argument("--from", dest="start", required=True, type=parse_time, help="inclusive")
    p.add_argument("--to", dest="end", required=True, type=parse_time, help="exclusive")
    p.add_argument("--keep-partitions", action="store_true", help="same partition numbers")
    p.add_argument("--sink-id", help="dedup scope; default: derived from the arguments")
    args = p.parse_args(argv)
    if args.end <= args.start:
        p.error("--to must be after --from")
    args.target_bootstrap = args.target_bootstrap or args.bootstrap
    return args


def plan(args: Any) -> tuple[off.Offsets, off.Offsets]:
    """Start and end offsets of the time range, per source partition (printed)."""
    with broker.connect(args.bootstrap) as client:
        shape = broker.layout(client, [args.source])
        start = broker.offsets_for_time(client, shape, args.start)
        end = broker.offsets_for_time(client, shape, args.end)
    for r in off.ranges(start, end):
        print(f"  {r.queue}/{r.partition}: offsets [{r.start}, {r.end}) = {r.size} messages")
    return start, end


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sink_id = args.sink_id or job.stable_id(
        "replay", [args.source, args.target, str(args.start), str(args.end)]
    )
    print(f"replay {args.source} [{args.start}, {args.end}) -> {args.target}, sinkId {sink_id}")
    start, end = plan(args)
    spark = job.session("raftq-replay-range")
    df = (
        spark.read.format("raftq")
        .option("bootstrap", args.bootstrap)
        .option("token", job.token())
        .option("queue", args.source)
        .option("startingOffsets", off.to_json(start))
        .option("endingOffsets", off.to_json(end))
        .option("includeHeaders", "true")
        .load()
    )
    columns = ["key", "value", "headers"] + (["partition"] if args.keep_partitions else [])
    rows = off.total(off.ranges(start, end))
    new, seconds = job.publish(df.select(*columns), args.target_bootstrap, args.target, sink_id)
    print(
        f"done: {rows} messages replayed, {new} new in {args.target} "
        f"({rows - new} already replayed before), {seconds:.1f} s, {job.rate(rows, seconds)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
