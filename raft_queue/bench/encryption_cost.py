"""The cost of encryption at rest: ``python -m raft_queue.bench.encryption_cost``.

1. A micro-benchmark of the seal and the open of one batch (what a Send of
   ``--batch`` messages of ``--size`` bytes costs a partition leader, and
   what a lease or read of that batch costs), beside the cost of building
   the batch's blobs from the request (the send path's own work per batch).
2. ``--rounds`` pairs of ``raftq bench --workloads W2,W3`` runs, with
   ``--encryption`` and ``--no-encryption`` interleaved, each on a fresh
   3-node cluster, printing each run's throughput and the nodes' CPU per
   message, the medians and the on/off ratios (docs/benchmarks.md "Cost of
   encryption at rest").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.config import QueueSpec
from raft_queue.core.sealing import open_records, seal_blobs
from raft_queue.core.segments import Segment, encode_body, segment_value
from raft_queue.security.encryption import decrypt, encrypter
from raft_queue.server.api.convert import record_blobs


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
    """``n`` pairs of ``raftq bench --workloads W2,W3`` runs, encryption on and
    off interleaved (on, off, on, off...: both see the same stretch of the
    machine's load, as far as that goes on a shared machine), each on a FRESH
    3-node cluster that ``raftq bench`` starts and stops (no run inherits
    another's deleted queues, opened batches or garbage)."""
    results: list[dict[str, Any]] = []
    for r in range(n):
        for flag in ("--encryption", "--no-encryption"):
            for row in _one(flag, scale, r):
                results.append(row)
                print(json.dumps(row), flush=True)
    return results


def _one(flag: str, scale: float, round_no: int) -> list[dict[str, Any]]:
    """One ``raftq bench`` run: a row per workload, with the node processes'
    CPU per message (W2: over the measured sends; W3: over the drain)."""
    cmd = [sys.executable, "-m", "raft_queue.cli.main", "bench", "--workloads", "W2,W3",
           "--runs", "1", "--quiet-wait", "0", "--scale", str(scale), flag, "--json"]  # fmt: skip
    load = os.getloadavg()[0]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return []
    rows = []
    for run in json.loads(done.stdout)["runs"]:
        rate = run["metrics"].get("msgs_per_s")
        cpu = run["info"].get("cpu") or {}
        if not rate:
            continue  # a failed workload (its error is in the run's info)
        server = cpu.get("server_pct")
        row = {
            "round": round_no,
            "workload": run["workload"],
            "encryption": flag == "--encryption",
            "msgs_per_s": round(rate),
            "node_cpu_us_per_msg": round(server / 100 / rate * 1e6, 2) if server else None,
            "other_tenants_pct": cpu.get("other_pct"),
            "load_before": load,
        }
        if "prefill_msgs_per_s" in run["metrics"]:
            row["prefill_msgs_per_s"] = round(run["metrics"]["prefill_msgs_per_s"])
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--micro-only", action="store_true")
    ap.add_argument("--no-micro", action="store_true", help="only the raftq bench pairs")
    args = ap.parse_args()
    if not args.no_micro:
        print(json.dumps({"micro": micro(args.batch, args.size, args.repeat)}), flush=True)
    if args.micro_only:
        return
    rows = rounds(args.rounds, args.scale)
    print(json.dumps({"summary": summarize(rows)}, indent=1))


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per workload and mode, and the on/off ratios: of the medians,
    and the median of each pair's ratio (a pair shares a stretch of load)."""
    out: dict[str, Any] = {}
    for wl in ("W2", "W3"):
        by_mode = {}
        for enc in (True, False):
            sel = [r for r in rows if r["workload"] == wl and r["encryption"] == enc]
            by_mode[enc] = {r["round"]: r for r in sel}
            out[f"{wl} {'on' if enc else 'off'}"] = {
                "runs": len(sel),
                "msgs_per_s_median": _median([r["msgs_per_s"] for r in sel]),
                "cpu_us_per_msg_median": _median(
                    [r["node_cpu_us_per_msg"] for r in sel if r["node_cpu_us_per_msg"]]
                ),
            }
        on, off = out[f"{wl} on"], out[f"{wl} off"]
        pairs = [
            (by_mode[True][k], by_mode[False][k]) for k in by_mode[True] if k in by_mode[False]
        ]
        out[f"{wl} on/off"] = {
            "msgs_per_s_of_medians": _ratio(on["msgs_per_s_median"], off["msgs_per_s_median"]),
            "cpu_of_medians": _ratio(on["cpu_us_per_msg_median"], off["cpu_us_per_msg_median"]),
            "msgs_per_s_paired_median": _median(
                [a["msgs_per_s"] / b["msgs_per_s"] for a, b in pairs]
            ),
            "cpu_paired_median": _median(
                [
                    a["node_cpu_us_per_msg"] / b["node_cpu_us_per_msg"]
                    for a, b in pairs
                    if a["node_cpu_us_per_msg"] and b["node_cpu_us_per_msg"]
                ]
            ),
        }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


if __name__ == "__main__":
    main()
