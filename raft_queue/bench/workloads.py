"""The benchmark workloads: W1-W4 as the peer harness defines them, plus idle CPU.

Each workload takes a ``Target`` and ``Params``, works on its own queue
(replication 3, durability fsync: a send returns once a majority has the
entry in its fsynced journal), deletes that queue afterwards and returns a
``Result``. ``metrics`` are the numbers ``raftq bench`` aggregates over runs
(median, min..max); ``info`` holds details for ``--json`` (CPU split, sizes).

Payloads start with the peer harness's 24-byte header (seq, sent_ns,
intended_ns; CLOCK_MONOTONIC, comparable across processes on one host), so
W3 can check completeness and W4 can measure latency in another process.
Definitions: ../shared/bench/peers/README.md; docs/benchmarks.md.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from raft_queue.bench.cluster import (
    bench_queue,
    drop_queue,
    replicas_per_node,
    wait_leaders,
    wait_replicas_gone,
)
from raft_queue.bench.measure import HDR, CpuWindow, cpu_pct_over, make_msg, percentiles_ms
from raft_queue.client import Client
from raft_queue.errors import QueueError


@dataclass(frozen=True, slots=True)
class Params:
    """Sizes and durations; the defaults are the peer harness's (README "Workloads")."""

    size: int = 100
    partitions: int = 1  # per benchmark queue; the peers use one stream/queue
    durability: str = "fsync"  # the targets are for fsync; "quorum" shows what fsync costs
    encryption: bool = True  # the queues' encryption at rest (docs/benchmarks.md: its cost)
    w1_secs: float = 10.0
    w1_warmup: int = 200
    w2_secs: float = 15.0
    batch: int = 4096  # messages per send_batch in W2 and the W3 prefill
    inflight: int = 8  # concurrent send_batch calls (threads) in W2 and the W3 prefill
    w3_msgs: int = 100_000
    w3_receive: int = 1000  # max_messages per receive in W3 (the server caps it at 1000)
    w3_max_secs: float = 120.0
    w4_rate: float = 1000.0
    w4_secs: float = 15.0
    w4_max_batch: int = 64
    w4_wait_ms: int = 1000
    idle_replicas: tuple[int, ...] = (64, 256)  # replicas per node, measured in this order
    idle_secs: float = 20.0
    settle_secs: float = 10.0  # after the idle queues have leaders, before measuring

    def scaled(self, factor: float) -> Params:
        """Durations and counts times ``factor`` (smoke tests); never below a workable floor."""
        return dataclasses.replace(
            self,
            w1_secs=max(0.5, self.w1_secs * factor),
            w1_warmup=max(10, int(self.w1_warmup * factor)),
            w2_secs=max(0.5, self.w2_secs * factor),
            w3_msgs=max(1000, int(self.w3_msgs * factor)),
            w4_secs=max(2.0, self.w4_secs * factor),
            idle_replicas=tuple(max(1, int(r * factor)) for r in self.idle_replicas),
            idle_secs=max(1.0, self.idle_secs * factor),
            settle_secs=max(1.0, self.settle_secs * factor),
        )


@dataclass
class Target:
    """What a workload runs against. ``pids``: the node processes when the cluster is
    local (server CPU, idle workload); empty for a remote cluster. ``tag`` makes queue
    names unique per run, so a run never sees a previous run's leftovers."""

    client: Client
    bootstrap: str
    pids: list[int] = field(default_factory=list)
    tag: str = ""
    token: str | None = None  # for the workloads' own clients (else $RAFTQ_TOKEN)


@dataclass
class Result:
    workload: str
    metrics: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)


# ---- publishing --------------------------------------------------------------------------


