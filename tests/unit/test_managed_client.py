"""ManagedClient's routing over a mapping, with fake per-cluster clients (no sockets)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from raft_queue import errors
from raft_queue.client.managed import Home, ManagedClient, Mapping_
from raft_queue.client.models import Message, OutgoingMessage, ReceiptResult, SendResult
from raft_queue.client.partitioner import partition_for_key


class FakeCluster:
    """One cluster's queue: local partitions of lists; receipts are 'p:offset'."""

    def __init__(self, name: str, partitions: int) -> None:
        self.name = name
        self.logs: list[list[OutgoingMessage]] = [[] for _ in range(partitions)]
        self.acked: list[str] = []
        self.turn = 0

    def send_batch(self, queue: str, messages: list[Any]) -> list[SendResult]:
        out = []
        for m in messages:
            if not isinstance(m, OutgoingMessage):  # a bare body: this cluster's round robin
                m = OutgoingMessage(m, partition=self.turn % len(self.logs))
                self.turn += 1
            if m.partition is None:  # placed by this cluster's Client: its key rule
                m = dataclasses.replace(m, partition=partition_for_key(m.key, len(self.logs)))
            assert m.partition is not None
            self.logs[m.partition].append(m)
            out.append(SendResult(m.partition, len(self.logs[m.partition]) - 1, False, "fsync"))
        return out

    def receive(self, queue: str, max_messages: int, *args: Any) -> list[Message]:
        for p, log in enumerate(self.logs):
            if log:
                m = log.pop(0)
                return [Message(queue, p, 0, bytes(m.body), m.key, receipt=f"{p}:0")]
        return []

    def ack(self, queue: str, receipts: list[str]) -> list[ReceiptResult]:
        self.acked.extend(receipts)
        return [ReceiptResult(r, True) for r in receipts]


def managed(homes: tuple[Home, ...]) -> tuple[ManagedClient, dict[str, FakeCluster]]:
    client = ManagedClient("127.0.0.1:1", token="")
    counts: dict[str, int] = {}
    for h in homes:
        counts[h.cluster] = counts.get(h.cluster, 0) + 1
    fakes = {c: FakeCluster(c, n) for c, n in counts.items()}
    bootstrap = {c: ("127.0.0.1:2",) for c in fakes}
    client._map.current = Mapping_(1, bootstrap, {"q": homes}, {})
    client._map.fetched_at = time.monotonic() + 3600  # no age refresh behind receives here
    client.client_for = lambda cluster: fakes[cluster]  # type: ignore[method-assign,assignment,return-value]
    return client, fakes


SPAN = (Home("c1", 0), Home("c2", 0), Home("c1", 1), Home("c2", 1))


def test_keys_land_on_their_global_partition_and_its_cluster() -> None:
    client, fakes = managed(SPAN)
    msgs = [OutgoingMessage(b"m%d" % i, key=f"key-{i % 40}") for i in range(100)]
    results = client.send_batch("q", msgs)
    again = client.send_batch("q", msgs)  # the same key -> the same partition, every time
    assert [r.partition for r in results] == [r.partition for r in again]
    for g, home in enumerate(SPAN):
        stored = fakes[home.cluster].logs[home.local]
        sent_there = {m.key for m, r in zip(msgs, results, strict=True) if r.partition == g}
        assert {m.key for m in stored} == sent_there
    assert {r.partition for r in results} == {0, 1, 2, 3}


def test_bare_bodies_spread_over_every_global_partition() -> None:
    client, fakes = managed(SPAN)
    results = client.send_batch("q", [b"b%d" % i for i in range(40)])
    assert sorted(r.partition for r in results) == sorted(list(range(4)) * 10)
    for g, home in enumerate(SPAN):
        assert len(fakes[home.cluster].logs[home.local]) == 10
        assert all(r.offset < 10 for r in results if r.partition == g)


