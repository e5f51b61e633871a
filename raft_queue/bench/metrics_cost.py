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

from raft_queue.testing.cluster import LocalCluster


def _scrape_loop(urls: list[str], period_s: float, stop: threading.Event) -> None:
    while not stop.wait(period_s):
        for url in urls:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(url + "/metrics", timeout=5).read()


def one_run(enabled: bool, scrape_s: float) -> float:
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
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
            return float(_msgs_per_s(json.loads(out.stdout)))
        finally:
            stop.set()
            cluster.stop()


def _msgs_per_s(doc: dict[str, Any]) -> float:
    """W2's msgs/s from ``raftq bench --json`` (its one run); an error is fatal."""
    (run,) = [r for r in doc["runs"] if r.get("workload", r.get("name")) == "W2"]
    if "error" in run.get("info", {}):
        raise RuntimeError(f"W2 failed: {run['info']['error']}")
    return float(run["metrics"]["msgs_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--scrape-s", type=float, default=5.0)
    args = parser.parse_args()
    on: list[float] = []
    off: list[float] = []
    for k in range(args.pairs):
        for enabled in (True, False) if k % 2 == 0 else (False, True):
            value = one_run(enabled, args.scrape_s)
            (on if enabled else off).append(value)
            print(f"pair {k + 1} metrics {'on ' if enabled else 'off'}: {value:,.0f} msgs/s",
                  flush=True)  # fmt: skip
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"median on {m_on:,.0f}  off {m_off:,.0f}  cost {100 * (1 - m_on / m_off):+.1f} %")


if __name__ == "__main__":
    main()
