"""Moving a queue between clusters (raftq queue move; manager/moves.py) on
real processes: two 3-node clusters and a 3-node manager (9 node processes,
one fixture for the module).

Producers send keyed messages one at a time through ManagedClient (a send
with an unknown outcome is recorded as such and the producer goes on with a
new process id), consumers receive and ack through ManagedClient. Every
delivery is recorded with its cluster (``c1/0``: partition 0 on c1), and the
chaos checker ranks the source's partitions before the target's: per key,
the source's records come first, then the target's copies and new sends.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner

from chaos.checker import check
from chaos.consuming import consume_recorded
from chaos.history import History
from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.cli.main import main
from raft_queue.client import OutgoingMessage
from raft_queue.client.managed import ManagedClient
from raft_queue.client.partitioner import partition_for_key
from raft_queue.testing.cluster import LocalCluster
from raft_queue.testing.managers import ManagerCluster

pytestmark = pytest.mark.integration

HEALTH = {"poll_period_s": 0.5, "call_timeout_s": 2.0, "down_after_s": 3.0}
KEYS = [f"key-{i}" for i in range(12)]


@dataclass
class Fleet:
    c1: LocalCluster
    c2: LocalCluster
    managers: ManagerCluster

    def managed(self, timeout_s: float = 20.0) -> ManagedClient:
        return ManagedClient(self.managers.bootstrap, self.managers.token, timeout_s=timeout_s)

    def raftq(self, *args: str) -> Any:
        argv = ["--manager", self.managers.bootstrap, "--token", self.managers.token, *args]
        return CliRunner().invoke(main, argv)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    base = Path(tmp_path_factory.mktemp("move"))
    c1, c2 = LocalCluster(base / "c1", nodes=3), LocalCluster(base / "c2", nodes=3)
    managers = ManagerCluster(base / "mgr", managers=3, health=HEALTH)
    for c in (c1, c2):  # one admin token for the fleet, as `raftq dev up --clusters` makes
        c.base_dir.mkdir(parents=True)
        (c.base_dir / "admin.token").write_text(managers.token + "\n")
        (c.base_dir / "admin.token").chmod(0o600)
    try:
        for part in (c1, c2, managers):
            part.start()
        c1.wait_ready(90)
        c2.wait_ready(90)
        managers.wait_ready(60)
        with managers.admin() as admin:
            admin.add_cluster("c1", c1.bootstrap.split(","), c1.token)
            admin.add_cluster("c2", c2.bootstrap.split(","), c2.token)
        yield Fleet(c1, c2, managers)
    except BaseException:
        for i in range(3):
            print(f"--- m{i + 1} log tail ---")
            print("\n".join(managers.log_path(i).read_text(errors="replace").splitlines()[-30:]))
        raise
    finally:
        managers.stop()
        c1.stop()
        c2.stop()


def _wait(what: str, check_: Any, timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if check_():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def _phase(fleet: Fleet, queue: str) -> str:
    with fleet.managers.admin() as admin:
        return str(admin.move_status(queue).moves[0].phase)


# ---- load: producers and consumers through ManagedClient, recorded -------------------------


@dataclass
class Load:
    fleet: Fleet
    queue: str
    history: History = field(default_factory=History)
    sent_at: list[tuple[float, float]] = field(default_factory=list)  # (invoked, completed)
    sent_keys: list[tuple[float, str]] = field(default_factory=list)  # (completed, key)
    stopped_at: float = 0.0  # when ``finish`` stopped the producers
    stop_sends: threading.Event = field(default_factory=threading.Event)
    stop_receives: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, producers: int = 2, consumers: int = 2, consume: bool = True) -> None:
        for i in range(producers):
            self._spawn(self.produce, KEYS[i::producers])
        if consume:
            self.start_consumers(consumers)

    def start_consumers(self, count: int = 2) -> None:
        for _ in range(count):
            self._spawn(self.consume)

    def _spawn(self, fn: Any, *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def prefill(self, count: int) -> None:
        """``count`` messages of distinct keys in batches, recorded as sends."""
        client, history = self.fleet.managed(), self.history
        for start in range(0, count, 500):
            batch = [f"fill-{i}" for i in range(start, min(count, start + 500))]
            ops = [history.invoke(history.new_process_id(), "send", p, queue=self.queue, key=p)
                   for p in batch]  # fmt: skip
            client.send_batch(self.queue, [OutgoingMessage(p, key=p) for p in batch])
            for op in ops:
                self.history.complete(op, "ok")
        client.close()

    def produce(self, keys: list[str]) -> None:
        client, history = self.fleet.managed(), self.history
        process, n = history.new_process_id(), 0
        while not self.stop_sends.is_set():
            for key in keys:
                payload = f"{key}/{n:05d}"
                op = history.invoke(process, "send", payload, queue=self.queue, key=key)
                began = time.monotonic()
                try:
                    client.send(self.queue, payload, key=key)
                except Exception as exc:  # outcome unknown: a new process goes on
                    history.complete(op, "info", error=repr(exc))
                    process = history.new_process_id()
                    continue
                history.complete(op, "ok")
                self.sent_at.append((began, time.monotonic()))
                self.sent_keys.append((self.sent_at[-1][1], key))
            n += 1
        client.close()

    def consume(self) -> None:
        client = self.fleet.managed()
        consume_recorded(self.history, client, self.queue, self.stop_receives, 50, seen=_seen)
        client.close()

    def finish(self, timeout_s: float = 120.0) -> None:
        """Stop sending, let the consumers take everything, stop them, drain."""
        self.stop_sends.set()
        self.stopped_at = time.monotonic()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.sent_payloads() <= self.acked_payloads():
            time.sleep(0.5)
        self.stop_receives.set()
        for t in self.threads:
            t.join(60)
        client = self.fleet.managed()
        drain = self.history.invoke(self.history.new_process_id(), "drain", queue=self.queue)
        left = client.receive(self.queue, max_messages=100, wait_ms=1000)
        self.history.complete(drain, "ok", [_seen(m) for m in left])
        client.close()

    def sent_payloads(self) -> set[str]:
        ops = list(self.history.ops)
        return {op["value"] for op in ops if op["f"] == "send" and op["type"] == "ok"}

    def acked_payloads(self) -> set[str]:
        ops = list(self.history.ops)
        return {
            r["payload"] for op in ops if op["f"] == "ack" and op["type"] == "ok"
            for r in op["value"]
        }  # fmt: skip

    def verdict(self, source: str, target: str, partitions: int) -> Any:
        rank = {(self.queue, f"{c}/{p}"): r for r, c in enumerate((source, target))
                for p in range(partitions)}  # fmt: skip
        report = check(self.history.ops, fifo_keys=True, dedup=False, partition_rank=rank)
        print(report.render())
        return report

    def longest_send_gap(self, start: float, end: float) -> float:
        """The longest time in [start, end] with no send completing (the
        producers' view of the move's unavailability), and the slowest send."""
        done = sorted(c for _, c in self.sent_at if start <= c <= end + 30)
        marks = [start, *done]
        return max((b - a for a, b in zip(marks, marks[1:], strict=False)), default=0.0)

    def longest_gap_of(self, keys: set[str], start: float, end: float) -> float:
        """As ``longest_send_gap``, counting only sends of ``keys`` (their
        partitions' view), up to the first send of them after ``end`` (or,
        if none came, up to when the producers were stopped)."""
        done = sorted(c for c, k in list(self.sent_keys) if k in keys and c >= start)
        after = [c for c in done if c > end][:1] or [self.stopped_at or time.monotonic()]
        inside = [c for c in done if c <= end] + after
        marks = [start, *inside]
        return max((b - a for a, b in zip(marks, marks[1:], strict=False)), default=0.0)


def _seen(m: Any) -> dict[str, Any]:
    cluster = m.receipt.partition("@")[0]
    return {"partition": f"{cluster}/{m.partition}", "offset": m.offset,
            "payload": m.body.decode(), "key": m.key, "receipt": m.receipt}  # fmt: skip


def _sends(client: Any, queue: str) -> bool:
    try:
        client.send(queue, "direct")
        return True
    except errors.PartitionSealed:
        return False


def _stored_twice_on(load: Load, cluster: str) -> dict[str, set[Any]]:
    """Payloads delivered from two different slots of ``cluster``: copied twice."""
    slots: dict[str, set[Any]] = {}
    for op in list(load.history.ops):
        if op["f"] in ("receive", "drain") and op["type"] == "ok":
            for r in op["value"] or []:
                if r["partition"].startswith(cluster + "/"):
                    slots.setdefault(r["payload"], set()).add((r["partition"], r["offset"]))
    return {p: s for p, s in slots.items() if len(s) > 1}


def _redelivered_from_target(load: Load, target: str, before_index: int) -> list[str]:
    """Payloads delivered by the target although an ack of them at the source
    had completed before ``before_index`` (the move's start): must be none."""
    ops = list(load.history.ops)
    acked_early = {
        r["payload"] for op in ops[:before_index] if op["f"] == "ack" and op["type"] == "ok"
        for r in op["value"]
    }  # fmt: skip
    return [
        r["payload"] for op in ops
        if op["f"] in ("receive", "drain") and op["type"] == "ok"
        for r in op["value"] or [] if r["partition"].startswith(target + "/")
        and r["payload"] in acked_early
    ]  # fmt: skip


# ---- tests ---------------------------------------------------------------------------------


def test_bad_moves_are_refused_naming_the_field_and_change_nothing(fleet: Fleet) -> None:
    with fleet.managers.admin() as admin:
        admin.create_queue("bad-a", partitions=1, clusters=["c1"])
        admin.create_queue("bad-b", partitions=1, clusters=["c1"])
        before = admin.get_mapping().version
    cases = [
        (("queue", "move", "nope", "--to", "c2", "--execute"), "queue: 'nope' is not managed"),
        (("queue", "move", "bad-a", "--to", "c9", "--execute"), "to: cluster 'c9'"),
        (("queue", "move", "bad-a", "--to", "c1", "--execute"), "to: queue 'bad-a' is already"),
        (("queue", "move", "bad-a", "--execute"), "--to CLUSTER"),
        (("queue", "move", "nope", "cancel"), "queue: 'nope' has no move"),
    ]
    for argv, said in cases:
        result = fleet.raftq(*argv)
        assert result.exit_code != 0 and said in result.output, (argv, result.output)
    plan = fleet.raftq("queue", "move", "bad-a", "--to", "c2", "--json")  # a dry run
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.output)["phase"] == "planned"
    started = fleet.raftq("queue", "move", "bad-a", "--to", "c2", "--execute", "--no-wait")
    assert started.exit_code == 0, started.output
    other = fleet.raftq("queue", "move", "bad-b", "--to", "c2", "--execute")
    assert other.exit_code != 0 and "queue: a move is running (bad-a" in other.output
    _wait("bad-a moved", lambda: _phase(fleet, "bad-a") == "done", 60)
    with fleet.managers.admin() as admin:
        assert admin.get_mapping().version == before + 1  # the one real move, nothing else
        assert len(admin.move_status().moves) == 1
    with fleet.c2.client() as c2:
        assert [q.name for q in c2.list_queues()] == ["bad-a"]  # bad-b was not created there
    with fleet.managed() as client:  # the moved queue works on c2
        client.send("bad-a", "after")
        assert [m.body for m in client.receive("bad-a", wait_ms=2000)] == [b"after"]
        assert {h.cluster for h in client.homes("bad-a")} == {"c2"}
    again = fleet.raftq("queue", "move", "bad-a", "--to", "c2", "cancel")
    assert again.exit_code != 0 and "already cut over" in again.output
    # The source keeps the queue, fenced; an operator can lift the fence there.
    with fleet.c1.client() as c1:
        with pytest.raises(errors.PartitionSealed):
            c1.send("bad-a", "direct")
        argv = ["--server", fleet.c1.bootstrap, "--token", fleet.c1.token]
        undo = CliRunner().invoke(main, [*argv, "queue", "fence", "bad-a", "--undo"])
        assert undo.exit_code == 0 and "not fenced" in undo.output, undo.output
        _wait("unfenced", lambda: _sends(c1, "bad-a"), 20)


