"""BackgroundAcks (client/acks.py) with a recording send function: which
receipts leave, when, and what a failed flush counts. No sockets."""

from __future__ import annotations

import threading

import pytest

from raft_queue.client.acks import BackgroundAcks
from raft_queue.errors import QueueError, Unavailable


class Sent:
    def __init__(self, refuse: int = 0, fail: bool = False) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.refuse, self.fail = refuse, fail
        self.event = threading.Event()

    def __call__(self, queue: str, receipts: list[str]) -> int:
        self.calls.append((queue, list(receipts)))
        self.event.set()
        if self.fail:
            raise Unavailable("no leader")
        return self.refuse


def test_a_receive_takes_what_waits_for_its_queue_and_nothing_is_sent_twice() -> None:
    sent = Sent()
    acks = BackgroundAcks(sent, flush_ms=60_000)
    acks.add("a", ["r1", "r2"])
    acks.add("b", ["s1"])
    assert acks.take("a") == ["r1", "r2"]
    assert acks.take("a") == []
    acks.flush()
    assert sent.calls == [("b", ["s1"])]


def test_take_is_bounded_and_a_failed_receive_gives_back_in_order() -> None:
    acks = BackgroundAcks(Sent(), flush_ms=60_000)
    acks.add("a", [f"r{i}" for i in range(5)])
    taken = acks.take("a", limit=3)
    assert taken == ["r0", "r1", "r2"]
    acks.give_back("a", taken)
    assert acks.take("a") == ["r0", "r1", "r2", "r3", "r4"]


def test_the_timer_flushes_without_a_receive() -> None:
    sent = Sent()
    acks = BackgroundAcks(sent, flush_ms=5)
    acks.add("a", ["r1"])
    assert sent.event.wait(10)
    assert sent.calls == [("a", ["r1"])]
    acks.close()


def test_close_flushes_and_refuses_later_acks() -> None:
    sent = Sent(refuse=1)
    acks = BackgroundAcks(sent, flush_ms=60_000)
    acks.add("a", ["r1", "r2"])
    acks.close()
    assert sent.calls == [("a", ["r1", "r2"])]
    assert (acks.sent, acks.refused, acks.failed) == (1, 1, 0)
    with pytest.raises(QueueError):
        acks.add("a", ["r3"])


def test_a_failed_flush_is_counted_not_retried() -> None:
    sent = Sent(fail=True)
    acks = BackgroundAcks(sent, flush_ms=60_000)
    acks.add("a", ["r1", "r2"])
    acks.flush()
    acks.flush()
    assert len(sent.calls) == 1 and acks.failed == 2
