"""Faults for a ChaosCluster, and a seeded random schedule of them (Jepsen's nemesis).

Each nemesis ``inject``s one fault and ``heal``s it; the schedule alternates calm and
fault windows, always heals (``finally``), and the campaign ends with
``cluster.recover()`` so nothing is left broken before the final phase.

Network faults (through the proxies): isolate a leader; majority/minority split
(sometimes cutting the minority's clients too); bridge (two halves that only one node
sees both of); one-way cuts to or from a leader; flapping splits; latency with jitter;
bandwidth limits. Process faults (by PID): SIGKILL or SIGSTOP of one node, a majority,
or all of them; and SIGKILL of a lagging node while it receives a snapshot. Disk
faults (chaos/disk_nemesis.py): a full disk, and a disk returning EIO, on one node.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.cluster import ChaosCluster
from raft_queue.errors import QueueError


@dataclass
class Context:
    """What a nemesis may touch. ``client``: an SDK client with short timeouts, used
    only to find leaders; ``clock()``: seconds since the history began."""

    cluster: ChaosCluster
    client: Any
    queue: str
    rng: random.Random
    clock: Callable[[], float]
    compaction_entries: int = 200
    log: Callable[[str], None] = print

    @property
    def nodes(self) -> list[int]:
        return list(range(self.cluster.nodes))


@dataclass
class Fault:
    """One injected fault, for the report. Times in seconds since the history began."""

    name: str
    detail: str
    start_s: float
    heal_s: float | None = None
    error: str = ""
    hit: bool | None = None  # kill-during-snapshot: did the kill land mid-install?


def leaders(ctx: Context) -> list[int]:
    """Nodes leading partitions of the queue, most partitions first ([] if unknown)."""
    try:
        parts = ctx.client.partitions(ctx.queue)
    except QueueError:
        return []
    counts = Counter(ctx.cluster.index_of(p.leader) for p in parts if p.leader)
    return [n for n, _ in counts.most_common()]


def pick_leader(ctx: Context) -> int:
    """A node leading something: a partition leader, or sometimes the metadata leader."""
    if ctx.rng.random() < 0.25:
        try:
            meta = ctx.client.cluster_status().metadata_leader
            if meta:
                return ctx.cluster.index_of(meta)
        except QueueError:
            pass
    found = leaders(ctx)
    return found[0] if found else ctx.rng.choice(ctx.nodes)


def _names(nodes: Any) -> str:
    return "{" + ",".join(f"n{i + 1}" for i in sorted(nodes)) + "}"


class Nemesis:
    """One kind of fault. ``inject`` returns a description of what it did."""

    name = "nemesis"

    def inject(self, ctx: Context) -> str:
        raise NotImplementedError

    def heal(self, ctx: Context) -> None:
        ctx.cluster.heal()


class IsolateLeader(Nemesis):
    """A leader cut from every other node; clients still reach it (so it must step
    down and refuse, not serve stale leases or reads)."""

    name = "isolate-leader"

    def inject(self, ctx: Context) -> str:
        victim = pick_leader(ctx)
        ctx.cluster.isolate(victim)
        return f"n{victim + 1} cut from every other node (clients still reach it)"


class Split(Nemesis):
    """A random minority cut from the majority, both ways; half the time the minority's
    clients are cut too (otherwise clients keep talking to the minority)."""

    name = "split"

    def inject(self, ctx: Context) -> str:
        nodes = ctx.nodes
        ctx.rng.shuffle(nodes)
        minority = set(nodes[: ctx.rng.randint(1, (len(nodes) - 1) // 2)])
        majority = set(nodes) - minority
        ctx.cluster.partition(minority, majority)
        detail = f"{_names(minority)} | {_names(majority)}"
        if ctx.rng.random() < 0.5:
            ctx.cluster.cut_clients(minority)
            detail += ", minority's clients cut"
        return detail


class Bridge(Nemesis):
    """Two halves that cannot see each other; one bridge node sees both (Jepsen)."""

    name = "bridge"

    def inject(self, ctx: Context) -> str:
        nodes = ctx.nodes
        ctx.rng.shuffle(nodes)
        half = (len(nodes) - 1) // 2
        left, bridge, right = nodes[:half], nodes[half], nodes[half + 1 :]
        ctx.cluster.partition(left, right)
        return f"{_names(left)} | {_names(right)}, n{bridge + 1} bridges"


class OneWay(Nemesis):
    """A leader cannot send to the others (or cannot hear them); the reverse flows."""

    name = "one-way"

    def inject(self, ctx: Context) -> str:
        victim = pick_leader(ctx)
        others = set(ctx.nodes) - {victim}
        if ctx.rng.random() < 0.5:
            ctx.cluster.cut_one_way([victim], others)
            return f"n{victim + 1} -> others dropped"
        ctx.cluster.cut_one_way(others, [victim])
        return f"others -> n{victim + 1} dropped"


class Flapping(Nemesis):
    """Random splits that come and go every 0.3-1.5 s until healed."""

    name = "flapping"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.flaps = 0

    def inject(self, ctx: Context) -> str:
        self._stop.clear()
        self.flaps = 0
        rng = random.Random(ctx.rng.random())
        self._thread = threading.Thread(target=self._run, args=(ctx, rng), daemon=True)
        self._thread.start()
        return "random splits toggling every 0.3-1.5 s"

    def _run(self, ctx: Context, rng: random.Random) -> None:
        while not self._stop.is_set():
            nodes = ctx.nodes
            rng.shuffle(nodes)
            cut = nodes[: rng.randint(1, (len(nodes) - 1) // 2)]
            ctx.cluster.partition(cut, set(nodes) - set(cut))
            self.flaps += 1
            if self._stop.wait(rng.uniform(0.3, 1.5)):
                return
            ctx.cluster.heal()
            self._stop.wait(rng.uniform(0.3, 1.5))

    def heal(self, ctx: Context) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        ctx.cluster.heal()
        ctx.log(f"  flapping: {self.flaps} splits")


class Latency(Nemesis):
    """Latency with jitter on every node-to-node link, or on one node's."""

    name = "latency"

    def inject(self, ctx: Context) -> str:
        latency, jitter = ctx.rng.choice([(20, 20), (50, 50), (100, 100), (200, 50)])
        nodes = None if ctx.rng.random() < 0.5 else [ctx.rng.choice(ctx.nodes)]
        ctx.cluster.slow(nodes, latency, jitter)
        where = "all links" if nodes is None else f"links of {_names(nodes)}"
        return f"{latency} ms +- {jitter} ms on {where}"


