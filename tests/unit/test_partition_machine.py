"""PartitionMachine, one behaviour at a time (the model test covers mixes).

Each test drives a machine over a MemoryStore with explicit ``now_ms``
values: no clock, no sleeps.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from raft_queue.core.codec import decode, encode
from raft_queue.core.commands import (
    Ack,
    Append,
    Batch,
    ChangeVisibility,
    Command,
    CommitOffset,
    Configure,
    Expire,
    ForgetDead,
    Lease,
    Nack,
    NewRecord,
    PartitionConfig,
    Purge,
    ReceiptRef,
)
from raft_queue.core.kv import KVTxn
from raft_queue.core.partition import PartitionMachine
from raft_queue.core.records import to_blob
from raft_queue.core.results import (
    NOT_FOUND,
    OK,
    STALE,
    AppendItem,
    AppendResult,
    ExpireResult,
    History,
    LeasedMessage,
    LeaseEvent,
    LeaseResult,
    PartitionStats,
    ReadResult,
    ReceiptsResult,
)
from raft_queue.core.segments import RECORD_OVERHEAD
from raft_queue.core.state import HISTORY_LIMIT
from raft_queue.errors import InvalidArgument
from raft_queue.storage import MemoryStore


class Partition:
    """A machine and its store, with one method per command."""

    def __init__(self, **config: Any) -> None:
        self.machine = PartitionMachine()
        self.store = MemoryStore(PartitionMachine.TABLES)
        if config:
            self.apply(Configure(PartitionConfig(**config)))

    def apply(self, cmd: Command) -> Any:
        with self.store.begin(write=True) as txn:
            return self.machine.apply(txn, cmd)

    def append(self, now: int, *bodies: bytes | NewRecord) -> list[int]:
        recs = tuple(b if isinstance(b, NewRecord) else NewRecord(b) for b in bodies)
        result = self.apply(Append(recs, now))
        assert isinstance(result, AppendResult)
        return [item.offset for item in result.items]

    def lease(self, now: int, n: int = 10, visibility: int = 0) -> list[LeasedMessage]:
        result = self.apply(Lease("c", n, visibility, now))
        assert isinstance(result, LeaseResult)
        return list(result.messages)

    def leased_offsets(self, now: int, n: int = 10, visibility: int = 0) -> list[int]:
        return [m.record.offset for m in self.lease(now, n, visibility)]

    def settle(self, cmd: Ack | Nack | ChangeVisibility) -> list[str]:
        result = self.apply(cmd)
        assert isinstance(result, ReceiptsResult)
        return list(result.outcomes)

    def ack(self, now: int, *msgs: LeasedMessage | ReceiptRef) -> list[str]:
        return self.settle(Ack(refs(*msgs), now))

    def nack(self, now: int, delay: int, *msgs: LeasedMessage) -> list[str]:
        return self.settle(Nack(refs(*msgs), delay, now))

    def expire(self, now: int) -> ExpireResult:
        result = self.apply(Expire(now))
        assert isinstance(result, ExpireResult)
        return result

    def read(self, offset: int = 0, n: int = 100, max_bytes: int | None = None) -> ReadResult:
        with self.store.begin() as txn:
            return self.machine.read(txn, offset, n, max_bytes)

    def stats(self, now: int) -> PartitionStats:
        with self.store.begin() as txn:
            return self.machine.stats(txn, now)

    def digest(self) -> str:
        with self.store.begin() as txn:
            return self.machine.digest(txn)

    def history(self, offset: int) -> History | None:
        with self.store.begin() as txn:
            return self.machine.history(txn, offset)

    def next_due(self) -> int | None:
        with self.store.begin() as txn:
            return self.machine.next_due_ms(txn)

    def count(self, table: str) -> int:
        with self.store.begin() as txn:
            return txn.count(table)


def size(rec: NewRecord) -> int:
    """A record's stored size, as retention_bytes and stats count it."""
    return RECORD_OVERHEAD + len(to_blob(rec))


def refs(*msgs: LeasedMessage | ReceiptRef) -> tuple[ReceiptRef, ...]:
    return tuple(
        m if isinstance(m, ReceiptRef) else ReceiptRef(m.record.offset, m.epoch) for m in msgs
    )


def keyed(key: str, body: bytes = b"x", **kw: Any) -> NewRecord:
    return NewRecord(body, key=key, **kw)


# --- 1. append, dedup, read, stats, digest -----------------------------------


