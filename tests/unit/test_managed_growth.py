"""Growing a managed queue (pure pieces): which queues a split may grow
(core/managed_homes.py, manager/queue_update.py), the manager's UpdateQueue
command, and ManagedClient handing a queue whole on one cluster to that
cluster's Client (fake clusters, no sockets)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from raft_queue import errors
from raft_queue.client.managed import Home
from raft_queue.client.models import Message, OutgoingMessage, SendResult
from raft_queue.core.managed_homes import sole_cluster
from raft_queue.manager import move_state, queue_update, state
from tests.unit.test_managed_client import managed
from tests.unit.test_manager_state import machine_with

H = state.PartitionHome


def test_a_queue_is_whole_on_a_cluster_only_with_the_same_numbers_there() -> None:
    assert sole_cluster((H("c1", 0), H("c1", 1))) == "c1"
    assert sole_cluster((H("c1", 0), H("c2", 0))) is None  # spans clusters
    assert sole_cluster((H("c1", 1), H("c1", 0))) is None  # numbered otherwise
    assert sole_cluster((H("c2", 0), H("c2", 2))) is None  # a partial move's leftovers between
    assert sole_cluster((H("c1", 0),), pinned=True) is None
    assert sole_cluster(()) is None


def placed(*homes: state.PartitionHome) -> state.ManagerMachine:
    m = machine_with("c1", "c2")
    m.apply(state.PlaceQueue("q", homes, {"partitions": len(homes), "ordering": "fifo"}, 5))
    return m


def test_growing_a_queue_spanning_clusters_is_refused_naming_partitions() -> None:
    m = placed(H("c1", 0), H("c2", 0))
    with pytest.raises(errors.FailedPrecondition) as refused:
        queue_update.check_update(m, "q", {"partitions": 4})
    assert refused.value.message.startswith("partitions: queue spans clusters c1,c2;")
    # The same count, or other fields, pass; ``partitions`` is then not forwarded.
    queue = queue_update.check_update(m, "q", {"partitions": 2, "max_receives": 3})
    assert queue_update.forwarded(queue, {"partitions": 2, "max_receives": 3}) == {
        "max_receives": 3
    }
    assert queue_update.grown_homes(queue, 1, H) == queue.partitions  # a cluster's own count


def test_growing_a_pinned_or_moving_or_unknown_queue_is_refused() -> None:
    m = placed(H("c1", 0), H("c1", 1))
    m.apply(move_state.StartMove("q", "c2", 6, (1,)))  # a partial move: pinned, moving
    with pytest.raises(errors.FailedPrecondition) as moving:
        queue_update.check_update(m, "q", {"max_receives": 3})
    assert moving.value.message.startswith("name: queue 'q' is being moved to c2")
    with pytest.raises(errors.NotFound):
        queue_update.check_update(m, "nope", {})
    pinned = dataclasses.replace(m.queue("q"), pinned=True)  # type: ignore[type-var]

    class View:
        def queue(self, name: str) -> Any:
            return pinned

        def move(self, name: str) -> None:
            return None

    with pytest.raises(errors.FailedPrecondition) as left:
        queue_update.check_update(View(), "q", {"partitions": 4})
    assert left.value.message.startswith("partitions: queue 'q' on c1 holds partitions")


def test_a_whole_queue_grows_its_homes_on_its_cluster_and_the_machine_records_it() -> None:
    m = placed(H("c1", 0), H("c1", 1))
    queue = queue_update.check_update(m, "q", {"partitions": 4})
    assert queue_update.forwarded(queue, {"partitions": 4}) == {"partitions": 4}
    homes = queue_update.grown_homes(queue, 4, H)
    assert homes == (H("c1", 0), H("c1", 1), H("c1", 2), H("c1", 3))
    before = m.mapping_version
    cmd = queue_update.UpdateQueue("q", homes, {"partitions": 4, "ordering": "fifo"})
    assert state.decode_command(state.encode_command(cmd)) == cmd  # the log's codec
    grown = m.apply(cmd)
    assert grown.partitions == homes and grown.config["partitions"] == 4
    assert m.mapping_version == before + 1
    m.apply(cmd)  # applied again (a retried update): no change, no bump
    assert m.mapping_version == before + 1
    again = state.ManagerMachine.from_bytes(m.to_bytes())  # snapshots keep it
    assert again.queue("q") == m.queue("q")


def test_the_machine_never_rewrites_existing_homes() -> None:
    m = placed(H("c1", 0), H("c1", 1))
    with pytest.raises(errors.InvalidArgument) as bad:
        m.apply(queue_update.UpdateQueue("q", (H("c2", 0), H("c1", 1), H("c1", 2)), {}))
    assert bad.value.field == "partitions"
    with pytest.raises(errors.NotFound):
        m.apply(queue_update.UpdateQueue("q", (H("c1", 0), H("c1", 1), H("c9", 2)), {}))
    assert m.queue("q").partitions == (H("c1", 0), H("c1", 1))  # type: ignore[union-attr]


class SplitCluster:
    """A cluster's Client after a split of partition 0 of 2 into 2 and 3: it
    places by its own ranges and numbers the children."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_batch(self, queue: str, messages: list[Any]) -> list[SendResult]:
        self.sent += messages
        return [SendResult(2 + i % 2, i, False, "fsync") for i, _ in enumerate(messages)]

    def receive(self, queue: str, max_messages: int, *args: Any) -> list[Message]:
        return [Message(queue, 3, 7, b"child", "k", receipt="3:7")]

    def read(self, queue: str, partition: int, offset: int, max_messages: int, **kw: Any) -> Any:
        from raft_queue.client.models import ReadResult

        return ReadResult([Message(queue, partition, offset, b"r", "k")], offset + 1, 0, offset + 1)