class Bandwidth(Nemesis):
    """A bandwidth limit on one node's links (slow replication, slow snapshots)."""

    name = "bandwidth"

    def inject(self, ctx: Context) -> str:
        rate = ctx.rng.choice([8, 32, 128])
        nodes = [ctx.rng.choice(ctx.nodes)]
        ctx.cluster.throttle(nodes, rate)
        return f"{rate} KB/s on links of {_names(nodes)}"


def _victims(ctx: Context, how: str) -> list[int]:
    nodes = ctx.nodes
    if how == "all":
        return nodes
    if how == "majority":
        ctx.rng.shuffle(nodes)
        return nodes[: len(nodes) // 2 + 1]
    return [pick_leader(ctx) if ctx.rng.random() < 0.5 else ctx.rng.choice(nodes)]


@dataclass
class Signal(Nemesis):
    """SIGKILL (healed by restarting) or SIGSTOP (healed by SIGCONT) of one node (half
    the time a leader), a majority, or all nodes."""

    action: str = "kill"  # or "pause"
    how: str = "one"
    victims: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.action}-{self.how}"

    def inject(self, ctx: Context) -> str:
        self.victims = _victims(ctx, self.how)
        act = ctx.cluster.kill if self.action == "kill" else ctx.cluster.pause
        for i in self.victims:
            act(i)
        return f"{'SIGKILL' if self.action == 'kill' else 'SIGSTOP'} {_names(self.victims)}"

    def heal(self, ctx: Context) -> None:
        undo = ctx.cluster.start_node if self.action == "kill" else ctx.cluster.resume
        for i in self.victims:
            undo(i)


