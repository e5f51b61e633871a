"""Profile a partition leader under W2's load (or W3's drain), encryption on
and off in turn: ``python -m raft_queue.bench.leader_profile --out DIR``.

One fresh 3-node cluster; per mode (``--modes on,off,on,off``) a fresh
1-partition fsync queue, a warm-up, then ``--secs`` of 8 threads looping
``send_batch(4096)`` (``--w3``: 50,000 messages prefilled, then the drain),
while ``py-spy record --nonblocking`` samples the leader's node process into
``DIR/<k>-<mode>.txt`` (raw, collapsed stacks). Prints each run's throughput
and every node's CPU per message (/proc), and the samples per 10,000
messages of the frames that matter for encryption (docs/benchmarks.md
"Cost of encryption at rest"). py-spy comes with the dev dependencies; if
ptrace is refused, run as root or with CAP_SYS_PTRACE.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from raft_queue.bench.cluster import bench_queue, local_cluster
from raft_queue.bench.measure import proc_cpu_s
from raft_queue.bench.workloads import Params, Publisher, drain
from raft_queue.client import Client
from raft_queue.errors import QueueError

FRAMES = (
    "RaftHost._run",
    "Sender._send_partition",
    "NodeCrypto.seal",
    "encrypter.<locals>.encrypt",
    "record_blobs",
    "PartitionReplica.apply_bytes",
    "lease_messages",
    "NodeCrypto.open_segment",
)
W3_MSGS = 50_000


def _spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed (pip install py-spy)")
    return found


def _metadata_ready(client: Client, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.create_queue("profile-warm", replication_factor=3)
            client.delete_queue("profile-warm")
            return
        except QueueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def one(client: Client, cluster: Any, k: int, mode: str, args: Any) -> dict[str, Any]:
    p = Params()
    with bench_queue(client, f"profile{k}", 1, "fsync", mode == "on") as q:
        leader = [s.node_id for s in cluster.specs].index(client.partitions(q)[0].leader)
        pids = [cluster.pid(i) for i in range(cluster.nodes)]
        prefilled = Publisher(client, q, p).run(total=W3_MSGS if args.w3 else 2000)[0]
        out = Path(args.out) / f"{k}-{mode}.txt"
        cmd = [_spy(), "record", "--pid", str(pids[leader]), "-d", str(int(args.secs) + 1),
               "-r", "50", "-f", "raw", "-o", str(out), "--nonblocking"]  # fmt: skip
        spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # py-spy attached
        cpu0 = [proc_cpu_s(pid) for pid in pids]
        t0 = time.perf_counter()
        if args.w3:
            sent = drain(client, q, prefilled, p)["got"]
        else:
            sent = Publisher(client, q, p).run(secs=args.secs)[0]
        elapsed = time.perf_counter() - t0
        cpu = [proc_cpu_s(pid) - c for pid, c in zip(pids, cpu0, strict=True)]
        spy.wait()
    return {
        "k": k,
        "mode": mode,
        "msgs_per_s": round(sent / elapsed),
        "leader": leader,
        "node_cpu_us_per_msg": [round(c / sent * 1e6, 2) for c in cpu],
        "frames_per_10k_msgs": frames(out, sent) if out.exists() else None,
    }


def frames(path: Path, msgs: int) -> dict[str, float]:
    """Samples per 10,000 messages of each of FRAMES (inclusive) and in all."""
    hits: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        total += int(n)
        names = {f.split(" (")[0] for f in stack.split(";")}
        for name in FRAMES:
            if name in names:
                hits[name] += int(n)
    scale = 1e4 / max(1, msgs)
    return {"<all>": round(total * scale, 2), **{f: round(hits[f] * scale, 2) for f in FRAMES}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="a directory for the cluster and the profiles")
    ap.add_argument("--modes", default="on,off,on,off")
    ap.add_argument("--secs", type=float, default=14.0)
    ap.add_argument("--w3", action="store_true", help="profile the drain instead of sends")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    cluster = local_cluster(Path(args.out) / "cluster", nodes=3)
    cluster.start()
    try:
        cluster.wait_ready(90)
        with cluster.client() as client:
            _metadata_ready(client)
            for k, mode in enumerate(args.modes.split(",")):
                print(json.dumps(one(client, cluster, k, mode, args)), flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
