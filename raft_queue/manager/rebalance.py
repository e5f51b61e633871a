"""Rebalancer: the manager leader moves a queue off a cluster that stays
overheated, by itself (``[balance] auto_move``; docs/operations.md "Moving a
queue off an overheated cluster by itself").

Every poll period the leader feeds each cluster's heat (manager/heat.py, from
the health poller's counters) to an ``OverheatWatch``. When a cluster has been
above ``overheat_msgs_per_s`` per node for ``overheat_for_s``, no move is
running and the last automatic move is ``cooldown_s`` old, it picks the
hottest queue living wholly on that cluster and the coolest healthy,
undrained cluster that stays under the bar with it (``choose_move``), and
starts the same move an operator's ``raftq queue move`` starts (its checks
included); MoveWatch (manager/moves.py) then carries it out. A queue whose
move is refused (split, a queue of that name on the target, ...) is left
alone for ``cooldown_s``. Nothing here is replicated: a new leader measures
heat again before it acts, so it never acts on a stale picture.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from raft_queue import errors
from raft_queue.manager.heat import Balance, Candidate, HeatMeter, OverheatWatch, choose_move
from raft_queue.manager.node import ManagerNode

log = logging.getLogger(__name__)

StartMove = Callable[[str, str], Awaitable[Any]]


class Rebalancer:
    def __init__(
        self,
        node: ManagerNode,
        meter: HeatMeter,
        settings: Balance,
        start_move: StartMove,
        period_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._node = node
        self._meter = meter
        self._settings = settings
        self._start_move = start_move
        self._period_s = period_s
        self._clock = clock
        self.watch = OverheatWatch(settings)
        self._last_move_at: float | None = None
        self._refused: dict[str, float] = {}  # queue -> when its move was refused
        self.decisions: list[str] = []  # what it did, newest last (for logs and tests)

    async def run_forever(self) -> None:
        while True:
            try:
                if self._node.can_serve():
                    await self.step()
                else:
                    self._last_move_at = None  # a leader again later starts afresh
            except Exception:
                log.exception("rebalance step failed")
            await asyncio.sleep(self._period_s)

    async def step(self) -> tuple[str, str] | None:
        """One look: observe every cluster's heat, maybe start one move."""
        now = self._clock()
        for name, heat in self._meter.heat.items():
            self.watch.observe(name, heat, now)
        if not self._settings.auto_move or self._node.view.active_moves():
            return None
        last = self._last_move_at
        if last is not None and now - last < self._settings.cooldown_s:
            return None
        for source in self.watch.overheated(now):
            # a refused queue is left out of the next choice: at most one try per queue
            while (choice := self._choose(source, now)) is not None:
                if await self._start(source, *choice, now):
                    return choice
        return None

    def _choose(self, source: str, now: float) -> tuple[str, str] | None:
        view = self._node.view
        record = view.cluster(source)
        if record is None or record.health == "down":
            return None  # nothing can be copied off a cluster nobody hears
        cooldown = self._settings.cooldown_s
        wholly_on = {
            q.name: q.clusters()[0]
            for q in view.queues()
            if len(q.clusters()) == 1 and now - self._refused.get(q.name, -cooldown) >= cooldown
        }
        candidates = [
            Candidate(c.name, c.health == "healthy", c.draining) for c in view.clusters().values()
        ]
        return choose_move(source, self._meter.heat, wholly_on, candidates, self._settings)

    async def _start(self, source: str, queue: str, target: str, now: float) -> bool:
        heat = self._meter.heat[source]
        why = (
            f"{source} at {heat.per_node:.0f} msgs/s per node, over "
            f"{self._settings.overheat_msgs_per_s:.0f} for {self._settings.overheat_for_s:.0f} s"
        )
        try:
            await self._start_move(queue, target)
        except errors.QueueError as exc:
            self._refused[queue] = now
            self._note(f"not moving {queue} to {target} ({why}): {exc.message}")
            return False
        self._last_move_at = now
        self.watch.forget(source)
        self._note(f"moving {queue} from {source} to {target}: {why}")
        return True

    def _note(self, line: str) -> None:
        log.warning("auto move: %s", line)
        self.decisions = [*self.decisions[-19:], line]
