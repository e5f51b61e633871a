"""The Consumer's LeaseKeeper: one thread extends every held lease, in
batches; release waits out an extension under way; lost leases are dropped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from raft_queue.client.consumer import LeaseKeeper
from raft_queue.client.models import Message, ReceiptResult


def _msg(n: int) -> Message:
    return Message(queue="q", partition=0, offset=n, body=b"", receipt=f"r{n}")


class _Server:
    """Records every extend call: its thread and receipts; ``lost`` ones fail."""

    def __init__(self, lost: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.lost = lost
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def extend(self, messages: list[Message]) -> list[ReceiptResult]:
        self.entered.set()
        self.gate.wait(10)
        self.calls.append((threading.current_thread().name, [m.receipt for m in messages]))
        return [ReceiptResult(m.receipt, m.receipt not in self.lost) for m in messages]


def _wait_for(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_one_thread_extends_every_held_lease_in_batches() -> None:
    server = _Server()
    keeper = LeaseKeeper(server.extend, 0.05)
    before = threading.active_count()
    keys = [keeper.hold(_msg(n)) for n in range(50)]
    assert threading.active_count() <= before + 1  # one thread, not one per message
    _wait_for(lambda: sum(len(r) for _t, r in server.calls) >= 150)  # each extended 3+ times
    assert {t for t, _r in server.calls} == {"raftq-lease-keeper"}
    assert len(server.calls) < 150  # batched: fewer calls than extensions
    for key in keys:
        keeper.release(key)
    done = len(server.calls)
    time.sleep(0.2)  # four periods
    assert len(server.calls) <= done + 1  # at most one already under way at release


def test_release_waits_for_an_extension_under_way() -> None:
    server = _Server()
    keeper = LeaseKeeper(server.extend, 0.05)
    server.gate.clear()
    key = keeper.hold(_msg(1))
    assert server.entered.wait(10)  # the keeper is inside extend() now
    released = threading.Event()

    def release() -> None:
        keeper.release(key)
        released.set()

    waiter = threading.Thread(target=release)
    waiter.start()
    assert not released.wait(0.2)  # still extending: release has not returned
    server.gate.set()
    assert released.wait(10)
    waiter.join(10)
    calls = len(server.calls)
    time.sleep(0.2)
    assert len(server.calls) == calls  # nothing extended after release


def test_a_lease_the_server_lost_is_dropped_and_errors_are_retried() -> None:
    server = _Server(lost=frozenset({"r1"}))
    failures: list[int] = []

    def flaky(messages: list[Message]) -> list[ReceiptResult]:
        if len(failures) < 2:
            failures.append(len(messages))
            raise ConnectionError("cluster unreachable")
        return server.extend(messages)

    keeper = LeaseKeeper(flaky, 0.05)
    keeper.hold(_msg(1))
    keeper.hold(_msg(2))
    _wait_for(lambda: sum(r.count("r2") for _t, r in server.calls) >= 3)
    assert len(failures) == 2  # the calls after the errors went on
    extended = [receipt for _t, r in server.calls for receipt in r]
    assert extended.count("r1") == 1  # r1 lost: never extended again