def test_a_cancelled_move_rolls_back_the_fence_and_the_target_copy(fleet: Fleet) -> None:
    total = 20_000
    with fleet.managed() as client:
        client.create_queue("undo", partitions=2, clusters=["c1"], ordering="fifo")
        for start in range(0, total, 1000):
            client.send_batch("undo", [OutgoingMessage(f"m{i}", key=f"k{i}")
                                       for i in range(start, start + 1000)])  # fmt: skip
    started = fleet.raftq("queue", "move", "undo", "--to", "c2", "--execute", "--no-wait")
    assert started.exit_code == 0, started.output
    _wait("fenced", lambda: _phase(fleet, "undo") == "fenced", 30)
    cancelled = fleet.raftq("queue", "move", "undo", "cancel", "--json")
    assert cancelled.exit_code == 0, cancelled.output  # the copy of 20000 takes longer
    _wait("rolled back", lambda: _phase(fleet, "undo") == "cancelled", 60)
    with fleet.managed() as client:
        assert {h.cluster for h in client.homes("undo")} == {"c1"}
        client.send("undo", "more", key="k1")  # unfenced: sends and receives again
        assert client.get_queue("undo").messages == total + 1
        assert len(client.receive("undo", max_messages=10, wait_ms=2000)) == 10
    with fleet.c2.client() as c2:
        _wait("target copy dropped", lambda: "undo" not in {q.name for q in c2.list_queues()}, 20)


