"""When housekeeping submits an Expire (each one is a Raft entry on every
replica): only when it can change something, and without reading an empty
partition again until an entry applies."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from raft_queue.config import QueueSpec
from raft_queue.server.control import housekeeping
from raft_queue.server.control.housekeeping import IDLE_EXPIRE_S, Housekeeper
from raft_queue.server.node import ReplicaKey

KEY = ReplicaKey("q", 1, 0)


class FakeReplica:
    def __init__(self, earliest: int = 0, latest: int = 0, dead: int = 0) -> None:
        self.applied_entries = 0
        self.reads = 0
        self.earliest, self.latest, self.dead = earliest, latest, dead

    def stats(self, now_ms: int) -> Any:
        self.reads += 1
        return SimpleNamespace(
            earliest_offset=self.earliest, latest_offset=self.latest, dead=self.dead
        )


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(housekeeping.time, "monotonic", c)
    return c


def keeper() -> Housekeeper:
    return Housekeeper(cluster=None, sender=None)  # type: ignore[arg-type]


def expired(hk: Housekeeper, replica: FakeReplica, clock: Clock) -> None:
    """What tend() records after its Expire applied."""
    replica.applied_entries += 1
    seen = hk._seen[KEY]
    seen.applied, seen.at = replica.applied_entries, clock()


def test_a_partition_that_never_held_a_record_is_never_expired_nor_reread(clock: Clock) -> None:
    hk, replica, spec = keeper(), FakeReplica(), QueueSpec()
    for _ in range(100):
        assert not hk._due(KEY, replica, spec)
        clock.t += IDLE_EXPIRE_S
    assert replica.reads == 1
    replica.applied_entries += 1  # e.g. a Configure
    assert not hk._due(KEY, replica, spec)
    assert replica.reads == 2


def test_retained_records_with_new_entries_or_dead_ones_are_expired(clock: Clock) -> None:
    hk, spec = keeper(), QueueSpec()
    assert hk._due(KEY, FakeReplica(earliest=0, latest=5), spec)
    assert hk._due(ReplicaKey("q", 1, 1), FakeReplica(earliest=0, latest=5, dead=1), spec)


def test_an_emptied_partition_expires_until_a_dedup_window_after_its_last_entry(
    clock: Clock,
) -> None:
    hk, spec = keeper(), QueueSpec(dedup_window_ms=60_000)
    replica = FakeReplica(earliest=7, latest=7)  # held records, all gone now
    replica.applied_entries = 9
    assert not hk._due(KEY, replica, spec)  # first look: the last Expire was "now"
    due_times = []
    for _ in range(20):
        clock.t += IDLE_EXPIRE_S
        if hk._due(KEY, replica, spec):
            due_times.append(clock.t)
            expired(hk, replica, clock)
    assert len(due_times) >= 2, "dedup ids left to age out were never expired"
    window = 60 + 2 * IDLE_EXPIRE_S
    assert due_times[-1] - 1000.0 < window + IDLE_EXPIRE_S
    assert replica.reads <= len(due_times) + 1, "an unchanged empty log was read again"