class Publisher:
    """``inflight`` threads, each a loop of ``send_batch(batch)``: the SDK is synchronous,
    so concurrency in flight comes from threads sharing one Client. Sequence numbers
    are dense from 0. The first error stops every thread and is raised by ``run``."""

    def __init__(self, client: Client, queue: str, p: Params) -> None:
        self.client, self.queue, self.p = client, queue, p
        self._lock = threading.Lock()
        self._next = self.sent = 0
        self.batch_ns: list[int] = []

    def run(self, total: int | None = None, secs: float | None = None) -> tuple[int, float]:
        """Send ``total`` messages, or batches until ``secs`` pass; (acked, elapsed s)."""
        self._limit = total if total is not None else 1 << 62
        self._deadline = time.monotonic() + secs if secs is not None else math.inf
        self._stop = threading.Event()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(self.p.inflight) as pool:
            futures = [pool.submit(self._loop) for _ in range(self.p.inflight)]
        elapsed = time.perf_counter() - t0
        for f in futures:
            if f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        return self.sent, elapsed

    def _claim(self) -> tuple[int, int]:
        with self._lock:
            start = self._next
            count = min(self.p.batch, self._limit - start)
            self._next += max(count, 0)
            return start, count

    def _loop(self) -> None:
        try:
            while not self._stop.is_set() and time.monotonic() < self._deadline:
                start, count = self._claim()
                if count <= 0:
                    return
                msgs = [make_msg(start + j, self.p.size) for j in range(count)]
                t = time.perf_counter_ns()
                self.client.send_batch(self.queue, msgs)
                dt = time.perf_counter_ns() - t
                with self._lock:
                    self.sent += count
                    self.batch_ns.append(dt)
        except BaseException:
            self._stop.set()
            raise


# ---- W1-W4 ---------------------------------------------------------------------------------


def w1(t: Target, p: Params) -> Result:
    """Acked publish, one in flight: ``send`` in a loop; latency-bound throughput."""
    with bench_queue(t.client, f"bench-w1{t.tag}", p.partitions, p.durability, p.encryption) as q:
        for i in range(p.w1_warmup):
            t.client.send(q, make_msg(i, p.size))
        lat: list[int] = []
        deadline = time.monotonic() + p.w1_secs
        with CpuWindow(t.pids) as cpu:
            t0 = time.perf_counter()
            while time.monotonic() < deadline:
                msg = make_msg(len(lat), p.size)
                s = time.perf_counter_ns()
                t.client.send(q, msg)
                lat.append(time.perf_counter_ns() - s)
            elapsed = time.perf_counter() - t0
    pct = percentiles_ms(lat)
    metrics = {"msgs_per_s": len(lat) / elapsed, "p50_ms": pct["p50"], "p99_ms": pct["p99"]}
    metrics["p99.9_ms"] = pct["p99.9"]
    return Result("W1", metrics, {"lat_ms": pct, "cpu": cpu.result, "msgs": len(lat)})


def w2(t: Target, p: Params) -> Result:
    """Pipelined batch publish: ``inflight`` concurrent send_batch(4096) for w2_secs."""
    with bench_queue(t.client, f"bench-w2{t.tag}", p.partitions, p.durability, p.encryption) as q:
        Publisher(t.client, q, p).run(total=p.w1_warmup * 10)  # warm-up, as the harness
        pub = Publisher(t.client, q, p)
        with CpuWindow(t.pids) as cpu:
            sent, elapsed = pub.run(secs=p.w2_secs)
    info = {"batch_ms": percentiles_ms(pub.batch_ns), "cpu": cpu.result, "msgs": sent}
    info["params"] = {"batch": p.batch, "inflight": p.inflight, "partitions": p.partitions}
    return Result("W2", {"msgs_per_s": sent / elapsed}, info)


def w3(t: Target, p: Params) -> Result:
    """Pre-publish w3_msgs (as W2), then receive + ack until every message was seen."""
    with bench_queue(t.client, f"bench-w3{t.tag}", p.partitions, p.durability, p.encryption) as q:
        with CpuWindow(t.pids) as pcpu:
            n, pub_s = Publisher(t.client, q, p).run(total=p.w3_msgs)
        with CpuWindow(t.pids) as cpu:
            d = drain(t.client, q, n, p)
    metrics = {"msgs_per_s": d["got"] / d["secs"], "prefill_msgs_per_s": n / pub_s}
    metrics.update(missing=n - d["got"], duplicates=d["dups"])
    info = {**d, "cpu": cpu.result, "prefill_cpu": pcpu.result, "receive_max": p.w3_receive}
    return Result("W3", metrics, info)


