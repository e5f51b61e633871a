"""A queue move carries dedup windows (core/dedup.py ``live_entries`` and
``seed``, core/dedup_carry.py): the source's live entries of both kinds are
exported, the target is seeded with them, keeping their original
timestamps. Machines over real stores, explicit ``now_ms``: no clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core import access
from raft_queue.core.codec import decode, encode
from raft_queue.core.commands import Append, Configure, NewRecord, PartitionConfig
from raft_queue.core.dedup import DedupPage
from raft_queue.core.dedup_carry import MOVED_OFFSET, DedupEntry, SeedDedup
from raft_queue.core.partition import PartitionMachine
from raft_queue.core.results import AppendItem, AppendResult
from raft_queue.core.state import table_key
from raft_queue.errors import InvalidArgument
from raft_queue.manager import moves
from raft_queue.storage.lmdb_store import LmdbStore
from tests.unit.test_partition_machine import Partition

WINDOW = 1000


def page(p: Partition, after: bytes = b"", n: int = 100, now: int = 0) -> DedupPage:
    with p.store.begin() as txn:
        return p.machine.dedup_entries(txn, after, n, 50_000, now)


def send(p: Partition, now: int, *ids: str, request_id: bytes = b"") -> AppendResult:
    records = tuple(NewRecord(b"m-" + i.encode(), dedup_id=i) for i in ids)
    result = p.apply(Append(records, now, request_id))
    assert isinstance(result, AppendResult)
    return result


def source() -> Partition:
    """d0..d3 at t=100 (request r1), d4 at t=600 (request r2); d0, d1 acked
    (compacted away: their entries live on in dedup_exp)."""
    p = Partition(dedup_window_ms=WINDOW)
    send(p, 100, "d0", "d1", "d2", "d3", request_id=b"r1")
    send(p, 600, "d4", request_id=b"r2")
    p.ack(700, *p.lease(700, 2))
    return p


def test_export_lists_live_entries_of_both_kinds_with_their_original_times() -> None:
    p = source()
    got = page(p, now=700)
    assert got.done
    by_key = {(e.dedup_id, e.request_id): e for e in got.entries}
    assert by_key[(b"d0", b"")] == DedupEntry(b"d0", b"", 100, (0,))  # acked, still live
    assert by_key[(b"d4", b"")] == DedupEntry(b"d4", b"", 600, (4,))
    assert by_key[(b"", b"r1")] == DedupEntry(b"", b"r1", 100, (0, 1, 2, 3))
    assert by_key[(b"", b"r2")] == DedupEntry(b"", b"r2", 600, (4,))
    assert len(got.entries) == 7
    later = page(p, now=1100)  # the t=100 windows ended at 1100: only d4 and r2 are left
    assert sorted((e.dedup_id, e.request_id) for e in later.entries) == [(b"", b"r2"), (b"d4", b"")]


def test_export_pages_walk_every_key_once_and_say_when_done() -> None:
    p = source()
    seen, after = [], b""
    for _ in range(20):
        got = page(p, after, n=2, now=700)
        seen += [e.dedup_id or e.request_id for e in got.entries]
        after = got.next_key
        if got.done:
            break
    assert sorted(seen) == sorted([b"d0", b"d1", b"d2", b"d3", b"d4", b"r1", b"r2"])


def seeded_target(tmp_path: Path | None = None) -> Partition:
    """A target whose copy holds d2 (unacked at the source) at offset 0 and
    that is then seeded with d0 (acked before the fence), r1 (offsets 2 -> 0,
    the rest not copied) and d2's source entry (must not replace the copy's)."""
    p = Partition()
    if tmp_path is not None:
        p.store = LmdbStore(tmp_path / "lmdb", tables=PartitionMachine.TABLES)
    p.apply(Configure(PartitionConfig(dedup_window_ms=WINDOW)))
    send(p, 800, "d2")  # the copy
    m = MOVED_OFFSET
    entries = (
        DedupEntry(b"d0", b"", 100),
        DedupEntry(b"d2", b"", 100),
        DedupEntry(b"", b"r1", 100, (m, m, 0, m)),
        DedupEntry(b"gone", b"", 40),  # ended by now (1050 - 40 >= WINDOW): not planted
    )
    assert p.apply(SeedDedup(entries, 1050)) == 2
    return p


def test_a_seeded_dedup_id_is_a_duplicate_answered_moved_and_stores_nothing() -> None:
    p = seeded_target()
    before = p.stats(1060)
    assert send(p, 1060, "d0").items == (AppendItem(MOVED_OFFSET, True),)
    assert send(p, 1060, "d2").items == (AppendItem(0, True),)  # the copy's entry was kept
    assert send(p, 1060, "gone").items == (AppendItem(1, False),)  # its window had ended
    assert p.stats(1060).latest_offset == before.latest_offset + 1


def test_a_retried_request_is_answered_with_translated_offsets_and_stores_nothing() -> None:
    p = seeded_target()
    result = send(p, 1060, "fresh-a", "fresh-b", "fresh-c", "fresh-d", request_id=b"r1")
    m = MOVED_OFFSET
    assert [(i.offset, i.duplicate) for i in result.items] == [(m, 1), (m, 1), (0, 1), (m, 1)]
    assert p.stats(1060).latest_offset == 1


def test_seeding_twice_changes_nothing() -> None:
    p = seeded_target()
    digest = p.digest()
    again = (DedupEntry(b"d0", b"", 100), DedupEntry(b"", b"r1", 100, (1, 2, 3, 4)))
    assert p.apply(SeedDedup(again, 1050)) == 0
    assert p.digest() == digest


def test_seeded_entries_end_when_their_window_would_have_ended_on_the_source() -> None:
    p = seeded_target()
    p.expire(1099)
    assert send(p, 1099, "d0").items[0].duplicate
    p.expire(1100)  # 100 + WINDOW
    assert p.count("dedup") == 1 and p.count("dedup_exp") == 0  # only the copy's d2 is left
    assert send(p, 1100, "d0").items == (AppendItem(1, False),)
    assert not send(p, 1100, "x", request_id=b"r1").items[0].duplicate


def test_seeded_entries_survive_an_lmdb_snapshot_and_restore(tmp_path: Path) -> None:
    p = seeded_target(tmp_path)
    image = tmp_path / "image"
    with open(image, "wb") as f:
        p.store.snapshot_to(f)
    q = Partition()
    q.store = LmdbStore(tmp_path / "restored", tables=PartitionMachine.TABLES)
    q.store.restore_from(image)
    assert q.digest() == p.digest()
    assert send(q, 1060, "d0").items == (AppendItem(MOVED_OFFSET, True),)
    assert send(q, 1060, "y", request_id=b"r1").items[2] == AppendItem(0, True)


def test_seed_round_trips_and_replicas_hold_the_same_bytes() -> None:
    cmd = SeedDedup((DedupEntry(b"\xff" + b"h" * 32, b"", 5), DedupEntry(b"", b"r", 6, (7,))), 8)
    assert decode(encode(cmd)) == cmd
    a, b = seeded_target(), seeded_target()
    assert a.digest() == b.digest()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dedup_id": b"a", "request_id": b"r"}, "entries[0]"),
        ({}, "entries[0]"),
        ({"dedup_id": b"\xff" + b"x" * 3}, "entries[0].dedup_id"),
        ({"dedup_id": b"\xc3\x28"}, "entries[0].dedup_id"),
        ({"dedup_id": b"a" * 401}, "entries[0].dedup_id"),
        ({"request_id": b"r" * 65}, "entries[0].request_id"),
        ({"dedup_id": b"a", "offsets": (1,)}, "entries[0].offsets"),
        ({"request_id": b"r", "offsets": (-1,)}, "entries[0].offsets"),
        ({"request_id": b"r", "timestamp_ms": -5}, "entries[0].timestamp_ms"),
    ],
)
def test_bad_entries_are_refused_naming_the_field_and_write_nothing(
    kwargs: dict[str, Any], field: str
) -> None:
    fields: dict[str, Any] = {"dedup_id": b"", "request_id": b"", "timestamp_ms": 1, **kwargs}
    with pytest.raises(InvalidArgument) as info:
        SeedDedup((DedupEntry(**fields),), 1)
    assert info.value.field == field


def test_a_seed_on_a_partition_without_dedup_plants_nothing() -> None:
    p = Partition(dedup_window_ms=0)
    assert p.apply(SeedDedup((DedupEntry(table_key(b"a"), b"", 1),), 2)) == 0
    assert p.count("dedup") == 0


def test_the_export_and_the_seed_are_admin_calls_like_export_partition() -> None:
    for rpc in ("ExportPartition", "ExportDedup", "SeedDedup"):
        assert access.rpc_operation(f"/raft_queue.v1.QueueService/{rpc}") == (access.ADMIN, "")


def test_the_mover_leaves_copied_records_out_and_translates_request_offsets() -> None:
    copied = {4: 0, 5: 1}  # source offset -> its copy's target offset
    out = moves._seed_entry(
        queue_pb2.DedupEntry(dedup_id=b"d4", timestamp_ms=9, offsets=[4]), copied
    )
    assert out is None  # the copy made the target's entry
    acked = moves._seed_entry(
        queue_pb2.DedupEntry(dedup_id=b"d0", timestamp_ms=9, offsets=[0]), copied
    )
    assert (acked.dedup_id, acked.timestamp_ms, list(acked.offsets)) == (b"d0", 9, [])
    request = queue_pb2.DedupEntry(request_id=b"r", timestamp_ms=9, offsets=[3, 4, 5])
    seeded = moves._seed_entry(request, copied)
    assert (seeded.request_id, list(seeded.offsets)) == (b"r", [MOVED_OFFSET, 0, 1])
