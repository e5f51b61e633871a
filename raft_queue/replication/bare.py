"""pysyncobj 0.3.17 as it ships, for one benchmark only (bench/commit_floor.py,
mode ``pysyncobj``): the library's own cost of committing one entry, to set
beside what raft_queue's replication layer costs on the same path.

Nothing here is used by a node. It has every hazard SafeSyncObj fixes
(../shared/PYSYNCOBJ.md): no journal sync, pickled commands, a follower's
entries truncated below its applied index. So its figure is a lower bound
for this library: the same path with durability and our codec costs more.

The settings are the fastest the library offers a one-at-a-time caller
(``appendEntriesUseBatch=False``: an entry goes out as it is appended, not at
the next tick; PYSYNCOBJ.md's performance table) with its own tick thread.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated


class BareLog(SyncObj):
    """A replicated counter of appended payloads."""

    def __init__(self, me: str, peers: list[str]) -> None:
        conf = SyncObjConf(appendEntriesUseBatch=False, dynamicMembershipChange=False)
        super().__init__(me, peers, conf)
        self._count = 0

    @replicated
    def append(self, data: bytes) -> int:
        self._count += 1
        return self._count


def start(me: str, peers: list[str], timeout_s: float = 30.0) -> BareLog:
    """A group member, once some member leads (its own tick thread runs it)."""
    log = BareLog(me, peers)
    deadline = time.monotonic() + timeout_s
    while log._getLeader() is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{me}: no leader after {timeout_s}s")
        time.sleep(0.02)
    return log


def leads(log: BareLog) -> bool:
    return bool(log._isLeader())


async def commit(log: BareLog, payload: bytes) -> int:
    """Append ``payload``; its index in the applied order once committed and
    applied here (the tick thread's callback hands it to this loop)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()

    def done(result: Any, err: Any) -> None:
        loop.call_soon_threadsafe(_settle, fut, result, err)

    log.append(payload, callback=done)
    return await fut


def _settle(fut: asyncio.Future[int], result: Any, err: Any) -> None:
    if fut.done():
        return
    if err:  # FAIL_REASON.SUCCESS is 0
        fut.set_exception(RuntimeError(f"pysyncobj refused the append: reason {err}"))
    else:
        fut.set_result(int(result))