def test_a_fifo_queue_moved_under_load_loses_nothing_and_keeps_per_key_order(
    fleet: Fleet,
) -> None:
    queue = "orders"
    with fleet.managed() as client:
        client.create_queue("orders-dlq", partitions=1, clusters=["c1"], retention_ms=60_000)
        client.create_queue(queue, partitions=2, clusters=["c1"], ordering="fifo",
                            replication_factor=3, dead_letter_queue="orders-dlq",
                            max_receives=50, dedup_window_ms=600_000)  # fmt: skip
        with fleet.c1.client() as c1:  # a consumer group's offsets, to be translated
            c1.commit_offsets(queue, "audit", {0: 0, 1: 0})
    load = Load(fleet, queue)
    load.start(consume=False)
    time.sleep(3)  # a backlog for the move to copy
    load.start_consumers()
    time.sleep(2)
    index = len(load.history.ops)
    began = time.monotonic()
    moved = fleet.raftq("queue", "move", queue, "--to", "c2", "--execute", "--json")
    took = time.monotonic() - began
    assert moved.exit_code == 0, moved.output
    row = json.loads(moved.output)
    assert row["phase"] == "done", row
    time.sleep(3)  # sends and receives go on against c2
    load.finish()
    gap = load.longest_send_gap(began, began + took)
    report = load.verdict("c1", "c2", 2)
    sent, acked = load.sent_payloads(), load.acked_payloads()
    after = [op for op in load.history.ops[index:] if op["f"] == "send" and op["type"] == "ok"]
    unknown = [op.get("error") for op in load.history.ops if op["type"] == "info"]
    print(f"move of {queue}: {took:.2f} s (CLI), {row['copied']} copied, cut-over "
          f"{(row['finished_ms'] - row['started_ms']) / 1000:.2f} s after the start; "
          f"{len(sent)} sent, {len(after)} after the move began; longest pause of "
          f"sends {gap:.2f} s; outcome unknown: {len(unknown)} {unknown[:3]}")  # fmt: skip
    assert report.ok, report.to_json()
    assert report.counts["lost"] == 0 and sent <= acked
    assert row["copied"] > 0 and len(after) > 0
    from_target = {
        r["payload"] for op in load.history.ops
        if op["f"] in ("receive", "drain") and op["type"] == "ok"
        for r in op["value"] or [] if r["partition"].startswith("c2/")
    }  # fmt: skip
    assert len(from_target) > row["copied"]  # the copies, and new sends the clients moved to
    assert _redelivered_from_target(load, "c2", index) == []
    assert _stored_twice_on(load, "c2") == {}
    with fleet.c2.client() as c2:  # the config came along; the group offset was translated
        info = c2.get_queue(queue)
        assert (info.config.ordering, info.config.dead_letter_queue) == ("fifo", "orders-dlq")
        assert c2.get_queue("orders-dlq").config.retention_ms == 60_000
        assert (info.config.max_receives, info.config.dedup_window_ms) == (50, 600_000)
        assert set(c2.get_offsets(queue, "audit")) == {0, 1}
    with fleet.c1.client() as c1, pytest.raises(errors.PartitionSealed):
        c1.send(queue, "late", key="k", partition=0)  # the source keeps its queue, fenced