def drain(client: Client, queue: str, n: int, p: Params) -> dict[str, Any]:
    """Receive + ack until seqs [0, n) were all seen (or w3_max_secs / 5 empty polls).

    Each batch's ack runs on a helper thread while the next receive is on the
    wire (at most 2 acks outstanding); the clock stops after the last ack
    returned, i.e. when the queue is empty, not merely delivered.
    """
    seen = bytearray(n)
    got = dups = failed = empty = receives = 0
    pending: collections.deque[Any] = collections.deque()
    deadline = time.monotonic() + p.w3_max_secs
    with ThreadPoolExecutor(1) as acker:
        t0 = time.perf_counter()
        while got < n and empty < 5 and time.monotonic() < deadline:
            batch = client.receive(queue, max_messages=p.w3_receive, wait_ms=1000)
            empty = 0 if batch else empty + 1
            receives += 1
            if batch:
                pending.append(acker.submit(client.ack, queue, batch))
            while len(pending) > 2:
                failed += sum(not r.ok for r in pending.popleft().result())
            for m in batch:
                seq = HDR.unpack_from(m.body)[0]
                if seq < n and not seen[seq]:
                    seen[seq] = 1
                    got += 1
                else:
                    dups += 1
        while pending:
            failed += sum(not r.ok for r in pending.popleft().result())
        secs = time.perf_counter() - t0
    done = {"got": got, "dups": dups, "ack_failed": failed, "secs": secs, "complete": got == n}
    return {**done, "avg_receive": round(got / max(1, receives), 1)}


