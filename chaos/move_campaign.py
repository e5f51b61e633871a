"""A chaos campaign of queue moves between clusters (issue 16), Jepsen style.

    python -m chaos.move_campaign --seed 7 --duration 60

Starts two 3-node clusters (c1, c2) and a 3-node external manager, puts a
FIFO queue on c1, and runs producers (keyed messages, one at a time) and
consumers (receive + ack) through ``ManagedClient`` while a seeded schedule
(chaos.nemesis ``Schedule``) plays these nemeses (default: all four):

- ``move``: ``raftq queue move`` of the queue to the other cluster (manager/
  moves.py); healed by waiting for the cut-over and deleting the fenced copy
  the move leaves on the source, so the next move can come back;
- ``move-kill-manager``: the same, and the manager's leader is killed
  (SIGKILL) at once or once the copy is under way, restarted 2 s later;
- ``grow``: one split of a second FIFO queue, which stays on c1 with load of
  its own (chaos/fleet_grow.py);
- ``kill-one``: SIGKILL of one node of c1 or c2, restarted at the heal.

Every delivery is recorded with the mapping version its client used and its
cluster (``v3:c2/0``), and the checker ranks positions by that version: per
key, an earlier placement's records come before a later one's, as a move
promises; the grown queue's partitions rank by split depth. The run ends
with every fault healed, the consumers taking what is left, a final drain
(``lost`` is then meaningful) and every replica's digest compared.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.campaign import collect_digests, split_ranks
from chaos.checker import check
from chaos.fleet_grow import (
    GROW_CLUSTER,
    GROW_KEYS,
    GROW_QUEUE,
    FleetGrow,
    FleetKillOne,
    create_grow_queue,
    grow_client,
    seen_grown,
)
from chaos.fleet_load import Load, finish
from chaos.history import History
from chaos.nemesis import Context, Fault, Nemesis, Schedule
from raft_queue import errors
from raft_queue.client.managed import ManagedClient
from raft_queue.testing.cluster import LocalCluster
from raft_queue.testing.managers import ManagerCluster

QUEUE = "chaos-moves"
KEYS = [f"key-{i}" for i in range(12)]
HEALTH = {"poll_period_s": 0.5, "call_timeout_s": 2.0, "down_after_s": 3.0}
MOVE_TIMEOUT_S = 120.0
UNFINISHED: list[str] = []  # moves a heal saw not done: the run is INVALID


@dataclass
class Fleet:
    """Two clusters and a manager, as ``raftq dev up --clusters 2`` makes them."""

    base: Path
    clusters: dict[str, LocalCluster] = field(default_factory=dict)
    managers: ManagerCluster | None = None
    nodes: int = 3  # for Context.nodes (unused by these nemeses)

    def start(self) -> Fleet:
        self.managers = ManagerCluster(self.base / "mgr", managers=3, health=HEALTH)
        for name in ("c1", "c2"):
            c = LocalCluster(self.base / name, nodes=3)
            c.base_dir.mkdir(parents=True, exist_ok=True)
            (c.base_dir / "admin.token").write_text(self.managers.token + "\n")
            (c.base_dir / "admin.token").chmod(0o600)
            self.clusters[name] = c
        parts: list[Any] = [*self.clusters.values(), self.managers]
        for part in parts:
            part.start()
        for c in self.clusters.values():
            c.wait_ready(120)
        self.managers.wait_ready(90)
        with self.managers.admin() as admin:
            for name, c in self.clusters.items():
                admin.add_cluster(name, c.bootstrap.split(","), c.token)
        return self

    def managed(self, timeout_s: float = 20.0) -> ManagedClient:
        assert self.managers is not None
        return ManagedClient(self.managers.bootstrap, self.managers.token, timeout_s=timeout_s)

    def recover(self) -> None:
        """Every manager process running (a nemesis restarts what it kills)."""

    def stop(self) -> None:
        if self.managers is not None:
            self.managers.stop()
        for c in self.clusters.values():
            c.stop()


# ---- nemeses ---------------------------------------------------------------------------------


class Move(Nemesis):
    """Move the queue to the other cluster; heal: wait for the cut-over and
    delete the fenced copy left on the source."""

    name = "move"
    kill_manager = False
    source = target = ""

    def inject(self, ctx: Context) -> str:
        fleet: Fleet = ctx.cluster  # type: ignore[assignment]
        assert fleet.managers is not None
        with fleet.managers.admin() as admin:
            source = {h.cluster for h in _mapping(admin).partitions}.pop()
            target = "c2" if source == "c1" else "c1"
            leader = admin.list_clusters().leader
            admin.move_queue(QUEUE, target)
            self.source, self.target = source, target
            detail = f"{QUEUE}: {source} -> {target}"
            if self.kill_manager:
                when = ctx.rng.choice(("starting", "copying"))
                detail += self._kill_mid_move(fleet, admin, leader, when)
        return detail

    def _kill_mid_move(self, fleet: Fleet, admin: Any, leader: str, when: str) -> str:
        """Kill the manager leader at once (the move is ``starting``: the
        target's queue is being created) or once the copy has begun."""
        assert fleet.managers is not None
        phase = admin.move_status(QUEUE).moves[0].phase
        with fleet.clusters[self.target].client() as dst:
            deadline = time.monotonic() + 30
            while when == "copying" and time.monotonic() < deadline:
                phase = admin.move_status(QUEUE).moves[0].phase
                copying = phase == "fenced" and _has_messages(dst)
                if copying or phase in ("done", "cancelled"):
                    break
                time.sleep(0.05)
        victim = fleet.managers.addresses.index(leader)
        fleet.managers.kill(victim)
        time.sleep(2)
        fleet.managers.start(victim)
        return f"; manager leader m{victim + 1} killed in phase {phase}, restarted"

    def heal(self, ctx: Context) -> None:
        fleet: Fleet = ctx.cluster  # type: ignore[assignment]
        assert fleet.managers is not None
        if not self.source:
            return  # inject failed before the move began
        deadline = time.monotonic() + MOVE_TIMEOUT_S
        phase = ""
        while time.monotonic() < deadline:
            try:
                with fleet.managers.admin() as admin:
                    phase = admin.move_status(QUEUE).moves[0].phase
            except errors.QueueError:
                phase = "?"
            if phase in ("done", "cancelled"):
                break
            time.sleep(0.2)
        if phase != "done":
            UNFINISHED.append(f"move {self.source} -> {self.target} ended {phase!r}")
            ctx.log(f"  {UNFINISHED[-1]}")
            return
        with fleet.clusters[self.source].client() as src:  # the fenced copy: no longer needed
            src.delete_queue(QUEUE)


class MoveKillManager(Move):
    name = "move-kill-manager"
    kill_manager = True


NEMESES: dict[str, Any] = {"move": Move, "move-kill-manager": MoveKillManager,
                           "grow": FleetGrow, "kill-one": FleetKillOne}  # fmt: skip


def _mapping(admin: Any) -> Any:
    return next(q for q in admin.get_mapping().queues if q.name == QUEUE)


def _has_messages(client: Any) -> bool:
    try:
        return any(p.latest_offset for p in client.partitions(QUEUE))
    except errors.QueueError:
        return False


# ---- workload --------------------------------------------------------------------------------


def _seen_managed(m: Any, client: Any) -> dict[str, Any]:
    return _seen(m, client.mapping_version)


def _seen(m: Any, version: int) -> dict[str, Any]:
    cluster = m.receipt.partition("@")[0]
    return {"partition": f"v{version}:{cluster}/{m.partition}", "offset": m.offset,
            "payload": m.body.decode(), "key": m.key, "receipt": m.receipt}  # fmt: skip


def _records(ops: list[Any]) -> list[dict[str, Any]]:
    return [r for op in ops if op["f"] in ("receive", "drain", "ack") and op["type"] == "ok"
            and op["queue"] == QUEUE for r in op["value"] or []]  # fmt: skip


def by_placement(ops: list[Any]) -> list[Any]:
    """``ops`` with the move queue's records renamed from the mapping version
    their client used (``v6:c1/0``) to the queue's placement epoch
    (``e2:c1/0``): the versions in order, a new epoch each time the queue's
    cluster changes (a cut-over). The mapping version also moves for other
    queues (a split through the manager records the grow queue's new
    partitions), which must not make one partition's records two."""
    tags = {(int(r["partition"][1:].split(":")[0]), r["partition"].split(":")[1].split("/")[0])
            for r in _records(ops)}  # fmt: skip
    epoch, last, names = 0, "", {}
    for version, cluster in sorted(tags):
        if cluster != last:
            epoch, last = epoch + 1, cluster
        names[f"v{version}:{cluster}"] = f"e{epoch}:{cluster}"
    out = []
    for op in ops:
        if op["f"] in ("receive", "drain", "ack") and op["type"] == "ok" and op["queue"] == QUEUE:
            op = {**op, "value": [_renamed(r, names) for r in op["value"] or []]}
        out.append(op)
    return out


def _renamed(r: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    tag, slot = r["partition"].split("/", 1)
    return {**r, "partition": f"{names[tag]}/{slot}"}


def ranks(ops: list[Any]) -> dict[tuple[str, Any], int]:
    """Each recorded placement's rank: its epoch (``by_placement``; moves only raise it)."""
    return {(QUEUE, r["partition"]): int(r["partition"][1:].split(":")[0]) for r in _records(ops)}


# ---- the run ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    ok: bool
    faults: list[Fault]
    report: Any
    digests_equal: bool
    counts: dict[str, int]  # faults done without error, by nemesis
    stuck: int = 0  # client threads still in a call after the load stopped


def run(seed: int, duration_s: float, base: Path, nemeses: list[str]) -> Outcome:
    fleet = Fleet(base).start()
    UNFINISHED.clear()
    try:
        grow = "grow" in nemeses
        with fleet.managed() as client:
            client.create_queue(QUEUE, partitions=2, clusters=["c1"], ordering="fifo",
                                replication_factor=3)  # fmt: skip
            if grow:
                create_grow_queue(client)
        history = History(base / "history.jsonl")
        t0 = time.monotonic()
        loads = [Load(history, QUEUE, KEYS, fleet.managed, _seen_managed).start()]
        if grow:
            grown = Load(history, GROW_QUEUE, GROW_KEYS, lambda: grow_client(fleet), seen_grown)
            loads.append(grown.start())
        ctx = Context(fleet, None, QUEUE, random.Random(seed), lambda: time.monotonic() - t0)  # type: ignore[arg-type]
        stop = threading.Event()
        stop.wait(3.0)  # warm-up
        schedule = Schedule(seed, nemeses, duration_s, fault_s=(1.0, 3.0), calm_s=(2.0, 4.0),
                            factories=NEMESES)  # fmt: skip
        faults: list[Fault] = schedule.run(ctx, stop)
        stop.wait(3.0)  # quiet
        stuck = finish(loads, history, 180)
        history.close()
        for stack in stuck:
            print(f"client thread stuck in a call after the load stopped:\n{stack}")
        return _judge(fleet, seed, history.ops, faults, grow, len(stuck))
    finally:
        fleet.stop()


def _judge(
    fleet: Fleet, seed: int, ops: list[Any], faults: list[Fault], grow: bool, stuck: int
) -> Outcome:
    """The checker over both queues (each with its ranking), with replica digests."""
    ops = by_placement(ops)
    rank = ranks(ops)
    with fleet.managers.admin() as admin:  # type: ignore[union-attr]
        homes = {QUEUE: {h.cluster for h in _mapping(admin).partitions}.pop()}
    if grow:
        homes[GROW_QUEUE] = GROW_CLUSTER
        rank.update(split_ranks(fleet.clusters[GROW_CLUSTER], GROW_QUEUE))
    replicas, equal = {}, True
    for queue, cluster in homes.items():
        with fleet.clusters[cluster].client(timeout_s=10.0, retries=5) as client:
            found, converged = collect_digests(client, queue, replication=3)
        replicas.update({f"{queue}/{p}": d for p, d in found.items()})
        equal = equal and converged
    report = check(ops, replicas, fifo_keys=True, dedup=False, partition_rank=rank)
    done = [f for f in faults if not f.error and ": skipped" not in f.detail]
    counts = {n: sum(1 for f in done if f.name == n) for n in dict.fromkeys(f.name for f in faults)}
    sends = sum(1 for o in ops if o["f"] == "send" and o["type"] == "ok")
    print(f"seed {seed}: {len(faults)} faults, done {counts}; {sends} sends ok")
    for f in faults:
        print(f"  [{f.start_s:6.1f}s] {f.name}: {f.detail} {f.error}")
    print(report.render())
    print(f"unfinished moves: {UNFINISHED}; replica digests equal: {equal}")
    ok = report.ok and not report.warnings and equal and not UNFINISHED
    ok = ok and not any(f.error for f in faults)
    return Outcome(ok, faults, report, equal, counts, stuck)


DEFAULT_NEMESES = "move,move-kill-manager,grow,kill-one"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.move_campaign", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
    parser.add_argument("--nemesis", default=DEFAULT_NEMESES, help=f"subset of {DEFAULT_NEMESES}")
    parser.add_argument("--dir", default="", help="data directory (default: a temporary one)")
    args = parser.parse_args(argv)
    nemeses = [n for n in args.nemesis.split(",") if n]
    unknown = [n for n in nemeses if n not in NEMESES]
    if unknown or not nemeses:
        parser.error(f"unknown nemesis {unknown}; known: {', '.join(NEMESES)}")
    if args.dir:
        ok = run(args.seed, args.duration, Path(args.dir), nemeses).ok
    else:
        with tempfile.TemporaryDirectory(prefix="raftq-moves-") as tmp:
            ok = run(args.seed, args.duration, Path(tmp), nemeses).ok
    print("VALID" if ok else "INVALID")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
