"""A chaos campaign: ``python -m chaos.campaign --duration S --seed N [--nodes 3|5] [--out DIR]``.

Starts a ChaosCluster (every link proxied, small log compaction threshold so lagging
replicas catch up by snapshot), runs the workload (chaos.workload) while a seeded
schedule of faults (chaos.nemesis) plays, heals everything, lets the cluster settle,
drains the queue (receive + ack) and reads every partition by offset, collects every
replica's digest once they have caught up, and hands the history to chaos.checker.

Prints: the seed, the faults injected (and how long the queue took to accept writes on
every partition again after each heal), operations by type, anomalies by class, term
changes and leader changes seen by a monitor. Exit status 0 only if the history is
valid and the final phase completed; ``--out`` keeps history.jsonl and report.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import Report, check
from chaos.cluster import ChaosCluster
from chaos.history import History, Op
from chaos.nemesis import FACTORIES, OPT_IN, Context, Fault, Schedule
from chaos.workload import (
    DRAIN_VISIBILITY_MS,
    Workload,
    WorkloadConfig,
    final_drain,
    final_reads,
    lease_and_read_checks,
)
from raft_queue.errors import QueueError

# Acked records stay readable by offset for the whole run (with retention_ms 0 the
# queue trims acked records from the front, and the checker assumes no trimming).
RETENTION_MS = 24 * 3600 * 1000


@dataclass
class CampaignConfig:
    """One campaign. ``compaction_entries`` is the nodes' log_compaction_min_entries:
    small, so replicas that fall behind catch up by snapshot (kill-during-snapshot)."""

    duration_s: float = 120.0
    seed: int = 0
    nodes: int = 3
    out: Path = Path(".raftq/chaos")
    partitions: int = 3
    replication: int = 3
    durability: str = "fsync"
    ordering: str = "none"
    # Encryption at rest (on by default, as for every queue); the power-loss
    # test turns it off because it reads bodies straight from the journals.
    encryption: bool = True
    nemeses: list[str] = field(default_factory=lambda: list(FACTORIES))
    warmup_s: float = 3.0
    quiet_s: float = 5.0
    compaction_entries: int = 200
    fault_s: tuple[float, float] = (4.0, 10.0)
    calm_s: tuple[float, float] = (3.0, 6.0)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    keep_data: bool = False
    # Messages/s allowed to the workload's principal (``admin``) while faults
    # run; 0 = no quota (docs/operations.md "Quotas and usage").
    quota_messages_per_s: int = 0


def disk_setup(config: CampaignConfig) -> tuple[dict[str, int], dict[str, Any]]:
    """Mounts for the disk nemeses in ``config.nemeses`` that this machine can make
    ({"tmpfs": node, "eio": node}), and the nodes' [storage] watermark."""
    from chaos.disk_nemesis import WATERMARK_BYTES
    from chaos.disks import can_mount, have_fuse

    disks: dict[str, int] = {}
    if "disk-full" in config.nemeses and can_mount():
        disks["tmpfs"] = 0
    if "disk-eio" in config.nemeses and have_fuse():
        disks["eio"] = 1 % config.nodes
    storage = {"min_free_bytes": WATERMARK_BYTES} if disks else {}
    return disks, storage


class Monitor:
    """Polls every replica's term and role once a second: term changes (elections
    started) and leader changes per partition, as seen from outside."""

    def __init__(self, client: Any, queue: str) -> None:
        self.client, self.queue = client, queue
        self.terms: dict[int, int] = {}
        self.leaders: dict[int, str] = {}
        self.term_changes: Counter[int] = Counter()
        self.leader_changes: Counter[int] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def start(self) -> Monitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.sample(self.client.cluster_status().replicas)
            except QueueError:
                continue

    def sample(self, replicas: list[Any]) -> None:
        for r in replicas:
            if r.queue != self.queue:
                continue
            old = self.terms.get(r.partition)
            if old is not None and r.term > old:
                self.term_changes[r.partition] += r.term - old
            self.terms[r.partition] = max(old or 0, r.term)
            if r.role == "leader" and self.leaders.get(r.partition, r.node) != r.node:
                self.leader_changes[r.partition] += 1
            if r.role == "leader":
                self.leaders[r.partition] = r.node


