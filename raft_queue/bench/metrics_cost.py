"""The cost of metrics on W2: ``python -m raft_queue.bench.metrics_cost --pairs 5``.

Runs W2 (``raftq bench --workloads W2 --server ...``) on fresh 3-node
clusters, alternately with ``[metrics] enabled = true`` (every node scraped
every ``--scrape-s`` seconds meanwhile, as a Prometheus would) and
``enabled = false``, so drift in the machine's load hits both sides alike;
prints each run and the medians (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import Any

from raft_queue.bench.measure import proc_cpu_s
from raft_queue.testing.cluster import LocalCluster


def _scrape_loop(urls: list[str], period_s: float, stop: threading.Event) -> None:
    while not stop.wait(period_s):
        for url in urls:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(url + "/metrics", timeout=5).read()


def one_run(enabled: bool, scrape_s: float) -> tuple[float, float]:
    """W2's msgs/s, and the nodes' CPU (all three, whole bench command:
    queue creation, warm-up, workload) in microseconds per message sent."""
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "c", nodes=3, metrics={"enabled": enabled})
        cluster.start()
        stop = threading.Event()
        try:
            cluster.wait_ready(60)
            if enabled:
                args = (cluster.metrics_urls, scrape_s, stop)
                threading.Thread(target=_scrape_loop, args=args, daemon=True).start()
            cmd = [sys.executable, "-m", "raft_queue.cli.main", "bench", "--workloads", "W2",
                   "--runs", "1", "--quiet-wait", "0", "--json",
                   "--server", cluster.bootstrap]  # fmt: skip
            pids = [cluster.pid(i) for i in range(cluster.nodes)]
            cpu0 = sum(proc_cpu_s(p) for p in pids)
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
            cpu = sum(proc_cpu_s(p) for p in pids) - cpu0
            rate, msgs = _w2(json.loads(out.stdout))
            return rate, 1e6 * cpu / max(msgs, 1)
        finally:
            stop.set()
            cluster.stop()


def _w2(doc: dict[str, Any]) -> tuple[float, int]:
    """W2's msgs/s and messages sent from ``raftq bench --json``; an error is fatal."""
    (run,) = [r for r in doc["runs"] if r.get("workload") == "W2"]
    if "error" in run.get("info", {}):
        raise RuntimeError(f"W2 failed: {run['info']['error']}")
    return float(run["metrics"]["msgs_per_s"]), int(run["info"]["msgs"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--scrape-s", type=float, default=5.0)
    args = parser.parse_args()
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for k in range(args.pairs):
        for enabled in (True, False) if k % 2 == 0 else (False, True):
            rate, cpu_us = one_run(enabled, args.scrape_s)
            runs[enabled].append((rate, cpu_us))
            print(f"pair {k + 1} metrics {'on ' if enabled else 'off'}: {rate:,.0f} msgs/s, "
                  f"nodes' CPU {cpu_us:.2f} us/msg", flush=True)  # fmt: skip
    for i, what in ((0, "msgs/s"), (1, "CPU us/msg")):
        on = statistics.median(r[i] for r in runs[True])
        off = statistics.median(r[i] for r in runs[False])
        cost = 100 * (1 - on / off) if i == 0 else 100 * (on / off - 1)
        print(f"median {what}: on {on:,.2f}  off {off:,.2f}  cost {cost:+.1f} %")


if __name__ == "__main__":
    main()
