"""LoopWaiter: a submitted command's result handed from the Raft driver
thread straight to the caller's asyncio future (replication/group.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from raft_queue import errors
from raft_queue.replication.group import LoopWaiter, _fail, _resolve


def from_thread(fn: object) -> None:
    t = threading.Thread(target=fn)  # type: ignore[arg-type]
    t.start()
    t.join(10)


def test_a_result_set_on_another_thread_settles_the_loops_future() -> None:
    async def go() -> object:
        waiter = LoopWaiter(asyncio.get_running_loop())
        from_thread(lambda: _resolve(waiter, ("offsets", "quorum")))
        assert waiter.done()
        return await asyncio.wait_for(waiter.future, 10)

    assert asyncio.run(go()) == ("offsets", "quorum")


def test_the_first_outcome_counts_as_with_a_concurrent_future() -> None:
    async def go() -> object:
        waiter = LoopWaiter(asyncio.get_running_loop())

        def driver() -> None:
            _resolve(waiter, "early")  # an early ack, then its commit
            _resolve(waiter, "late")
            _fail(waiter, errors.OutcomeUnknown("timed out"))

        from_thread(driver)
        return await asyncio.wait_for(waiter.future, 10)

    assert asyncio.run(go()) == "early"


def test_an_error_is_raised_to_the_awaiting_caller() -> None:
    async def go() -> None:
        waiter = LoopWaiter(asyncio.get_running_loop())
        from_thread(lambda: _fail(waiter, errors.NotLeader("not the leader", "n2")))
        await asyncio.wait_for(waiter.future, 10)

    with pytest.raises(errors.NotLeader):
        asyncio.run(go())


def test_a_cancelled_caller_and_a_closed_loop_are_left_alone() -> None:
    seen: list[object] = []

    async def cancelled() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: seen.append(context))
        waiter = LoopWaiter(loop)
        waiter.future.cancel()  # its Send's call was cancelled
        from_thread(lambda: _resolve(waiter, "applied anyway"))
        for _ in range(3):
            await asyncio.sleep(0)  # the settle callback runs
        assert waiter.future.cancelled()

    asyncio.run(cancelled())
    assert seen == [], "settling a cancelled future raised in the loop"
    loop = asyncio.new_event_loop()
    waiter = LoopWaiter(loop)
    loop.close()
    from_thread(lambda: _resolve(waiter, "nobody waits"))  # no raise on the driver
    assert waiter.done()