@dataclass
class Result:
    """Everything the campaign found; ``ok`` decides the exit status."""

    seed: int
    nodes: int
    duration_s: float
    faults: list[Fault]
    recovery_s: list[float | None]
    operations: dict[str, int]
    report: Report
    term_changes: dict[int, int]
    leader_changes: dict[int, int]
    final: dict[str, Any]
    extra: dict[str, list[Any]] = field(default_factory=dict)  # lease_and_read_checks
    replay: str = ""

    @property
    def ok(self) -> bool:
        f = self.final
        return not any(self.extra.values()) and (
            self.report.ok
            and f["healthy"]
            and f["drained"]
            and f["reads_complete"]
            and f["digests_equal"]
            and not f["workload_errors"]
        )

    def render(self) -> str:
        verdict = "VALID" if self.ok else "INVALID"
        lines = [f"chaos campaign seed={self.seed} nodes={self.nodes}: {verdict}"]
        lines.append(f"faults injected: {len(self.faults)} in {self.duration_s:.0f} s")
        for k, (fault, rec) in enumerate(zip(self.faults, self.recovery_s, strict=True)):
            healed = f"{fault.heal_s:6.1f}s" if fault.heal_s is not None else "   -   "
            if rec is not None:
                back = f"writable again after {rec:.1f} s"
            elif k + 1 < len(self.faults) and fault.heal_s is not None:
                window = self.faults[k + 1].start_s - fault.heal_s
                back = f"not writable on every partition within {window:.1f} s (next fault)"
            else:
                back = "not writable on every partition before the workload stopped"
            what = f"{fault.name}: {fault.detail} {fault.error}".rstrip()
            lines.append(f"  {fault.start_s:6.1f}s-{healed} {what}; {back}")
        lines.append("operations: " + _pairs(sorted(self.operations.items())))
        lines.append("checker: " + self.report.render().replace("\n", "\n  "))
        counts = {**self.report.counts, **{k: len(v) for k, v in self.extra.items()}}
        lines.append("anomalies: " + _pairs(counts.items()))
        for name, found in self.extra.items():
            lines += [f"  {name}: {json.dumps(e, default=str)}" for e in found[:3]]
        terms, leaders = self.term_changes, self.leader_changes
        lines.append(
            f"term changes: {sum(terms.values())} by partition {dict(sorted(terms.items()))}"
        )
        lines.append(
            f"leader changes: {sum(leaders.values())} by partition {dict(sorted(leaders.items()))}"
        )
        lines.append("final phase: " + _pairs(self.final.items()))
        lines.append(f"replay: {self.replay}")
        return "\n".join(lines)

    def to_json(self) -> str:
        body = {k: v for k, v in asdict(self).items() if k != "report"}
        return json.dumps({**body, "ok": self.ok, "checker": self.report.to_dict()}, default=str)


def _pairs(items: Any) -> str:
    return ", ".join(f"{k} {v}" for k, v in items)


def replay_command(config: CampaignConfig) -> str:
    """The command line that replays ``config``'s schedule."""
    cmd = f"python -m chaos.campaign --duration {config.duration_s:.0f} --seed {config.seed}"
    cmd += f" --nodes {config.nodes}" + (" --fifo" if config.ordering == "fifo" else "")
    cmd += f" --quota {config.quota_messages_per_s}" if config.quota_messages_per_s else ""
    if sorted(config.nemeses) != sorted(FACTORIES):
        cmd += f" --nemesis {','.join(config.nemeses)}"
    return cmd


# ---- phases ---------------------------------------------------------------------------------


