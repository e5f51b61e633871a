"""One queue spread over two clusters against one cluster, and a routed
request against a direct one (issue 16; docs/benchmarks.md "Several clusters").

    python -m raft_queue.bench.spread --dir /tmp/spread [--secs 15] [--rounds 2]

Starts two 3-node clusters and a 3-node manager (9 processes) under ``--dir``
and measures, alternating the cases in each round so that background load
falls on all of them:

- W2 (``workloads.Publisher``: ``inflight`` threads of send_batch(4096 x 100 B),
  fsync, replication 3) into a queue of ``--partitions`` partitions: all on c1
  through a plain Client ("direct"), all on c1 through ManagedClient
  ("routed-one"), and half on each cluster through ManagedClient
  ("routed-two");
- the latency of one 100 B send, direct (Client on c1) against routed
  (ManagedClient, same queue), alternating call by call.

Prints one JSON object. On one machine the two clusters share its cores, so
"routed-two" measures the routing, not a second machine's capacity.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from raft_queue.bench.measure import make_msg, percentiles_ms
from raft_queue.bench.workloads import Params, Publisher
from raft_queue.client.managed import ManagedClient
from raft_queue.testing.cluster import LocalCluster
from raft_queue.testing.managers import ManagerCluster


def _fleet(base: Path) -> tuple[LocalCluster, LocalCluster, ManagerCluster]:
    c1, c2 = LocalCluster(base / "c1", nodes=3), LocalCluster(base / "c2", nodes=3)
    managers = ManagerCluster(base / "mgr", managers=3)
    for c in (c1, c2):  # one token for the fleet
        c.base_dir.mkdir(parents=True, exist_ok=True)
        (c.base_dir / "admin.token").write_text(managers.token + "\n")
        (c.base_dir / "admin.token").chmod(0o600)
    for part in (c1, c2, managers):
        part.start()
    c1.wait_ready(120)
    c2.wait_ready(120)
    managers.wait_ready(60)
    with managers.admin() as admin:
        admin.add_cluster("c1", c1.bootstrap.split(","), c1.token)
        admin.add_cluster("c2", c2.bootstrap.split(","), c2.token)
    return c1, c2, managers


def _latency(direct: Any, routed: Any, queue: str, n: int) -> dict[str, Any]:
    out: dict[str, list[int]] = {"direct": [], "routed": []}
    for i in range(n + 50):
        for name, client in (("direct", direct), ("routed", routed)):
            t = time.perf_counter_ns()
            client.send(queue, make_msg(i, 100))
            if i >= 50:  # warm-up: channels, leaders, the mapping
                out[name].append(time.perf_counter_ns() - t)
    return {name: percentiles_ms(v) for name, v in out.items()}


def run(base: Path, secs: float, rounds: int, partitions: int, latency_n: int) -> dict[str, Any]:
    c1, c2, managers = _fleet(base)
    try:
        routed = ManagedClient(managers.bootstrap, managers.token, timeout_s=60)
        direct = c1.client(timeout_s=60)
        routed.create_queue("spread-one", partitions, clusters=["c1"])
        routed.create_queue("spread-two", partitions, clusters=["c1", "c2"])
        routed.create_queue("spread-lat", 1, clusters=["c1"])
        p = replace(Params(), partitions=partitions, w2_secs=secs)
        cases = {"direct": (direct, "spread-one"), "routed-one": (routed, "spread-one"),
                 "routed-two": (routed, "spread-two")}  # fmt: skip
        w2: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, (client, queue) in cases.items():
                Publisher(client, queue, p).run(total=2000)  # warm-up
                sent, elapsed = Publisher(client, queue, p).run(secs=secs)
                w2[name].append(round(sent / elapsed))
        latency = _latency(direct, routed, "spread-lat", latency_n)
        routed.close()
        direct.close()
        return {"w2_msgs_per_s": w2, "send_latency_ms": latency,
                "params": {"secs": secs, "rounds": rounds, "partitions": partitions,
                           "batch": p.batch, "inflight": p.inflight}}  # fmt: skip
    finally:
        managers.stop()
        c1.stop()
        c2.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True, help="an empty directory for the 9 processes")
    parser.add_argument("--secs", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--latency-n", type=int, default=500)
    a = parser.parse_args()
    print(json.dumps(run(Path(a.dir), a.secs, a.rounds, a.partitions, a.latency_n), indent=2))


if __name__ == "__main__":
    main()
