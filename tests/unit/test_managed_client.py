"""ManagedClient's routing over a mapping, with fake per-cluster clients (no sockets)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from raft_queue import errors
from raft_queue.client.managed import Home, ManagedClient, Mapping_
from raft_queue.client.models import Message, OutgoingMessage, ReceiptResult, SendResult


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
    client._mapping = Mapping_(1, bootstrap, {"q": homes}, {})
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