def create_queue(cluster: ChaosCluster, config: CampaignConfig) -> None:
    """Create the campaign's queue, retried while the cluster settles (bounded)."""
    deadline = time.monotonic() + 60
    with cluster.client(timeout_s=10.0) as client:
        while True:
            try:
                client.create_queue(
                    config.workload.queue,
                    partitions=config.partitions,
                    replication_factor=config.replication,
                    visibility_timeout_ms=config.workload.visibility_ms,
                    retention_ms=RETENTION_MS,
                    durability=config.durability,
                    ordering=config.ordering,
                    encryption=config.encryption,
                )
                break
            except QueueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        if config.quota_messages_per_s:  # the workload and checker run as ``admin``
            client.set_quota("admin", messages_per_s=config.quota_messages_per_s, burst_s=1.0)
    if wait_healthy(cluster, config.workload.queue, config.partitions, 60) is None:
        raise TimeoutError("cluster not healthy 60 s after creating the queue")


def wait_healthy(cluster: Any, queue: str, partitions: int, timeout_s: float) -> float | None:
    """Seconds until EVERY node, asked directly, answers, sees no node unreachable and
    sees a leader with a quorum for every partition (None after ``timeout_s``). Asking
    each node catches one whose view of the cluster is stale or empty."""
    from raft_queue.client import Client

    start = time.monotonic()
    pending = cluster.bootstrap.split(",")
    while pending and time.monotonic() - start < timeout_s:
        with Client(bootstrap=pending[0], timeout_s=5.0, retries=0, token=cluster.token) as one:
            try:
                status = one.cluster_status()
            except QueueError:
                status = None
        led = {
            r.partition
            for r in (status.replicas if status else [])
            if r.queue == queue and r.role == "leader" and r.has_quorum
        }
        if status and not status.unreachable and len(led) == partitions:
            pending.pop(0)
        else:
            time.sleep(0.3)
    return None if pending else time.monotonic() - start


def collect_digests(
    client: Any, queue: str, replication: int, timeout_s: float = 60.0
) -> tuple[dict[int, dict[str, str]], bool]:
    """Poll until every partition's replicas report the same applied index and digest.

    Returns the last digests seen ({partition: {node: digest}}) and whether they
    converged; a replica that never catches up shows up as a divergence."""
    deadline = time.monotonic() + timeout_s
    digests: dict[int, dict[str, str]] = {}
    while time.monotonic() < deadline:
        try:
            replicas = [
                r for r in client.cluster_status(include_digests=True).replicas if r.queue == queue
            ]
        except QueueError:
            time.sleep(0.5)
            continue
        digests, applied = defaultdict(dict), defaultdict(set)
        for r in replicas:
            # The applied index rides along: a replica left behind shows as
            # behind, one that differs at the same index as diverged.
            digests[r.partition][r.node] = f"{r.digest}@{r.last_applied}"
            applied[r.partition].add(r.last_applied)
        if all(
            len(d) == replication and len(set(d.values())) == 1 and len(applied[p]) == 1
            for p, d in digests.items()
        ):
            return dict(digests), True
        time.sleep(0.5)
    return dict(digests), False


def final_phase(
    cluster: ChaosCluster, history: History, config: CampaignConfig
) -> tuple[dict[str, Any], dict[int, dict[str, str]]]:
    """Drain, read everything by offset, and collect digests (faults healed)."""
    q = config.workload.queue
    partitions = partition_count_now(cluster, q, config.partitions)  # "grow" adds some
    settle_s = wait_healthy(cluster, q, partitions, 90)
    with cluster.client(timeout_s=10.0, retries=5) as client:
        # FIFO hands out one message per key at a time: a long run's backlog drains
        # slowly, so the budget is generous (the drain ends once the queue is empty).
        vis = config.workload.visibility_ms
        drained, drain_done = final_drain(history, client, q, vis, timeout_s=900.0)
        read, reads_done = final_reads(history, client, q, partitions)
        digests, converged = collect_digests(client, q, config.replication)
    final = {
        "healthy": settle_s is not None,
        "healthy_after_s": None if settle_s is None else round(settle_s, 1),
        "drained_records": drained,
        "drained": drain_done,
        "read_records": read,
        "reads_complete": reads_done,
        "digests_equal": converged,
    }
    return final, digests


