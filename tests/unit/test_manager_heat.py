"""The manager's heat (manager/heat.py): rates from counter samples, the
overheat judgement and the choice of what to move where."""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.client.models import QueueCounters
from raft_queue.manager.heat import (
    Balance,
    Candidate,
    ClusterHeat,
    HeatMeter,
    OverheatWatch,
    choose_move,
    totals,
)

BAR = Balance(auto_move=True, overheat_msgs_per_s=1000, overheat_for_s=10, cooldown_s=60)


def test_rates_come_from_successive_samples_and_a_restarted_node_counts_from_zero() -> None:
    meter = HeatMeter()
    first = {"n1": [QueueCounters("a", 0, sent=100, received=50, acked=50)],
             "n2": [QueueCounters("b", 0, sent=10)]}  # fmt: skip
    assert meter.sample("c1", 10.0, 2, totals(first)) is None  # nothing to compare with yet
    second = {"n1": [QueueCounters("a", 0, sent=300, received=150, acked=150)],
              "n2": [QueueCounters("b", 0, sent=4)]}  # n2 restarted: 4 since its start  # fmt: skip
    heat = meter.sample("c1", 12.0, 2, totals(second))
    assert heat is not None
    assert heat.queues == {"a": 200.0, "b": 2.0}  # (600 - 200) / 2 s and 4 / 2 s
    assert heat.per_node == pytest.approx(101.0)
    assert meter.heat["c1"] is heat


def test_a_cluster_is_overheated_only_after_staying_above_the_bar() -> None:
    watch = OverheatWatch(BAR)
    hot, cool = ClusterHeat(2, {"a": 2500.0}), ClusterHeat(2, {"a": 1500.0})
    watch.observe("c1", hot, 0.0)
    assert watch.overheated(9.9) == []
    watch.observe("c1", hot, 9.9)
    assert watch.overheated(10.0) == ["c1"]
    watch.observe("c1", cool, 11.0)  # 750 per node: below the bar, the clock restarts
    watch.observe("c1", hot, 12.0)
    assert watch.overheated(21.0) == []
    assert watch.overheated(22.0) == ["c1"]


def test_the_hottest_queue_wholly_on_the_source_goes_to_the_coolest_cluster_that_fits() -> None:
    heats = {"c1": ClusterHeat(2, {"big": 2400.0, "small": 300.0, "span": 900.0}),
             "c2": ClusterHeat(2, {"x": 1200.0}),
             "c3": ClusterHeat(3, {"y": 300.0})}  # fmt: skip
    wholly = {"big": "c1", "small": "c1", "x": "c2", "y": "c3"}  # span is on two clusters
    everyone = [Candidate("c1", True, False), Candidate("c2", True, False),
                Candidate("c3", True, False)]  # fmt: skip
    # big (2400) fits nowhere: c3 would be (300 + 2400) / 3 = 900 <= 1000: it fits c3
    assert choose_move("c1", heats, wholly, everyone, BAR) == ("big", "c3")
    sick = [Candidate("c1", True, False), Candidate("c2", True, False),
            Candidate("c3", False, False)]  # fmt: skip
    # c3 not healthy; big on c2 would be (1200 + 2400) / 2 > 1000; small fits: 750
    assert choose_move("c1", heats, wholly, sick, BAR) == ("small", "c2")
    drained = [Candidate("c1", True, False), Candidate("c2", True, True)]
    assert choose_move("c1", heats, wholly, drained, BAR) is None  # nowhere to go
    assert choose_move("c9", heats, wholly, everyone, BAR) is None  # no heat known


def test_balance_settings_are_checked_by_name() -> None:
    assert Balance().auto_move is False
    with pytest.raises(errors.ConfigError) as exc:
        Balance(overheat_msgs_per_s=0)
    assert exc.value.field == "balance.overheat_msgs_per_s"
    with pytest.raises(errors.ConfigError) as exc:
        Balance(cooldown_s=-1)
    assert exc.value.field == "balance.cooldown_s"
