"""At the apply of an entry that carried a Send and a standing lease, the
Receive that delivers the Send's messages is resumed before the Send answers
its producer (replication/group.py ``_propose``, dataplane/wakeups.py
``until_settled``; docs/benchmarks.md, W4)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from typing import Any

from raft_queue.replication.group import LoopWaiter, ReplicatedGroup, _resolve
from raft_queue.server.dataplane.wakeups import Settling, until_settled


class _Probe:
    def committed(self, seconds: float) -> None:
        pass


class _Group:
    """What ``ReplicatedGroup._propose`` uses of its group: entries are
    "proposed" into ``self.entries`` with their apply callback."""

    max_entry_bytes = 1 << 20
    probe = _Probe()
    _propose = ReplicatedGroup._propose

    def __init__(self) -> None:
        self._seq = 0
        self._inflight: dict[int, Any] = {}
        self.entries: list[tuple[bytes, Any]] = []

    def encode_batch(self, commands: list[Any]) -> bytes:
        return "|".join(commands).encode()

    def split_results(self, result: Any, count: int) -> list[Any]:
        return list(result)

    def _idle(self) -> bool:
        return False

    def propose(self, payload: bytes, callback: Any) -> None:
        self.entries.append((payload, callback))


class _Recording:
    """A waiter that records when it was resolved."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    def done(self) -> bool:
        return False

    def set_result(self, result: Any) -> None:
        self.seen.append(self.name)

    def set_exception(self, exception: BaseException) -> None:
        self.seen.append(self.name)


def test_the_riders_of_an_entry_are_resolved_before_the_commands_they_rode_with() -> None:
    group, seen = _Group(), list[str]()
    chunk = [
        ("append-1", _Recording("send-1", seen), time.monotonic() + 5, ""),
        ("append-2", _Recording("send-2", seen), time.monotonic() + 5, ""),
        ("lease-a", _Recording("receive-a", seen), time.monotonic() + 5, ""),
        ("lease-b", _Recording("receive-b", seen), time.monotonic() + 5, ""),
    ]
    group._propose(chunk, 2)  # type: ignore[arg-type]
    ((payload, applied),) = group.entries
    assert payload == b"append-1|append-2|lease-a|lease-b"  # the log's order is kept
    applied(["r1", "r2", "ra", "rb"], 0)
    assert seen == ["receive-a", "receive-b", "send-1", "send-2"]


def test_an_entry_split_in_halves_keeps_which_commands_are_riders() -> None:
    group, seen = _Group(), list[str]()
    group.max_entry_bytes = 30  # 46 bytes: two entries, the second send-3 and receive-a
    chunk = [
        (f"cmd-{name}", _Recording(name, seen), time.monotonic() + 5, "")
        for name in ("send-1", "send-2", "send-3", "receive-a")
    ]
    group._propose(chunk, 3)  # type: ignore[arg-type]
    assert [p for p, _ in group.entries] == [b"cmd-send-1|cmd-send-2", b"cmd-send-3|cmd-receive-a"]
    for payload, applied in group.entries:
        applied([payload] * payload.count(b"|") + [payload], 0)
    assert seen.index("receive-a") < seen.index("send-3")
    assert [s for s in seen if s.startswith("send")] == ["send-1", "send-2", "send-3"]


def test_a_receive_waiting_on_its_lease_runs_before_the_send_resolved_right_after_it() -> None:
    """The driver resolves the lease, then the Send, in one step: the
    Receive's task must get the loop first (with wrap_future and
    asyncio.wait it came two hops after the Send's)."""

    async def go() -> list[str]:
        loop = asyncio.get_running_loop()
        lease: Future[Any] = Future()
        assert lease.set_running_or_notify_cancel()
        send = LoopWaiter(loop)
        order: list[str] = []

        async def receive() -> None:
            await until_settled([lease], 10.0)
            order.append("receive")

        async def answer() -> None:
            await send.future
            order.append("send")

        tasks = [asyncio.ensure_future(receive()), asyncio.ensure_future(answer())]
        await asyncio.sleep(0.01)  # both wait

        def driver_step() -> None:  # as the driver's apply: lease first, then the Send
            lease.set_result("leased")
            _resolve(send, "stored")

        loop.call_soon(driver_step)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(go()) == ["receive", "send"]


def test_until_settled_waits_for_every_future_from_another_thread_or_its_timeout() -> None:
    async def go() -> tuple[float, float]:
        futures: list[Future[Any]] = [Future(), Future()]

        def driver() -> None:
            for f in futures:
                time.sleep(0.05)
                f.set_result(None)

        t = threading.Thread(target=driver)
        started = time.monotonic()
        t.start()
        await until_settled(futures, 10.0)
        both = time.monotonic() - started
        assert all(f.done() for f in futures)
        t.join()
        started = time.monotonic()
        await until_settled([Future()], 0.05)  # never resolved: the timeout ends it
        return both, time.monotonic() - started

    both, timed_out = asyncio.run(go())
    assert 0.09 <= both < 5.0
    assert 0.04 <= timed_out < 5.0


def test_a_standing_poll_wakes_on_its_first_lease_or_its_wake_up_and_waits_again_cheaply() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        leases: list[Future[Any]] = [Future(), Future()]
        wake_up: asyncio.Future[None] = loop.create_future()
        watch = Settling(leases, also=wake_up)
        started = time.monotonic()
        await watch.wait(0.05, first=True)  # nothing happened: the re-check's timeout
        assert not watch.any and time.monotonic() - started >= 0.04
        threading.Thread(target=lambda: leases[1].set_result("leased")).start()
        await watch.wait(10.0, first=True)
        assert watch.any and watch.left == 1
        await watch.wait(10.0, first=True)  # already woken: at once
        wake_up.set_result(None)
        leases[0].set_result("leased")
        await watch.wait(10.0)
        assert watch.left == 0

        other = Settling([Future()], also=wake_up)  # its wake-up came before
        await other.wait(10.0, first=True)
        assert other.any

    asyncio.run(asyncio.wait_for(go(), 20))