def test_offsets_are_dense_from_zero_across_appends_and_batches() -> None:
    p = Partition()
    assert p.append(1, b"a", b"b") == [0, 1]
    batch = Batch((Append((NewRecord(b"c"),), 2), Append((NewRecord(b"d"),), 2)))
    assert p.apply(batch) == (
        AppendResult.of((AppendItem(2, False),)),
        AppendResult.of((AppendItem(3, False),)),
    )
    read = p.read()
    assert [r.offset for r in read.records] == [0, 1, 2, 3]
    assert [r.body for r in read.records] == [b"a", b"b", b"c", b"d"]
    assert (read.next_offset, read.earliest_offset, read.latest_offset) == (4, 0, 4)


def test_record_keeps_its_fields_and_is_stamped_with_now() -> None:
    p = Partition()
    rec = NewRecord(b"body", key="k", headers=(("h", b"v"),), dedup_id="d1")
    p.append(1234, rec)
    (stored,) = p.read().records
    assert (stored.body, stored.key, stored.headers) == (b"body", "k", (("h", b"v"),))
    assert (stored.timestamp_ms, stored.dedup_id) == (1234, "d1")


def test_timestamps_never_decrease_when_the_leader_clock_steps_back() -> None:
    p = Partition()
    p.append(1000, b"a")
    p.append(900, b"b")
    assert [r.timestamp_ms for r in p.read().records] == [1000, 1000]


def test_duplicate_within_window_returns_original_offset_and_stores_nothing() -> None:
    p = Partition(dedup_window_ms=100)
    p.append(0, NewRecord(b"a", dedup_id="x"))
    result = p.apply(Append((NewRecord(b"b"), NewRecord(b"a2", dedup_id="x")), 99))
    assert result.items == (AppendItem(1, False), AppendItem(0, True))
    assert [r.body for r in p.read().records] == [b"a", b"b"]
    assert p.stats(99).latest_offset == 2


def test_duplicate_inside_one_append_is_caught() -> None:
    p = Partition()
    result = p.apply(Append((NewRecord(b"a", dedup_id="x"), NewRecord(b"a", dedup_id="x")), 5))
    assert result.items == (AppendItem(0, False), AppendItem(0, True))


def test_same_dedup_id_after_the_window_is_a_new_record() -> None:
    p = Partition(dedup_window_ms=100)
    p.append(0, NewRecord(b"a", dedup_id="x"))
    assert p.apply(Append((NewRecord(b"a", dedup_id="x"),), 100)).items == (AppendItem(1, False),)


def test_zero_dedup_window_disables_dedup() -> None:
    p = Partition(dedup_window_ms=0)
    assert p.append(0, NewRecord(b"a", dedup_id="x"), NewRecord(b"a", dedup_id="x")) == [0, 1]
    assert p.count("dedup") == 0


def test_expire_drops_dedup_entries_past_their_window() -> None:
    p = Partition(dedup_window_ms=100, retention_ms=10_000)
    p.append(0, NewRecord(b"a", dedup_id="x"))
    p.append(50, NewRecord(b"b", dedup_id="y"))
    p.expire(120)
    assert p.count("dedup") == 1
    p.expire(150)
    assert p.count("dedup") == 0


def test_dedup_outlives_ack_compaction_and_purge_until_its_window_ends() -> None:
    p = Partition(dedup_window_ms=1000)
    p.append(0, NewRecord(b"a", dedup_id="x"), NewRecord(b"b", dedup_id="y"))
    p.ack(1, *p.lease(1, 1))
    assert p.expire(2).removed == 1  # record 0 compacted away
    p.apply(Purge(3))  # record 1 purged
    assert p.count("records") == 0
    assert p.append(500, NewRecord(b"a", dedup_id="x"), NewRecord(b"b", dedup_id="y")) == [0, 1]
    p.expire(1000)
    assert p.count("dedup") == 0 and p.count("dedup_exp") == 0
    assert p.append(1001, NewRecord(b"a", dedup_id="x")) == [2]


def test_long_keys_and_dedup_ids_are_accepted() -> None:
    p = Partition(ordering="fifo")
    long_key, long_id = "k" * 1024, "é" * 300
    p.append(0, keyed(long_key, dedup_id=long_id), keyed(long_key), keyed("k" * 1023))
    assert p.append(1, keyed(long_key, dedup_id=long_id)) == [0]
    assert p.leased_offsets(2) == [0, 2]


