"""Helpers for the Spark tests: ground truth straight from the SDK, and short readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raft_queue import OutgoingMessage


def read_queue(client: Any, queue: str) -> list[Any]:
    """Every stored message of ``queue``, by (partition, offset), straight from the SDK."""
    out = []
    for p in client.partitions(queue):
        offset = p.earliest_offset
        while offset < p.latest_offset:
            res = client.read(queue, p.partition, offset, max_messages=1000)
            out.extend(res.messages)
            offset = res.next_offset
    return sorted(out, key=lambda m: (m.partition, m.offset))


def raftq(spark: Any, cluster: Any, **options: Any) -> Any:
    """A batch reader of the raftq format pointed at the test cluster."""
    reader = spark.read.format("raftq").option("bootstrap", cluster.bootstrap)
    reader = reader.option("token", cluster.token)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader


def checkpoint(tmp_path: Path, name: str = "ck") -> str:
    return str(tmp_path / name)


def send_spread(
    client: Any, queue: str, per_partition: int, partitions: int, tag: str = "m"
) -> None:
    """``per_partition`` messages on each partition (explicit), bodies ``{tag}-{p}-{i}``."""
    messages = [
        OutgoingMessage(f"{tag}-{p}-{i}".encode(), key=f"k{i % 4}", partition=p)
        for i in range(per_partition)
        for p in range(partitions)
    ]
    client.send_batch(queue, messages)
