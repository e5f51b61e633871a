"""Growing a running cluster: a 4th node that is not a metadata voter joins
by heartbeat, follows the metadata, and ``raftq partitions rebalance
--execute`` moves replicas onto it under load without losing anything, and
the moved groups survive a restart of every node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raft_queue.testing.cluster import LocalCluster
from tests.integration.conftest import Producer
from tests.integration.test_operations import (
    TUNING,
    check_nothing_lost,
    cli,
    holders,
    states,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def three(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster", nodes=3, cluster_tuning=TUNING)
    c.start()
    try:
        c.wait_ready(60)
        yield c
    finally:
        c.stop()


def test_a_new_non_voter_node_joins_and_rebalance_moves_replicas_onto_it(
    three: LocalCluster,
) -> None:
    client = three.client(timeout_s=20)
    client.create_queue("q", partitions=4, replication_factor=3)
    producer = Producer(three.client(timeout_s=20), "q").start()
    i = three.add_node()
    three.start(i)
    wait_for(lambda: states(client).get("n4") == "alive", 30, "n4 registered")
    dry = cli(three, "partitions", "rebalance", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    steps = json.loads(dry.output)["steps"]
    assert [s["to_node"] for s in steps if s["kind"] == "move"] == ["n4"] * 3
    started = time.monotonic()
    result = cli(three, "partitions", "rebalance", "--execute")
    print(f"rebalance of {len(steps)} steps took {time.monotonic() - started:.1f} s")
    producer.stop()
    assert result.exit_code == 0, result.output
    assert sorted(holders(client, "q").values()) == [3, 3, 3, 3]
    assert json.loads(cli(three, "partitions", "rebalance", "--json").output)["steps"] == []
    check_nothing_lost(client, "q", producer)
    # Every node restarts from its journal (which replays the membership
    # changes) with peers from the new assignment: the groups still agree.
    three.stop()
    three.start()
    three.wait_ready(60)
    after = Producer(three.client(timeout_s=20), "q")
    after.acked, after.seq = dict(producer.acked), producer.seq
    before = len(after.acked)
    after.start()
    wait_for(lambda: len(after.acked) > before + 200, 30, "sends after restart")
    after.stop()
    check_nothing_lost(client, "q", after)