def test_read_pages_by_count_and_bytes_but_returns_at_least_one_record() -> None:
    p = Partition()
    p.append(0, b"aaaa", b"bbbb", b"cccc")
    assert [r.offset for r in p.read(1, 1).records] == [1]
    assert p.read(1, 1).next_offset == 2
    assert [r.offset for r in p.read(0, 10, max_bytes=8).records] == [0, 1]
    assert [r.offset for r in p.read(0, 10, max_bytes=1).records] == [0]


def test_read_outside_the_retained_range_returns_nothing() -> None:
    p = Partition(retention_ms=10)
    p.append(0, b"a", b"b")
    p.append(20, b"c")
    p.expire(20)
    for offset in (0, 3, 99):
        res = p.read(offset)
        assert res.records == () and res.next_offset == offset
        assert (res.earliest_offset, res.latest_offset) == (2, 3)


def test_stats_count_messages_in_flight_delayed_and_stored_bytes() -> None:
    p = Partition()
    recs = [NewRecord(b"12345"), keyed("kk", b"1", headers=(("h", b"vv"),)), keyed("x"), keyed("y")]
    p.append(5, *recs[:2])
    p.append(7, *recs[2:])
    p.ack(7, p.lease(7, 1)[0])
    p.lease(7, 1, visibility=100)
    p.nack(7, 50, *p.lease(7, 1))
    stored = sum(size(r) for r in recs)
    assert p.stats(10) == PartitionStats(0, 4, 3, 1, 1, 0, stored, oldest_timestamp_ms=5)
    assert p.stats(107).in_flight == 0 and p.stats(107).delayed == 0


def test_oldest_timestamp_is_the_oldest_record_not_finished() -> None:
    p = Partition(max_receives=1)
    assert p.stats(0).oldest_timestamp_ms == 0
    p.append(10, b"a")
    p.append(20, b"b")
    p.append(30, b"c")
    assert p.stats(40).oldest_timestamp_ms == 10
    a, b = p.lease(40, 2, visibility=5)
    p.ack(41, b)
    p.apply(Expire(45))  # a dies: dead records are not waiting to be consumed
    assert p.stats(45).oldest_timestamp_ms == 30


def test_history_lists_each_lease_with_its_consumer() -> None:
    p = Partition()
    p.append(0, b"a", b"b")
    assert p.history(0) == History("queued", 0, ())
    p.apply(Lease("first", 1, 10, 100))
    p.apply(Lease("second", 1, 10, 110))
    expected = (LeaseEvent(100, "first", 110), LeaseEvent(110, "second", 120))
    assert p.history(0) == History("in_flight", 2, expected)
    (m,) = p.lease(130, 1)
    assert p.nack(131, 50, m) == [OK]
    assert p.history(0).state == "delayed"
    assert p.ack(132, m) == [OK]
    assert p.history(0) == History("done", 0, ())
    assert p.history(2) is None


def test_history_of_a_queued_record_tells_when_its_own_send_delay_ends() -> None:
    """A move copies what is left of the delay (manager/moves.py)."""
    p = Partition(delay_ms=7)  # the queue's delay is not the record's own
    p.append(100, NewRecord(b"a", delay_ms=50), b"b")
    assert p.history(0).at_ms == 150
    assert p.history(1).at_ms == 0


def test_history_keeps_the_last_leases_only() -> None:
    p = Partition()
    p.append(0, b"a")
    for t in range(HISTORY_LIMIT + 3):
        p.apply(Lease(f"c{t}", 1, 1, t))
    hist = p.history(0)
    assert hist is not None and hist.receive_count == HISTORY_LIMIT + 3
    assert [e.consumer for e in hist.deliveries] == [f"c{t}" for t in range(3, HISTORY_LIMIT + 3)]


def test_next_due_is_the_earliest_lease_end_wait_end_or_delay() -> None:
    p = Partition(delay_ms=100)
    assert p.next_due() is None
    p.append(0, b"a")
    assert p.next_due() == 100  # the queue delay of the record Lease will reach next
    p.lease(100, 1, visibility=30)
    assert p.next_due() == 130
    p.append(110, b"b")
    assert p.next_due() == 130


def test_unconfigured_partition_uses_documented_defaults() -> None:
    p = Partition()
    p.append(0, b"a")
    (msg,) = p.lease(0)
    assert msg.deadline_ms == PartitionConfig().visibility_timeout_ms == 30_000


