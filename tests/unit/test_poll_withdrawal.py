"""Forwarded Receives are withdrawn, not cancelled (server/dataplane/withdrawals.py,
server/callcancel.py's ``withdraw``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from raft_queue.server.callcancel import settle
from raft_queue.server.dataplane.withdrawals import ForwardedPolls


async def _poll(log: list[str], seconds: float = 30.0) -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        log.append("cancelled")  # where a real poll gives its leases back
        raise
    return "messages"


def test_a_running_poll_withdrawn_ends_empty_and_its_work_is_cancelled() -> None:
    async def main() -> None:
        polls, log = ForwardedPolls(), []
        task = asyncio.ensure_future(polls.run("p", _poll(log)))
        await asyncio.sleep(0.01)
        assert len(polls) == 1
        assert polls.withdraw("p") is True
        assert await asyncio.wait_for(task, 1) is None
        assert log == ["cancelled"]
        assert len(polls) == 0

    asyncio.run(main())


def test_a_poll_withdrawn_before_it_arrives_ends_at_once() -> None:
    async def main() -> None:
        polls, log = ForwardedPolls(), []
        assert polls.withdraw("early") is False
        assert await asyncio.wait_for(polls.run("early", _poll(log)), 1) is None
        assert log == []  # never started
        # another poll is not affected
        assert await polls.run("other", _poll(log, 0.01)) == "messages"

    asyncio.run(main())


def test_a_poll_whose_rpc_ends_is_cancelled_not_answered_empty() -> None:
    """The handler cancelled (its caller's deadline): CancelledError, even
    if a withdrawal came too."""

    async def main() -> None:
        polls, log = ForwardedPolls(), []
        task = asyncio.ensure_future(polls.run("p", _poll(log)))
        await asyncio.sleep(0.01)
        task.cancel()
        polls.withdraw("p")
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log == ["cancelled"]

    asyncio.run(main())


async def _server(handled: list[str]) -> AsyncIterator[str]:
    async def slow(request: bytes, context: Any) -> bytes:
        try:
            await asyncio.sleep(0.3)
        except asyncio.CancelledError:
            handled.append("cancelled")
            raise
        handled.append("answered")
        return b"leased"

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(slow)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("t.S", {"Slow": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def test_settle_with_withdraw_never_cancels_and_hands_the_answer_to_late() -> None:
    """The caller stops waiting while the server works: ``withdraw`` is
    called, the server's handler is not cancelled, and its answer (which a
    cancel could have discarded after the server sent it) reaches ``late``."""

    async def main() -> None:
        handled: list[str] = []
        gen = _server(handled)
        target = await gen.__anext__()
        late: list[Any] = []
        withdrawn: list[bool] = []
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.unary_unary("/t.S/Slow")(b"", timeout=10)
            task = asyncio.ensure_future(
                settle(call, late.append, withdraw=lambda: withdrawn.append(True))
            )
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert withdrawn == [True]
            for _ in range(100):
                if late:
                    break
                await asyncio.sleep(0.02)
        assert late == [b"leased"]
        assert handled == ["answered"]
        await gen.aclose()

    asyncio.run(main())


def test_settle_without_withdraw_still_cancels_the_rpc() -> None:
    async def main() -> None:
        handled: list[str] = []
        gen = _server(handled)
        target = await gen.__anext__()
        late: list[Any] = []
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.unary_unary("/t.S/Slow")(b"", timeout=10)
            task = asyncio.ensure_future(settle(call, late.append))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(50):
                if handled:
                    break
                await asyncio.sleep(0.02)
        assert handled == ["cancelled"]
        assert late == []
        await gen.aclose()

    asyncio.run(main())
