"""Hazard 5 of shared/PYSYNCOBJ.md: a leader cut off from its quorum keeps
believing it leads for leaderFallbackTimeout (30 s by default).

Three replicas in this process on loopback; the leader's links are cut by
dropping everything it sends and receives. Ours (make_conf + SafeSyncObj on
RaftHosts) must step down within about one election timeout and stop
claiming quorum contact; unmodified pysyncobj (xfail strict) still leads.
Timing assertions are lower bounds on the broken behaviour and generous
upper bounds on ours.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pysyncobj import SyncObj, SyncObjConf

from raft_queue.replication.group import ReplicatedGroup
from raft_queue.replication.host import RaftHost
from raft_queue.replication.raft import make_conf
from raft_queue.testing.cluster import free_port

pytestmark = pytest.mark.integration

ELECTION_S = (0.4, 0.8)
CUT_FOR_S = 3.0  # far above ours (0.8 s), far below pysyncobj's default (30 s)


class NullGroup(ReplicatedGroup):
    def encode_batch(self, cmds: list[Any]) -> bytes:
        return b"".join(cmds)

    def split_results(self, result: Any, count: int) -> list[Any]:
        return [result] * count

    def apply_bytes(self, index: int, data: bytes) -> Any:
        return index


def start_patched(addrs: list[str]) -> tuple[list[Any], list[RaftHost]]:
    hosts, groups = [], []
    for a in addrs:
        host = RaftHost(idle_tick_s=0.02)
        host.start()
        conf = make_conf(
            journal_file=None,
            dump_file=None,
            election_timeout_min_s=ELECTION_S[0],
            election_timeout_max_s=ELECTION_S[1],
        )
        peers = [x for x in addrs if x != a]
        group = host.call(lambda a=a, h=host, p=peers, c=conf: NullGroup("g", h, a, p, c)).result(5)
        host.call(lambda h=host, g=group: h.add(g)).result(5)
        hosts.append(host)
        groups.append(group)
    return groups, hosts


def start_unmodified(addrs: list[str]) -> list[Any]:
    objs = []
    for a in addrs:
        conf = SyncObjConf(raftMinTimeout=ELECTION_S[0], raftMaxTimeout=ELECTION_S[1])
        objs.append(SyncObj(a, [x for x in addrs if x != a], conf))
    return objs


@pytest.fixture(
    params=[
        "patched",
        pytest.param(
            "unmodified",
            marks=pytest.mark.xfail(strict=True, reason="hazard 5 present in unmodified pysyncobj"),
        ),
    ]
)
def replicas(request: Any) -> Iterator[list[Any]]:
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    if request.param == "patched":
        groups, hosts = start_patched(addrs)
        yield groups
        for h in hosts:
            h.stop()
    else:
        objs = start_unmodified(addrs)
        yield objs
        for o in objs:
            o.destroy()


def cut_off(obj: Any) -> None:
    transport = obj._SyncObj__transport
    transport.send = lambda node, message: True
    transport.setOnMessageReceivedCallback(lambda node, message: None)


def test_a_leader_cut_off_from_its_quorum_steps_down(replicas: list[Any]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(r._isLeader() for r in replicas):
        time.sleep(0.05)
    leader = next(r for r in replicas if r._isLeader())
    cut_off(leader)
    cut_at = time.monotonic()
    while time.monotonic() - cut_at < CUT_FOR_S and leader._isLeader():
        time.sleep(0.05)
    assert not leader._isLeader(), f"still leader {CUT_FOR_S}s after losing its quorum"
    if isinstance(leader, ReplicatedGroup):
        assert not leader.can_serve_leader_reads()
        others = [r for r in replicas if r is not leader]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(r.is_leader() for r in others):
            time.sleep(0.05)
        assert any(r.is_leader() for r in others), "the majority side elected no new leader"
