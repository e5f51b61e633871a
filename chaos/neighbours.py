"""Run the seeded chaos campaign test beside noisy neighbours.

    python -m chaos.neighbours --runs 5 [--hogs 2] [--clusters 2] [--out DIR]

Neighbours, for as long as the runs last (bounded: ``--hogs`` CPU hogs at
``--duty`` of a core each, ``--clusters`` neighbour clusters):

- CPU hogs: processes spinning ``--duty`` of each 100 ms;
- other 3-node LocalClusters, each in a loop: start, create a queue, send and
  receive for 10-25 s, then SIGKILL every node and start over (new ports, as
  ``make test`` running beside it would).

Then ``pytest tests/chaos/test_campaign.py::test_seeded_campaign_over_every_kind_of_fault_is_valid``
runs ``--runs`` times in a row, each with its output kept under ``--out``
(RAFTQ_CHAOS_OUT) and its pytest output in ``run-N.txt``; a summary goes to
``summary.txt``. Exit status 0 only if every run passed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from raft_queue.errors import QueueError
from raft_queue.testing.cluster import LocalCluster

TEST = "tests/chaos/test_campaign.py::test_seeded_campaign_over_every_kind_of_fault_is_valid"


def start_hogs(count: int, duty: float) -> list[subprocess.Popen[bytes]]:
    code = (
        "import time\n"
        "while True:\n"
        f"    end = time.monotonic() + {0.1 * duty}\n"
        "    while time.monotonic() < end: pass\n"
        f"    time.sleep({0.1 * (1 - duty)})\n"
    )
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


class Neighbour(threading.Thread):
    """A LocalCluster started, loaded and SIGKILLed in a loop."""

    def __init__(self, k: int, base: Path, stop: threading.Event) -> None:
        super().__init__(name=f"neighbour-{k}", daemon=True)
        self.k, self.base, self.stop = k, base, stop
        self.rounds = 0
        self.errors: list[str] = []

    def run(self) -> None:
        rng = random.Random(self.k)
        while not self.stop.is_set():
            path = self.base / f"nb{self.k}-{self.rounds}"
            cluster = LocalCluster(path, nodes=3)
            try:
                cluster.start()
                cluster.wait_ready(90)
                self._load(cluster, rng.uniform(10, 25))
            except Exception as exc:  # a neighbour's trouble is reported, never fatal
                self.errors.append(f"round {self.rounds}: {type(exc).__name__}: {exc}")
            finally:
                for i in list(cluster.procs):
                    cluster.kill(i)  # SIGKILL, as a crashed test run would leave them
                shutil.rmtree(path, ignore_errors=True)
            self.rounds += 1

    def _load(self, cluster: LocalCluster, seconds: float) -> None:
        with cluster.client(timeout_s=10.0) as client:
            client.create_queue("nb", partitions=3, replication_factor=3)
            end = time.monotonic() + seconds
            while time.monotonic() < end and not self.stop.is_set():
                try:
                    client.send_batch("nb", [b"n" * 512] * 20)
                    got = client.receive("nb", max_messages=20)
                    if got:
                        client.ack("nb", [m.receipt for m in got])
                except QueueError:
                    time.sleep(0.1)


def run_campaigns(runs: int, out: Path) -> list[tuple[int, float, str]]:
    results = []
    for n in range(1, runs + 1):
        t0 = time.monotonic()
        env = {**os.environ, "RAFTQ_CHAOS_OUT": str(out / f"run-{n}")}
        cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST]
        with open(out / f"run-{n}.txt", "wb") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        verdict = "PASS" if rc == 0 else f"FAIL (rc {rc})"
        results.append((n, time.monotonic() - t0, verdict))
        print(f"run {n}: {verdict} in {time.monotonic() - t0:.0f} s", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser("python -m chaos.neighbours")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--duty", type=float, default=0.8)
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(".raftq/neighbours"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    hogs = start_hogs(args.hogs, args.duty)
    neighbours = [Neighbour(k, args.out / "neighbours", stop) for k in range(args.clusters)]
    for nb in neighbours:
        nb.start()
    try:
        results = run_campaigns(args.runs, args.out)
    finally:
        stop.set()
        for hog in hogs:
            hog.send_signal(signal.SIGKILL)
            hog.wait()
        for nb in neighbours:
            nb.join(120)
    lines = [f"run {n}: {verdict} in {secs:.0f} s" for n, secs, verdict in results]
    lines += [f"neighbour {nb.k}: {nb.rounds} rounds, errors {nb.errors[:5]}" for nb in neighbours]
    lines.append(f"hogs: {args.hogs} at {args.duty:.0%} of a core each")
    (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0 if all(v == "PASS" for _, _, v in results) else 1


if __name__ == "__main__":
    sys.exit(main())