def test_a_whole_queue_is_handed_to_its_clusters_client_with_its_numbers() -> None:
    client, _ = managed((Home("c1", 0), Home("c1", 1)))
    split = SplitCluster()
    client.client_for = lambda cluster: split  # type: ignore[method-assign,assignment,return-value]
    msgs = [OutgoingMessage(b"a", key="k1"), b"bare", OutgoingMessage(b"b", partition=3)]
    results = client.send_batch("q", msgs)
    assert split.sent == msgs  # unplaced: the cluster's Client follows its key ranges
    assert [r.partition for r in results] == [2, 3, 2]  # the children's numbers, no KeyError
    got = client.receive("q")
    assert (got[0].partition, got[0].receipt) == (3, "c1@3:7")
    assert client.read("q", 3, 5).messages[0].partition == 3  # a child, by its number
    with pytest.raises(errors.InvalidArgument):
        client.read("q", -1)


def test_a_pinned_queue_is_still_placed_by_the_manager_over_its_mapped_partitions() -> None:
    from raft_queue.client.partitioner import partition_for_key

    client, fakes = managed((Home("c1", 0), Home("c1", 1)))
    client._map.current = dataclasses.replace(client._mapping, pinned=frozenset({"q"}))
    results = client.send_batch("q", [b"x", OutgoingMessage(b"y", key="k")])
    assert [r.partition for r in results] == [0, partition_for_key("k", 2)]
    assert fakes["c1"].turn == 0  # no bare body was left to the cluster's round robin
    with pytest.raises(errors.InvalidArgument):
        client.read("q", 2)  # beyond the mapping: only a whole queue reads a child


def test_the_move_campaign_ranks_records_by_placement_epoch_not_by_any_mapping_bump() -> None:
    """chaos/move_campaign.py: a mapping bump of another queue (a split through
    the manager) must not split one partition's records into two; a cut-over
    to another cluster starts a new epoch ranked after the first."""
    from chaos.move_campaign import QUEUE, by_placement, ranks

    def got(tag: str, offset: int) -> dict[str, Any]:
        record = {"partition": f"{tag}/0", "offset": offset, "payload": f"p{offset}"}
        return {"f": "receive", "type": "ok", "queue": QUEUE, "value": [record]}

    ops = [got("v5:c1", 1), got("v6:c1", 2), got("v8:c2", 0), got("v9:c2", 1), got("v11:c1", 0)]
    named = [op["value"][0]["partition"] for op in by_placement(ops)]
    assert named == ["e1:c1/0", "e1:c1/0", "e2:c2/0", "e2:c2/0", "e3:c1/0"]
    assert ranks(by_placement(ops)) == {(QUEUE, "e1:c1/0"): 1, (QUEUE, "e2:c2/0"): 2,
                                        (QUEUE, "e3:c1/0"): 3}  # fmt: skip