def test_replicas_fed_the_same_commands_have_equal_digests() -> None:
    a, b = Partition(), Partition()
    cmds: list[Command] = [
        Configure(PartitionConfig(ordering="fifo", max_receives=2)),
        Append((keyed("k", dedup_id="1"), keyed("k"), NewRecord(b"z")), 10),
        Lease("c", 5, 100, 20),
        CommitOffset("g", 2),
        Expire(500),
    ]
    for cmd in cmds:
        assert a.apply(cmd) == b.apply(cmd)
    assert a.digest() == b.digest()
    a.apply(Ack((ReceiptRef(0, 1),), 501))
    assert a.digest() != b.digest()


class CountingTxn:
    """Wraps a KVTxn and counts puts per table."""

    def __init__(self, txn: KVTxn) -> None:
        self._txn = txn
        self.puts: dict[str, int] = {}

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.puts[table] = self.puts.get(table, 0) + 1
        self._txn.put(table, key, value)

    def put_many(self, table: str, items: Any) -> None:
        self.puts[table] = self.puts.get(table, 0) + len(items)
        self._txn.put_many(table, items)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)


@pytest.mark.parametrize("encoded", [False, True])
@pytest.mark.parametrize("dedup", [False, True])
def test_append_costs_one_put_per_append_plus_dedup_entries(dedup: bool, encoded: bool) -> None:
    p = Partition()
    recs = tuple(NewRecord(b"x", dedup_id=f"id{i}" if dedup else "") for i in range(100))
    batch = Batch((Append(recs[:50], 1), Append(recs[50:], 2)))
    with p.store.begin(write=True) as txn:
        counting: Any = CountingTxn(txn)
        if encoded:
            p.machine.apply_encoded(counting, encode(batch))
        else:
            p.machine.apply(counting, batch)
    expected = {"records": 2, "meta": 1} | ({"dedup": 100} if dedup else {})
    assert counting.puts == expected  # meta: one counters write per Raft entry


def test_a_request_id_costs_one_dedup_entry_per_append() -> None:
    p = Partition()
    recs = tuple(NewRecord(b"x") for _ in range(100))
    with p.store.begin(write=True) as txn:
        counting: Any = CountingTxn(txn)
        p.machine.apply_encoded(counting, encode(Append(recs, 1, request_id=b"r" * 16)))
    assert counting.puts == {"records": 1, "dedup": 1, "dedup_exp": 1, "meta": 1}


def _blob(delay: int, dedup_len: int, key_len: int, count: int, rest: bytes) -> bytes:
    return struct.pack(">IHHH", delay, dedup_len, key_len, count) + rest


def _parts(*parts: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in parts)


def _append_of(*blobs: bytes, count: int | None = None) -> bytes:
    n = len(blobs) if count is None else count
    return b"\x02" + struct.pack(">QI", 5, n) + _parts(*blobs)


def _batch_of(*commands: bytes, count: int | None = None) -> bytes:
    n = len(commands) if count is None else count
    return b"\x0b" + struct.pack(">I", n) + _parts(*commands)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x63",  # unknown tag
        _append_of(b"\x00" * 9),  # record shorter than its header
        _append_of(_blob(0, 5, 0, 0, b"ab")),  # dedup_id runs past the record
        _append_of(_blob(0, 1, 0, 0, b"\xff")),  # dedup_id not UTF-8
        _append_of(_blob(0, 0, 1, 0, b"\xc3")),  # key not UTF-8
        _append_of(_blob(0, 0, 0, 1, b"")),  # header missing
        _append_of(_blob(0, 0, 0, 0, b""), count=2),  # second record missing
        _append_of(_blob(0, 0, 0, 0, b""))[:-1],  # record cut short
        _append_of(_blob(0, 0, 0, 0, b"")) + b"\x00",  # trailing byte
        _batch_of(encode(Expire(1)), count=2),  # second command missing
        _batch_of(_batch_of()),  # nested Batch
    ],
)
def test_apply_encoded_rejects_garbage_and_the_txn_rolls_back(data: bytes) -> None:
    p = Partition()
    p.append(1, b"a")
    before = p.digest()
    entry = _batch_of(encode(Append((NewRecord(b"ok"),), 2)), data)
    with pytest.raises(InvalidArgument) as info, p.store.begin(write=True) as txn:
        p.machine.apply_encoded(txn, entry)
    assert info.value.field == "command"
    assert p.digest() == before
    with pytest.raises(InvalidArgument):
        decode(data)  # the same bytes are rejected by the plain codec too