@pytest.mark.parametrize("partitions", [(), (1,)], ids=["whole", "partial"])
def test_the_manager_leader_killed_mid_move_the_move_still_finishes(
    fleet: Fleet, partitions: tuple[int, ...]
) -> None:
    """kill -9 of the manager leader while it copies: the next leader's watch
    finds the phase still ``fenced``, drops the partial copy on the target,
    copies again and cuts over; nothing acked is lost, per-key order holds.
    ``partial``: only global partition 1 of 2 moves (the same steps)."""
    queue = "jobs-part" if partitions else "jobs"
    with fleet.managed() as client:
        client.create_queue(queue, partitions=2, clusters=["c1"], ordering="fifo")
    load = Load(fleet, queue)
    load.prefill(20_000)  # a copy of several seconds, to be cut short
    load.start(consume=False)
    time.sleep(1)
    index = len(load.history.ops)
    admin = fleet.managers.admin()
    leader = admin.list_clusters().leader
    admin.move_queue(queue, "c2", partitions=partitions)
    _wait("fenced", lambda: admin.move_status(queue).moves[0].phase == "fenced", 60)
    with fleet.c2.client() as c2:  # the copy has begun on the target
        _wait("copying", lambda: any(p.latest_offset for p in c2.partitions(queue)), 30)
    victim = fleet.managers.addresses.index(leader)
    fleet.managers.kill(victim)
    assert admin.move_status(queue).moves[0].phase == "fenced"  # killed mid-copy
    killed_at = time.monotonic()
    try:
        took = _wait("moved", lambda: _phase(fleet, queue) in ("done", "cancelled"), 180)
    finally:
        fleet.managers.start(victim)
        admin.close()
    phase = _phase(fleet, queue)
    redone = [
        i for i in range(3) if i != victim and "dropping a partial copy" in
        fleet.managers.log_path(i).read_text(errors="replace")
    ]  # fmt: skip
    print(f"manager leader {leader} killed mid-copy; the move ended {phase} {took:.1f} s "
          f"later; partial copy dropped by m{[i + 1 for i in redone]}")  # fmt: skip
    load.start_consumers(3)
    time.sleep(2)
    load.finish(240)
    report = load.verdict("c1", "c2", 2)
    assert phase == "done"
    with fleet.managed() as client:
        want = [("c1", 0), ("c2", 0)] if partitions else [("c2", 0), ("c2", 1)]
        assert [(h.cluster, h.local) for h in client.homes(queue)] == want
    assert report.ok, report.to_json()
    assert report.counts["lost"] == 0 and load.sent_payloads() <= load.acked_payloads()
    assert _redelivered_from_target(load, "c2", index) == []
    assert _stored_twice_on(load, "c2") == {}
    assert redone  # the path taken: the next leader dropped the partial copy
    assert time.monotonic() - killed_at < 400


# ---- moving only some partitions (raftq queue move Q --to C --partitions 2,3) ---------------


def test_two_of_four_partitions_moved_under_load_the_rest_never_stops_taking_sends(
    fleet: Fleet,
) -> None:
    """A FIFO queue of 4 partitions on c1; partitions 2 and 3 move to c2
    under load (producers of the moved partitions' keys apart from those of
    the others, so a send waiting out the fence holds up no other key)."""
    queue = "shards"
    moved_keys = {k for k in KEYS if partition_for_key(k, 4) in (2, 3)}
    kept_keys = set(KEYS) - moved_keys
    assert moved_keys and kept_keys
    with fleet.managed() as client:
        client.create_queue(queue, partitions=4, clusters=["c1"], ordering="fifo",
                            replication_factor=3, dedup_window_ms=600_000)  # fmt: skip
        with fleet.c1.client() as c1:  # a consumer group's offsets, to be translated
            c1.commit_offsets(queue, "audit", {p: 0 for p in range(4)})
    load = Load(fleet, queue)
    for keys in (sorted(kept_keys), sorted(moved_keys)):
        for i in range(2):
            load._spawn(load.produce, keys[i::2])
    time.sleep(3)  # a backlog for the move to copy
    load.start_consumers()
    time.sleep(2)
    began = time.monotonic()
    argv = ("queue", "move", queue, "--to", "c2", "--partitions", "3,2", "--execute", "--json")
    moved = fleet.raftq(*argv)
    took = time.monotonic() - began
    assert moved.exit_code == 0, moved.output
    row = json.loads(moved.output)
    assert row["phase"] == "done" and row["moved_partitions"] == [2, 3], row
    time.sleep(3)  # sends and receives go on against both clusters
    load.finish()
    kept_gap = load.longest_gap_of(kept_keys, began, began + took)
    moved_gap = load.longest_gap_of(moved_keys, began, began + took)
    report = load.verdict("c1", "c2", 4)
    sent, acked = load.sent_payloads(), load.acked_payloads()
    print(f"partial move of {queue} [2,3]: {took:.2f} s (CLI), {row['copied']} copied; "
          f"longest pause of sends: unmoved partitions {kept_gap:.2f} s, moved ones "
          f"{moved_gap:.2f} s; {len(sent)} sent")  # fmt: skip
    assert kept_gap < 1.5 and kept_gap < moved_gap  # the rest of the queue kept serving
    assert report.ok, report.to_json()
    assert report.counts["lost"] == 0 and sent <= acked
    assert row["copied"] > 0
    assert _stored_twice_on(load, "c2") == {}
    with fleet.managed() as client:
        homes = [(h.cluster, h.local) for h in client.homes(queue)]
        assert homes == [("c1", 0), ("c1", 1), ("c2", 0), ("c2", 1)]
        for g in range(4):  # every global partition takes sends and gives them back
            client.send(queue, f"to-{g}", key=f"probe-{g}", partition=g)
        seen: dict[str, tuple[int, str]] = {}
        deadline = time.monotonic() + 30
        while len(seen) < 4 and time.monotonic() < deadline:
            for m in client.receive(queue, max_messages=10, wait_ms=500):
                seen[m.body.decode()] = (m.partition, m.receipt.partition("@")[0])
                client.ack(queue, [m])
        assert seen == {f"to-{g}": (g, homes[g][0]) for g in range(4)}, seen
    with fleet.c2.client() as c2:
        assert c2.get_queue(queue).config.partitions == 2
        assert c2.get_queue(queue).config.ordering == "fifo"
        assert set(c2.get_offsets(queue, "audit")) == {0, 1}
    with fleet.c1.client() as c1:
        with pytest.raises(errors.PartitionSealed):
            c1.send(queue, "late", key="k", partition=2)  # the source keeps it, fenced
        argv = ["--server", fleet.c1.bootstrap, "--token", fleet.c1.token]
        undo = CliRunner().invoke(
            main, [*argv, "queue", "fence", queue, "--partitions", "2", "--undo"]
        )  # an operator's way out, one partition at a time
        assert undo.exit_code == 0 and "partitions 3 fenced" in undo.output, undo.output
    # The rest cannot follow to c2: its queue there cannot grow partitions.
    rest = fleet.raftq("queue", "move", queue, "--to", "c2", "--partitions", "0,1", "--execute")
    assert rest.exit_code != 0 and "to: cluster 'c2' already holds" in rest.output, rest.output


