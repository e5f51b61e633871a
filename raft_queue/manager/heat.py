"""Heat: how busy each cluster and queue is, and when a cluster is overheated (pure).

The manager leader asks each cluster for its nodes' message counters with
every health poll (ClusterStatus ``include_counters``: per node, totals of
messages appended, delivered and acked per partition since that node process
started). ``HeatMeter`` turns two successive samples into rates; a counter
that went down is a restarted node and counts from zero. A queue's heat is
its messages handled per second (sent + received + acked, summed over nodes
and partitions); a cluster's heat per node is the sum over its queues divided
by its node count.

``OverheatWatch`` says a cluster is overheated once its heat per node has
stayed above ``overheat_msgs_per_s`` for ``overheat_for_s``; ``choose_move``
picks what to move off it (the rebalancer in manager/rebalance.py acts on
it). Everything here is in the leader's memory only: heat is measured again
after a leader change, never written to the manager's log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from raft_queue.errors import ConfigError

CounterKey = tuple[str, str, int]  # (node, queue, partition)


class CounterRow(Protocol):
    """One node's totals for one partition (client/models.py QueueCounters)."""

    @property
    def queue(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def sent(self) -> int: ...
    @property
    def received(self) -> int: ...
    @property
    def acked(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Balance:
    """``[balance]``: moving queues off overheated clusters by the manager itself."""

    auto_move: bool = False  # off by default: an operator moves queues (raftq queue move)
    overheat_msgs_per_s: float = 20_000.0  # per node of the cluster
    overheat_for_s: float = 60.0  # above the bar this long before acting
    cooldown_s: float = 300.0  # at least this long between two automatic moves

    def __post_init__(self) -> None:
        if not isinstance(self.auto_move, bool):
            raise ConfigError("balance.auto_move", "must be true or false")
        for name in ("overheat_msgs_per_s", "overheat_for_s", "cooldown_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"balance.{name}", "must not be negative")
        if self.overheat_msgs_per_s == 0:
            raise ConfigError("balance.overheat_msgs_per_s", "must be positive")


@dataclass(frozen=True, slots=True)
class ClusterHeat:
    """One cluster's rates over the last poll interval."""

    nodes: int
    queues: Mapping[str, float] = field(default_factory=dict)  # msgs/s per queue

    @property
    def total(self) -> float:
        return sum(self.queues.values())

    @property
    def per_node(self) -> float:
        return self.total / max(1, self.nodes)


def totals(counters: Mapping[str, Iterable[CounterRow]]) -> dict[CounterKey, int]:
    """Per (node, queue, partition): sent + received + acked, from
    ``ClusterStatus.counters``."""
    out: dict[CounterKey, int] = {}
    for node, rows in counters.items():
        for r in rows:
            out[(node, r.queue, r.partition)] = r.sent + r.received + r.acked
    return out


class HeatMeter:
    """Rates from successive samples of each cluster's counters."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, dict[CounterKey, int]]] = {}
        self.heat: dict[str, ClusterHeat] = {}

    def sample(
        self, cluster: str, now_s: float, nodes: int, counters: Mapping[CounterKey, int]
    ) -> ClusterHeat | None:
        """Record a sample; the heat since the previous one (None for the first)."""
        previous = self._last.get(cluster)
        self._last[cluster] = (now_s, dict(counters))
        if previous is None or now_s <= previous[0]:
            return None
        then, before = previous
        queues: dict[str, float] = {}
        for key, value in counters.items():
            old = before.get(key, 0)
            delta = value - old if value >= old else value  # went down: a restarted node
            queues[key[1]] = queues.get(key[1], 0.0) + delta
        elapsed = now_s - then
        heat = ClusterHeat(nodes, {q: n / elapsed for q, n in queues.items()})
        self.heat[cluster] = heat
        return heat

    def forget(self, cluster: str) -> None:
        self._last.pop(cluster, None)
        self.heat.pop(cluster, None)


class OverheatWatch:
    """Since when each cluster has been above the bar."""

    def __init__(self, settings: Balance) -> None:
        self.settings = settings
        self._above_since: dict[str, float] = {}

    def observe(self, cluster: str, heat: ClusterHeat, now_s: float) -> None:
        if heat.per_node > self.settings.overheat_msgs_per_s:
            self._above_since.setdefault(cluster, now_s)
        else:
            self._above_since.pop(cluster, None)

    def overheated(self, now_s: float) -> list[str]:
        """Clusters above the bar for ``overheat_for_s`` or longer, by name."""
        due = self.settings.overheat_for_s
        return sorted(c for c, since in self._above_since.items() if now_s - since >= due)

    def forget(self, cluster: str) -> None:
        self._above_since.pop(cluster, None)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A cluster the rebalancer may move a queue to."""

    name: str
    healthy: bool
    draining: bool


def choose_move(
    source: str,
    heats: Mapping[str, ClusterHeat],
    wholly_on: Mapping[str, str],
    candidates: Iterable[Candidate],
    settings: Balance,
) -> tuple[str, str] | None:
    """(queue, target): the hottest queue that lives wholly on ``source``
    (``wholly_on``: queue -> its one cluster; queues spanning clusters or
    moving are left out) moved to the coolest healthy, undrained cluster
    that stays under the bar with it. None when no such pair exists (then
    nothing moves: a move that only carries the fire elsewhere helps no one).
    """
    heat = heats.get(source)
    if heat is None:
        return None
    targets = sorted(
        (c for c in candidates if c.name != source and c.healthy and not c.draining),
        key=lambda c: (heats[c.name].per_node if c.name in heats else 0.0, c.name),
    )
    queues = sorted(
        ((rate, q) for q, rate in heat.queues.items() if wholly_on.get(q) == source and rate > 0),
        reverse=True,
    )
    for rate, queue in queues:
        for target in targets:
            there = heats.get(target.name, ClusterHeat(1))
            after = (there.total + rate) / max(1, there.nodes)
            if after <= settings.overheat_msgs_per_s:
                return queue, target.name
    return None