def test_apply_encoded_equals_apply_of_the_decoded_command() -> None:
    a, b = Partition(), Partition()
    cmd = Batch(
        (
            Append(
                (NewRecord(b"x", key="k", headers=(("h", b"1"),), dedup_id="d", delay_ms=3),), 7
            ),
            Append((NewRecord(b"y", dedup_id="d"), NewRecord(b"z")), 8),
            Lease("c", 5, 0, 20),
        )
    )
    with b.store.begin(write=True) as txn:
        encoded_result = b.machine.apply_encoded(txn, encode(cmd))
    assert encoded_result == a.apply(cmd)
    assert a.digest() == b.digest()


def test_append_blobs_applies_as_the_same_append() -> None:
    from raft_queue.core.commands import AppendBlobs

    a, b = Partition(), Partition()
    recs = (
        NewRecord(b"x", key="k", headers=(("h", b"1"),), dedup_id="d", delay_ms=3),
        NewRecord(b"y", dedup_id="d"),
        NewRecord(b"z"),
    )
    assert b.apply(AppendBlobs(tuple(to_blob(r) for r in recs), 7)) == a.apply(Append(recs, 7))
    assert a.digest() == b.digest()
    with pytest.raises(InvalidArgument) as info:
        b.apply(AppendBlobs((b"\x00",), 8))
    assert info.value.field == "command"


def test_apply_rejects_what_is_not_a_command() -> None:
    p = Partition()
    with pytest.raises(InvalidArgument):
        p.apply(NewRecord(b"x"))  # type: ignore[arg-type]


# --- 2. leases, ack, nack, change visibility ---------------------------------


def test_lease_takes_visible_records_in_offset_order_up_to_max() -> None:
    p = Partition()
    p.append(0, b"a", b"b", b"c")
    msgs = p.lease(5, 2, visibility=100)
    assert [m.record.offset for m in msgs] == [0, 1]
    assert [(m.epoch, m.receive_count, m.deadline_ms) for m in msgs] == [(1, 1, 105)] * 2
    assert p.leased_offsets(5) == [2]
    assert p.leased_offsets(5) == []


def test_leased_record_is_invisible_until_its_deadline_then_redelivered() -> None:
    p = Partition()
    p.append(0, b"a")
    p.lease(0, visibility=100)
    assert p.lease(99) == []
    (again,) = p.lease(100)
    assert (again.record.offset, again.epoch, again.receive_count) == (0, 2, 2)


def test_ack_removes_from_delivery_for_good() -> None:
    p = Partition(retention_ms=10_000)
    p.append(0, b"a", b"b")
    first = p.lease(0, 1, visibility=10)
    assert p.ack(1, *first) == [OK]
    assert p.ack(2, *first) == [NOT_FOUND]
    assert p.leased_offsets(1000, visibility=10) == [1]
    assert p.leased_offsets(2000) == [1]  # 0 never comes back
    assert [r.offset for r in p.read().records] == [0, 1]  # still replayable


def test_stale_receipt_after_re_lease_is_rejected() -> None:
    p = Partition()
    p.append(0, b"a")
    (old,) = p.lease(0, visibility=10)
    (new,) = p.lease(10, visibility=10)
    assert p.ack(11, old) == [STALE]
    assert p.settle(Nack(refs(old), 0, 11)) == [STALE]
    assert p.settle(ChangeVisibility(refs(old), 100, 11)) == [STALE]
    assert p.ack(11, new) == [OK]


def test_ack_after_deadline_without_re_lease_still_counts() -> None:
    p = Partition()
    p.append(0, b"a")
    (msg,) = p.lease(0, visibility=10)
    assert p.ack(500, msg) == [OK]
    assert p.lease(600) == []


def test_receipts_for_unknown_or_never_leased_records_are_not_found() -> None:
    p = Partition()
    p.append(0, b"a", b"b")
    p.lease(0, 1)
    assert p.ack(1, ReceiptRef(1, 1), ReceiptRef(7, 1)) == [NOT_FOUND, NOT_FOUND]


