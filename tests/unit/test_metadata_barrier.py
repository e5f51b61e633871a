"""The "does not exist" decision (server/control/metadata_barrier.py): a miss in
a metadata view that may be behind becomes NOT_FOUND only once the node vouched
for its view against the metadata leader's version, UNAVAILABLE otherwise.

The node here is a stand-in holding a real MetadataMachine view and the real
``Node.queue_spec``; the leader is a stand-in GetMetadata stub.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.config import QueueSpec
from raft_queue.core import metadata as meta
from raft_queue.server.api.status import to_status
from raft_queue.server.control.metadata_barrier import MetadataBarrier
from raft_queue.server.node import Node

ME, LEADER = "127.0.0.1:1", "127.0.0.1:2"


def machine(queues: int) -> meta.MetadataMachine:
    m = meta.MetadataMachine()
    m.apply(meta.RegisterNode("n1", ME, "127.0.0.1", 2000, 2100))
    for i in range(queues):
        a = meta.PartitionAssignment(0, (meta.ReplicaRef("n1", 2000 + i),))
        m.apply(meta.CreateQueue(f"q{i}", QueueSpec(replication_factor=1), (a,), 1))
    return m


@dataclass
class Replica:
    leader: bool = False

    def is_leader(self) -> bool:
        return self.leader


@dataclass
class FakeNode:
    view: meta.MetadataMachine
    leader_address: str = LEADER
    metadata: Replica | None = field(default_factory=Replica)
    ready: bool = False
    address: str = ME

    def metadata_leader_address(self) -> str:
        return self.leader_address

    def metadata_leader_ready(self) -> bool:
        return self.ready

    def queue_spec(self, name: str) -> Any:
        return Node.queue_spec(self, name)  # type: ignore[arg-type]


@dataclass
class Leader:
    """GetMetadata of the metadata leader: its version, or an error."""

    version: int
    ready: bool = True
    error: BaseException | None = None
    calls: int = 0

    async def GetMetadata(self, request: Any, timeout: float) -> Any:  # noqa: N802
        self.calls += 1
        assert request.known_version == 2**64 - 1  # the version only, no image
        if self.error is not None:
            raise self.error
        return admin_pb2.GetMetadataResponse(
            version=self.version, leader_address=LEADER, leader_ready=self.ready
        )


class Peers:
    def __init__(self, leader: Leader) -> None:
        self.leader = leader

    def node(self, address: str) -> Leader:
        assert address == LEADER
        return self.leader


def decide(node: FakeNode, leader: Leader, name: str, catch_up_to: Any = None) -> Any:
    """The answer for ``name`` on ``node``: the record, or the error to send.
    ``catch_up_to``: a newer view the node adopts 50 ms into the barrier."""

    async def run() -> Any:
        barrier = MetadataBarrier(node, Peers(leader), timeout_s=0.5, poll_s=0.01)  # type: ignore[arg-type]
        if catch_up_to is not None:
            asyncio.get_running_loop().call_later(0.05, setattr, node, "view", catch_up_to)
        try:
            return node.queue_spec(name)
        except errors.NotFound as exc:
            return await barrier.vouch_miss(exc)

    return asyncio.run(run())


def test_a_found_queue_pays_no_round_trip() -> None:
    leader = Leader(version=99)
    got = decide(FakeNode(machine(2)), leader, "q1")
    assert got.name == "q1" and leader.calls == 0


def test_a_view_behind_catches_up_and_then_has_the_queue_unavailable_retry() -> None:
    behind, current = machine(1), machine(3)  # after a restart: q1, q2 not replayed yet
    leader = Leader(version=current.version)
    got = decide(FakeNode(behind), leader, "q2", catch_up_to=current)
    assert isinstance(got, errors.Unavailable) and got.retryable
    assert "caught up: retry" in got.message
    assert to_status(got)[0] == grpc.StatusCode.UNAVAILABLE


def test_a_view_behind_that_catches_up_without_it_says_not_found() -> None:
    behind, current = machine(1), machine(3)
    got = decide(FakeNode(behind), Leader(version=current.version), "never", current)
    assert isinstance(got, errors.NotFound) and not isinstance(got, errors.Unavailable)
    assert to_status(got)[0] == grpc.StatusCode.NOT_FOUND


def test_a_current_view_says_not_found_after_one_call() -> None:
    view = machine(2)
    leader = Leader(version=view.version)
    got = decide(FakeNode(view), leader, "never")
    assert isinstance(got, errors.NotFound) and leader.calls == 1


def test_a_view_that_does_not_catch_up_in_time_is_unavailable() -> None:
    behind, current = machine(1), machine(3)
    got = decide(FakeNode(behind), Leader(version=current.version), "q2")
    assert isinstance(got, errors.Unavailable)
    assert f"the leader's {current.version}" in got.message


def test_no_leader_known_is_unavailable_not_not_found() -> None:
    got = decide(FakeNode(machine(1), leader_address=""), Leader(version=1), "q2")
    assert isinstance(got, errors.Unavailable) and "no metadata leader" in got.message


def test_an_unreachable_leader_is_unavailable() -> None:
    leader = Leader(version=9, error=ConnectionError("refused"))
    got = decide(FakeNode(machine(1)), leader, "q2")
    assert isinstance(got, errors.Unavailable) and "did not answer" in got.message


def test_a_leader_still_replaying_cannot_vouch() -> None:
    got = decide(FakeNode(machine(1)), Leader(version=1, ready=False), "q2")
    assert isinstance(got, errors.Unavailable) and "cannot vouch" in got.message


def test_the_leader_itself_vouches_once_its_first_entry_applied() -> None:
    ready = FakeNode(machine(1), leader_address=ME, metadata=Replica(leader=True), ready=True)
    leader = Leader(version=99)
    got = decide(ready, leader, "never")
    assert isinstance(got, errors.NotFound) and leader.calls == 0
    replaying = FakeNode(machine(1), leader_address=ME, metadata=Replica(leader=True))
    got = decide(replaying, leader, "never")
    assert isinstance(got, errors.Unavailable) and "still applying" in got.message


def test_a_not_found_not_read_from_the_view_is_answered_as_is() -> None:
    leader = Leader(version=99)

    async def run() -> Any:
        barrier = MetadataBarrier(FakeNode(machine(1)), Peers(leader))  # type: ignore[arg-type]
        return await barrier.vouch_miss(errors.NotFound("no such message"))

    got = asyncio.run(run())
    assert isinstance(got, errors.NotFound) and leader.calls == 0


def test_queue_spec_marks_its_miss_with_how_to_look_again() -> None:
    node = FakeNode(machine(1))
    with pytest.raises(errors.NotFound) as caught:
        node.queue_spec("q2")
    found_now = caught.value.found_now
    assert found_now is not None and not found_now()
    node.view = machine(3)  # the view caught up: looking again finds it
    assert found_now()
