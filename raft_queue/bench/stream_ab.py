"""W1's send, unary against SendStream, alternated in blocks on one cluster.

On a shared machine the load swings between consecutive harness runs by
more than the difference being measured (another engineer's suite starts);
alternating the two modes every ``--block`` sends on one cluster, from one
process, puts both under the same load. Two SDK clients on one fresh
3-node ``LocalCluster`` (fsync, replication 3, one partition, 100-byte
messages): ``Client(send_stream=False)`` and the default, each sending one
message at a time, as the harness's W1 does.

    python -m raft_queue.bench.stream_ab --blocks 40 --block 100

Prints p50/p99 over all sends of each mode, and the median over blocks of
(unary block p50 - stream block p50), the paired difference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from raft_queue.bench.cluster import bench_queue, local_cluster
from raft_queue.bench.measure import quantile
from raft_queue.client import Client

QUEUE = "stream-ab"


def _block(client: Client, n: int, body: bytes) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.send(QUEUE, body)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(blocks: int, block: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="stream-ab-") as tmp:
        cluster = local_cluster(Path(tmp) / "cluster")
        cluster.start()
        try:
            cluster.wait_ready(120)
            boot, token = cluster.bootstrap, cluster.token
            with (
                Client(boot, 30.0, token=token, send_stream=False) as unary,
                Client(boot, 30.0, token=token) as stream,
                bench_queue(unary, QUEUE, 1, "fsync"),
            ):
                return _alternate({"unary": unary, "stream": stream}, blocks, block)
        finally:
            cluster.stop()


def _alternate(clients: dict[str, Client], blocks: int, block: int) -> dict[str, object]:
    body = b"x" * 100
    for client in clients.values():
        _block(client, 200, body)  # warm: channels, the stream, leader caches
    samples: dict[str, list[float]] = {mode: [] for mode in clients}
    diffs = []
    for k in range(blocks):
        order = list(clients) if k % 2 == 0 else list(reversed(clients))
        p50s = {}
        for mode in order:
            got = _block(clients[mode], block, body)
            samples[mode] += got
            p50s[mode] = quantile(got, 0.5)
        diffs.append(p50s["unary"] - p50s["stream"])
    out: dict[str, object] = {
        mode: {
            "p50_ms": round(quantile(s, 0.5), 3),
            "p99_ms": round(quantile(s, 0.99), 3),
            "n": len(s),
        }
        for mode, s in samples.items()
    }
    out["paired_p50_diff_ms"] = round(statistics.median(diffs), 3)
    out["blocks_stream_faster"] = sum(1 for d in diffs if d > 0)
    out["blocks"] = blocks
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raft_queue.bench.stream_ab")
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--block", type=int, default=100, help="sends per block")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.blocks, args.block)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