def test_nack_makes_visible_again_now_or_after_delay() -> None:
    p = Partition()
    p.append(0, b"a", b"b")
    a, b = p.lease(0, 2, visibility=1000)
    assert p.nack(10, 0, a) == [OK]
    assert p.nack(10, 50, b) == [OK]
    assert p.leased_offsets(10) == [0]
    assert p.leased_offsets(59) == []
    assert p.leased_offsets(60) == [1]


def test_nack_of_expired_lease_still_counts() -> None:
    p = Partition()
    p.append(0, b"a")
    (msg,) = p.lease(0, visibility=10)
    assert p.nack(20, 100, msg) == [OK]
    assert p.lease(119) == []
    assert p.leased_offsets(120) == [0]


def test_change_visibility_moves_the_deadline_either_way() -> None:
    p = Partition()
    p.append(0, b"a", b"b")
    a, b = p.lease(0, 2, visibility=100)
    assert p.settle(ChangeVisibility(refs(a), 500, 50)) == [OK]
    assert p.settle(ChangeVisibility(refs(b), 0, 50)) == [OK]
    assert p.leased_offsets(50) == [1]
    assert p.leased_offsets(549) == []
    (again,) = p.lease(550)
    assert (again.record.offset, again.epoch) == (0, 2)


# --- 3. delays -----------------------------------------------------------------


def test_per_message_delay_hides_only_that_record() -> None:
    p = Partition()
    p.append(100, NewRecord(b"late", delay_ms=50), NewRecord(b"now"))
    assert p.leased_offsets(100) == [1]
    assert p.stats(100).delayed == 1
    assert p.leased_offsets(149) == []
    assert p.leased_offsets(150) == [0]


def test_queue_delay_is_a_minimum_that_record_delays_can_extend() -> None:
    p = Partition(delay_ms=100)
    p.append(0, NewRecord(b"a"), NewRecord(b"b", delay_ms=30), NewRecord(b"c", delay_ms=300))
    p.append(50, NewRecord(b"d"))
    assert p.leased_offsets(99) == []
    assert p.leased_offsets(100) == [0, 1]
    assert p.leased_offsets(150) == [3]
    assert p.leased_offsets(300) == [2]


def test_reads_see_delayed_records_at_once() -> None:
    p = Partition(delay_ms=1000)
    p.append(0, b"a")
    assert [r.body for r in p.read().records] == [b"a"]


# --- 4. fifo -------------------------------------------------------------------


def test_fifo_allows_one_record_in_flight_per_key_in_offset_order() -> None:
    p = Partition(ordering="fifo")
    p.append(0, keyed("a"), keyed("a"), keyed("b"), keyed("a"), keyed("b"))
    first = p.lease(0)
    assert [m.record.offset for m in first] == [0, 2]
    assert p.lease(0) == []
    p.ack(1, first[0])
    assert p.leased_offsets(1) == [1]
    p.ack(1, first[1])
    assert p.leased_offsets(1) == [4]


def test_fifo_redelivers_the_head_before_later_records_of_its_key() -> None:
    p = Partition(ordering="fifo")
    p.append(0, keyed("a"), keyed("a"))
    (head,) = p.lease(0, visibility=10)
    p.nack(1, 20, head)
    assert p.lease(5) == []  # head waits out its nack delay; 1 must not overtake
    assert p.leased_offsets(21) == [0]


def test_fifo_records_without_key_are_each_their_own_group() -> None:
    p = Partition(ordering="fifo")
    p.append(0, b"a", b"b", keyed("k"), keyed("k"))
    assert p.leased_offsets(0) == [0, 1, 2]


def test_fifo_delayed_head_holds_back_its_key() -> None:
    p = Partition(ordering="fifo")
    p.append(0, keyed("k", delay_ms=100), keyed("k"), keyed("j"))
    assert p.leased_offsets(0) == [2]
    assert p.leased_offsets(100) == [0]


def test_switching_fifo_to_none_releases_blocked_records() -> None:
    p = Partition(ordering="fifo")
    p.append(0, keyed("k"), keyed("k"), keyed("k"))
    assert p.leased_offsets(0) == [0]
    p.apply(Configure(PartitionConfig(ordering="none")))
    assert p.leased_offsets(0) == [1, 2]
    assert p.count("fifo") == 0 and p.count("blocked") == 0


# --- 5. max_receives and dead letters ------------------------------------------


