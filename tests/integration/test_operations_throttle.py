"""Throttled replica moves on real node processes: ``raftq partitions move
--throttle`` takes at least (bytes the new replica must receive) / rate,
shows its progress while it runs, and can be cancelled midway.

Timing is checked as a lower bound only: a loaded machine makes anything
slower, never faster than the limit."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raft_queue.client import OutgoingMessage
from raft_queue.testing.cluster import LocalCluster
from tests.integration.conftest import wait_identical_replicas
from tests.integration.test_operations import TUNING, cli, replicas_of, running, wait_for

pytestmark = pytest.mark.integration

BODY = 1000
MESSAGES = 2000  # 2 MB of bodies: what any catch-up (snapshot or log) must carry


@pytest.fixture
def four_compacting(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from running(tmp_path, TUNING, raft={"log_compaction_min_entries": 50})


def fill(client: Any) -> int:
    client.create_queue("q", partitions=1, replication_factor=3)
    for k in range(MESSAGES // 100):
        batch = [OutgoingMessage(f"{k:04d}-{j:03d}-".encode() + b"x" * (BODY - 9))
                 for j in range(100)]  # fmt: skip
        client.send_batch("q", batch)
    return MESSAGES * BODY


def target_of(client: Any) -> tuple[str, str]:
    replicas = replicas_of(client, "q")[0]
    source = replicas[-1]
    return source, next(n for n in ("n1", "n2", "n3", "n4") if n not in replicas)


def test_a_throttled_move_takes_at_least_its_bytes_over_the_rate_and_shows_progress(
    four_compacting: LocalCluster,
) -> None:
    four = four_compacting
    client = four.client()
    payload = fill(client)
    source, target = target_of(client)
    rate = 400_000  # >= 5 s for 2 MB
    seen: list[Any] = []
    started = time.monotonic()
    client.move_partition("q", 0, source, target, throttle_bytes_per_s=rate)

    def done() -> bool:
        moves = list(client.list_moves().moves)
        seen.extend(moves)
        return not moves

    wait_for(done, 120, "the throttled move")
    elapsed = time.monotonic() - started
    assert elapsed >= payload / rate, (elapsed, payload / rate)
    assert target in replicas_of(client, "q")[0] and source not in replicas_of(client, "q")[0]
    assert {m.throttle_bytes_per_s for m in seen} == {rate}
    sent = [m.bytes_sent for m in seen if m.bytes_sent]
    assert len(set(sent)) >= 3 and sent == sorted(sent), "progress grows while it runs"
    shown = cli(four, "partitions", "status")  # the table has the columns, even when empty
    assert shown.exit_code == 0 and "throttle" in shown.output
    wait_identical_replicas(client, "q")


def test_a_throttled_move_can_be_cancelled_midway(four_compacting: LocalCluster) -> None:
    four = four_compacting
    client = four.client()
    fill(client)
    before = replicas_of(client, "q")[0]
    source, target = target_of(client)
    result = cli(four, "partitions", "move", "q", "0", "--from", source, "--to", target,
                 "--throttle", "100kB/s", "--no-wait", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert int(json.loads(result.output)["throttle_bytes_per_s"]) == 100_000

    def sending() -> bool:
        moves = list(client.list_moves().moves)
        return bool(moves and moves[0].bytes_sent > 0)

    wait_for(sending, 30, "catch-up to start")
    status = cli(four, "partitions", "status", "--json")
    assert int(json.loads(status.output)[0]["bytes_sent"]) > 0
    cancelled = cli(four, "partitions", "cancel", "q", "0")
    assert cancelled.exit_code == 0, cancelled.output
    wait_for(lambda: not list(client.list_moves().moves), 30, "the cancel")
    assert replicas_of(client, "q")[0] == before
    client.send("q", b"after the cancel")
    wait_identical_replicas(client, "q")
