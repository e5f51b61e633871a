"""How an idle long poll waits (server/dataplane/receiving.py): it stands
until woken, until a due timer or its deadline, and at most WAKE_MAX_S; it
re-checks leadership in memory every ``_recheck_s``, an interval that grows
with the polls standing on a partition.

A queue with nothing due cut the stand short: the due-timer bound was
RECHECK_S, so 2,000 standing polls each withdrew, read the store and stood
again 4 times a second; the node's event loop ran at 100 % and admitted new
polls at a few a second.
"""

from __future__ import annotations

from typing import Any

import pytest

from raft_queue.server.dataplane import receiving
from raft_queue.server.dataplane.receiving import (
    RECHECK_MAX_S,
    RECHECK_S,
    RECHECK_SHARE,
    STAND_S,
    WAKE_MAX_S,
    _recheck_s,
    _sleep_s,
)


class _Replica:
    """What the wait reads of a partition: its standing polls and next due time."""

    def __init__(self, standing: int, due_ms: int | None) -> None:
        self.standing = [None] * standing
        self._due = due_ms

    def next_due_ms(self) -> int | None:
        return self._due


def sleep(remaining: float, *replicas: _Replica) -> float:
    r: Any = list(replicas)
    return _sleep_s(remaining, r)


def recheck(*replicas: _Replica) -> float:
    r: Any = list(replicas)
    return _recheck_s(r)


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiving, "now_ms", lambda: 1_000_000)


def test_with_nothing_due_a_poll_stands_long_within_its_standing_lease() -> None:
    assert sleep(60.0, _Replica(1, None)) == WAKE_MAX_S
    assert sleep(60.0, _Replica(2_000, None)) == WAKE_MAX_S
    assert RECHECK_MAX_S < WAKE_MAX_S < STAND_S


def test_a_due_timer_ends_the_stand_just_after_it() -> None:
    assert sleep(20.0, _Replica(2_000, 1_000_500), _Replica(2_000, None)) == pytest.approx(0.502)


def test_a_timer_already_due_wakes_at_once() -> None:
    assert sleep(20.0, _Replica(2_000, 999_000)) == pytest.approx(0.002)


def test_the_poll_deadline_bounds_the_stand() -> None:
    assert sleep(0.1, _Replica(2_000, None)) == 0.1
    assert sleep(0.0, _Replica(1, 1_000_500)) == 0.0


def test_no_partition_led_here_still_ends() -> None:
    assert sleep(60.0) == WAKE_MAX_S
    assert recheck() == RECHECK_S


def test_few_polls_re_check_leadership_every_recheck_s() -> None:
    assert recheck(_Replica(1, None)) == RECHECK_S


def test_many_polls_re_check_less_often_up_to_a_cap() -> None:
    polls = 2_000
    assert recheck(_Replica(polls, None)) == pytest.approx(RECHECK_S * (polls // RECHECK_SHARE))
    assert recheck(_Replica(10**6, None)) == RECHECK_MAX_S