def partition_count_now(cluster: Any, queue: str, default: int) -> int:
    """The queue's partitions now (a "grow" nemesis splits some), else ``default``."""
    with cluster.client(timeout_s=5.0, retries=3) as client:
        try:
            return len(client.partitions(queue))
        except QueueError:
            return default


def split_ranks(cluster: Any, queue: str) -> dict[tuple[str, Any], int]:
    """Each partition's depth in the queue's split tree (0 if never split): the
    checker's per-key order puts a parent's records before its child's."""
    with cluster.client(timeout_s=10.0, retries=5) as client:
        try:
            infos = {p.partition: p for p in client.partitions(queue)}
        except QueueError:
            return {}
    ranks = {}
    for p, info in infos.items():
        depth, parent = 0, info.parent
        while parent >= 0 and parent in infos:
            depth, parent = depth + 1, infos[parent].parent
        ranks[(queue, p)] = depth
    return ranks


def recovery_times(
    ops: list[Op], faults: list[Fault], partitions: int, end_s: float
) -> list[float | None]:
    """Per fault: seconds from its heal until every partition acknowledged a send that
    was invoked after the heal (None if that did not happen before the next fault)."""
    invoked: dict[Any, int] = {}
    acks: list[tuple[int, int, int]] = []  # (invoke ns, ok ns, partition)
    for op in ops:
        if op["type"] == "invoke":
            invoked[op["process"]] = op["time_ns"]
        elif op["f"] == "send" and op["type"] == "ok" and op.get("partition") is not None:
            acks.append((invoked.get(op["process"], op["time_ns"]), op["time_ns"], op["partition"]))
    out: list[float | None] = []
    for k, fault in enumerate(faults):
        healed = fault.heal_s if fault.heal_s is not None else end_s
        until = faults[k + 1].start_s if k + 1 < len(faults) else end_s
        first: dict[int, int] = {}
        for inv, done, part in acks:
            if inv >= healed * 1e9 and done <= until * 1e9:
                first[part] = min(first.get(part, done), done)
        # >=: after a "grow", sends reach more partitions than the queue began with.
        out.append(max(first.values()) / 1e9 - healed if len(first) >= partitions else None)
    return out


def count_operations(ops: list[Op]) -> dict[str, int]:
    return dict(Counter(f"{op['f']} {op['type']}" for op in ops if op["type"] != "invoke"))


def run(config: CampaignConfig, log: Any = None) -> Result:
    """One campaign; the cluster is always stopped, faults always healed. ``log``
    gets progress lines (default: printed and flushed at once)."""
    run_dir = config.out / f"seed-{config.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    log = _tee(log or functools.partial(print, flush=True), run_dir / "campaign.log")
    replay = replay_command(config)
    log(f"chaos seed: {config.seed} (replay: {replay}); output in {run_dir}")
    raft = {"log_compaction_min_entries": config.compaction_entries}
    disks, storage = disk_setup(config)
    cluster = ChaosCluster(
        run_dir / "cluster", config.nodes, seed=config.seed, raft=raft, disks=disks, storage=storage
    )
    try:
        result = _run_in(cluster, config, run_dir, log)
    except BaseException as exc:  # keep what happened: the run dir stays, with node logs
        log(f"campaign aborted: {type(exc).__name__}: {exc}; output kept in {run_dir}")
        with open(run_dir / "campaign.log", "a") as f:
            traceback.print_exc(file=f)
        raise
    finally:
        cluster.stop()
    (run_dir / "report.json").write_text(result.to_json())
    (run_dir / "report.txt").write_text(result.render() + "\n")
    if result.ok and not config.keep_data:
        shutil.rmtree(run_dir / "cluster", ignore_errors=True)
    return result


def _tee(log: Any, path: Path) -> Any:
    """``log``, also appending every line to ``path`` (kept when a run fails)."""

    def both(line: str) -> None:
        with open(path, "a") as f:
            f.write(line + "\n")
        log(line)

    return both