SNAPSHOT_MARKERS = ("raft.dump.1.tmp", "raft.dump.image", "lmdb.restore")


def snapshot_in_progress(data_dir: Path) -> str:
    """The first file showing a snapshot being received or restored under ``data_dir``."""
    for marker in SNAPSHOT_MARKERS:
        for found in data_dir.glob(f"**/{marker}"):
            return str(found.relative_to(data_dir))
    return ""


def commit_indexes(ctx: Context, node: int | None = None) -> dict[int, int]:
    """Commit index per partition of the queue (max over replicas); with ``node``, only
    the partitions that node hosts. {} if the status is unavailable."""
    try:
        replicas = [r for r in ctx.client.cluster_status().replicas if r.queue == ctx.queue]
    except QueueError:
        return {}
    hosted = {r.partition for r in replicas if node is None or r.node == ctx.cluster.node_id(node)}
    top: dict[int, int] = {}
    for r in replicas:
        if r.partition in hosted:
            top[r.partition] = max(top.get(r.partition, 0), r.commit_index)
    return top


def _until(fetch: Callable[[], Any], timeout_s: float, step_s: float) -> Any:
    """``fetch()`` until it returns something truthy or ``timeout_s`` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = fetch()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(step_s)


@dataclass
class SnapshotKill(Nemesis):
    """Make a node lag behind compacted logs, restart it with its links throttled so
    the snapshot trickles in, and SIGKILL it while the snapshot is received or
    restored. Healed by restarting it unthrottled (it must then finish catching up)."""

    victim: int = -1
    hit: bool = False  # the kill landed while a snapshot was being received or restored
    name = "kill-during-snapshot"

    def inject(self, ctx: Context) -> str:
        lead = set(leaders(ctx))
        followers = [i for i in ctx.nodes if i not in lead] or ctx.nodes
        self.victim = victim = ctx.rng.choice(followers)
        before = _until(lambda: commit_indexes(ctx, victim), 20.0, 0.5)
        if not before:
            self.victim = -1
            return f"skipped: no status for n{victim + 1}'s partitions"
        ctx.cluster.kill(victim)
        grown = self._wait_growth(ctx, before, 2 * ctx.compaction_entries, 30.0)
        ctx.cluster.throttle([victim], ctx.rng.choice([8, 16, 32]))
        ctx.cluster.start_node(victim)
        data_dir = ctx.cluster.data_dir(victim)
        marker = _until(lambda: snapshot_in_progress(data_dir), 20.0, 0.02)
        if marker:
            time.sleep(ctx.rng.uniform(0.0, 0.3))
        ctx.cluster.kill(victim)
        self.hit = bool(marker)
        seen = f"while installing a snapshot ({marker})" if marker else "(no snapshot seen)"
        return f"n{victim + 1} killed {seen}; its partitions' logs grew {grown}"

    def _wait_growth(
        self, ctx: Context, before: dict[int, int], need: int, timeout_s: float
    ) -> list[int]:
        """Until every partition the victim hosts has committed ``need`` more entries
        (so its leader compacted past the victim's log)."""
        deadline = time.monotonic() + timeout_s
        grown: list[int] = []
        while time.monotonic() < deadline:
            now = commit_indexes(ctx)
            if now and before:
                grown = [now.get(p, 0) - v for p, v in sorted(before.items())]
                if min(grown) >= need:
                    break
            time.sleep(0.5)
        return grown

    def heal(self, ctx: Context) -> None:
        ctx.cluster.heal()
        if self.victim >= 0:
            ctx.cluster.start_node(self.victim)


class Grow(Nemesis):
    """Grow the queue in place by one split (``raftq queue update --partitions``,
    docs/semantics.md "Growing a queue: splits"): the load goes on, a parent is
    sealed and drained, its children take over its keys. Opt-in (OPT_IN): it
    changes the queue for the rest of the run. Nothing to heal."""

    name = "grow"
    max_partitions = 9

    def inject(self, ctx: Context) -> str:
        count = len(ctx.client.partitions(ctx.queue))
        if count + 2 > self.max_partitions:
            return f"skipped: {count} partitions already"
        info = ctx.client.update_queue(ctx.queue, partitions=count + 2)
        return (
            f"split: {count} -> {info.partitions} partitions ({info.writable_partitions} writable)"
        )

    def heal(self, ctx: Context) -> None:
        pass


FACTORIES: dict[str, Callable[[], Nemesis]] = {
    "isolate-leader": IsolateLeader,
    "split": Split,
    "bridge": Bridge,
    "one-way": OneWay,
    "flapping": Flapping,
    "latency": Latency,
    "bandwidth": Bandwidth,
    **{
        f"{action}-{how}": (lambda a=action, h=how: Signal(a, h))
        for action in ("kill", "pause")
        for how in ("one", "majority", "all")
    },
    "kill-during-snapshot": SnapshotKill,
}


@dataclass
class Schedule:
    """Calm and fault windows drawn from ``seed``: which nemesis, for how long.

    Nemeses come in a seeded shuffled order, every one before any repeats, so even a
    short run covers many kinds of fault."""

    seed: int
    names: list[str]
    duration_s: float
    fault_s: tuple[float, float] = (4.0, 10.0)
    calm_s: tuple[float, float] = (3.0, 6.0)
    faults: list[Fault] = field(default_factory=list)
    # Nemeses of this schedule's own (a campaign over other targets), looked up first.
    factories: dict[str, Callable[[], Nemesis]] = field(default_factory=dict)

    def run(self, ctx: Context, stop: threading.Event) -> list[Fault]:
        """Inject faults until ``duration_s`` is spent or ``stop`` is set; every fault
        is healed before the next begins and before this returns."""
        rng = random.Random(self.seed)
        ctx.rng = random.Random(rng.random())
        end = time.monotonic() + self.duration_s
        order: list[str] = []
        while not stop.wait(rng.uniform(*self.calm_s)) and time.monotonic() < end:
            if not order:
                order = rng.sample(self.names, len(self.names))
            name = order.pop()
            nemesis = (self.factories.get(name) or factory(name))()
            hold_s = min(rng.uniform(*self.fault_s), max(0.5, end - time.monotonic()))
            self._one(ctx, nemesis, hold_s, stop)
        return self.faults

    def _one(self, ctx: Context, nemesis: Nemesis, hold_s: float, stop: threading.Event) -> None:
        fault = Fault(nemesis.name, "", ctx.clock())
        self.faults.append(fault)
        try:
            fault.detail = nemesis.inject(ctx)
            fault.hit = getattr(nemesis, "hit", None)
            ctx.log(f"[{fault.start_s:7.1f}s] {fault.name}: {fault.detail}")
            stop.wait(hold_s)
        except Exception as exc:  # report it; the heal below still runs
            fault.error = f"{type(exc).__name__}: {exc}"
            ctx.log(f"  {fault.name} failed: {fault.error}")
        finally:
            nemesis.heal(ctx)
            fault.heal_s = ctx.clock()
            ctx.log(f"[{fault.heal_s:7.1f}s] healed {fault.name}")


def _add_disk_nemeses() -> None:
    from chaos.disk_nemesis import DISK_FACTORIES

    FACTORIES.update(DISK_FACTORIES)


_add_disk_nemeses()

# Nemeses a campaign runs only when named (--nemesis): not in the default set, so
# existing seeds replay the same schedules.
OPT_IN: dict[str, Callable[[], Nemesis]] = {"grow": Grow}


def factory(name: str) -> Callable[[], Nemesis]:
    return FACTORIES.get(name) or OPT_IN[name]
