"""Node.reconcile with a slow replica open: the open that outlives one round is
adopted by a later round, never started twice (which failed forever with LMDB's
"already open" and left the node without that replica)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from raft_queue import config as config_mod
from raft_queue.server import node as node_mod
from raft_queue.server.node import Node
from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration


def test_a_replica_that_opens_slowly_is_adopted_not_opened_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LocalCluster(tmp_path / "c", nodes=1) as cluster:
        cluster.start()
        cluster.wait_ready(60)
        with cluster.client() as client:
            client.create_queue("slow", partitions=2, replication_factor=1)
        time.sleep(2.0)  # pysyncobj saves the commit index once a second
    real_open = Node._open_replica
    opens: list[str] = []

    def slow_open(self: Node, key: Any, me: str, peers: list[str]) -> Any:
        opens.append(key.name)
        time.sleep(1.0)  # longer than one reconcile round waits
        return real_open(self, key, me, peers)

    monkeypatch.setattr(Node, "_open_replica", slow_open)
    monkeypatch.setattr(node_mod, "OPEN_TIMEOUT_S", 0.2)
    node = Node(config_mod.load(cluster.specs[0].config_path))
    node.start(asyncio.new_event_loop())
    try:
        deadline = time.monotonic() + 20
        while len(node.replicas) < 2 and time.monotonic() < deadline:
            node.reconcile()
        assert sorted(k.partition for k in node.replicas) == [0, 1]
        assert sorted(opens) == sorted(set(opens)), f"opened twice: {opens}"
        assert len(node.host.keys()) == 3  # the metadata group and two partitions
    finally:
        node.stop()


def test_replicas_open_only_once_the_metadata_view_is_vouched_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after a start the view may be the metadata snapshot only: a
    replica opened from it may get the peers of an assignment a move has
    since changed, and is never re-peered. The first reconcile waits for
    the barrier's vouch; one that never comes is waited out
    (FIRST_OPEN_WAIT_S), so a metadata outage does not keep the data plane closed."""
    with LocalCluster(tmp_path / "c", nodes=1) as cluster:
        cluster.start()
        cluster.wait_ready(60)
    rounds: list[float] = []
    monkeypatch.setattr(Node, "reconcile", lambda self: rounds.append(time.monotonic()))
    node = Node(config_mod.load(cluster.specs[0].config_path))
    vouched: list[float] = []

    async def vouch() -> None:
        if len(vouched) < 3:
            vouched.append(time.monotonic())
            raise node_mod.errors.Unavailable("view behind")
        vouched.append(time.monotonic())

    async def never() -> None:
        raise node_mod.errors.Unavailable("no metadata leader")

    async def run(v: Any, secs: float) -> None:
        task = asyncio.create_task(node.reconcile_forever(v))
        await asyncio.sleep(secs)
        task.cancel()

    asyncio.run(run(vouch, 1.5))
    assert len(vouched) == 4 and rounds, "no reconcile after the vouch"
    assert rounds[0] >= vouched[-1], "a replica was opened before the view was vouched for"
    rounds.clear()
    monkeypatch.setattr(node_mod, "FIRST_OPEN_WAIT_S", 0.5)
    started = time.monotonic()
    asyncio.run(run(never, 1.5))
    assert rounds and rounds[0] - started >= 0.5, "waited less than FIRST_OPEN_WAIT_S"
