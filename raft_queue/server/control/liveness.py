"""Node liveness, judged by the metadata leader from heartbeats.

Heartbeats are kept in this process's memory only (``beat``); what goes
through Raft is a *state change*: alive -> suspect after
``cluster.suspect_after_s`` of silence, -> dead after ``dead_after_s``, and
back to alive on the next heartbeat (``SetNodeState``), as Kafka's
controller fences brokers whose session expired. ``draining`` and
``removed`` are operator states and are never touched here.

A node that just became metadata leader has no heartbeat history: it counts
every alive node as seen at that moment, so a failover never marks the
cluster suspect (a node that really is down is judged ``suspect_after_s``
later), and a suspect or dead node stays so until it heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from raft_queue.config import ClusterTuning
from raft_queue.core import metadata as meta

if TYPE_CHECKING:
    from raft_queue.server.node import Node

log = logging.getLogger(__name__)

JUDGED_STATES = ("alive", "suspect", "dead")


def judge(state: str, silent_s: float, tuning: ClusterTuning) -> str:
    """The state a node in ``state`` should have after ``silent_s`` without
    a heartbeat (pure; operator states are kept)."""
    if state not in JUDGED_STATES:
        return state
    if silent_s >= tuning.dead_after_s:
        return "dead"
    if silent_s >= tuning.suspect_after_s:
        return "dead" if state == "dead" else "suspect"
    return "alive"


class Liveness:
    """Heartbeat times (asyncio thread only) and the loop that turns them into
    node states while this node leads the metadata group."""

    def __init__(self, node: Node, tuning: ClusterTuning, clock: Any = time.monotonic) -> None:
        self.node = node
        self.tuning = tuning
        self.clock = clock
        self.last_seen: dict[str, float] = {}
        self.failed: dict[str, str] = {}  # node id -> a replica's fail-stop reason
        self._leading = False

    def beat(self, node_id: str, failure: str = "") -> None:
        """A heartbeat. One from a node with a fail-stopped replica (a storage
        error, server/control/disk.py) does not count: the node turns suspect, then
        dead, and the repair moves its replicas elsewhere."""
        if failure:
            if node_id not in self.failed:
                log.error("node %s reports a failed replica: %s", node_id, failure)
            self.failed[node_id] = failure
            return
        self.failed.pop(node_id, None)
        self.last_seen[node_id] = self.clock()

    def age_s(self, node_id: str) -> float | None:
        seen = self.last_seen.get(node_id)
        return None if seen is None else self.clock() - seen

    async def run_forever(self, period_s: float = 0.25) -> None:
        while True:
            try:
                await self.check()
            except Exception as exc:  # the next round retries
                log.debug("liveness check failed: %s", exc)
            await asyncio.sleep(period_s)

    def _start_leading(self) -> None:
        """Fresh history: every node counts as seen now, except that a node
        already suspect or dead keeps that judgement until it heartbeats."""
        now = self.clock()
        back = {"suspect": self.tuning.suspect_after_s, "dead": self.tuning.dead_after_s}
        self.last_seen = {
            n.node_id: now - back.get(n.state, 0.0) for n in self.node.view.nodes().values()
        }

    async def check(self) -> None:
        """One round: on the metadata leader, write every state change."""
        md = self.node.metadata
        leading = md is not None and md.is_leader()
        if leading and not self._leading:
            self._start_leading()
        self._leading = leading
        if not leading:
            return
        disk = getattr(self.node, "disk", None)  # server/control/disk.py (absent in some fakes)
        self.beat(self.node.id, disk.failure() if disk is not None else "")
        now_ms = int(time.time() * 1000)
        for node in self.node.view.nodes().values():
            silent = self.clock() - self.last_seen.setdefault(node.node_id, self.clock())
            state = judge(node.state, silent, self.tuning)
            if state != node.state:
                log.info("node %s: %s -> %s", node.node_id, node.state, state)
                await self.node.submit_metadata(meta.SetNodeState(node.node_id, state, now_ms))