def test_a_cancelled_partial_move_unfences_only_its_partitions_and_drops_the_copy(
    fleet: Fleet,
) -> None:
    total = 20_000
    with fleet.managed() as client:
        client.create_queue("undo-part", partitions=4, clusters=["c1"])
        for start in range(0, total, 1000):
            client.send_batch("undo-part", [OutgoingMessage(f"m{i}", partition=i % 4)
                                            for i in range(start, start + 1000)])  # fmt: skip
    argv = ("queue", "move", "undo-part", "--to", "c2", "--partitions", "1,2")
    started = fleet.raftq(*argv, "--execute", "--no-wait")
    assert started.exit_code == 0, started.output
    _wait("fenced", lambda: _phase(fleet, "undo-part") == "fenced", 30)
    with fleet.c1.client() as c1:
        c1.send("undo-part", "kept", partition=0)  # the unmoved partitions take sends
        with pytest.raises(errors.PartitionSealed):
            c1.send("undo-part", "refused", partition=1)
    cancelled = fleet.raftq("queue", "move", "undo-part", "cancel")
    assert cancelled.exit_code == 0, cancelled.output
    _wait("rolled back", lambda: _phase(fleet, "undo-part") == "cancelled", 60)
    with fleet.managed() as client:
        assert {h.cluster for h in client.homes("undo-part")} == {"c1"}
        assert client.get_queue("undo-part").messages == total + 1
    with fleet.c1.client() as c1:
        _wait("unfenced", lambda: _sends(c1, "undo-part"), 20)
        for p in range(4):
            c1.send("undo-part", f"again-{p}", partition=p)
    with fleet.c2.client() as c2:
        _wait("copy dropped", lambda: "undo-part" not in {q.name for q in c2.list_queues()}, 20)


def test_bad_partition_lists_are_refused_naming_the_field_and_change_nothing(
    fleet: Fleet,
) -> None:
    with fleet.managed() as client:
        client.create_queue("narrow", partitions=4, clusters=["c1"])
        client.create_queue("wide", partitions=4, clusters=["c1", "c2"])  # 0,2 on c1; 1,3 c2
    with fleet.managers.admin() as admin:
        before = admin.get_mapping().version
        moves = len(admin.move_status().moves)
    with fleet.c2.client() as c2:
        on_c2 = sorted(q.name for q in c2.list_queues())
    move = ("queue", "move")
    cases = [
        ((*move, "narrow", "--to", "c2", "--partitions", "4"), "partitions: 4 is out of range"),
        ((*move, "narrow", "--to", "c2", "--partitions", "1,1"), "partitions: names a partition"),
        ((*move, "narrow", "--to", "c2", "--partitions", "x"), "--partitions"),
        ((*move, "wide", "--to", "c2", "--partitions", "0,1"), "partitions: 'wide'"),
        ((*move, "wide", "--to", "c2", "--partitions", "0,2"), "to: cluster 'c2' already holds"),
        ((*move, "wide", "--to", "c2"), "queue: 'wide'"),  # the whole queue spans two
    ]
    for argv, said in cases:
        for mode in ("--execute", "--dry-run"):
            result = fleet.raftq(*argv, mode)
            assert result.exit_code != 0 and said in result.output, (argv, result.output)
    with fleet.managers.admin() as admin:
        assert admin.get_mapping().version == before
        assert len(admin.move_status().moves) == moves
    with fleet.c2.client() as c2:
        assert sorted(q.name for q in c2.list_queues()) == on_c2
    with fleet.c1.client() as c1:  # nothing fenced
        for p in range(4):
            c1.send("narrow", f"p{p}", partition=p)


# ---- dedup windows carried across a move (ExportDedup / SeedDedup) -------------------------

DEDUP_WINDOW_MS = 12_000
MOVED_OFFSET = (1 << 64) - 1  # a duplicate whose original was acked before the move


def _raw_send(c: LocalCluster, queue: str, request_id: bytes, body: str, part: int) -> Any:
    """One Send RPC with a request id of our choosing (the SDK's retry of a
    Send whose answer was lost repeats its id): its one SendResult."""
    request = queue_pb2.SendRequest(queue=queue, request_id=request_id,
                                    entries=[queue_pb2.SendEntry(body=body.encode(),
                                                                 partition=part)])  # fmt: skip
    md = (("authorization", f"Bearer {c.token}"),)
    with grpc.insecure_channel(c.specs[0].address) as ch:
        return queue_pb2_grpc.QueueServiceStub(ch).Send(request, metadata=md, timeout=20).results[0]


