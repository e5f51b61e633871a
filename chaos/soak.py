"""A soak test: ``python -m chaos.soak --duration 600 [--out DIR]`` (``make soak``).

A real 3-node LocalCluster under mixed load for ``--duration`` seconds:
senders (batches of small messages, rate-limited), receivers (receive, then
ack everything), and a reader (offset reads moving forward), through the SDK
with its own retries. Every ``--restart-every`` seconds one node is
restarted (SIGTERM, then started again), taking turns among n2 and n3; n1
runs the whole time, so one process lives through the entire soak.

RSS (VmRSS, and RssAnon: heap, no file pages) of every node process is
sampled every ``--sample-every`` seconds. Verdict, printed and written to
``soak.json``:

- n1's RSS after warm-up stays within 10 % (max / min - 1);
- no error reached the application: the SDK's retries hide leader changes
  and restarts, nothing else;
- every message sent was received (and acked) by the end.

Acked messages are trimmed (``retention_ms`` 0), so the data on disk stays
bounded and a growing RSS means a leak, not a bigger store. Every Raft group
keeps the entries since its last snapshot in memory (pysyncobj's log) and
drops them when it compacts, after ``log_compaction_min_entries``: RSS is a
sawtooth whose height grows with that setting (at the default 5000, about
10 MiB on n1 here, over 10 % of its RSS), so the soak runs with
``--compaction-entries`` 1000 to see a trend through it. ``rss_trend_mib_per_min``
(a least-squares slope over n1's samples after warm-up) shows a leak the
spread would hide or exaggerate.

Each sample also records the size of n1's LMDB file per partition
(``data.mdb``): LMDB maps it, so every page it ever used stays in n1's RSS,
and the file keeps its high-water mark. It grows while the queue's dedup
window (300 s by default) fills with Send request ids (~150 pages per
partition here), and with whatever the log holds that cannot be trimmed: an
acked record stays until every record before it is finished, so one lost
lease kept ~30 s of traffic on disk (fixed: forwarded Receives are
withdrawn, not cancelled, server/dataplane/withdrawals.py).

Warm-up: the queue's dedup window plus 30 s (330 s with the default 300 s
window; ``--warmup`` overrides it), at most 60 % of the run. The window's
request ids are data, not a leak, and they fill the window first: measured
on 2026-11-26 (07:18 run, 400 messages/s, 180,190 sent), n1's three LMDB
files went from 1.9 MiB at 120 s to 4.5 MiB at 305 s, then stayed at
1.49-1.55 MiB each until a restart's lost lease (below); the dedup table
held ~36 more ids a second per partition until the window was full
(8,623 at 240 s in an earlier run). A warm-up of 120 s measured that fill
as growth: 10.4 % in that run, 5.1 % from 330 s. A lease in flight when a
node restarts is lost until its visibility timeout (30 s here, as a crashed
consumer's would be), and its partition keeps ~30 s of records meanwhile:
one such step (+1.1 MiB on one file) came after the 360 s restart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.procmem import KINDS, breakdown
from raft_queue.config import QueueSpec
from raft_queue.errors import OutOfRange, QueueError
from raft_queue.testing.cluster import LocalCluster

QUEUE = "soak"
DEFAULT_DEDUP_WINDOW_MS = QueueSpec().dedup_window_ms  # a queue's default (300 s)
PARTITIONS = 3


def proc_memory(pid: int) -> tuple[int, int]:
    """(VmRSS, RssAnon) of ``pid`` in bytes; (0, 0) if it is gone."""
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, anon


def data_mdb_sizes(data_dir: Path) -> dict[str, int]:
    """Bytes on disk of every partition replica's LMDB file under a node's
    ``data_dir`` (``partitions/<key>/lmdb/data.mdb``), by partition key: its
    blocks, not its length (with writemap the file is as long as LMDB's map,
    sparse, and backed to a little past its high-water page)."""
    sizes = {}
    for path in sorted(data_dir.glob("partitions/*/lmdb/data.mdb")):
        with contextlib.suppress(OSError):  # swapped by a snapshot install right now
            sizes[path.parent.parent.name] = path.stat().st_blocks * 512
    return sizes


@dataclass
class Counters:
    sent: int = 0
    received: int = 0
    acked: int = 0
    read: int = 0
    errors: list[str] = field(default_factory=list)
    bodies_sent: set[bytes] = field(default_factory=set)
    bodies_seen: set[bytes] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, where: str, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{time.strftime('%H:%M:%S')} {where}: {type(exc).__name__}: {exc}")


class Load:
    """The client threads; ``stop()`` ends them."""

    def __init__(self, cluster: LocalCluster, rate: int) -> None:
        self.cluster = cluster
        self.rate = rate  # messages per second, all senders together
        self.c = Counters()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._seq = 0

    def start(self) -> Load:
        jobs = [self._sender, self._sender, self._receiver, self._receiver, self._reader]
        for k, job in enumerate(jobs):
            t = threading.Thread(target=job, args=(k,), name=f"soak-{k}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _client(self) -> Any:
        # Generous retries: a restart or leader change must stay invisible.
        return self.cluster.client(timeout_s=30.0, retries=40)

    def _sender(self, k: int) -> None:
        batch = 10
        period = batch * 2 / self.rate  # two senders
        with self._client() as client:
            while not self._stop.is_set():
                t0 = time.monotonic()
                with self.c.lock:
                    start, self._seq = self._seq, self._seq + batch
                bodies = [b"soak-%09d-" % (start + i) + b"x" * 200 for i in range(batch)]
                try:
                    client.send_batch(QUEUE, bodies)
                    with self.c.lock:
                        self.c.sent += batch
                        self.c.bodies_sent.update(bodies)
                except QueueError as exc:
                    self.c.error(f"sender {k}", exc)
                self._stop.wait(max(0.0, period - (time.monotonic() - t0)))

    def _receiver(self, k: int) -> None:
        with self._client() as client:
            while not self._stop.is_set():
                self._receive_once(client, k)

    def _receive_once(self, client: Any, k: int) -> int:
        try:
            got = client.receive(QUEUE, max_messages=50, wait_ms=500, visibility_ms=30_000)
            if got:
                client.ack(QUEUE, [m.receipt for m in got])
        except QueueError as exc:
            self.c.error(f"receiver {k}", exc)
            return 0
        with self.c.lock:
            self.c.received += len(got)
            self.c.acked += len(got)
            self.c.bodies_seen.update(m.body for m in got)
        return len(got)

    def _reader(self, k: int) -> None:
        offsets = [0] * PARTITIONS
        with self._client() as client:
            while not self._stop.wait(0.2):
                for p in range(PARTITIONS):
                    try:
                        res = client.read(QUEUE, p, offsets[p], max_messages=200)
                    except OutOfRange:  # trimmed under us (acked): go on from the earliest
                        offsets[p] = self._earliest(client, p, offsets[p])
                        continue
                    except QueueError as exc:
                        self.c.error(f"reader {k}", exc)
                        continue
                    # Acked records are trimmed: jump to the earliest if we fell behind.
                    offsets[p] = max(res.next_offset, res.earliest_offset)
                    with self.c.lock:
                        self.c.read += len(res.messages)

    def _earliest(self, client: Any, partition: int, offset: int) -> int:
        try:
            return max(offset, int(client.partitions(QUEUE)[partition].earliest_offset))
        except QueueError as exc:
            self.c.error("reader", exc)
            return offset

    def drain(self, timeout_s: float = 120.0) -> None:
        """Receive and ack until every sent message was seen (or the timeout)."""
        deadline = time.monotonic() + timeout_s
        with self._client() as client:
            while time.monotonic() < deadline and self.c.bodies_sent - self.c.bodies_seen:
                self._receive_once(client, -1)


@dataclass
class Soak:
    duration_s: float = 600.0
    restart_every_s: float = 60.0
    sample_every_s: float = 5.0
    warmup_s: float = 330.0
    rate: int = 400
    compaction_entries: int = 1000
    dedup_window_ms: int = 0  # 0: the queue default (300 s)
    out: Path = Path(".raftq/soak")
    samples: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[tuple[float, str]] = field(default_factory=list)

    def run(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix="soak-", dir=self.out))
        raft = {"log_compaction_min_entries": self.compaction_entries}
        cluster = LocalCluster(base / "cluster", nodes=3, raft=raft)
        try:
            cluster.start()
            cluster.wait_ready(90)
            with cluster.client(timeout_s=30.0, retries=40) as admin:
                window = {"dedup_window_ms": self.dedup_window_ms} if self.dedup_window_ms else {}
                admin.create_queue(QUEUE, partitions=PARTITIONS, replication_factor=3, **window)
            load = Load(cluster, self.rate).start()
            self._drive(cluster)
            load.stop()
            load.drain()
        finally:
            cluster.stop()
        return self._verdict(load.c)

    def _drive(self, cluster: LocalCluster) -> None:
        t0 = time.monotonic()
        next_restart, next_sample, turn = self.restart_every_s, 0.0, 0
        while (now := time.monotonic() - t0) < self.duration_s:
            if now >= next_sample:
                self._sample(cluster, now)
                next_sample += self.sample_every_s
            if now >= next_restart:
                i = 1 + turn % 2  # n2, n3 in turn; n1 lives through the soak
                turn += 1
                cluster.stop(i)
                cluster.start(i)
                self.restarts.append((round(now, 1), f"n{i + 1}"))
                print(f"[{now:6.1f}s] restarted n{i + 1}", flush=True)
                next_restart += self.restart_every_s
            time.sleep(0.2)
        self._sample(cluster, time.monotonic() - t0)

    def _sample(self, cluster: LocalCluster, now: float) -> None:
        row: dict[str, Any] = {"t": round(now, 1)}
        for i in range(cluster.nodes):
            if cluster.alive(i):
                pid = cluster.pid(i)
                rss, anon = proc_memory(pid)
                row[f"n{i + 1}"] = [rss, anon]
                row[f"n{i + 1}_kinds"] = breakdown(pid, str(cluster.specs[i].dir.resolve()))
        row["n1_data_mdb"] = data_mdb_sizes(cluster.specs[0].dir / "data")
        self.samples.append(row)
        mib = {
            k: f"{v[0] / 2**20:.0f}/{v[1] / 2**20:.0f}" for k, v in row.items() if k[-1].isdigit()
        }
        kinds = " ".join(f"{k} {v / 2**20:.1f}" for k, v in row.get("n1_kinds", {}).items())
        files = " ".join(f"{v / 2**20:.2f}" for v in row["n1_data_mdb"].values())
        print(f"[{now:6.1f}s] RSS/anon MiB {mib}; n1: {kinds}; data.mdb MiB {files}", flush=True)

    def _verdict(self, c: Counters) -> dict[str, Any]:
        late = [(s["t"], s["n1"][0]) for s in self.samples if s["t"] >= self.warmup_s and "n1" in s]
        steady = [rss for _, rss in late]
        growth = (max(steady) / min(steady) - 1.0) if steady else None
        lost = len(c.bodies_sent - c.bodies_seen)
        result = {
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "restarts": self.restarts,
            "sent": c.sent,
            "received": c.received,
            "acked": c.acked,
            "read": c.read,
            "not_received": lost,
            "client_errors": c.errors,
            "n1_rss_after_warmup_mib": (
                [round(min(steady) / 2**20, 1), round(max(steady) / 2**20, 1)] if steady else []
            ),
            "n1_rss_spread": None if growth is None else round(growth, 4),
            "rss_trend_mib_per_min": _slope_mib_per_min(late),
            "n1_kinds_after_warmup_mib": self._kinds_after_warmup(),
            "n1_data_mdb_mib": self._data_mdb_summary(),
            "compaction_entries": self.compaction_entries,
            "dedup_window_ms": self.dedup_window_ms or None,
            "samples": self.samples,
        }
        result["ok"] = bool(
            growth is not None and growth <= 0.10 and not c.errors and lost == 0 and c.sent > 0
        )
        (self.out / "soak.json").write_text(json.dumps(result, indent=1))
        return result

    def _data_mdb_summary(self) -> dict[str, list[float]]:
        """n1's LMDB files (MiB, all partitions together) at warm-up's end
        and at the end: [at warm-up, at the end]."""
        rows = [s for s in self.samples if s["t"] >= self.warmup_s and s.get("n1_data_mdb")]
        if not rows:
            return {}
        total = [round(sum(s["n1_data_mdb"].values()) / 2**20, 2) for s in (rows[0], rows[-1])]
        return {"all partitions": total}

    def _kinds_after_warmup(self) -> dict[str, list[float | None]]:
        """n1's resident memory by kind (chaos/procmem.py) after warm-up:
        [min, max, least-squares trend per minute], MiB."""
        rows = [s for s in self.samples if s["t"] >= self.warmup_s and s.get("n1_kinds")]
        out: dict[str, list[float | None]] = {}
        for kind in KINDS:
            points = [(s["t"], s["n1_kinds"][kind]) for s in rows]
            if points:
                values = [v for _, v in points]
                low, high = round(min(values) / 2**20, 1), round(max(values) / 2**20, 1)
                out[kind] = [low, high, _slope_mib_per_min(points)]
        return out


def _slope_mib_per_min(points: list[tuple[float, int]]) -> float | None:
    """Least-squares slope of (seconds, bytes), in MiB per minute."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    slope = sum((t - mt) * (v - mv) for t, v in points) / var
    return round(slope * 60 / 2**20, 3)


