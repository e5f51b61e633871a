"""W1's send on two clusters that differ in one environment switch, alternated.

On a shared machine the load swings between consecutive runs by more than
the difference being measured; two fresh 3-node ``LocalCluster``s (fsync,
replication 3, one partition, 100-byte messages), one started with
``--env NAME=A`` and one with ``NAME=B`` in their nodes' environment, are
sent to one message at a time, alternating every ``--block`` sends, so both
see the same load. E.g. a follower's sync inline on its driver or on the
I/O threads (replication/syncs.py; docs/benchmarks.md, "W1: fewer hand-offs
on the commit path")::

    python -m raft_queue.bench.w1_ab --switch RAFTQ_SYNC_INLINE=0,1 --blocks 20

With ``--trace DIR`` the nodes and this client also write stage traces
(observability/stagetrace.py): ``DIR/<value>/`` gets one cluster's node
traces and a copy of the client's, for ``python -m
raft_queue.bench.stage_report DIR/<value>``. (The client's own marks need
``RAFTQ_STAGE_TRACE`` set before this module is imported; ``--trace`` sets
it and re-executes.)

Prints p50/p90/p99 and the share of sends over 3 ms of each value over all
its sends, and the median over blocks of (first value's block p50 -
second's): the paired difference; the same for the blocks' p95, the
paired tail figure (a block's p99 is one or two sends). The slowest sends
of a traced run: ``python -m raft_queue.bench.tail_report DIR/<value>``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from raft_queue.bench.cluster import bench_queue, local_cluster
from raft_queue.bench.measure import quantile
from raft_queue.client import Client
from raft_queue.observability.stagetrace import mark
from raft_queue.testing.cluster import LocalCluster

QUEUE = "w1-ab"


def _block(client: Client, n: int, body: bytes) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        mark("c.send")
        client.send(QUEUE, body)
        mark("c.recv")
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _cluster(base: Path, name: str, value: str, trace: str | None) -> LocalCluster:
    cluster = local_cluster(base / f"c{value}", ports_per_node=20)
    cluster.env[name] = value
    if trace:
        os.makedirs(os.path.join(trace, value), exist_ok=True)
        cluster.env["RAFTQ_STAGE_TRACE"] = os.path.join(trace, value)
    return cluster


def run(
    name: str, values: list[str], blocks: int, block: int, trace: str | None
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="w1-ab-") as tmp, contextlib.ExitStack() as stack:
        clients: dict[str, Client] = {}
        for value in values:
            cluster = _cluster(Path(tmp), name, value, trace)
            cluster.start()
            stack.callback(cluster.stop)
            cluster.wait_ready(120)
            client = stack.enter_context(Client(cluster.bootstrap, 30.0, token=cluster.token))
            stack.enter_context(bench_queue(client, QUEUE, 1, "fsync"))
            clients[value] = client
        return _alternate(clients, blocks, block)


def _alternate(clients: dict[str, Client], blocks: int, block: int) -> dict[str, object]:
    body = b"x" * 100
    for client in clients.values():
        _block(client, 200, body)  # warm: channels, the stream, leader caches
    samples: dict[str, list[float]] = {v: [] for v in clients}
    first, second = list(clients)
    diffs, tail_diffs = [], []
    for k in range(blocks):
        order = [first, second] if k % 2 == 0 else [second, first]
        p50s, p95s = {}, {}
        for value in order:
            got = _block(clients[value], block, body)
            samples[value] += got
            p50s[value] = quantile(got, 0.5)
            p95s[value] = quantile(got, 0.95)
        diffs.append(p50s[first] - p50s[second])
        tail_diffs.append(p95s[first] - p95s[second])
    out: dict[str, object] = {
        v: {
            "p50_ms": round(quantile(s, 0.5), 3),
            "p90_ms": round(quantile(s, 0.9), 3),
            "p99_ms": round(quantile(s, 0.99), 3),
            "over_3ms": round(sum(1 for x in s if x > 3.0) / len(s), 4),
            "n": len(s),
        }
        for v, s in samples.items()
    }
    out[f"paired_p50_diff_ms({first}-{second})"] = round(statistics.median(diffs), 3)
    # The tail, paired: a block's p99 is one or two sends, its p95 several.
    out[f"paired_p95_diff_ms({first}-{second})"] = round(statistics.median(tail_diffs), 3)
    out[f"blocks_{second}_p95_lower"] = sum(1 for d in tail_diffs if d > 0)
    out[f"blocks_{second}_faster"] = sum(1 for d in diffs if d > 0)
    out["blocks"] = blocks
    out["load_avg_1m"] = round(os.getloadavg()[0], 1)
    return out


def _copy_client_trace(trace: str, values: list[str]) -> None:
    own = os.path.join(trace, "client")
    for path in glob.glob(os.path.join(own, "*.trace")):
        for value in values:
            shutil.copy(path, os.path.join(trace, value))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raft_queue.bench.w1_ab")
    parser.add_argument("--switch", default="RAFTQ_SYNC_INLINE=0,1", help="NAME=A,B")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--block", type=int, default=100, help="sends per block")
    parser.add_argument("--trace", default=None, help="a directory for stage traces")
    args = parser.parse_args(argv)
    name, _, vals = args.switch.partition("=")
    values = vals.split(",")
    if len(values) != 2:
        parser.error("--switch NAME=A,B: two values")
    trace = os.path.abspath(args.trace) if args.trace else None
    if trace and os.environ.get("RAFTQ_STAGE_TRACE") != os.path.join(trace, "client"):
        os.makedirs(os.path.join(trace, "client"), exist_ok=True)
        env = {**os.environ, "RAFTQ_STAGE_TRACE": os.path.join(trace, "client")}
        argv = sys.argv if argv is None else [sys.argv[0], *argv]
        os.execve(sys.executable, [sys.executable, "-m", "raft_queue.bench.w1_ab", *argv[1:]], env)
    print(json.dumps(run(name, values, args.blocks, args.block, trace)))
    if trace:
        from raft_queue.observability import stagetrace

        getattr(stagetrace, "_flush", lambda: None)()
        _copy_client_trace(trace, values)
    return 0


if __name__ == "__main__":
    sys.exit(main())
