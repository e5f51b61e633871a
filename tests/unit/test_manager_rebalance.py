"""The rebalancer (manager/rebalance.py) on a real ManagerMachine, a fake clock
and a recording start_move: when it moves, what, where, and when it holds back."""

from __future__ import annotations

import asyncio
from typing import Any

from raft_queue import errors
from raft_queue.manager import move_state, state
from raft_queue.manager.heat import Balance, ClusterHeat, HeatMeter
from raft_queue.manager.rebalance import Rebalancer

BAR = Balance(auto_move=True, overheat_msgs_per_s=1000, overheat_for_s=10, cooldown_s=60)


class FakeNode:
    def __init__(self) -> None:
        self.view = state.ManagerMachine()
        for name in ("c1", "c2", "c3"):
            self.view.apply(state.AddCluster(name, ("127.0.0.1:1",), "", 0))
            self.view.apply(state.ReportHealth(name, "healthy", 1, "", 0))
        for queue, cluster in (("hot", "c1"), ("warm", "c1"), ("other", "c2")):
            home = (state.PartitionHome(cluster, 0),)
            self.view.apply(state.PlaceQueue(queue, home, {"partitions": 1}, 0))

    def can_serve(self) -> bool:
        return True


class Harness:
    def __init__(self, settings: Balance = BAR, refuse: str = "") -> None:
        self.node, self.meter, self.now = FakeNode(), HeatMeter(), 0.0
        self.started: list[tuple[str, str]] = []
        self.refuse = refuse

        async def start_move(queue: str, target: str) -> Any:
            if queue == self.refuse:
                raise errors.FailedPrecondition(f"queue: {queue!r} was split on c1")
            self.started.append((queue, target))
            self.node.view.apply(move_state.StartMove(queue, target, 0))

        self.rebalancer = Rebalancer(
            self.node,
            self.meter,
            settings,
            start_move,
            1.0,
            lambda: self.now,  # type: ignore[arg-type]
        )

    def heat(self, **clusters: dict[str, float]) -> None:
        for name, queues in clusters.items():
            self.meter.heat[name] = ClusterHeat(2, queues)

    def step_at(self, now: float) -> Any:
        self.now = now
        return asyncio.run(self.rebalancer.step())


def test_a_cluster_that_stays_hot_loses_its_hottest_queue_to_the_coolest_cluster() -> None:
    h = Harness()
    h.heat(c1={"hot": 2400.0, "warm": 300.0}, c2={"other": 1400.0}, c3={})
    assert h.step_at(0.0) is None  # above the bar, not for long enough yet
    assert h.step_at(9.0) is None
    assert h.step_at(10.0) == ("warm", "c3")  # hot (2400) would overheat any target
    assert h.started == [("warm", "c3")]
    assert "moving warm from c1 to c3" in h.rebalancer.decisions[-1]


def test_it_holds_back_while_a_move_runs_during_the_cooldown_and_when_switched_off() -> None:
    h = Harness()
    h.heat(c1={"hot": 1500.0, "warm": 900.0}, c2={}, c3={})
    h.step_at(0.0)
    assert h.step_at(10.0) == ("hot", "c2")
    h.node.view.apply(move_state.SetMovePhase("hot", "starting", "cancelling", 0))
    h.node.view.apply(move_state.SetMovePhase("hot", "cancelling", "cancelled", 0))
    h.heat(c1={"hot": 1500.0, "warm": 900.0})  # still hot: the move was cancelled
    h.step_at(11.0)
    assert h.step_at(30.0) is None  # overheated again, but within the 60 s cooldown
    assert h.step_at(71.0) == ("hot", "c2")
    off = Harness(Balance(auto_move=False, overheat_msgs_per_s=1000, overheat_for_s=10))
    off.heat(c1={"hot": 2400.0})
    off.step_at(0.0)
    assert off.step_at(100.0) is None and off.started == []
    assert off.rebalancer.watch.overheated(100.0) == ["c1"]  # still measured and judged


def test_a_refused_queue_is_left_alone_and_the_next_one_is_tried() -> None:
    h = Harness(refuse="hot")
    h.heat(c1={"hot": 1500.0, "warm": 900.0}, c2={}, c3={})
    h.step_at(0.0)
    assert h.step_at(10.0) == ("warm", "c2")
    assert any("not moving hot" in d and "split" in d for d in h.rebalancer.decisions)


def test_nothing_moves_when_every_target_would_overheat_too() -> None:
    h = Harness()
    h.heat(c1={"hot": 5000.0}, c2={"other": 1900.0}, c3={"x": 1900.0})
    h.step_at(0.0)
    assert h.step_at(20.0) is None and h.started == []
