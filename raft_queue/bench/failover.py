"""Failover as a client sees it: ``python -m raft_queue.bench.failover``.

A fresh 3-node cluster (real node processes), one queue of one partition
with replication 3, and one SDK producer sending one message at a time
(``Client.send``, default retries and timeout). Each run, after a steady
second of sends, the node leading the partition is killed with SIGKILL;
the run records the *gap*: the time between the last ack received before
the kill and the first ack received after it (what the producer waited),
and the time from the kill to that ack. "After" means after the process
is gone (``LocalCluster.kill`` returns): a reply the dying leader had
already sent is an ack before the outage, not the end of it. The killed node is restarted and
the cluster settles (every node back, the preferred leader re-elected)
before the next run; each run kills whichever node leads then.

Prints one line per run and the medians (``--json``: one document), with
the Raft timing the nodes ran with (``--election-min-s`` etc. override
the defaults of config.py, to measure a setting without editing it).
Issue 17's target: a median gap of at most 1 s over 5 runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from raft_queue.bench.cluster import wait_leaders
from raft_queue.bench.measure import loadavg
from raft_queue.client import Client
from raft_queue.errors import QueueError
from raft_queue.testing.cluster import LocalCluster

QUEUE = "failover"
STEADY_S = 1.0  # sends before the kill
AFTER_S = 0.5  # sends after the first ack past the kill
GIVE_UP_S = 30.0  # a run with no ack this long after the kill fails


@dataclass
class Run:
    killed: str
    gap_s: float  # last ack before the kill -> first ack after it
    kill_to_ack_s: float
    kill_to_leader_s: float | None  # a survivor first reported a new leader (polled)
    acks_before: int
    errors: list[str] = field(default_factory=list)  # sends that raised (after SDK retries)


class Producer:
    """One thread sending one message at a time; records each ack's time."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.acks: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="failover-producer", daemon=True)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        seq = 0
        while not self._stop.is_set():
            seq += 1
            try:
                self.client.send(QUEUE, f"m{seq}".encode())
            except QueueError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc.message}")
                continue
            self.acks.append(time.monotonic())

    def first_ack_after(self, t: float, timeout_s: float) -> float | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            after = [a for a in self.acks[-64:] if a > t]
            if after:
                return after[0]
            time.sleep(0.005)
        return None


class LeaderWatch:
    """Polls the survivors' GetPartitions after the kill: when a new leader of
    the partition was first reported (the election's end, as a client can
    see it), to split the gap into election and client time."""

    def __init__(self, cluster: LocalCluster, victim: int) -> None:
        others = [s.address for k, s in enumerate(cluster.specs) if k != victim]
        self.client = Client(others, timeout_s=1.0, retries=0, token=cluster.token)
        self.victim = cluster.specs[victim].node_id
        self.elected: float | None = None
        self._thread = threading.Thread(target=self._loop, name="leader-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        deadline = time.monotonic() + GIVE_UP_S
        while self.elected is None and time.monotonic() < deadline:
            with contextlib.suppress(QueueError):
                (part,) = self.client.partitions(QUEUE)
                if part.leader and part.leader != self.victim:
                    self.elected = time.monotonic()
                    break
            time.sleep(0.01)

    def stop(self) -> None:
        self._thread.join(GIVE_UP_S + 5)
        self.client.close()


def leader_index(client: Client, cluster: LocalCluster) -> int:
    (part,) = client.partitions(QUEUE)
    ids = [s.node_id for s in cluster.specs]
    return ids.index(part.leader)


def one_run(cluster: LocalCluster, client: Client) -> Run:
    victim = leader_index(client, cluster)
    with Producer(cluster.client()) as producer:
        time.sleep(STEADY_S)
        if not producer.acks:
            raise RuntimeError(f"no ack in the steady {STEADY_S}s: {producer.errors[-3:]}")
        watch = LeaderWatch(cluster, victim)
        kill_sent = time.monotonic()
        cluster.kill(victim)  # returns once the process is gone
        killed_at = time.monotonic()
        watch.start()
        # Acks received until the process was gone may come from it (a reply
        # already on its way): the outage starts at the last of them.
        before = [a for a in producer.acks if a <= killed_at]
        first = producer.first_ack_after(killed_at, GIVE_UP_S)
        if first is None:
            raise RuntimeError(f"no ack {GIVE_UP_S}s after the kill: {producer.errors[-3:]}")
        time.sleep(AFTER_S)
        watch.stop()
    return Run(
        killed=cluster.specs[victim].node_id,
        gap_s=first - before[-1],
        kill_to_ack_s=first - kill_sent,
        kill_to_leader_s=(watch.elected - kill_sent) if watch.elected else None,
        acks_before=len(before),
        errors=producer.errors,
    )


def settle(cluster: LocalCluster, client: Client, victim: str) -> None:
    """Restart the killed node; wait until it is back and the preferred
    replica leads again (its hand-over must not fall in the next run)."""
    cluster.start([s.node_id for s in cluster.specs].index(victim))
    cluster.wait_ready(120)
    wait_leaders(client, QUEUE, timeout_s=120, preferred_s=10)
    time.sleep(1.0)  # let the restarted replica catch up before the next kill


def measure(base: Path, runs: int, raft: dict[str, Any]) -> dict[str, Any]:
    cluster = LocalCluster(base, nodes=3, raft=raft)
    cluster.start()
    try:
        cluster.wait_ready(120)
        with cluster.client() as client:
            client.create_queue(QUEUE, partitions=1, replication_factor=3)
            wait_leaders(client, QUEUE, timeout_s=120)
            done: list[Run] = []
            for k in range(runs):
                run = one_run(cluster, client)
                done.append(run)
                print(
                    f"run {k + 1}: killed {run.killed}, gap {run.gap_s:.3f} s, "
                    f"kill->ack {run.kill_to_ack_s:.3f} s, kill->leader seen "
                    f"{run.kill_to_leader_s or float('nan'):.3f} s, errors {len(run.errors)}",
                    file=sys.stderr,
                )
                settle(cluster, client, run.killed)
    finally:
        cluster.stop_all()
    return {
        "raft": raft,
        "runs": [asdict(r) for r in done],
        "median_gap_s": statistics.median(r.gap_s for r in done),
        "median_kill_to_ack_s": statistics.median(r.kill_to_ack_s for r in done),
        "loadavg": loadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--election-min-s", type=float, default=None)
    p.add_argument("--election-max-s", type=float, default=None)
    p.add_argument("--heartbeat-s", type=float, default=None)
    p.add_argument(
        "--raft", action="append", default=[], metavar="KEY=VALUE",
        help="another [raft] key for the nodes (TOML value), e.g. pre_vote=false",
    )  # fmt: skip
    p.add_argument("--dir", type=Path, default=None, help="cluster directory (default: a temp dir)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    raft: dict[str, Any] = {}
    for key, value in (
        ("election_timeout_min_s", a.election_min_s),
        ("election_timeout_max_s", a.election_max_s),
        ("heartbeat_period_s", a.heartbeat_s),
    ):
        if value is not None:
            raft[key] = value
    for item in a.raft:
        key, _, value = item.partition("=")
        raft[key.strip()] = tomllib.loads(f"v = {value}")["v"]
    with contextlib.ExitStack() as stack:
        base = a.dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        doc = measure(base, a.runs, raft)
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        gaps = ", ".join(f"{r['gap_s']:.2f}" for r in doc["runs"])
        print(f"failover gaps (s): {gaps}; median {doc['median_gap_s']:.3f} s")


if __name__ == "__main__":
    main()
