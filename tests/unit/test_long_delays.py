"""Delays far beyond 49.7 days (the old 32-bit limit): a message's own delay
up to 3653 days (10 years), a queue's up to 365 days, 64-bit milliseconds
from the request to the stored record and its timer. Time is an input of
core/, so a FakeClock moves it by hand: a 400-day delay takes microseconds."""

from __future__ import annotations

from typing import Any

import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.cli.durations import parse_seconds
from raft_queue.config import MAX_MESSAGE_DELAY_MS, MAX_QUEUE_DELAY_MS, QueueSpec
from raft_queue.core.codec import encode
from raft_queue.core.commands import (
    Append,
    AppendBlobs,
    Configure,
    Lease,
    Nack,
    NewRecord,
    PartitionConfig,
    ReceiptRef,
)
from raft_queue.core.partition import PartitionMachine
from raft_queue.errors import InvalidArgument
from raft_queue.server.api import convert
from raft_queue.storage import MemoryStore
from raft_queue.testing.clock import FakeClock

DAY_MS = 86_400_000


class Machine:
    def __init__(self, **config: Any) -> None:
        self.machine, self.store = PartitionMachine(), MemoryStore(PartitionMachine.TABLES)
        self.clock = FakeClock()
        if config:
            self.apply(Configure(PartitionConfig(**config)))

    def apply(self, cmd: Any) -> Any:
        with self.store.begin(write=True) as txn:
            return self.machine.apply(txn, cmd)

    def apply_encoded(self, data: bytes) -> Any:
        with self.store.begin(write=True) as txn:
            return self.machine.apply_encoded(txn, data)

    def lease(self) -> list[bytes]:
        res = self.apply(Lease("c", 10, 30_000, self.clock.now_ms()))
        return [m.record.body for m in res.messages]

    def next_due_ms(self) -> int | None:
        with self.store.begin() as txn:
            return self.machine.next_due_ms(txn)


def send_through_the_front_end(m: Machine, delay_ms: int) -> None:
    """As a node does: the SendEntry validated and packed into blobs by
    convert.record_blobs, encoded as the Raft entry, applied by a replica."""
    entries = [queue_pb2.SendEntry(body=b"later", delay_ms=delay_ms)]
    blobs, summary = convert.record_blobs(entries, [0], QueueSpec())
    m.apply_encoded(encode(AppendBlobs(blobs, m.clock.now_ms(), b"", summary)))


def test_raftq_send_delay_400d_means_400_days() -> None:
    assert parse_seconds("400d") * 1000 == 400 * DAY_MS
    assert [parse_seconds(t) for t in ("90", "1.5", "250ms", "10m", "12h", "2D")] == [
        90,
        1.5,
        0.25,
        600,
        43_200,
        172_800,
    ]
    with pytest.raises(ValueError, match="400d"):
        parse_seconds("400 days")


@pytest.mark.parametrize("days", [50, 400, 3653])
def test_a_long_delay_is_delivered_on_time(days: int) -> None:
    m = Machine()
    sent_ms = m.clock.now_ms()
    send_through_the_front_end(m, days * DAY_MS)
    assert m.next_due_ms() == sent_ms + days * DAY_MS
    m.clock.advance(days=days - 1)
    assert m.lease() == []
    m.clock.advance(ms=DAY_MS - 1)
    assert m.lease() == [], "visible a millisecond early"
    m.clock.advance(ms=1)
    assert m.lease() == [b"later"]


def test_a_queue_delay_of_365_days_applies_to_each_message() -> None:
    m = Machine(delay_ms=MAX_QUEUE_DELAY_MS)
    m.apply(Append((NewRecord(b"q"), NewRecord(b"own", delay_ms=400 * DAY_MS)), m.clock.now_ms()))
    m.clock.advance(days=365, ms=-1)
    assert m.lease() == []
    m.clock.advance(ms=1)
    assert m.lease() == [b"q"]  # leased for 30 s: visible again long before day 400
    m.clock.advance(days=35, ms=-1)
    assert b"own" not in m.lease()
    m.clock.advance(ms=1)
    assert b"own" in m.lease()


def test_a_nack_delay_of_400_days() -> None:
    m = Machine()
    m.apply(Append((NewRecord(b"n"),), m.clock.now_ms()))
    (msg,) = m.apply(Lease("c", 1, 30_000, m.clock.now_ms())).messages
    m.apply(Nack((ReceiptRef(msg.record.offset, msg.epoch),), 400 * DAY_MS, m.clock.now_ms()))
    m.clock.advance(days=399)
    assert m.lease() == []
    m.clock.advance(days=1)
    assert m.lease() == [b"n"]


def test_limits_are_the_ones_the_errors_name() -> None:
    over = MAX_MESSAGE_DELAY_MS + 1
    with pytest.raises(InvalidArgument, match="3653 days") as exc:
        convert.record_blobs([queue_pb2.SendEntry(body=b"x", delay_ms=over)], [0], QueueSpec())
    assert exc.value.field == "entries[0].delay_ms"
    send_through_the_front_end(Machine(), MAX_MESSAGE_DELAY_MS)  # the limit itself is fine
    with pytest.raises(InvalidArgument, match="365 days") as exc:
        QueueSpec(delay_ms=MAX_QUEUE_DELAY_MS + 1)
    assert exc.value.field == "delay_ms"
    assert QueueSpec(delay_ms=MAX_QUEUE_DELAY_MS).delay_ms == 365 * DAY_MS
    with pytest.raises(InvalidArgument, match="365 days"):
        PartitionConfig(delay_ms=MAX_QUEUE_DELAY_MS + 1)
