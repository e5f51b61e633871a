"""Cluster operations on real node processes: liveness states, replica moves
under load (nothing acknowledged lost or duplicated, replicas identical),
cancel, bad input, drain and automatic repair of a dead node."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.cli.main import main as raftq
from raft_queue.testing.cluster import LocalCluster
from tests.integration.conftest import Producer, read_all, wait_identical_replicas

pytestmark = pytest.mark.integration

TUNING = {"heartbeat_period_s": 0.2, "suspect_after_s": 1.0, "dead_after_s": 2.0,
          "repair_after_s": 3.0}  # fmt: skip


def wait_for(pred: Callable[[], Any], timeout_s: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def four(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster", nodes=4, cluster_tuning=TUNING)
    c.start()
    try:
        c.wait_ready(60)
        yield c
    except BaseException:
        for i in range(c.nodes):
            print(f"--- n{i + 1} log tail ---")
            print("\n".join(c.log_path(i).read_text(errors="replace").splitlines()[-40:]))
        raise
    finally:
        c.stop()


def cli(cluster: LocalCluster, *args: str) -> Any:
    result = CliRunner().invoke(raftq, ["--server", cluster.bootstrap, *args])
    return result


def states(client: Any) -> dict[str, str]:
    return {n.id: n.state for n in client.cluster_status().nodes}


def replicas_of(client: Any, queue: str) -> dict[int, list[str]]:
    return {p.partition: list(p.replicas) for p in client.partitions(queue)}


def check_nothing_lost(client: Any, queue: str, producer: Producer) -> None:
    """Every acknowledged message is stored once, where its ack said."""
    stored = wait_for(lambda: _read(client, queue), what="a full read")
    counts = Counter(stored.values())
    assert not [b for b, n in counts.items() if n > 1 and b in producer.acked]
    for body, where in producer.acked.items():
        assert stored.get(where) == body, f"{body!r} acked at {where} but not stored there"
    wait_identical_replicas(client, queue)


def _read(client: Any, queue: str) -> dict[tuple[int, int], bytes] | None:
    try:
        return read_all(client, queue)
    except Exception:
        return None


def test_a_killed_node_becomes_suspect_then_dead_and_alive_again_on_restart(
    four: LocalCluster,
) -> None:
    client = four.client()
    four.kill(3)
    wait_for(lambda: states(client)["n4"] == "suspect", 10, "suspect")
    wait_for(lambda: states(client)["n4"] == "dead", 10, "dead")
    shown = cli(four, "cluster", "status")
    assert "dead" in shown.output
    four.start(3)
    wait_for(lambda: states(client)["n4"] == "alive", 30, "alive again")


def test_a_replica_moves_under_load_without_losing_or_duplicating_anything(
    four: LocalCluster,
) -> None:
    client = four.client()
    client.create_queue("q", partitions=2, replication_factor=3)
    before = replicas_of(client, "q")
    source = before[0][0]  # the preferred leader: leadership must move off it
    target = next(n for n in ("n1", "n2", "n3", "n4") if n not in before[0])
    producer = Producer(four.client(), "q").start()
    time.sleep(1.0)
    started = time.monotonic()
    result = cli(four, "partitions", "move", "q", "0", "--from", source, "--to", target)
    took = time.monotonic() - started
    time.sleep(0.5)
    producer.stop()
    assert result.exit_code == 0, result.output
    print(f"move took {took:.1f} s with {len(producer.acked)} messages acked")
    after = replicas_of(client, "q")
    assert after[0] == [target if n == source else n for n in before[0]]
    assert after[1] == before[1]
    assert len(producer.acked) > 0
    check_nothing_lost(client, "q", producer)


def test_bad_moves_are_refused_and_change_nothing(four: LocalCluster) -> None:
    client = four.client()
    client.create_queue("q", partitions=1, replication_factor=3)
    held = replicas_of(client, "q")[0]
    free = next(n for n in ("n1", "n2", "n3", "n4") if n not in held)
    bad = [
        ("--from", held[0], "--to", "n9"),  # unknown node
        ("--from", held[0], "--to", held[1]),  # already holds a replica
        ("--from", free, "--to", held[0]),  # from holds none
    ]
    for args in bad:
        result = cli(four, "partitions", "move", "q", "0", *args)
        assert result.exit_code == 1, result.output
    assert cli(four, "partitions", "move", "q", "0", "--from", held[0], "--to", "").exit_code
    assert replicas_of(client, "q")[0] == held
    assert not [m for m in _moves(four)]


def _moves(cluster: LocalCluster) -> list[Any]:
    result = cli(cluster, "partitions", "status", "--json")
    assert result.exit_code == 0, result.output
    import json

    return list(json.loads(result.output))


def test_a_second_move_of_a_partition_is_refused_and_a_move_can_be_cancelled(
    four: LocalCluster,
) -> None:
    client = four.client()
    client.create_queue("q", partitions=1, replication_factor=3)
    held = replicas_of(client, "q")[0]
    free = next(n for n in ("n1", "n2", "n3", "n4") if n not in held)
    first = cli(four, "partitions", "move", "q", "0", "--from", held[2], "--to", free, "--no-wait")
    assert first.exit_code == 0, first.output
    second = cli(four, "partitions", "move", "q", "0", "--from", held[1], "--to", free)
    assert second.exit_code == 1 and "in flight" in second.output
    cancel = cli(four, "partitions", "cancel", "q", "0")
    if cancel.exit_code == 0:  # else it already reached the remove step
        wait_for(lambda: not _moves(four), 30, "the cancel")
        assert replicas_of(client, "q")[0] == held
    else:
        assert "removing" in cancel.output or "no move" in cancel.output
    wait_for(lambda: not _moves(four), 30, "no move left")
    wait_identical_replicas(client, "q")
