"""The cost of encryption at rest: ``python -m raft_queue.bench.encryption_cost``.

1. A micro-benchmark of the seal and the open of one batch (what a Send of
   ``--batch`` messages of ``--size`` bytes costs a partition leader, and
   what a lease or read of that batch costs), beside the cost of building
   the batch's blobs from the request (the send path's own work per batch).
2. ``--rounds`` rounds of ``raftq bench --workloads W2,W3`` against ONE
   fresh 3-node cluster, with ``--encryption`` and ``--no-encryption``
   alternating (so both see the same machine load, as far as that goes on a
   shared machine), printing each run's throughput and the nodes' CPU per
   message, and the medians (docs/benchmarks.md "Cost of encryption at rest").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.bench.measure import proc_cpu_s
from raft_queue.config import QueueSpec
from raft_queue.core.sealing import open_records, seal_blobs
from raft_queue.core.segments import Segment, encode_body, segment_value
from raft_queue.security.encryption import decrypt, encrypter
from raft_queue.server.api.convert import record_blobs
from raft_queue.testing.cluster import LocalCluster


def micro(batch: int, size: int, repeat: int) -> dict[str, float]:
    """Microseconds per batch: build blobs, seal, open (decrypt + split)."""
    entries = [queue_pb2.SendEntry(body=os.urandom(size)) for _ in range(batch)]
    spec = QueueSpec(replication_factor=1)
    idx = list(range(batch))
    aes = AESGCM(os.urandom(32))
    enc = encrypter(aes)

    def timed(fn: Any) -> float:
        best = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            best.append(time.perf_counter() - t0)
        return statistics.median(best) * 1e6

    blobs, summary = record_blobs(entries, idx, spec)
    sealed, ssum = seal_blobs(blobs, summary, 1, 0, 1, enc)
    seg = Segment(0, segment_value(1, encode_body(sealed, ssum), 0))
    plain_seg = Segment(0, segment_value(1, encode_body(blobs, summary), 0))

    def dec(key_id: int, nonce: bytes, sealed: bytes, aad: bytes) -> bytes:
        return decrypt(aes, nonce, sealed, aad)

    out = {
        "build_us": timed(lambda: record_blobs(entries, idx, spec)),
        "seal_us": timed(lambda: seal_blobs(blobs, summary, 1, 0, 1, enc)),
        "open_us": timed(lambda: open_records(seg, 1, 0, dec)),
        "plain_records_us": timed(lambda: plain_seg.records(0, batch)),
        "plain_bodies_us": timed(lambda: plain_seg.bodies(0, batch)),
    }
    out["seal_us_per_msg"] = out["seal_us"] / batch
    out["open_us_per_msg"] = out["open_us"] / batch
    return out


def rounds(n: int, scale: float) -> list[dict[str, Any]]:
    """Runs of W2 and W3, encryption on and off in turn, against one cluster;
    each with the node processes' CPU seconds per message."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", nodes=3)
        cluster.start()
        try:
            cluster.wait_ready(90)
            pids = [cluster.pid(i) for i in range(cluster.nodes)]
            for r in range(n):
                for workload in ("W2", "W3"):
                    # Each mode goes first in every other round: the first run of
                    # a pair also pays for the previous run's queue clean-up.
                    order = ("--encryption", "--no-encryption")
                    for flag in order if r % 2 == 0 else order[::-1]:
                        row = _one(cluster.bootstrap, pids, workload, flag, scale, r)
                        if row is not None:
                            results.append(row)
                            print(json.dumps(row), flush=True)
        finally:
            cluster.stop()
    return results


def _one(
    server: str, pids: list[int], workload: str, flag: str, scale: float, round_no: int
) -> dict[str, Any] | None:
    cmd = [sys.executable, "-m", "raft_queue.cli.main", "bench", "--workloads", workload,
           "--runs", "1", "--server", server, "--quiet-wait", "0", "--scale", str(scale),
           flag, "--json"]  # fmt: skip
    cpu0 = sum(proc_cpu_s(p) for p in pids)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    cpu_s = sum(proc_cpu_s(p) for p in pids) - cpu0
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    run = json.loads(done.stdout)["runs"][0]
    info = run["info"]
    # W2: the messages sent while measured (the warm-up's are few); W3: each
    # message is sent (prefill) and received + acked (drain), all of it counted.
    msgs = info.get("msgs") if workload == "W2" else info.get("got")
    return {
        "round": round_no,
        "workload": workload,
        "encryption": flag == "--encryption",
        "msgs_per_s": run["metrics"]["msgs_per_s"],
        "node_cpu_s": round(cpu_s, 2),
        "cpu_us_per_msg": cpu_s / msgs * 1e6 if msgs else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--micro-only", action="store_true")
    args = ap.parse_args()
    print(json.dumps({"micro": micro(args.batch, args.size, args.repeat)}), flush=True)
    if args.micro_only:
        return
    rows = rounds(args.rounds, args.scale)
    summary = {}
    for wl in ("W2", "W3"):
        for enc in (True, False):
            sel = [r for r in rows if r["workload"] == wl and r["encryption"] == enc]
            cpu = [r["cpu_us_per_msg"] for r in sel if r["cpu_us_per_msg"]]
            summary[f"{wl} {'on' if enc else 'off'}"] = {
                "runs": len(sel),
                "msgs_per_s_median": statistics.median(r["msgs_per_s"] for r in sel)
                if sel
                else None,
                "cpu_us_per_msg_median": statistics.median(cpu) if cpu else None,
            }
    print(json.dumps({"summary": summary}, indent=1))


if __name__ == "__main__":
    main()
