"""Cluster operations on real node processes: liveness states, replica moves
under load (nothing acknowledged lost or duplicated, replicas identical),
cancel, bad input, leader balance, drain and automatic repair of a dead node.
Each test has its own 4-node cluster with short liveness times (TUNING)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

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
    yield from running(tmp_path, TUNING)


@pytest.fixture
def four_patient(tmp_path: Path) -> Iterator[LocalCluster]:
    """Nodes stay alive through 10 s of silence (a paused node is still a move target)."""
    yield from running(tmp_path, {**TUNING, "suspect_after_s": 10.0, "dead_after_s": 20.0,
                                  "repair_after_s": 60.0})  # fmt: skip


def running(
    tmp_path: Path, tuning: dict[str, float], raft: dict[str, Any] | None = None
) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster", nodes=4, cluster_tuning=tuning, raft=raft or {})
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
    argv = ["--server", cluster.bootstrap, "--token", cluster.token, *args]
    result = CliRunner().invoke(raftq, argv)
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
    return list(json.loads(result.output))


def test_a_second_move_of_a_partition_is_refused_while_the_first_runs(
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
    wait_for(lambda: not _moves(four), 30, "the first move")
    assert replicas_of(client, "q")[0] == [*held[:2], free]
    wait_identical_replicas(client, "q")


def holders(client: Any, queue: str) -> Counter[str]:
    return Counter(n for nodes in replicas_of(client, queue).values() for n in nodes)


def test_a_drained_node_ends_empty_under_load_and_can_then_be_removed(four: LocalCluster) -> None:
    client = four.client()
    client.create_queue("q", partitions=3, replication_factor=3)
    victim = holders(client, "q").most_common()[-1][0]
    producer = Producer(four.client(), "q").start()
    time.sleep(1.0)
    assert cli(four, "node", "remove", victim).exit_code == 1  # still holds replicas
    started = time.monotonic()
    result = cli(four, "node", "drain", victim)
    print(f"drain took {time.monotonic() - started:.1f} s")
    producer.stop()
    assert result.exit_code == 0, result.output
    assert victim not in holders(client, "q")
    assert sorted(holders(client, "q").values()) == [3, 3, 3]  # balanced over the rest
    check_nothing_lost(client, "q", producer)
    assert cli(four, "node", "remove", victim).exit_code == 0
    assert states(client)[victim] == "removed"


def test_the_replicas_of_a_dead_node_are_repaired_under_load(four: LocalCluster) -> None:
    client = four.client(timeout_s=20)
    client.create_queue("q", partitions=3, replication_factor=3)
    victim = "n4"
    assert victim in holders(client, "q")
    producer = Producer(four.client(timeout_s=20), "q").start()
    time.sleep(1.0)
    killed = time.monotonic()
    four.kill(3)
    wait_for(lambda: victim not in holders(client, "q"), 90, "repair")
    print(f"repair done {time.monotonic() - killed:.1f} s after the kill")
    time.sleep(0.5)
    producer.stop()
    assert sorted(holders(client, "q").values()) == [3, 3, 3]
    check_nothing_lost(client, "q", producer)


def test_a_move_cancelled_before_catch_up_leaves_the_assignment_as_it_was(
    four_patient: LocalCluster,
) -> None:
    four = four_patient
    client = four.client()
    client.create_queue("q", partitions=4, replication_factor=3)
    leader = client.cluster_status().metadata_leader  # stays unpaused: it runs the move
    part, held = next((p, nodes) for p, nodes in replicas_of(client, "q").items()
                      if leader in nodes)  # fmt: skip
    free = next(n for n in ("n1", "n2", "n3", "n4") if n not in held)
    four.pause(int(free[1:]) - 1)  # the new replica cannot even start: no catch-up
    try:
        args = ("--from", held[2], "--to", free, "--no-wait")
        moved = cli(four, "partitions", "move", "q", str(part), *args)
        assert moved.exit_code == 0, moved.output
        result = cli(four, "partitions", "cancel", "q", str(part))
        assert result.exit_code == 0, result.output
        wait_for(lambda: not _moves(four), 30, "the cancel")
    finally:
        four.resume(int(free[1:]) - 1)
    after = client.partitions("q")[part]
    assert list(after.replicas) == held and after.epoch == 1
    wait_identical_replicas(client, "q")


def test_leaders_balance_evens_out_preferred_leaders_and_raft_follows(
    four: LocalCluster,
) -> None:
    client = four.client()
    client.create_queue("q", partitions=4, replication_factor=3)
    for p, nodes in replicas_of(client, "q").items():  # pile preferred leaders on n1
        if "n1" in nodes and nodes[0] != "n1":
            client.transfer_leader("q", p, "n1")
    assert len(json.loads(cli(four, "leaders", "balance", "--dry-run", "--json").output)["steps"])
    result = cli(four, "leaders", "balance")
    assert result.exit_code == 0, result.output
    assert json.loads(cli(four, "leaders", "balance", "--dry-run", "--json").output)["steps"] == []
    firsts = Counter(nodes[0] for nodes in replicas_of(client, "q").values())
    assert max(firsts.values()) - min(firsts.get(n, 0) for n in ("n1", "n2", "n3", "n4")) <= 1

    def raft_follows() -> bool:
        return all(p.leader == p.replicas[0] for p in client.partitions("q"))

    wait_for(raft_follows, 30, "raft leaders to follow the preferred order")


def test_a_new_metadata_leader_resumes_a_move_in_flight(four_patient: LocalCluster) -> None:
    four = four_patient
    client = four.client(timeout_s=20)
    client.create_queue("q", partitions=4, replication_factor=3)
    leader = client.cluster_status().metadata_leader
    part, held = next((p, nodes) for p, nodes in replicas_of(client, "q").items()
                      if leader in nodes)  # fmt: skip
    free = next(n for n in ("n1", "n2", "n3", "n4") if n not in held)
    source = next(n for n in held if n != leader)
    producer = Producer(four.client(timeout_s=20), "q").start()
    four.pause(int(free[1:]) - 1)  # holds the move in its first phase
    try:
        args = ("--from", source, "--to", free, "--no-wait")
        moved = cli(four, "partitions", "move", "q", str(part), *args)
        assert moved.exit_code == 0, moved.output
        four.kill(int(leader[1:]) - 1)
    finally:
        four.resume(int(free[1:]) - 1)
    wait_for(lambda: client.cluster_status().metadata_leader not in ("", leader), 30, "failover")
    wait_for(lambda: not _moves(four), 60, "the move, resumed by the new leader")
    assert replicas_of(client, "q")[part] == [free if n == source else n for n in held]
    four.start(int(leader[1:]) - 1)
    four.wait_ready(60)
    producer.stop()
    check_nothing_lost(client, "q", producer)


@pytest.fixture
def four_balancing(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from running(tmp_path, {**TUNING, "leader_imbalance_max": 1})


def test_leaders_are_balanced_automatically_above_the_threshold(
    four_balancing: LocalCluster,
) -> None:
    four = four_balancing
    client = four.client()
    client.create_queue("q", partitions=4, replication_factor=3)
    epochs = sum(p.epoch for p in client.partitions("q"))
    piled = 0
    for p, nodes in replicas_of(client, "q").items():  # pile preferred leaders on n1
        if "n1" in nodes and nodes[0] != "n1":
            client.transfer_leader("q", p, "n1")
            piled += 1

    def balanced() -> bool:
        firsts = Counter(nodes[0] for nodes in replicas_of(client, "q").values())
        counts = [firsts.get(n, 0) for n in ("n1", "n2", "n3", "n4")]
        return max(counts) - min(counts) <= 1

    wait_for(balanced, 30, "automatic leader balance")
    if piled:  # the balancer itself changed assignments after our transfers
        assert sum(p.epoch for p in client.partitions("q")) > epochs + piled