def _receive_all(client: Any, queue: str, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        got += client.receive(queue, max_messages=10, wait_ms=500)
    assert len(got) == count, got
    return got


def _dedup_tables(fleet: Fleet, queue: str) -> str:
    """Both sides' dedup entries of ``queue`` (a failure's diagnosis)."""
    out = []
    for name, c in (("source c1", fleet.c1), ("target c2", fleet.c2)):
        with c.client() as client:
            for p in range(len(client.partitions(queue))):
                out.append(f"{name} [{p}]: {list(client.export_dedup(queue, p).entries)}")
    return "\n".join(out)


def _stored(c: LocalCluster, queue: str) -> list[int]:
    with c.client() as client:
        return [p.latest_offset for p in client.partitions(queue)]


def test_dedup_ids_and_request_ids_are_carried_across_whole_and_partial_moves(
    fleet: Fleet,
) -> None:
    """Two queues of 2 partitions on c1, one moved whole, one moved partially
    (partition 1 only). d0..d5 are sent with dedup ids (d0..d3 acked before
    the move), r-acked and r-kept with request ids (r-acked's message acked).
    After the cut-over, every dedup id re-sent and each request retried on c2
    stores nothing (answered with the copy's offset, or MOVED_OFFSET when the
    original was acked at the source); once the window has ended a re-send
    is stored."""
    queues = {"dd-whole": (), "dd-part": ("--partitions", "1")}
    ids = [f"d{i}" for i in range(6)]
    acked = {"d0", "d1", "d2", "d3", "req-acked"}
    with fleet.managed() as client:
        for q in queues:
            client.create_queue(q, partitions=2, clusters=["c1"],
                                dedup_window_ms=DEDUP_WINDOW_MS)  # fmt: skip
        sent_at = time.time()
        for q in queues:
            client.send_batch(q, [OutgoingMessage(d, dedup_id=d, partition=1) for d in ids])
            _raw_send(fleet.c1, q, q.encode() + b"-r-acked", "req-acked", 1)
            _raw_send(fleet.c1, q, q.encode() + b"-r-kept", "req-kept", 1)
            got = _receive_all(client, q, 8)
            client.ack(q, [m for m in got if m.body.decode() in acked])
    for q, extra in queues.items():
        started = fleet.raftq("queue", "move", q, "--to", "c2", *extra, "--execute", "--no-wait")
        assert started.exit_code == 0, started.output
        # cut over (the unacked d4, d5, req-kept are leased: their leases are carried)
        _wait(f"{q} moved", lambda q=q: _phase(fleet, q) in ("leases", "done"), 30)
    assert time.time() - sent_at < DEDUP_WINDOW_MS / 1000 - 3, "the moves took too long"
    for q in queues:
        on_target = 1 if q == "dd-whole" else 0  # the partial move's partition 1 is c2's 0
        before = _stored(fleet.c2, q)
        assert before[on_target] == 3  # the unacked d4, d5 and req-kept were copied
        with fleet.managed() as client:
            again = client.send_batch(q, [OutgoingMessage(d, dedup_id=d, partition=1)
                                          for d in ids])  # fmt: skip
        assert all(r.duplicate for r in again), again
        assert {r.offset for r, d in zip(again, ids, strict=True) if d in acked} == {MOVED_OFFSET}
        r_acked = _raw_send(fleet.c2, q, q.encode() + b"-r-acked", "retry", on_target)
        r_kept = _raw_send(fleet.c2, q, q.encode() + b"-r-kept", "retry", on_target)
        assert r_acked.duplicate and r_acked.offset == MOVED_OFFSET, _dedup_tables(fleet, q)
        assert r_kept.duplicate and r_kept.offset < 3
        with fleet.c2.client() as c2:
            copy = c2.read(q, on_target, r_kept.offset, 1).messages
            assert copy[0].body == b"req-kept"
        assert _stored(fleet.c2, q) == before, "a re-send was stored twice on the target"
    time.sleep(max(0.0, sent_at + DEDUP_WINDOW_MS / 1000 + 0.5 - time.time()))
    for q in queues:
        with fleet.managed() as client:
            late = client.send(q, "d0 again", dedup_id="d0", partition=1)
        assert not late.duplicate  # the window has ended: a new message
        r_late = _raw_send(
            fleet.c2, q, q.encode() + b"-r-acked", "late", 1 if q == "dd-whole" else 0
        )
        assert not r_late.duplicate


def test_dedup_export_and_seed_are_admin_only_and_bad_entries_write_nothing(
    fleet: Fleet,
) -> None:
    with fleet.c2.client() as admin:
        admin.create_queue("dd-auth", partitions=1)
        user = admin.create_principal("dd-user").token
        admin.add_grant("dd-user", "dd-*", ["send", "receive", "read", "manage"])
    good = queue_pb2.DedupEntry(dedup_id=b"planted", timestamp_ms=int(time.time() * 1000))
    bad = queue_pb2.DedupEntry(dedup_id=b"both", request_id=b"both", timestamp_ms=1)
    seed = queue_pb2.SeedDedupRequest(queue="dd-auth", partition=0, entries=[good, bad])
    export = queue_pb2.ExportDedupRequest(queue="dd-auth", partition=0)
    with grpc.insecure_channel(fleet.c2.specs[0].address) as ch:
        stub = queue_pb2_grpc.QueueServiceStub(ch)
        for call, request in ((stub.SeedDedup, seed), (stub.ExportDedup, export)):
            with pytest.raises(grpc.RpcError) as denied:
                call(request, metadata=(("authorization", f"Bearer {user}"),), timeout=20)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        md = (("authorization", f"Bearer {fleet.c2.token}"),)
        with pytest.raises(grpc.RpcError) as refused:
            stub.SeedDedup(seed, metadata=md, timeout=20)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ("raftq-field", "entries[1]") in (refused.value.trailing_metadata() or ())
        assert stub.ExportDedup(export, metadata=md, timeout=20).entries == []  # nothing planted
        bad_part = queue_pb2.ExportDedupRequest(queue="dd-auth", partition=5)
        with pytest.raises(grpc.RpcError) as out_of_range:
            stub.ExportDedup(bad_part, metadata=md, timeout=20)
        assert out_of_range.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.SeedDedup(seed.__class__(queue="dd-auth", entries=[good]), metadata=md,
                              timeout=20).seeded == 1  # fmt: skip
        assert [e.dedup_id for e in stub.ExportDedup(export, metadata=md, timeout=20).entries] == [
            b"planted"
        ]


# ---- leases carried across a move (CarryLeases / SettleCarried; manager/carried_leases.py) --

CARRY_VISIBILITY_MS = 8000


def _leased_then_moved(
    fleet: Fleet, queue: str, bodies: list[tuple[str, str]], visibility_ms: int
) -> tuple[ManagedClient, list[Any], float]:
    """``bodies`` ((body, key)) sent to a FIFO ``queue`` on c1, leased by a
    consumer (the holder) for ``visibility_ms``, then the queue moved to c2.
    (The holder, what it holds, the monotonic time before its receive: no
    lease ends before that + visibility.) Returns at the cut-over."""
    holder = fleet.managed()
    holder.create_queue(queue, partitions=1, clusters=["c1"], ordering="fifo")
    holder.send_batch(queue, [OutgoingMessage(b, key=k) for b, k in bodies])
    leased_at = time.monotonic()
    held = holder.receive(queue, max_messages=len(bodies), visibility_ms=visibility_ms,
                          wait_ms=1000)  # fmt: skip
    with fleet.managers.admin() as admin:
        admin.move_queue(queue, "c2")
        _wait("cut over", lambda: admin.move_status(queue).moves[0].phase in ("leases", "done"),
              30)  # fmt: skip
        info = admin.move_status(queue).moves[0]
    assert (info.phase, info.leases_left) == ("leases", len(held)), info
    status = fleet.raftq("queue", "move", queue, "status")
    assert status.exit_code == 0 and "  leases  " in status.output, status.output
    assert f"{len(held)} carried lease(s) still followed" in status.output, status.output
    return holder, held, leased_at


def _take(client: ManagedClient, queue: str, until: float, want: int = 1 << 30) -> list[Any]:
    got: list[Any] = []
    while time.monotonic() < until and len(got) < want:
        got += client.receive(queue, max_messages=10, wait_ms=300)
    return got


def test_leases_are_carried_acks_at_the_source_stick_and_the_rest_come_back_at_the_deadline(
    fleet: Fleet,
) -> None:
    """A consumer holds 6 messages (8 s) when the queue moves: a second
    consumer on the target gets none of them before their deadline; the
    holder acks 3 at the source (its receipts name c1) and those never come
    back; k0's next message, blocked behind k0's lease (FIFO), comes as soon
    as that ack is followed; the other 3 come back from the target right
    after the deadline, as their second receive."""
    queue = "carry"
    bodies = [(f"m{i}", f"k{i}") for i in range(6)] + [("k0-next", "k0")]
    holder, held, leased_at = _leased_then_moved(fleet, queue, bodies, CARRY_VISIBILITY_MS)
    assert sorted(m.body.decode() for m in held) == [f"m{i}" for i in range(6)]
    deadline = leased_at + CARRY_VISIBILITY_MS / 1000
    other = fleet.managed()
    try:
        assert other.receive(queue, max_messages=10, wait_ms=500) == []  # all held or blocked
        acked, kept = held[:3], held[3:]
        assert all(r.ok for r in holder.ack(queue, acked))  # at the source, after the cut-over
        early = _take(other, queue, deadline - 1.0)
        assert [m.body.decode() for m in early] == ["k0-next"]  # k0's head was acked
        assert all(m.receipt.startswith("c2@") for m in early)
        other.ack(queue, early)
        late = _take(other, queue, deadline + 5.0, want=3)
        came = time.monotonic() - deadline
        assert sorted(m.body.decode() for m in late) == sorted(m.body.decode() for m in kept)
        assert {m.receive_count for m in late} == {2}  # the source's receive count went on
        assert came < 4.0, f"came back {came:.1f} s after the deadline"
        other.ack(queue, late)
        again = _take(other, queue, time.monotonic() + 2.0)
        assert again == [], [m.body for m in again]  # the acked half: never delivered again
        with fleet.managers.admin() as admin:
            _wait("lease tail done", lambda: admin.move_status(queue).moves[0].phase == "done", 10)
            assert admin.move_status(queue).moves[0].leases_left == 0
        print(f"carried leases: 3 acked at the source never redelivered; 3 back "
              f"{came:.2f} s after their deadline")  # fmt: skip
    finally:
        holder.close()
        other.close()


def test_a_nack_at_the_source_after_the_cut_over_frees_the_copy_at_once(fleet: Fleet) -> None:
    """5 messages held for 30 s when the queue moves: 2 nacked at the source
    come from the target at once; one whose visibility is set to 2 s at the
    source comes from the target 2 s later; the manager leader is killed, the
    other 2 are acked at the source and the next leader settles their copies
    (the move is done long before their deadline, nothing comes back)."""
    queue = "carry-nack"
    bodies = [(f"n{i}", f"k{i}") for i in range(5)]
    holder, held, leased_at = _leased_then_moved(fleet, queue, bodies, 30_000)
    other = fleet.managed()
    try:
        nacked = [m for m in held if m.body.decode() in ("n0", "n1")]
        shortened = [m for m in held if m.body.decode() == "n4"]
        began = time.monotonic()
        assert all(r.ok for r in holder.nack(queue, nacked))
        assert all(r.ok for r in holder.change_visibility(queue, shortened, 2000))
        got = _take(other, queue, began + 5.0, want=2)
        took = time.monotonic() - began
        assert sorted(m.body.decode() for m in got) == ["n0", "n1"] and took < 1.5, took
        later = _take(other, queue, began + 6.0, want=1)
        shown = time.monotonic() - began
        assert [m.body.decode() for m in later] == ["n4"] and 1.8 < shown < 4.5, shown
        assert _take(other, queue, time.monotonic() + 1.0) == []  # n2, n3: still held
        got += later
        other.ack(queue, got)
        with fleet.managers.admin() as admin:
            leader = admin.list_clusters().leader
            assert admin.move_status(queue).moves[0].leases_left in (2, 3)  # n4's: ended soon
        victim = fleet.managers.addresses.index(leader)
        fleet.managers.kill(victim)  # mid-phase: the next leader follows the other two
        try:
            rest = [m for m in held if m not in nacked + shortened]
            assert all(r.ok for r in holder.ack(queue, rest))
            _wait("lease tail done", lambda: _phase(fleet, queue) == "done", 15)  # not 30 s
        finally:
            fleet.managers.start(victim)
        assert time.monotonic() - leased_at < 28
        assert _take(other, queue, time.monotonic() + 1.0) == []
        print(f"a nack at the source freed the copy on the target in {took:.2f} s; a "
              f"visibility of 2 s set at the source showed it after {shown:.2f} s")  # fmt: skip
    finally:
        holder.close()
        other.close()


def test_carry_and_settle_are_admin_only_and_bad_input_writes_nothing(fleet: Fleet) -> None:
    with fleet.c2.client() as admin:
        admin.create_queue("cl-auth", partitions=1)
        admin.send("cl-auth", "x")
        user = admin.create_principal("cl-user").token
        admin.add_grant("cl-user", "cl-*", ["send", "receive", "read", "manage"])
    far = int(time.time() * 1000) + 60_000
    lease = queue_pb2.CarriedLease(offset=0, deadline_ms=far, receive_count=1)
    carry = queue_pb2.CarryLeasesRequest(queue="cl-auth", leases=[lease, lease])  # repeated
    settle = queue_pb2.SettleCarriedRequest(queue="cl-auth", offsets=[0], action="ack")
    md = (("authorization", f"Bearer {fleet.c2.token}"),)
    with grpc.insecure_channel(fleet.c2.specs[0].address) as ch:
        stub = queue_pb2_grpc.QueueServiceStub(ch)
        for call, request in ((stub.CarryLeases, carry), (stub.SettleCarried, settle)):
            with pytest.raises(grpc.RpcError) as denied:
                call(request, metadata=(("authorization", f"Bearer {user}"),), timeout=20)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        bad_settle = queue_pb2.SettleCarriedRequest(queue="cl-auth", offsets=[0], action="eat")
        for call, request, field_ in (
            (stub.CarryLeases, carry, "leases[1].offset"),
            (stub.SettleCarried, bad_settle, "action"),
            (stub.SettleCarried, queue_pb2.SettleCarriedRequest(queue="cl-auth", action="ack"),
             "offsets"),
        ):  # fmt: skip
            with pytest.raises(grpc.RpcError) as refused:
                call(request, metadata=md, timeout=20)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert ("raftq-field", field_) in (refused.value.trailing_metadata() or ())
    with fleet.c2.client() as admin:  # nothing was leased: the message is there to take
        assert len(admin.receive("cl-auth", max_messages=1, wait_ms=2000)) == 1


# ---- delays carried across a move ----------------------------------------------------------


def test_pending_delays_are_carried_to_the_copies(fleet: Fleet) -> None:
    """``due`` is sent with a 1 s delay and waits it out at the source;
    ``later`` with a 9 s delay; then the queue is moved. On the target
    ``due`` is visible at once and ``later`` once its own 9 s are over (not
    at once, nor 9 s after the copy)."""
    queue = "delays-moved"
    with fleet.managed() as client:
        client.create_queue(queue, partitions=1, clusters=["c1"])
        sent_at = time.monotonic()
        client.send(queue, "later", delay_ms=9000)
        client.send(queue, "due", delay_ms=1000)
        time.sleep(max(0.0, sent_at + 1.3 - time.monotonic()))  # "due" is visible at c1 now
        started = fleet.raftq("queue", "move", queue, "--to", "c2", "--execute", "--no-wait")
        assert started.exit_code == 0, started.output
        _wait(f"{queue} moved", lambda: _phase(fleet, queue) == "done", 30)
        first = _take(client, queue, time.monotonic() + 2.0, want=1)
        assert [m.body for m in first] == [b"due"]
        assert first[0].receipt.startswith("c2@")
        client.ack(queue, first)
        assert time.monotonic() < sent_at + 8.5, "the move took too long to test the delay"
        assert client.receive(queue, max_messages=10) == []  # "later" still delayed
        late = _take(client, queue, sent_at + 15.0, want=1)
        got_at = time.monotonic() - sent_at
        assert [m.body for m in late] == [b"later"]
        assert 8.9 <= got_at < 11.0, got_at  # its own delay, not its delay after the copy
        client.ack(queue, late)
