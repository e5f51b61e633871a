"""Same-run comparison with NATS JetStream through the peer harness.

``python -m raft_queue.bench.peer_compare --rounds 3`` runs, per round, the
harness's own workloads (``../shared/bench/peers/loadgen.py``) against a fresh
NATS JetStream R3 cluster (the harness's start/stop scripts) and then against a
fresh ``raftq dev up`` cluster through ``RaftQueueAdapter``, in the same
minutes. It prints one table: the median per system and workload over the
rounds, the ratio to NATS, and the server CPU per message (µs of node CPU per
message: the harness's server CPU % over its msgs/s). Every run's JSON lines
are kept in ``--out`` (``loadgen.py summarize`` reads them).

The harness must be set up once (``../shared/bench/peers/setup.sh``: Debian's
nats-server and a venv with nats-py). The harness waits for a quiet machine
before each workload (``--quiet-wait``); keep other work off the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from raft_queue.testing.cluster import reserve_ports

REPO = Path(__file__).resolve().parents[2]
PEERS = REPO.parent / "shared" / "bench" / "peers"
ADAPTER = "raft_queue.bench.peer_adapter:RaftQueueAdapter"
DEV_UP_PORTS = 512  # raftq dev up: gRPC base+1.., metadata base+51.., partitions base+100*i..
HARNESS_PY = Path(os.environ.get("PB_VENV", "/tmp/peerbench/venv")) / "bin" / "python"


def loadgen(python: Path | str, args: list[str], out: Path, quiet_wait: float) -> None:
    cmd = [str(python), str(PEERS / "loadgen.py"), "run", "--out", str(out),
           "--quiet-wait", str(quiet_wait), *args]  # fmt: skip
    subprocess.run(cmd, check=False, cwd=REPO)


def nats_round(out: Path, workloads: str, quiet_wait: float) -> None:
    subprocess.run([str(PEERS / "start_nats_cluster.sh"), "--fresh"], check=True)
    try:
        time.sleep(3)  # as run_all.sh: let the elections settle
        loadgen(HARNESS_PY, ["--peer", "nats", "--workloads", workloads], out, quiet_wait)
    finally:
        subprocess.run([str(PEERS / "stop_nats_cluster.sh")], check=False)


def raftq_round(
    out: Path, workloads: str, quiet_wait: float, base_port: int, opts: tuple[str, ...] = ()
) -> None:
    fds: list[int] = []
    if not base_port:  # ports no LocalCluster of another process takes meanwhile
        base_port, fds = reserve_ports(DEV_UP_PORTS)
    try:
        _raftq_round(out, workloads, quiet_wait, base_port, opts)
    finally:
        for fd in fds:
            os.close(fd)


def _raftq_round(
    out: Path, workloads: str, quiet_wait: float, base_port: int, opts: tuple[str, ...]
) -> None:
    data = Path(f"/tmp/raftq-peer-{base_port}")
    shutil.rmtree(data, ignore_errors=True)
    raftq = Path(sys.executable).with_name("raftq")
    up = subprocess.Popen(
        [str(raftq), "dev", "up", "--data-dir", str(data), "--base-port", str(base_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_ready(up, data)
        target = ",".join(f"127.0.0.1:{base_port + i}" for i in (1, 2, 3))
        args = ["--label", "raft_queue", "--peer", ADAPTER, "--workloads", workloads,
                "--opt", f"target={target}", "--opt", f"cluster_dir={data}",
                *(x for o in opts for x in ("--opt", o))]  # fmt: skip
        loadgen(sys.executable, args, out, quiet_wait)
    finally:
        os.killpg(up.pid, signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        shutil.rmtree(data, ignore_errors=True)


def _wait_ready(up: subprocess.Popen[bytes], data: Path, timeout_s: float = 120.0) -> None:
    """Until ``raftq dev up`` wrote its admin token and printed its exports."""
    deadline = time.monotonic() + timeout_s
    assert up.stdout is not None
    while time.monotonic() < deadline:
        line = up.stdout.readline().decode(errors="replace")
        if not line and up.poll() is not None:
            raise RuntimeError(f"raftq dev up exited with {up.returncode}")
        if "RAFTQ_TOKEN" in line and (data / "admin.token").exists():
            time.sleep(2)  # the first elections of the metadata group
            return
    raise TimeoutError("raftq dev up did not get ready")


def rows(files: list[Path]) -> list[dict[str, Any]]:
    out = []
    for f in files:
        if f.exists():
            out += [json.loads(x) for x in f.read_text().splitlines() if x.startswith("{")]
    return [r for r in out if "msgs_per_s" in r]


def _median(values: list[Any]) -> float | None:
    found = [float(v) for v in values if v is not None]
    return statistics.median(found) if found else None


def table(found: list[dict[str, Any]]) -> str:
    """Medians per (peer, workload), with ratios to NATS and CPU per message."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in found:
        groups.setdefault((r["peer"], r["workload"]), []).append(r)
    med: dict[tuple[str, str], dict[str, Any]] = {}
    for key, rs in groups.items():
        lat = [r.get("lat_ms") or {} for r in rs]
        cpu = [(r.get("cpu") or {}).get("server_pct") for r in rs]
        rate = _median([r["msgs_per_s"] for r in rs])
        server = _median(cpu)
        med[key] = {
            "n": len(rs), "rate": rate, "p50": _median([x.get("p50") for x in lat]),
            "p99": _median([x.get("p99") for x in lat]),
            "cpu_us": server / 100 * 1e6 / rate if server is not None and rate else None,
        }  # fmt: skip
    head = "| peer | wl | runs | msgs/s | p50 ms | p99 ms | srv CPU µs/msg | vs NATS |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for (peer, wl), m in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append("| " + " | ".join([
            peer, wl, str(m["n"]), _fmt(m["rate"], 0), _fmt(m["p50"], 3), _fmt(m["p99"], 3),
            _fmt(m["cpu_us"], 1), _ratio(wl, m, med.get(("nats", wl))) if peer != "nats" else "",
        ]) + " |")  # fmt: skip
    return "\n".join(lines)


def _ratio(wl: str, ours: dict[str, Any], nats: dict[str, Any] | None) -> str:
    if not nats:
        return ""
    if wl in ("W2", "W3"):
        return f"x{ours['rate'] / nats['rate']:.2f} throughput" if nats["rate"] else ""
    if ours["p50"] and nats["p50"] and ours["p99"] and nats["p99"]:
        return f"p50 x{ours['p50'] / nats['p50']:.2f}, p99 x{ours['p99'] / nats['p99']:.2f}"
    return ""


def _fmt(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default="W1,W2,W3,W4")
    ap.add_argument("--out", default="peer-results", help="directory for the JSON lines")
    ap.add_argument("--quiet-wait", type=float, default=120.0)
    ap.add_argument("--base-port", type=int, default=0, help="0: a reserved free block")
    ap.add_argument("--only", choices=("nats", "raft_queue"), help="one system only")
    ap.add_argument("--opt", action="append", default=[], metavar="K=V",
                    help="an adapter option for raft_queue (e.g. ack=sync)")  # fmt: skip
    ap.add_argument("--summarize", action="store_true", help="only print the table of --out")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if not a.summarize:
        for i in range(a.rounds):
            if a.only != "raft_queue":
                nats_round(out / "nats.jsonl", a.workloads, a.quiet_wait)
            if a.only != "nats":
                raftq_round(out / "raft_queue.jsonl", a.workloads, a.quiet_wait, a.base_port, a.opt)
            print(f"round {i + 1}/{a.rounds} done", file=sys.stderr)
    print(table(rows(sorted(out.glob("*.jsonl")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
