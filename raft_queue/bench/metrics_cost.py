"""The cost of metrics on W2: ``python -m raft_queue.bench.metrics_cost``.

Two fresh 3-node clusters, one with ``[metrics] enabled = true`` (every node
scraped every ``--scrape-s`` seconds meanwhile, as a Prometheus would) and
one with ``enabled = false``, run W2 (``raftq bench --workloads W2 --server
...``) AT THE SAME TIME, ``--rounds`` times. On a shared machine whose load
swings 4x within minutes (measured: W2 from 31k to 138k msgs/s run to run),
runs one after the other compare the machine's moods, not the code; two
runs side by side see the same load, so their ratio is the cost. Prints each
round (throughput and the nodes' CPU per message) and the medians of the
per-round ratios (docs/benchmarks.md, "Cost of metrics").
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


def _w2(doc: dict[str, Any]) -> tuple[float, int]:
    """W2's msgs/s and messages sent from ``raftq bench --json``; an error is fatal."""
    (run,) = [r for r in doc["runs"] if r.get("workload") == "W2"]
    if "error" in run.get("info", {}):
        raise RuntimeError(f"W2 failed: {run['info']['error']}")
    return float(run["metrics"]["msgs_per_s"]), int(run["info"]["msgs"])


def _bench(cluster: LocalCluster) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "raft_queue.cli.main", "bench", "--workloads", "W2",
           "--runs", "1", "--quiet-wait", "0", "--json", "--server", cluster.bootstrap]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def one_round(scrape_s: float) -> dict[bool, tuple[float, float]]:
    """{enabled: (W2 msgs/s, the nodes' CPU in us per message sent)}, both
    clusters running W2 at once. CPU covers the whole bench command (queue
    creation, warm-up, workload) of all three nodes."""
    with tempfile.TemporaryDirectory() as tmp:
        clusters = {
            on: LocalCluster(Path(tmp) / f"c{int(on)}", nodes=3, metrics={"enabled": on})
            for on in (True, False)
        }
        stop = threading.Event()
        try:
            for c in clusters.values():
                c.start()
            for c in clusters.values():
                c.wait_ready(60)
            args = (clusters[True].metrics_urls, scrape_s, stop)
            threading.Thread(target=_scrape_loop, args=args, daemon=True).start()
            pids = {on: [c.pid(i) for i in range(c.nodes)] for on, c in clusters.items()}
            cpu0 = {on: sum(proc_cpu_s(p) for p in ps) for on, ps in pids.items()}
            procs = {on: _bench(c) for on, c in clusters.items()}
            out: dict[bool, tuple[float, float]] = {}
            for on, proc in procs.items():
                stdout, _ = proc.communicate(timeout=300)
                cpu = sum(proc_cpu_s(p) for p in pids[on]) - cpu0[on]
                rate, msgs = _w2(json.loads(stdout))
                out[on] = (rate, 1e6 * cpu / max(msgs, 1))
            return out
        finally:
            stop.set()
            for c in clusters.values():
                c.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scrape-s", type=float, default=15.0)
    args = parser.parse_args()
    ratios: list[tuple[float, float]] = []
    for k in range(args.rounds):
        r = one_round(args.scrape_s)
        (on_rate, on_cpu), (off_rate, off_cpu) = r[True], r[False]
        ratios.append((on_rate / off_rate, on_cpu / off_cpu))
        print(f"round {k + 1}: on {on_rate:,.0f} msgs/s {on_cpu:.2f} us/msg | "
              f"off {off_rate:,.0f} msgs/s {off_cpu:.2f} us/msg | "
              f"throughput x{ratios[-1][0]:.3f} CPU x{ratios[-1][1]:.3f}", flush=True)  # fmt: skip
    tput = statistics.median(x for x, _ in ratios)
    cpu = statistics.median(y for _, y in ratios)
    print(f"median of {len(ratios)} rounds: throughput x{tput:.3f} "
          f"({100 * (1 - tput):+.1f} % cost), CPU per message x{cpu:.3f} "
          f"({100 * (cpu - 1):+.1f} % cost)")  # fmt: skip


if __name__ == "__main__":
    main()
