"""Bounds inside one node, without a cluster: the pending-command list of a
Raft group (raft.commands_queue_size) and the standing-poll bounds and claim
budget (replication/standing.py), and the byte cap helper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core import commands as cmd
from raft_queue.observability import metrics
from raft_queue.replication.host import RaftHost
from raft_queue.replication.partition import PartitionReplica
from raft_queue.replication.standing import StandingLeases
from raft_queue.server.dataplane import bounds
from raft_queue.testing.cluster import free_port


@pytest.fixture
def stalled(tmp_path: Path) -> Iterator[PartitionReplica]:
    """A replica whose host never ticks: nothing it is given is ever proposed
    (as a group whose leader cannot commit)."""
    host = RaftHost(idle_tick_s=0.02)  # not started: no driver thread
    peer = f"127.0.0.1:{free_port()}"
    replica = PartitionReplica(
        "p0", host, f"127.0.0.1:{free_port()}", [peer], str(tmp_path / "r"),
        election_timeout_s=(0.4, 0.8),
    )  # fmt: skip
    yield replica
    replica.close()


def rejections() -> float:
    return float(metrics.REJECTIONS.labels("limits")._value.get())


def test_pending_commands_past_commands_queue_size_are_refused(
    stalled: PartitionReplica,
) -> None:
    stalled.max_pending = 3
    waiting = [stalled.submit(cmd.Expire(1)) for _ in range(3)]
    assert not any(f.done() for f in waiting), "queued, waiting to be proposed"
    before = rejections()
    refused = stalled.submit(cmd.Expire(1))
    assert refused.done(), "refused at once, not queued"
    with pytest.raises(errors.ResourceExhausted, match="raft.commands_queue_size"):
        refused.result(0)
    assert rejections() == before + 1
    assert len(stalled._pending) == 3, "the list did not grow"


def test_standing_polls_are_bounded_per_partition_and_per_consumer() -> None:
    box = StandingLeases(max_per_partition=3, max_per_consumer=2)
    box.stand("a", 1, 1000, 10.0)
    box.stand("a", 1, 1000, 10.0)
    with pytest.raises(errors.ResourceExhausted, match="max_standing_polls_per_consumer"):
        box.stand("a", 1, 1000, 10.0)
    last = box.stand("", 1, 1000, 10.0)
    with pytest.raises(errors.ResourceExhausted, match="max_standing_polls_per_partition"):
        box.stand("b", 1, 1000, 10.0)
    assert box.withdraw(last)
    box.stand("b", 1, 1000, 10.0)  # room again
    assert len(box) == 3


def test_a_claim_takes_only_what_the_records_can_feed() -> None:
    box = StandingLeases(max_per_partition=5000, max_per_consumer=5000)
    polls = [box.stand("", 1, 1000, 10.0) for _ in range(2000)]
    claimed = box.claim(lambda: 1, max_requests=511, max_records=1)
    assert len(claimed) == 1 and len(box) == 1999, "one record: one lease, the rest stand"
    claimed = box.claim(lambda: 1, max_requests=511, max_records=10_000)
    assert len(claimed) == 511 and len(box) == 1488, "never more than fits one entry"
    assert polls[0].future.running()
    assert box.withdraw(polls[-1])


def test_answers_are_cut_at_the_byte_cap_but_never_empty() -> None:
    def m(n: int, **extra: object) -> queue_pb2.Message:
        return queue_pb2.Message(queue="q", body=b"x" * n, headers={"h": b"v"}, **extra)  # type: ignore[arg-type]

    msgs = [m(40) for _ in range(5)]
    assert bounds.within_bytes(msgs, 100) == 2  # 42 bytes each
    assert bounds.within_bytes([m(500)], 100) == 1, "one alone over the cap still goes"
    assert bounds.within_bytes(msgs, 10_000) == 5
    # Counted as body, key and headers (not the receipt, offset, ...): the
    # wire-size shortcut only ever says "all fit" when they do.
    long = [m(40, receipt="r" * 300, offset=2**60) for _ in range(5)]
    assert bounds.within_bytes(long, 5 * 42) == 5
    assert bounds.within_bytes(long, 5 * 42 - 1) == 4
