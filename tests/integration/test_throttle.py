"""Catch-up of a new member under a bytes/s limit (replication/throttle.py),
on real groups over loopback: it takes at least bytes / rate, the member
ends identical, and lifting the limit lets it finish at once.

Lower bounds only: a loaded machine may make anything slower."""

from __future__ import annotations

import time
from typing import Any

from raft_queue.core import commands as cmd
from raft_queue.replication import membership, throttle
from raft_queue.testing.cluster import free_port
from tests.integration.test_membership import Replicas, replicas, wait_for

__all__ = ["replicas"]  # the fixture, imported for pytest

BODY = b"x" * 1000


def fill(r: Replicas, entries: int) -> None:
    for k in range(entries):
        records = tuple(cmd.NewRecord(body=BODY + f"{k}-{j}".encode()) for j in range(20))
        r.leader().submit(cmd.Append(records, now_ms=1_000 + k)).result(10)


def three(r: Replicas, compaction: int) -> list[str]:
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    for me in addrs:
        r.start(me, [x for x in addrs if x != me], compaction=compaction)
    return addrs


def on_driver(group: Any, fn: Any) -> Any:
    return group._host.call(fn).result(10)


def test_snapshot_catch_up_takes_at_least_its_bytes_over_the_rate(replicas: Replicas) -> None:
    addrs = three(replicas, compaction=20)
    fill(replicas, 60)  # ~1.2 MB, compacted: the newcomer needs the snapshot
    leader = replicas.leader()
    wait_for(lambda: throttle.snapshot_bytes(leader) > 0)
    size = throttle.snapshot_bytes(leader)
    rate = size // 2  # at least ~2 s
    new = f"127.0.0.1:{free_port()}"
    newcomer = replicas.start(new, addrs)
    on_driver(leader, lambda: throttle.set_limit(leader, new, rate))
    started = time.monotonic()
    membership.add_member(leader, new).result(10)
    seen: list[int] = []

    def caught_up() -> bool:
        on_driver(leader, lambda: throttle.set_limit(leader, new, rate))  # renew, as the mover
        limit = on_driver(leader, lambda: throttle.limit_of(leader, new))
        seen.append(limit.bytes_sent)
        return bool(on_driver(leader, lambda: membership.progress(leader, new).caught_up))

    wait_for(caught_up, timeout_s=60)
    elapsed = time.monotonic() - started
    sent = seen[-1]
    assert sent >= size, "the snapshot went through the limit"
    assert elapsed >= sent / rate, (elapsed, sent, rate)
    assert elapsed >= 1.9
    assert len(set(seen)) > 3, "progress grows step by step"
    wait_for(lambda: newcomer.digest() == leader.digest())


def test_log_catch_up_is_limited_and_lifting_the_limit_finishes_it(replicas: Replicas) -> None:
    addrs = three(replicas, compaction=100_000)  # never compacted: entries only
    fill(replicas, 40)
    leader = replicas.leader()
    assert throttle.snapshot_bytes(leader) == 0
    new = f"127.0.0.1:{free_port()}"
    newcomer = replicas.start(new, addrs)
    rate = 50_000  # ~0.8 MB of entries: 16 s if it ran to the end
    on_driver(leader, lambda: throttle.set_limit(leader, new, rate, ttl_s=60))
    started = time.monotonic()
    membership.add_member(leader, new).result(10)

    def sent() -> int:
        limit = on_driver(leader, lambda: throttle.limit_of(leader, new))
        return int(limit.bytes_sent)

    wait_for(lambda: sent() > 0, 10)
    # What the limit guarantees, however slow the machine: never more than
    # rate * elapsed (plus nothing: the bucket starts empty), so not caught up.
    assert sent() <= rate * (time.monotonic() - started)
    assert not on_driver(leader, lambda: membership.progress(leader, new).caught_up)
    on_driver(leader, lambda: throttle.set_limit(leader, new, 0))  # lifted
    wait_for(lambda: on_driver(leader, lambda: membership.progress(leader, new).caught_up), 20)
    wait_for(lambda: newcomer.digest() == leader.digest())
    fill(replicas, 3)  # the group still works with every member
    wait_for(lambda: newcomer.digest() == leader.digest())


def test_a_limit_expires_without_renewal(replicas: Replicas) -> None:
    addrs = three(replicas, compaction=100_000)
    leader = replicas.leader()
    on_driver(leader, lambda: throttle.set_limit(leader, addrs[1], 1000, ttl_s=0.2))
    assert on_driver(leader, lambda: throttle.limit_of(leader, addrs[1])) is not None
    time.sleep(0.3)
    assert on_driver(leader, lambda: throttle.limit_of(leader, addrs[1])) is None
    fill(replicas, 2)
    wait_for(lambda: replicas.groups[addrs[1]].digest() == leader.digest())