def test_explicit_partitions_are_global_and_bounded() -> None:
    client, fakes = managed(SPAN)
    assert client.send("q", b"x", partition=3).partition == 3
    assert len(fakes["c2"].logs[1]) == 1
    with pytest.raises(errors.InvalidArgument):
        client.send("q", b"x", partition=4)
    with pytest.raises(errors.InvalidArgument):
        client.send_batch("q", [b"x"], create=True)


def test_received_messages_carry_global_partitions_and_cluster_receipts() -> None:
    client, fakes = managed(SPAN)
    client.send("q", b"on-c2-local-1", partition=3)
    (m,) = client.receive("q", 1)
    assert m.partition == 3 and m.receipt == "c2@1:0"
    assert client.ack("q", [m])[0] == ReceiptResult("c2@1:0", True)
    assert fakes["c2"].acked == ["1:0"] and fakes["c1"].acked == []
    with pytest.raises(errors.InvalidArgument):
        client.ack("q", ["no-cluster"])


def test_receive_visits_every_cluster_of_the_queue() -> None:
    client, _ = managed(SPAN)
    client.send_batch("q", [OutgoingMessage(b"%d" % g, partition=g) for g in range(4)])
    got = sorted(m.partition for _ in range(4) for m in client.receive("q", 1))
    assert got == [0, 1, 2, 3]
    assert client.receive("q", 1) == []


def test_unrouted_calls_say_so() -> None:
    client, _ = managed(SPAN)
    with pytest.raises(errors.FailedPrecondition):
        client.get_history("q", 0, 0)
    assert dataclasses.is_dataclass(Home)


class FencedCluster(FakeCluster):
    """A cluster whose queue is fenced for a move: sends and receives refused."""

    def send_batch(self, queue: str, messages: list[Any]) -> list[SendResult]:
        raise errors.PartitionSealed("queue 'q' is fenced: it is moving to another cluster")

    def receive(self, queue: str, max_messages: int, *args: Any) -> list[Message]:
        raise errors.PartitionSealed("queue 'q' is fenced: it is moving to another cluster")


def moving(cut_over_after: int) -> tuple[ManagedClient, dict[str, FakeCluster], list[int]]:
    """``q`` on c1 (fenced), cut over to c2 at the ``cut_over_after``-th refresh."""
    client, fakes = managed((Home("c1", 0), Home("c2", 0)))
    fakes["c1"] = FencedCluster("c1", 1)
    client._map.current = Mapping_(1, client._mapping.bootstrap, {"q": (Home("c1", 0),)}, {})
    refreshes = [0]

    def refresh() -> int:
        refreshes[0] += 1
        if refreshes[0] >= cut_over_after:
            bootstrap = client._mapping.bootstrap
            client._map.current = Mapping_(2, bootstrap, {"q": (Home("c2", 0),)}, {})
        return client._mapping.version

    client.refresh = refresh  # type: ignore[method-assign]
    return client, fakes, refreshes


def test_a_send_to_a_fenced_queue_waits_for_the_cut_over_and_lands_on_the_target() -> None:
    client, fakes, refreshes = moving(cut_over_after=3)
    result = client.send("q", "hello", key="k")
    assert result.partition == 0 and refreshes[0] == 3
    assert [m.body for m in fakes["c2"].logs[0]] == ["hello"]


def test_a_send_to_a_fenced_queue_gives_up_after_its_timeout() -> None:
    client, _, refreshes = moving(cut_over_after=10**9)
    client._fence_wait_s = 0.3
    with pytest.raises(errors.PartitionSealed):
        client.send("q", "hello", key="k")
    assert refreshes[0] >= 2  # it asked the manager again while it waited


def test_a_receive_from_a_fenced_queue_finds_nothing_then_follows_the_cut_over() -> None:
    client, fakes, _ = moving(cut_over_after=2)
    fakes["c2"].logs[0].append(OutgoingMessage(b"copied", "k"))
    assert client.receive("q", wait_ms=0) == []  # fenced, mapping unchanged
    got = client.receive("q", wait_ms=0)  # the next refresh names c2
    assert [m.body for m in got] == [b"copied"] and got[0].receipt.startswith("c2@")