def test_record_dies_when_its_last_allowed_lease_expires() -> None:
    p = Partition(max_receives=2)
    p.append(0, b"a", b"b")
    p.lease(0, 1, visibility=10)
    (last,) = p.lease(10, 1, visibility=10)
    assert last.receive_count == 2
    assert p.expire(15).dead == ()
    assert p.expire(20).dead == (0,)
    assert p.leased_offsets(20) == [1]
    assert p.ack(21, last) == [NOT_FOUND]
    assert p.stats(21).dead == 1 and p.stats(21).messages == 1
    assert p.expire(30).dead == (0,)  # listed until forgotten: at least once to the DLQ
    assert p.apply(ForgetDead((0, 1, 99))) == 1
    assert p.expire(31).dead == ()
    assert p.stats(31).dead == 0


def test_nack_of_the_last_allowed_lease_kills_the_record() -> None:
    p = Partition(max_receives=1)
    p.append(0, b"a")
    assert p.nack(0, 0, *p.lease(0)) == [OK]
    assert p.lease(1) == []
    assert p.expire(1).dead == (0,)


def test_dead_fifo_head_releases_its_key() -> None:
    p = Partition(ordering="fifo", max_receives=1)
    p.append(0, keyed("k"), keyed("k"))
    p.lease(0, visibility=10)
    assert p.leased_offsets(10) == [1]


def test_dead_records_stay_readable_until_forgotten_then_compact() -> None:
    p = Partition(max_receives=1)
    p.append(0, b"a")
    p.lease(0, visibility=10)
    assert p.expire(10) == ExpireResult(0, (0,))
    assert [r.body for r in p.read().records] == [b"a"]
    p.apply(ForgetDead((0,)))
    assert p.expire(11).removed == 1


# --- 6. consumer-group offsets -------------------------------------------------


def test_committed_offsets_only_move_forward_unless_reset() -> None:
    p = Partition()
    assert p.apply(CommitOffset("g", 5)) == 5
    assert p.apply(CommitOffset("g", 3)) == 5
    assert p.apply(CommitOffset("h", 1)) == 1
    assert p.apply(CommitOffset("g", 2, reset=True)) == 2
    with p.store.begin() as txn:
        assert p.machine.offsets(txn) == {"g": 2, "h": 1}


# --- 7. retention and purge ----------------------------------------------------


def test_retention_ms_removes_old_records_acked_or_not() -> None:
    p = Partition(retention_ms=100)
    p.append(0, b"a", b"b")
    (msg,) = p.lease(0, 1, visibility=1000)
    p.append(50, b"c")
    assert p.expire(99).removed == 0
    assert p.expire(100) == ExpireResult(2, ())
    assert (p.read().earliest_offset, p.read(2).records[0].body) == (2, b"c")
    assert p.ack(100, msg) == [NOT_FOUND]
    assert p.leased_offsets(100) == [2]
    assert p.append(101, b"d") == [3]  # offsets never reused


def test_retention_zero_compacts_acked_records_from_the_front_only() -> None:
    p = Partition()
    p.append(0, b"a", b"b", b"c")
    a, b, c = p.lease(0)
    p.ack(1, a, c)
    assert p.expire(2).removed == 1
    assert p.stats(2).earliest_offset == 1
    p.ack(3, b)
    assert p.expire(4).removed == 2
    assert p.stats(4) == PartitionStats(3, 3, 0, 0, 0, 0, 0, 0)


def test_retention_bytes_trims_the_oldest_records() -> None:
    one = size(NewRecord(b"aaaa"))
    p = Partition(retention_bytes=2 * one, retention_ms=10**9)
    p.append(0, b"aaaa", b"bbbb", b"cccc")
    assert p.expire(1).removed == 1
    assert p.stats(1).bytes == 2 * one


def test_purge_drops_everything_but_keeps_offsets_growing() -> None:
    p = Partition(ordering="fifo", max_receives=1)
    p.append(0, keyed("k"), keyed("k"), b"z", keyed("j"))
    msgs = p.lease(0, visibility=10)
    p.lease(10)  # 0 and 2 die, 1 becomes head
    assert p.apply(Purge(11)) == 4
    assert p.stats(11) == PartitionStats(4, 4, 0, 0, 0, 0, 0, 0)
    assert p.ack(11, *msgs) == [NOT_FOUND] * len(msgs)
    assert p.expire(11).dead == ()
    for table in ("delivery", "timers", "ready", "blocked", "fifo", "dead"):
        assert p.count(table) == 0, table
    assert p.append(12, keyed("k")) == [4]
    assert p.leased_offsets(12) == [4]