def _warmup_s(args: argparse.Namespace) -> float:
    """``--warmup``, or the queue's dedup window + 30 s (the window fills
    with request ids first: data, not a leak); at most 60 % of the run."""
    window_s = (args.dedup_window_ms or DEFAULT_DEDUP_WINDOW_MS) / 1000
    warmup = args.warmup if args.warmup is not None else window_s + 30.0
    return float(min(warmup, args.duration * 0.6))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser("python -m chaos.soak", description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--duration", type=float, default=600.0)
    add("--restart-every", type=float, default=60.0)
    add("--sample-every", type=float, default=5.0)
    add("--warmup", type=float, default=None, help="seconds (default: dedup window + 30)")
    add("--rate", type=int, default=400, help="messages per second sent")
    add("--compaction-entries", type=int, default=1000, help="log_compaction_min_entries")
    add("--dedup-window-ms", type=int, default=0, help="the queue's dedup window (0: default)")
    add("--out", type=Path, default=Path(".raftq/soak"))
    args = parser.parse_args(argv)
    soak = Soak(
        duration_s=args.duration, restart_every_s=args.restart_every,
        sample_every_s=args.sample_every, warmup_s=_warmup_s(args),
        rate=args.rate, compaction_entries=args.compaction_entries, out=args.out,
        dedup_window_ms=args.dedup_window_ms,
    )  # fmt: skip
    result = soak.run()
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=1), flush=True)
    print("soak:", "PASS" if result["ok"] else "FAIL", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