def _run_in(cluster: ChaosCluster, config: CampaignConfig, run_dir: Path, log: Any) -> Result:
    cluster.start()
    create_queue(cluster, config)
    t0 = time.monotonic()  # the history's clock starts here too
    history = History(run_dir / "history.jsonl")
    workload = Workload(history, cluster.client, config.workload, config.seed).start()
    with cluster.client(timeout_s=5.0, retries=1) as client:
        monitor = Monitor(client, config.workload.queue).start()
        rng = random.Random(config.seed)
        ctx = Context(cluster, client, config.workload.queue, rng, lambda: time.monotonic() - t0)
        ctx.compaction_entries, ctx.log = config.compaction_entries, log
        faults = _fault_phase(ctx, config)
        workload.stop()
        monitor.stop()
    end_s = ctx.clock()
    final, digests = final_phase(cluster, history, config)
    final["workload_errors"] = workload.errors
    history.close()
    ops = history.ops
    fifo = config.ordering == "fifo"
    rank = split_ranks(cluster, config.workload.queue)
    report = check(ops, replica_digests=digests, dedup=True, fifo_keys=fifo, partition_rank=rank)
    windows = {"receive": config.workload.visibility_ms, "drain": DRAIN_VISIBILITY_MS}
    return Result(
        config.seed, config.nodes, config.duration_s, faults,
        recovery_times(ops, faults, config.partitions, end_s), count_operations(ops), report,
        dict(monitor.term_changes), dict(monitor.leader_changes), final,
        lease_and_read_checks(ops, windows), replay_command(config),
    )  # fmt: skip


def _fault_phase(ctx: Context, config: CampaignConfig) -> list[Fault]:
    """Warm up, play the schedule, heal everything (always), then a quiet period."""
    stop = threading.Event()
    try:
        stop.wait(config.warmup_s)
        schedule = Schedule(config.seed, config.nemeses, config.duration_s)
        schedule.fault_s, schedule.calm_s = config.fault_s, config.calm_s
        faults = schedule.run(ctx, stop)
    finally:
        ctx.cluster.recover()
    ctx.log(f"[{ctx.clock():7.1f}s] every fault healed; quiet period {config.quiet_s:.0f} s")
    stop.wait(config.quiet_s)
    return faults


def parse_args(argv: list[str] | None) -> CampaignConfig:
    parser = argparse.ArgumentParser("python -m chaos.campaign", description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--duration", type=float, default=180.0, help="seconds of faults (default 180)")
    add("--seed", type=int, default=None, help="replays a schedule (default: random, printed)")
    add("--nodes", type=int, choices=(3, 5), default=3)
    add("--out", type=Path, default=Path(".raftq/chaos"), help="for history and report")
    add("--nemesis", default=",".join(FACTORIES),
        help="subset of: " + ", ".join(FACTORIES) + "; opt-in: " + ", ".join(OPT_IN))  # fmt: skip
    add("--fifo", action="store_true", help="a FIFO queue; also checks per-key order")
    add("--keep-data", action="store_true", help="keep node data even when valid")
    add("--quota", type=int, default=0, help="messages/s quota on the workload's principal")
    args = parser.parse_args(argv)
    names = [n for n in args.nemesis.split(",") if n]
    unknown = [n for n in names if n not in FACTORIES and n not in OPT_IN]
    if unknown or not names:
        parser.error(f"unknown nemesis {unknown}; known: {', '.join([*FACTORIES, *OPT_IN])}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    return CampaignConfig(
        duration_s=args.duration, seed=seed, nodes=args.nodes, out=args.out, nemeses=names,
        ordering="fifo" if args.fifo else "none", keep_data=args.keep_data,
        quota_messages_per_s=args.quota,
    )  # fmt: skip


def _exit_on_sigterm() -> None:
    """SIGTERM (a CI timeout, ``kill``) unwinds like Ctrl-C, so ``run``'s finally
    stops the nodes and the toxiproxy server instead of leaving them orphaned."""

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    _exit_on_sigterm()
    result = run(config)
    print(result.render(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