def w4(t: Target, p: Params) -> Result:
    """Fixed-rate producer here, receive + ack consumer in a spawned process."""
    total = int(p.w4_rate * p.w4_secs)
    warm = min(total // 10, int(p.w4_rate))  # the first second is not counted
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    with bench_queue(t.client, f"bench-w4{t.tag}", p.partitions, p.durability, p.encryption) as q:
        args = (t.bootstrap, q, total, warm, p.w4_wait_ms, p.w4_secs + 30, ready, out, t.token)
        proc = ctx.Process(target=w4_consumer, args=args, daemon=True)
        proc.start()
        try:
            if not ready.wait(60):
                raise RuntimeError("W4 consumer did not become ready in 60 s")
            time.sleep(0.5)
            with CpuWindow(t.pids) as cpu:
                sent, batches = produce_at_rate(t.client, q, p, total)
            r = out.get(timeout=p.w4_secs + 60)
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
    if "error" in r:
        raise RuntimeError(f"W4 consumer failed: {r['error']}")
    cpu.result["other_pct"] = round(cpu.result["other_pct"] - r["consumer_cpu_pct"], 1)
    metrics = {"p50_ms": r["recv"].get("p50", math.nan), "p99_ms": r["recv"].get("p99", math.nan)}
    metrics["p99_incl_ack_ms"] = r["acked"].get("p99", math.nan)
    metrics["p99_from_schedule_ms"] = r["sched"].get("p99", math.nan)
    metrics.update(missing=sent - r["got"], duplicates=r["dups"])
    info = {**r, "sent": sent, "avg_send_batch": round(sent / max(1, batches), 2)}
    return Result("W4", metrics, {**info, "cpu": cpu.result})


def produce_at_rate(client: Client, queue: str, p: Params, total: int) -> tuple[int, int]:
    """Open loop: each tick sends every message due by now in one send_batch (at most
    w4_max_batch), so a slow send batches later messages instead of lowering the rate."""
    interval = 1e9 / p.w4_rate
    sent = batches = 0
    t0 = time.monotonic_ns() + 10_000_000
    while sent < total:
        now = time.monotonic_ns()
        due = min(total, int((now - t0) / interval) + 1)
        if due <= sent:
            time.sleep(max(0.0, (t0 + sent * interval - now) / 1e9))
            continue
        k = min(due - sent, p.w4_max_batch)
        stamp = time.monotonic_ns()
        msgs = [
            make_msg(sent + j, p.size, stamp, int(t0 + (sent + j) * interval)) for j in range(k)
        ]
        client.send_batch(queue, msgs)
        sent += k
        batches += 1
    return sent, batches


def w4_consumer(
    bootstrap: str, queue: str, expect: int, warm: int, wait_ms: int, max_secs: float,
    ready: Any, out: Any, token: str | None = None,
) -> None:  # fmt: skip
    """The W4 consumer, in its own process (spawn): receive(wait_ms) + ack until
    ``expect`` distinct messages arrived. Latency per message from the producer's
    stamp to: receive return (``recv``), ack return (``acked``, the peer harness's
    definition, whose consume() includes the ack), and from its schedule (``sched``)."""
    try:
        with Client(bootstrap, token=token) as client:
            client.partitions(queue)  # learn the leaders before the producer starts
            ready.set()
            out.put(_consume(client, queue, expect, warm, wait_ms, max_secs))
    except Exception as exc:  # reported to the parent, which raises it
        ready.set()
        out.put({"error": f"{type(exc).__name__}: {exc}"})


def _consume(
    client: Client, queue: str, expect: int, warm: int, wait_ms: int, max_secs: float
) -> dict[str, Any]:
    lat: dict[str, list[int]] = {"recv": [], "acked": [], "sched": []}
    seen: set[int] = set()
    dups = 0
    c0, t_start = sum(os.times()[:2]), time.monotonic()

    def ack(batch: list[Any], stamps: list[tuple[int, int]]) -> None:
        client.ack(queue, batch)
        t_ack = time.monotonic_ns()
        lat["acked"].extend(t_ack - sent_ns for sent_ns, _ in stamps)

    # Acks run on a helper thread while the next receive waits (as any consumer
    # that acks after processing does): the next long poll is standing when the
    # next message is sent, so it rides on that message's Raft entry.
    with ThreadPoolExecutor(1) as acker:
        while len(seen) < expect and time.monotonic() < t_start + max_secs:
            batch = client.receive(queue, max_messages=256, wait_ms=wait_ms)
            t_recv = time.monotonic_ns()
            stamps: list[tuple[int, int]] = []
            for m in batch:
                seq, sent_ns, intended_ns = HDR.unpack_from(m.body)
                dups += seq in seen
                if seq not in seen and seq >= warm:
                    lat["recv"].append(t_recv - sent_ns)
                    lat["sched"].append(t_recv - intended_ns)
                    stamps.append((sent_ns, intended_ns))
                seen.add(seq)
            if batch:
                acker.submit(ack, batch, stamps)
    cpu_pct = 100 * (sum(os.times()[:2]) - c0) / max(time.monotonic() - t_start, 1e-9)
    result: dict[str, Any] = {k: percentiles_ms(v) for k, v in lat.items()}
    return {**result, "got": len(seen), "dups": dups, "consumer_cpu_pct": round(cpu_pct, 1)}


# ---- idle ------------------------------------------------------------------------------------


IDLE_QUEUE_PARTITIONS = 64  # groups created per CreateQueue: 192 at once lost the
# metadata leader on a loaded 2-core machine (every group elects at the same moment)


def idle(t: Target, p: Params) -> Result:
    """CPU of each node process while it hosts N idle partition replicas (for each N of
    idle_replicas, growing); the metric is the busiest node, in % of one core. A step
    whose partitions do not all elect a leader in 300 s is still measured, and says so
    in ``info`` (``settled``): that CPU is what an overloaded node burns."""
    if not t.pids:
        return Result("idle", {}, {"skipped": "needs the node pids: a cluster started by bench"})
    made: dict[str, int] = {}  # queue -> partitions
    metrics: dict[str, float] = {}
    info: dict[str, Any] = {}
    # Long timeout and many retries: creating 100s of groups takes a while and may
    # cost the metadata group an election.
    with Client(t.bootstrap, timeout_s=300, retries=30, token=t.token) as admin:
        try:
            for replicas in p.idle_replicas:
                want = math.ceil(replicas * len(t.pids) / 3)  # partitions: 3 replicas each
                step = _idle_step(admin, t.tag, made, want, t.pids, p)
                metrics[f"cpu{replicas}_pct"] = max(step["per_node_pct"])
                info[f"replicas{replicas}"] = step
        finally:
            for name in made:
                with contextlib.suppress(QueueError):
                    drop_queue(admin, name)
            info["teardown_s"] = wait_replicas_gone(admin, set(made))
    return Result("idle", metrics, info)


def _idle_step(
    admin: Client, tag: str, made: dict[str, int], want: int, pids: list[int], p: Params
) -> dict[str, Any]:
    """Grow to ``want`` idle partitions (queues of at most IDLE_QUEUE_PARTITIONS, added
    to ``made``), let them settle, then measure each node's CPU."""
    t0, settled = time.monotonic(), True
    while (have := sum(made.values())) < want:
        name = f"bench-idle{len(made)}{tag}"
        made[name] = min(IDLE_QUEUE_PARTITIONS, want - have)
        admin.create_queue(name, partitions=made[name], replication_factor=3)
        try:
            wait_leaders(admin, name, timeout_s=300, preferred_s=0)
        except TimeoutError:
            settled = False
    create_s = round(time.monotonic() - t0, 1)
    time.sleep(p.settle_secs)
    per_node = cpu_pct_over(pids, p.idle_secs)
    hosted = replicas_per_node(admin)
    return {"per_node_pct": per_node, "hosted": hosted, "settled": settled, "create_s": create_s}


WORKLOADS: dict[str, Callable[[Target, Params], Result]] = {
    "W1": w1,
    "W2": w2,
    "W3": w3,
    "W4": w4,
    "idle": idle,
}
