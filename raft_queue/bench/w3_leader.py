"""The harness's W3 drain, node by node: CPU per message of the partition
leader, of each follower and of the consumer, optionally with py-spy on the
leader (docs/benchmarks.md, "W3: the leader's CPU per message").

    python -m raft_queue.bench.w3_leader --peers ../shared/bench/peers \\
        --target 127.0.0.1:7101,... --cluster-dir .raftq/dev [--spy OUT.txt]

Runs the harness's own W3 code path (``loadgen.py``'s prefill and
``consume(256)`` loop, through ``RaftQueueAdapter``) against a running
cluster (``raftq dev up``), ``--rounds`` times, and prints per round: the
drain's msgs/s, and µs of CPU (utime + stime from /proc) per drained
message of the leader, the followers and this process. CPU per message
moves far less than throughput with other load on the machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from raft_queue.bench.measure import proc_cpu_s
from raft_queue.bench.peer_adapter import RaftQueueAdapter
from raft_queue.bench.peer_compare import PEERS


def _loadgen(peers: str) -> Any:
    spec = importlib.util.spec_from_file_location("loadgen", Path(peers) / "loadgen.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no loadgen.py in {peers}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pid_of(address: str, cluster_dir: str, pids: list[int]) -> int:
    """The node process serving gRPC on ``address`` (its node.toml names it)."""
    for pid in pids:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        config = Path(cmdline[cmdline.index(b"--config") + 1].decode())
        if f"grpc_port = {address.rsplit(':', 1)[1]}\n" in config.read_text():
            return pid
    raise SystemExit(f"no node process of {cluster_dir} serves {address}")


def one_round(lg: Any, a: argparse.Namespace, k: int) -> dict[str, Any]:
    opts = dict(kv.split("=", 1) for kv in a.opt)
    q = RaftQueueAdapter(
        dest="pb_w3lead",
        max_inflight=a.inflight,
        target=a.target,
        cluster_dir=a.cluster_dir,
        **opts,
    )
    q.connect()
    q.reset()
    n, _ = lg._publish_n(q, a.msgs, a.size, a.chunk, time.monotonic() + 120)
    pids = q.server_pids()
    assert q.client is not None
    leader = _pid_of(q.client.partitions(q.dest)[0].leader_address, a.cluster_dir, pids)
    spy = None
    if a.spy:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        out = f"{a.spy}.{k}.txt"
        cmd = [py_spy, "record", "--pid", str(leader), "-r", str(a.rate), "-f", "raw",
               "-o", out, "-d", "600"]  # fmt: skip
        # --native cannot be --nonblocking (py-spy pauses the process per sample)
        cmd += ["--native"] if a.native else ["--nonblocking"]
        cmd += ["--gil"] if a.gil else []
        spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
    cpu0 = {p: proc_cpu_s(p) for p in pids}
    me0 = sum(os.times()[:2])
    seen = bytearray(n)
    got = dups = 0
    calls: list[float] = []  # wall time of each consume call (ms)
    t0 = time.perf_counter()
    while got < n and time.perf_counter() - t0 < 120:
        c0 = time.perf_counter()
        batch = q.consume(a.batch, timeout=2.0)
        calls.append((time.perf_counter() - c0) * 1e3)
        for m in batch:
            seq = lg.HDR.unpack_from(m)[0]
            if seq < n and not seen[seq]:
                seen[seq] = 1
                got += 1
            else:
                dups += 1
    el = time.perf_counter() - t0
    cpu = {p: proc_cpu_s(p) - cpu0[p] for p in pids}
    me = sum(os.times()[:2]) - me0
    if spy is not None:
        spy.send_signal(2)
        spy.wait(30)
    q.close()
    per = 1e6 / max(got, 1)
    followers = [round(cpu[p] * per, 1) for p in pids if p != leader]
    return {
        "msgs": got,
        "dups": dups,
        "msgs_per_s": round(got / el),
        "leader_us": round(cpu[leader] * per, 1),
        "followers_us": followers,
        "client_us": round(me * per, 1),
        # the serial loop: time inside consume per call, against the leader's CPU per call
        "calls": len(calls),
        "call_ms_p50": round(statistics.median(calls), 3),
        "call_ms_p90": round(statistics.quantiles(calls, n=10)[-1], 3) if len(calls) > 1 else 0,
        "in_consume_pct": round(100 * sum(calls) / 1e3 / el, 1),
        "leader_ms_per_call": round(cpu[leader] * 1e3 / max(len(calls), 1), 3),
        "wall_ms_per_call": round(el * 1e3 / max(len(calls), 1), 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default=str(PEERS))
    ap.add_argument("--target", required=True)
    ap.add_argument("--cluster-dir", required=True)
    ap.add_argument("--msgs", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--spy", default="", help="py-spy raw output prefix (leader)")
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--gil", action="store_true", help="py-spy: only samples holding the GIL")
    ap.add_argument("--native", action="store_true", help="py-spy: C frames too")
    ap.add_argument("--opt", action="append", default=[], metavar="K=V", help="adapter option")
    a = ap.parse_args(argv)
    lg = _loadgen(a.peers)
    for k in range(a.rounds):
        print(one_round(lg, a, k), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
