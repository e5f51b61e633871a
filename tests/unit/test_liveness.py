"""Liveness: heartbeat silence -> node state, on the metadata leader only,
with a fake clock (no sockets, no sleeps)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raft_queue.config import ClusterTuning
from raft_queue.core import metadata as meta
from raft_queue.server.control.liveness import Liveness, judge

TUNING = ClusterTuning(heartbeat_period_s=1.0, suspect_after_s=5.0, dead_after_s=30.0)


@pytest.mark.parametrize(
    ("state", "silent", "expected"),
    [
        ("alive", 1.0, "alive"),
        ("alive", 5.0, "suspect"),
        ("alive", 30.0, "dead"),
        ("suspect", 1.0, "alive"),
        ("dead", 10.0, "dead"),  # a dead node does not become suspect again
        ("dead", 0.5, "alive"),
        ("draining", 100.0, "draining"),  # operator states are never judged
        ("removed", 100.0, "removed"),
    ],
)
def test_judge(state: str, silent: float, expected: str) -> None:
    assert judge(state, silent, TUNING) == expected


class FakeNode:
    """The metadata leader as Liveness sees it: a view and submit_metadata."""

    def __init__(self) -> None:
        self.id = "n1"
        self.view = meta.MetadataMachine()
        for i in (1, 2):
            self.view.apply(meta.RegisterNode(f"n{i}", f"h:{i}", "h", 1000 * i, 1000 * i + 9))
        self.leader = True
        self.metadata = self
        self.submitted: list[Any] = []

    def is_leader(self) -> bool:
        return self.leader

    async def submit_metadata(self, cmd: Any) -> Any:
        self.submitted.append(cmd)
        return self.view.apply(cmd)


def test_only_state_changes_are_written_and_a_heartbeat_brings_a_node_back() -> None:
    node, now = FakeNode(), [100.0]
    live = Liveness(node, TUNING, clock=lambda: now[0])
    run = asyncio.run
    run(live.check())
    now[0] += 4.0
    run(live.check())
    assert node.submitted == []  # silence below suspect_after_s: nothing written
    now[0] += 1.0
    run(live.check())
    assert [(c.node_id, c.state) for c in node.submitted] == [("n2", "suspect")]
    run(live.check())
    assert len(node.submitted) == 1  # no rewrite of an unchanged state
    now[0] += 25.0
    run(live.check())
    assert node.view.nodes()["n2"].state == "dead"
    assert node.view.nodes()["n1"].state == "alive"  # the leader counts itself
    live.beat("n2")
    run(live.check())
    assert node.view.nodes()["n2"].state == "alive"


def test_a_new_leader_does_not_revive_a_dead_node_nor_suspect_the_others() -> None:
    node, now = FakeNode(), [100.0]
    node.view.apply(meta.SetNodeState("n2", "dead"))
    node.leader = False
    live = Liveness(node, TUNING, clock=lambda: now[0])
    asyncio.run(live.check())
    node.leader = True
    asyncio.run(live.check())
    assert node.submitted == []
    assert node.view.nodes()["n2"].state == "dead"


def test_heartbeats_reporting_a_failed_replica_do_not_count() -> None:
    """A node whose replica stopped on a storage error (fail-stop) keeps
    heartbeating with the reason: it goes suspect, then dead, so the repair
    moves its replicas; a clean heartbeat (after a restart) brings it back."""
    node, now = FakeNode(), [100.0]
    live = Liveness(node, TUNING, clock=lambda: now[0])
    run = asyncio.run
    run(live.check())
    for _ in range(31):
        now[0] += 1.0
        live.beat("n2", "replica q.1.0 failed: journal sync failed: EIO")
        run(live.check())
    assert node.view.nodes()["n2"].state == "dead"
    assert "journal sync failed" in live.failed["n2"]
    live.beat("n2")
    run(live.check())
    assert node.view.nodes()["n2"].state == "alive" and "n2" not in live.failed
