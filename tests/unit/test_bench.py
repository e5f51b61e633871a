"""The benchmark suite measures what it claims: each workload, cut to about a second,
against a real 3-node cluster, must report complete, internally consistent numbers.

These check the harness, not the speed: a benchmark never fails a build
(docs/benchmarks.md). Units are checked through relations that hold on any
machine (one send in flight: rate x median latency is about 1).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from click.testing import CliRunner

from raft_queue.bench import workloads as wl
from raft_queue.bench.cluster import local_cluster
from raft_queue.bench.peer_adapter import RaftQueueAdapter
from raft_queue.cli.bench import _schedule, summarize
from raft_queue.cli.main import main
from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)
integration = pytest.mark.integration  # the tests that start node processes

TINY = wl.Params(
    w1_secs=1.0,
    w1_warmup=10,
    w2_secs=1.0,
    batch=500,
    inflight=2,
    w3_msgs=2000,
    w3_receive=500,
    w4_rate=200.0,
    w4_secs=2.0,
    idle_replicas=(2, 3),
    idle_secs=1.0,
    settle_secs=0.5,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = tmp_path_factory.mktemp("bench") / "cluster"
    with local_cluster(base, 3, ports_per_node=20) as c:  # stops the nodes on exit
        c.start()
        c.wait_ready(60)
        yield c


@pytest.fixture(scope="module")
def target(cluster: LocalCluster) -> Iterator[wl.Target]:
    with cluster.client(timeout_s=30) as client:
        pids = [cluster.pid(i) for i in range(3)]
        yield wl.Target(client, cluster.bootstrap, pids, "-t", cluster.token)


@integration
def test_local_cluster_gives_each_node_its_own_port_range(cluster: LocalCluster) -> None:
    ranges = sorted((s.raft_port_min, s.raft_port_max) for s in cluster.specs)
    assert all(hi - lo + 1 == 20 for lo, hi in ranges)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))


@integration
def test_w1_one_in_flight_rate_matches_its_latency(target: wl.Target) -> None:
    m = wl.w1(target, TINY).metrics
    assert m["msgs_per_s"] > 0
    assert 0 < m["p50_ms"] <= m["p99_ms"] <= m["p99.9_ms"] < 5000
    assert 0.2 < m["msgs_per_s"] * m["p50_ms"] / 1000 < 2  # one at a time: rate ~ 1/latency


@integration
def test_w2_counts_only_whole_acked_batches(target: wl.Target) -> None:
    r = wl.w2(target, TINY)
    assert r.metrics["msgs_per_s"] > 0
    assert r.info["msgs"] > 0 and r.info["msgs"] % TINY.batch == 0
    assert r.info["cpu"]["server_pct"] > 0


@integration
def test_w3_drains_every_message_exactly_once(target: wl.Target) -> None:
    r = wl.w3(target, TINY)
    assert r.metrics["missing"] == 0 and r.metrics["duplicates"] == 0
    assert r.info["complete"] and r.info["ack_failed"] == 0
    assert r.metrics["msgs_per_s"] > 0 and r.metrics["prefill_msgs_per_s"] > 0


@integration
def test_w4_latency_is_measured_across_processes(target: wl.Target) -> None:
    r = wl.w4(target, TINY)
    m = r.metrics
    assert m["missing"] == 0 and m["duplicates"] == 0
    assert 0 < m["p50_ms"] <= m["p99_ms"] < 10_000  # same monotonic clock in both processes
    assert m["p99_ms"] <= m["p99_incl_ack_ms"]  # the ack comes after the receive
    assert r.info["recv"]["n"] == 400 - 40  # 2 s at 200/s, minus the first second's 10 %


@integration
def test_idle_cpu_is_per_node_and_the_queues_are_removed(target: wl.Target) -> None:
    r = wl.idle(target, TINY)
    for n in (2, 3):  # grown in steps: the second step adds to the first
        step = r.info[f"replicas{n}"]
        assert step["settled"] and step["hosted"] == {"n1": n, "n2": n, "n3": n}
        assert 0 <= r.metrics[f"cpu{n}_pct"] < 200 and len(step["per_node_pct"]) == 3
    assert not [q for q in target.client.list_queues() if q.name.startswith("bench-idle")]


@integration
def test_idle_is_skipped_without_node_pids(target: wl.Target) -> None:
    remote = wl.Target(target.client, target.bootstrap, [], "-r", target.token)
    assert "skipped" in wl.idle(remote, TINY).info


@integration
def test_peer_adapter_round_trips_a_chunked_batch(cluster: LocalCluster) -> None:
    adapter = RaftQueueAdapter(
        "pb_test", max_inflight=256, target=cluster.bootstrap, token=cluster.token
    )
    adapter.connect()
    try:
        adapter.reset()
        msgs = [wl.make_msg(i, 100) for i in range(2500)]  # 3 Send RPCs of <= 1000
        adapter.publish_batch(msgs)
        got: list[bytes] = []
        while len(got) < len(msgs) and (batch := adapter.consume(256, timeout=1.0)):
            got.extend(batch)
        assert sorted(got) == sorted(msgs)
        assert adapter.consume(256, timeout=0.2) == []  # consumed means acked
        assert set(adapter.server_pids()) >= {cluster.pid(i) for i in range(3)}
    finally:
        adapter.close()


@integration
def test_cli_bench_on_an_existing_cluster_prints_json(cluster: LocalCluster) -> None:
    argv = ["bench", "--server", cluster.bootstrap, "--workloads", "W1,idle", "--runs", "1"]
    argv += ["--scale", "0.05", "--quiet-wait", "0", "--json"]
    result = CliRunner().invoke(main, argv, prog_name="raftq", env={"RAFTQ_TOKEN": cluster.token})
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["workload"] for r in doc["runs"]] == ["W1", "idle"]
    assert "skipped" in doc["runs"][1]["info"]
    assert {r["metric"] for r in doc["summary"]} >= {"msgs_per_s", "p99_ms"}


def test_summary_is_median_and_range_with_targets_judged_on_the_median() -> None:
    runs = [{"workload": "W1", "metrics": {"p99_ms": v}} for v in (12.0, 4.0, 8.0)]
    runs.append({"workload": "W1", "metrics": {"p99_ms": float("nan")}})  # a failed sample
    [row] = summarize(runs)
    assert (row["median"], row["min"], row["max"], row["runs"]) == (8.0, 4.0, 12.0, 3)
    assert row["met"] is True and row["target"] == "<= 10"


def test_scaled_params_keep_workable_floors() -> None:
    tiny = wl.Params().scaled(0.0001)
    assert tiny.w3_msgs == 1000 and tiny.w4_secs == 2.0 and min(tiny.idle_replicas) >= 1


def test_runs_interleave_workloads_and_leave_idle_for_last() -> None:
    order = _schedule(["W1", "idle", "W2"], 2)
    assert order == [(1, "W1"), (1, "W2"), (2, "W1"), (2, "W2"), (1, "idle"), (2, "idle")]


class _ScriptedReceives(ThreadPoolExecutor):
    """The adapter's receiver pool, each submitted Receive answered by the
    next of ``script`` in submission order (so "the older one" is certain),
    then by nothing."""

    def __init__(self, script: list[Callable[[], list[Any]]]) -> None:
        super().__init__(2)
        self.script = deque(script)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        return super().submit(self.script.popleft() if self.script else list)


def test_peer_adapter_takes_the_receive_ahead_that_answers_first() -> None:
    """The older Receive ahead long-polls an empty queue while the younger
    one leased the last messages: consume returns those at once, it does not
    wait out the older one's poll (W3's drain stalled 2 s that way)."""

    class Msg:
        def __init__(self, body: bytes) -> None:
            self.body = body

    class Acks:
        def __init__(self) -> None:
            self.acked: list[bytes] = []

        def ack(self, queue: str, messages: list[Msg], wait: bool) -> list[Any]:
            self.acked += [m.body for m in messages]
            return []

        def receive(self, *args: Any) -> list[Msg]:  # answered by the script instead
            raise AssertionError("not called: _ScriptedReceives runs its script")

    polling = threading.Event()

    def empty_poll() -> list[Msg]:
        polling.wait(10)
        return []

    adapter = RaftQueueAdapter("pb_w3", max_inflight=256, consumer_window=4, prefetch="2")
    client = Acks()
    adapter.client = client  # type: ignore[assignment]
    receiver = _ScriptedReceives(
        [lambda: [Msg(b"1"), Msg(b"2")], empty_poll, lambda: [Msg(b"3"), Msg(b"4")]]
    )
    adapter._receiver = receiver
    try:
        assert adapter.consume(2) == [b"1", b"2"]  # then Receives 2 (older) and 3 leave
        started = time.monotonic()
        assert adapter.consume(2) == [b"3", b"4"]
        assert time.monotonic() - started < 5  # not held by the older Receive's poll
        assert client.acked == [b"1", b"2", b"3", b"4"]
    finally:
        polling.set()
        receiver.shutdown(wait=True)
