"""server/dataplane/stands.py: what a Receive may hand over of the leases its
standing requests took. A lease that would reach the consumer with more of
its visibility spent than the linger window allows is split off (and given
back by ``fresh``), so no Receive delivers a lease another consumer could take
again before this one's visibility, asked at its arrival, ends."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from raft_queue.core.results import LeasedSpan, LeaseResult
from raft_queue.replication.standing import Standing
from raft_queue.server.dataplane.stands import split_stale, take_meanwhile


def span(offset: int, deadline_ms: int) -> LeasedSpan:
    return LeasedSpan(b"", offset, offset, 1, 1, 1, deadline_ms)


def test_spans_ending_before_the_bound_are_split_off_per_replica() -> None:
    a: Any = object()
    b: Any = object()
    claimed: list[Any] = [
        (0, a, LeaseResult((span(5, 10_000), span(6, 9_999), span(7, 12_000)))),
        (1, b, LeaseResult((span(1, 11_000),))),
        (2, b, LeaseResult((span(3, 100),))),
    ]
    ok, stale = split_stale(claimed, 10_000)
    assert [(p, r, [s.offset for s in res.spans]) for p, r, res in ok] == [
        (0, a, [5, 7]),
        (1, b, [1]),
        (2, b, []),
    ]
    assert [(r, [s.offset for s in spans]) for r, spans in stale] == [(a, [6]), (b, [3])]


def test_nothing_is_split_off_when_every_lease_is_fresh() -> None:
    a: Any = object()
    res = LeaseResult((span(0, 20_000),))
    ok, stale = split_stale([(0, a, res)], 20_000)
    assert ok == [(0, a, res)] and ok[0][2] is res
    assert stale == []


class _ResolvedWhileLooked(Future):  # type: ignore[type-arg]
    """A lease the driver thread applies right after its first look."""

    def done(self) -> bool:
        was = super().done()
        if not was and not self.running():
            self.set_running_or_notify_cancel()
            self.set_result(LeaseResult(()))
        return was


def test_a_lease_applied_while_take_meanwhile_looks_stays_in_one_list() -> None:
    # Two passes over the requests (one for the applied, one for the rest)
    # lost a request that the driver resolved between them: in neither
    # list, its lease was never delivered nor given back.
    request = Standing("c", 10, 30_000, deadline=0.0)
    request.future = _ResolvedWhileLooked()
    stand: Any = (0, object(), request)
    claimed, left = take_meanwhile([stand])
    assert (claimed, left) == ([], [stand])
