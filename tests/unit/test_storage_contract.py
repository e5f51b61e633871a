"""The LogStore contract, run against both MemoryStore and LmdbStore.

Every test taking ``store`` runs once per implementation; tests at the end
cover what only LMDB has (reopen, map growth, concurrent readers, crash
recovery of a restore).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft_queue import errors
from raft_queue.core.kv import KVTxn
from raft_queue.storage import LmdbStore, LogStore, MemoryStore, lmdb_store

TABLES = ("records", "leases")
StoreFactory = Callable[[Path], LogStore]

FACTORIES: dict[str, StoreFactory] = {
    "memory": lambda _path: MemoryStore(TABLES),
    "lmdb": lambda path: LmdbStore(path / "env", TABLES, map_size=1 << 20),
}


def k(n: int) -> bytes:
    return n.to_bytes(8, "big")


@pytest.fixture(params=sorted(FACTORIES))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], LogStore]]:
    """Opens fresh stores of one kind (each in its own directory); closes them."""
    opened: list[LogStore] = []
    counter = iter(range(1000))

    def make() -> LogStore:
        target = tmp_path / f"s{next(counter)}"
        target.mkdir()
        store = FACTORIES[request.param](target)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: Callable[[], LogStore]) -> LogStore:
    return make_store()


def fill(store: LogStore, table: str, keys: range) -> None:
    with store.begin(write=True) as txn:
        for n in keys:
            txn.put(table, k(n), b"v%d" % n)


def items(store: LogStore, table: str, **kw: object) -> list[tuple[bytes, bytes]]:
    with store.begin() as txn:
        return list(txn.scan(table, **kw))  # type: ignore[arg-type]


def test_get_put_overwrite_delete(store: LogStore) -> None:
    with store.begin(write=True) as txn:
        assert txn.get("records", b"a") is None
        txn.put("records", b"a", b"1")
        assert txn.get("records", b"a") == b"1"  # read-your-writes
        txn.put("records", b"a", b"2")
        assert txn.delete("records", b"missing") is False
    with store.begin() as txn:
        assert txn.get("records", b"a") == b"2"
        assert txn.get("leases", b"a") is None  # tables are separate
    with store.begin(write=True) as txn:
        assert txn.delete("records", b"a") is True
    with store.begin() as txn:
        assert txn.get("records", b"a") is None
        assert txn.count("records") == 0


def test_scan_is_half_open_and_ordered_by_bytes(store: LogStore) -> None:
    fill(store, "records", range(0, 20, 2))  # 0, 2, ..., 18; big-endian sorts numerically
    assert [key for key, _ in items(store, "records", start=k(4), stop=k(10))] == [
        k(4),
        k(6),
        k(8),
    ]
    assert [key for key, _ in items(store, "records", start=k(5), stop=k(9))] == [k(6), k(8)]
    assert len(items(store, "records")) == 10
    assert items(store, "records", start=k(19)) == []
    assert items(store, "records", start=k(6), stop=k(6)) == []
    assert items(store, "records", start=k(4), stop=k(5)) == [(k(4), b"v4")]


def test_reverse_scan_is_descending_within_the_same_range(store: LogStore) -> None:
    fill(store, "records", range(0, 20, 2))
    assert [key for key, _ in items(store, "records", start=k(4), stop=k(10), reverse=True)] == [
        k(8),
        k(6),
        k(4),
    ]
    assert items(store, "records", reverse=True)[0] == (k(18), b"v18")
    assert len(items(store, "records", stop=k(100), reverse=True)) == 10
    assert items(store, "records", stop=k(0), reverse=True) == []
    assert items(store, "records", stop=b"", reverse=True) == []
    assert items(store, "records", start=k(7), stop=k(9), reverse=True) == [(k(8), b"v8")]


def test_floor_is_the_greatest_key_at_or_below(store: LogStore) -> None:
    fill(store, "records", range(10, 50, 10))
    with store.begin() as txn:
        assert txn.floor("records", k(9)) is None
        assert txn.floor("records", k(10)) == (k(10), b"v10")
        assert txn.floor("records", k(29)) == (k(20), b"v20")
        assert txn.floor("records", k(40)) == (k(40), b"v40")
        assert txn.floor("records", k(99)) == (k(40), b"v40")
        assert txn.floor("records", b"\xff" * 9) == (k(40), b"v40")  # past every key
        assert txn.floor("leases", k(5)) is None  # empty table


def test_floor_sees_the_txn_own_writes(store: LogStore) -> None:
    fill(store, "records", range(10, 30, 10))
    with store.begin(write=True) as txn:
        txn.put("records", k(15), b"new")
        txn.delete("records", k(10))
        assert txn.floor("records", k(17)) == (k(15), b"new")
        assert txn.floor("records", k(12)) is None


def test_scan_of_empty_table(store: LogStore) -> None:
    assert items(store, "leases") == []
    assert items(store, "leases", reverse=True) == []


def test_count_counts_committed_and_own_writes(store: LogStore) -> None:
    fill(store, "records", range(5))
    with store.begin(write=True) as txn:
        txn.put("records", k(99), b"x")
        txn.delete("records", k(0))
        assert txn.count("records") == 5
    with store.begin() as txn:
        assert txn.count("records") == 5
        assert txn.count("leases") == 0


def test_exception_inside_write_txn_discards_everything(store: LogStore) -> None:
    fill(store, "records", range(3))
    with store.begin(write=True) as txn:
        store.set_last_applied(txn, 3)
    with pytest.raises(RuntimeError), store.begin(write=True) as txn:
        txn.put("records", k(0), b"changed")
        txn.delete("records", k(1))
        txn.put("records", k(7), b"new")
        txn.put("leases", k(1), b"x")
        store.set_last_applied(txn, 4)
        raise RuntimeError("apply failed")
    assert items(store, "records") == [(k(0), b"v0"), (k(1), b"v1"), (k(2), b"v2")]
    assert items(store, "leases") == []
    assert store.last_applied() == 3


def test_last_applied_commits_with_the_data(store: LogStore) -> None:
    assert store.last_applied() == 0
    with store.begin(write=True) as txn:
        txn.put("records", k(1), b"x")
        store.set_last_applied(txn, 41)
    assert store.last_applied() == 41
    with store.begin(write=True) as txn:
        store.set_last_applied(txn, 2**63)
    assert store.last_applied() == 2**63


def test_run_write_commits_and_returns_the_result(store: LogStore) -> None:
    def apply(txn: KVTxn) -> int:
        txn.put("records", k(1), b"x")
        return txn.count("records")

    assert store.run_write(apply) == 1
    assert items(store, "records") == [(k(1), b"x")]


def test_read_txn_rejects_writes(store: LogStore) -> None:
    with store.begin() as txn:
        with pytest.raises(errors.Internal):
            txn.put("records", b"a", b"1")
        with pytest.raises(errors.Internal):
            txn.delete("records", b"a")
        with pytest.raises(errors.Internal):
            store.set_last_applied(txn, 1)


def test_unknown_table_is_a_key_error(store: LogStore) -> None:
    with store.begin(write=True) as txn:
        for call in (
            lambda: txn.get("nope", b"a"),
            lambda: txn.put("nope", b"a", b"1"),
            lambda: txn.delete("nope", b"a"),
            lambda: list(txn.scan("nope")),
            lambda: txn.count("nope"),
            lambda: txn.get("_meta", b"last_applied"),
        ):
            with pytest.raises(KeyError):
                call()


@pytest.mark.parametrize("key", [b"", b"x" * 512])
def test_keys_must_be_1_to_511_bytes(store: LogStore, key: bytes) -> None:
    with store.begin(write=True) as txn:
        txn.put("records", b"x" * 511, b"max is fine")
        with pytest.raises(errors.Internal):
            txn.put("records", key, b"v")


def test_txn_is_unusable_after_its_block(store: LogStore) -> None:
    with store.begin(write=True) as txn:
        pass
    with pytest.raises(errors.Internal):
        txn.get("records", b"a")


def test_nested_write_txn_in_one_thread_is_an_error_not_a_deadlock(store: LogStore) -> None:
    with store.begin(write=True) as outer:
        outer.put("records", b"a", b"1")
        with pytest.raises(errors.Internal), store.begin(write=True):
            pass
    assert items(store, "records") == [(b"a", b"1")]


def test_snapshot_round_trip_into_a_fresh_store(
    make_store: Callable[[], LogStore], tmp_path: Path
) -> None:
    source = make_store()
    fill(source, "records", range(100))
    fill(source, "leases", range(3))
    with source.begin(write=True) as txn:
        txn.delete("records", k(50))
        source.set_last_applied(txn, 77)
    image = tmp_path / "image"
    with open(image, "wb") as f:
        source.sync()
        source.snapshot_to(f)
    target = make_store()
    fill(target, "records", range(1000, 1010))  # replaced, not merged
    target.restore_from(image)
    assert items(target, "records") == items(source, "records")
    assert items(target, "leases") == items(source, "leases")
    assert target.last_applied() == 77
    fill(target, "records", range(200, 201))  # still writable after the swap
    assert len(items(target, "records")) == 100


def test_restore_from_garbage_keeps_the_old_contents(
    make_store: Callable[[], LogStore], tmp_path: Path
) -> None:
    store = make_store()
    fill(store, "records", range(3))
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a snapshot" * 1000)
    with pytest.raises(errors.Internal):
        store.restore_from(junk)
    assert len(items(store, "records")) == 3


def test_closed_store_refuses_transactions(store: LogStore) -> None:
    store.close()
    with pytest.raises(errors.Internal), store.begin():
        pass
    store.close()  # idempotent


keys = st.binary(min_size=1, max_size=3)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, st.binary(max_size=4)),
        st.tuples(st.just("delete"), keys, st.just(b"")),
    ),
    max_size=30,
)


def apply_batch(
    store: LogStore, model: dict[bytes, bytes], batch: list[tuple[str, bytes, bytes]], abort: bool
) -> dict[bytes, bytes]:
    """Apply ``batch`` to store and a copy of model; the copy is kept unless aborted."""
    staged = dict(model)
    expect_error = pytest.raises(RuntimeError) if abort else contextlib.nullcontext()
    with expect_error, store.begin(write=True) as txn:
        for op, key, value in batch:
            if op == "put":
                txn.put("records", key, value)
                staged[key] = value
            else:
                assert txn.delete("records", key) == (staged.pop(key, None) is not None)
        if abort:
            raise RuntimeError("abort")
    return model if abort else staged


@pytest.mark.parametrize("kind", sorted(FACTORIES))
@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(ops, st.booleans()), max_size=4), lo=keys, hi=keys)
def test_store_matches_a_dict_model(
    kind: str, batches: list[tuple[list[tuple[str, bytes, bytes]], bool]], lo: bytes, hi: bytes
) -> None:
    """Random batches, some aborted: range scans always equal the model's."""
    model: dict[bytes, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = FACTORIES[kind](Path(tmp))
        try:
            for batch, abort in batches:
                model = apply_batch(store, model, batch, abort)
            expected = sorted((key, v) for key, v in model.items() if lo <= key < hi)
            assert items(store, "records", start=lo, stop=hi) == expected
            assert items(store, "records", start=lo, stop=hi, reverse=True) == expected[::-1]
            at_or_below = [(key, v) for key, v in sorted(model.items()) if key <= hi]
            with store.begin() as txn:
                assert txn.count("records") == len(model)
                assert txn.floor("records", hi) == (at_or_below[-1] if at_or_below else None)
        finally:
            store.close()


# ---- LMDB only ------------------------------------------------------------------------


def test_lmdb_reopen_keeps_data_and_last_applied(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "env", TABLES)
    fill(store, "records", range(10))
    with store.begin(write=True) as txn:
        store.set_last_applied(txn, 9)
    store.close()
    again = LmdbStore(tmp_path / "env", TABLES)
    try:
        assert len(items(again, "records")) == 10
        assert again.last_applied() == 9
    finally:
        again.close()


def test_lmdb_grows_its_map_instead_of_failing(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "env", TABLES, map_size=64 << 10)
    try:

        def big_batch(txn: KVTxn) -> None:
            for n in range(2000):
                txn.put("records", k(n), b"x" * 200)

        store.run_write(big_batch)  # ~400 KiB into a 64 KiB map
        with store.begin() as txn:
            assert txn.count("records") == 2000
    finally:
        store.close()


@pytest.mark.skipif(not lmdb_store.WRITEMAP, reason="RAFTQ_LMDB_WRITEMAP=0")
def test_lmdb_backs_its_sparse_file_ahead_of_the_high_water_page(tmp_path: Path) -> None:
    """With writemap data.mdb is as long as the map and sparse; the store
    allocates blocks past the high-water page before each write (at least
    HEADROOM_MIN_BYTES, and 4x the size hint), so no write lands in a hole."""
    store = LmdbStore(tmp_path / "env", TABLES, map_size=256 << 20)
    data = tmp_path / "env" / "data.mdb"
    try:
        assert data.stat().st_size == 256 << 20  # LMDB's whole map
        for n in range(64):
            store.run_write(lambda txn, n=n: txn.put("records", k(n), b"x" * (64 << 10)), 64 << 10)
        used = store._used()
        assert used >= 4 << 20
        assert data.stat().st_blocks * 512 >= used + lmdb_store.HEADROOM_MIN_BYTES
        hint = 16 << 20  # an entry of 16 MiB about to be applied: 64 MiB ahead
        store.run_write(lambda txn: txn.put("records", k(999), b"y"), hint)
        assert data.stat().st_blocks * 512 >= store._used() + 4 * hint
        assert data.stat().st_blocks * 512 < data.stat().st_size  # still sparse beyond
    finally:
        store.close()


def test_lmdb_full_map_in_a_with_block_is_retryable(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "env", TABLES, map_size=64 << 10, max_map_size=1 << 30)
    try:
        with pytest.raises(errors.ResourceExhausted) as info, store.begin(write=True) as txn:
            for n in range(2000):
                txn.put("records", k(n), b"x" * 200)
        assert info.value.retryable
        assert items(store, "records") == []  # the failed txn left nothing
    finally:
        store.close()


def test_lmdb_readers_see_the_last_commit_while_a_write_is_open(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "env", TABLES)
    seen: list[list[tuple[bytes, bytes]]] = []
    try:
        fill(store, "records", range(1))
        with store.begin(write=True) as txn:
            txn.put("records", k(5), b"uncommitted")
            reader = threading.Thread(target=lambda: seen.append(items(store, "records")))
            reader.start()
            reader.join()
        assert seen == [[(k(0), b"v0")]]
    finally:
        store.close()


def test_lmdb_open_finishes_a_restore_interrupted_after_staging(tmp_path: Path) -> None:
    source = LmdbStore(tmp_path / "src", TABLES)
    fill(source, "records", range(4))
    target = LmdbStore(tmp_path / "dst", TABLES)
    target.close()
    staging = tmp_path / "dst.restore"
    staging.mkdir()
    with open(staging / "data.mdb", "wb") as f:
        source.snapshot_to(f)
    source.close()
    (staging / "RESTORE_COMPLETE").touch()
    shutil.rmtree(tmp_path / "dst")  # crash between the two renames
    (tmp_path / "dst.old").mkdir()
    recovered = LmdbStore(tmp_path / "dst", TABLES)
    try:
        assert len(items(recovered, "records")) == 4
        assert not staging.exists() and not (tmp_path / "dst.old").exists()
    finally:
        recovered.close()


def test_lmdb_maintenance_inside_an_open_txn_is_an_error_not_a_deadlock(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "env", TABLES)
    image = tmp_path / "image"
    try:
        with open(image, "wb") as f:
            store.snapshot_to(f)
        with store.begin(), pytest.raises(errors.Internal):
            store.restore_from(image)  # would wait forever for this very txn
        assert not (tmp_path / "env.restore").exists()
        store.restore_from(image)
    finally:
        store.close()


def test_put_many_stores_each_item_in_order_and_overwrites(store: LogStore) -> None:
    with store.begin(write=True) as txn:
        txn.put("records", k(1), b"old")
        txn.put_many("records", [(k(3), b"c"), (k(1), b"a"), (k(2), b"b"), (k(3), b"last")])
        txn.put_many("records", [])
        assert txn.get("records", k(1)) == b"a"  # read-your-writes
    assert items(store, "records") == [(k(1), b"a"), (k(2), b"b"), (k(3), b"last")]


@pytest.mark.parametrize("key", [b"", b"x" * 512])
def test_put_many_rejects_bad_keys_like_put(store: LogStore, key: bytes) -> None:
    with store.begin(write=True) as txn, pytest.raises(errors.Internal):
        txn.put_many("records", [(k(1), b"v"), (key, b"v")])


def test_put_many_needs_a_write_txn_and_a_known_table(store: LogStore) -> None:
    with store.begin() as txn, pytest.raises(errors.Internal):
        txn.put_many("records", [(k(1), b"v")])
    with store.begin(write=True) as txn, pytest.raises(KeyError):
        txn.put_many("nope", [(k(1), b"v")])


@pytest.fixture
def lmdb(tmp_path: Path) -> Iterator[LmdbStore]:
    store = LmdbStore(tmp_path / "env", TABLES)
    yield store
    store.close()  # close needs the gate: a held write left open would hang it


def _held(store: LmdbStore, body: bytes, index: int) -> lmdb_store.HeldWrite:
    held = store.hold_write()
    held.txn.put("records", k(1), body)
    store.set_last_applied(held.txn, index)
    return held


def test_lmdb_held_write_is_invisible_until_committed(lmdb: LmdbStore) -> None:
    held = _held(lmdb, b"ahead", 7)
    seen: list[object] = []
    reader = threading.Thread(  # another thread reads the committed state
        target=lambda: seen.append((lmdb.last_applied(), _get(lmdb, k(1))))
    )
    reader.start()
    reader.join(10)
    assert seen == [(0, None)]
    assert _get(lmdb, k(1)) is None  # so does this thread, in a read transaction
    with pytest.raises(errors.Internal, match="already open"), lmdb.begin(write=True):
        pass  # one writer per thread: the held one
    held.commit()
    assert not held.open
    assert (lmdb.last_applied(), _get(lmdb, k(1))) == (7, b"ahead")
    with pytest.raises(errors.Internal, match="already ended"):
        held.commit()
    with lmdb.begin(write=True) as txn:  # the thread may write again
        txn.put("records", k(2), b"next")


def test_lmdb_held_write_aborted_leaves_nothing_and_frees_the_writer(lmdb: LmdbStore) -> None:
    held = _held(lmdb, b"never", 3)
    held.abort()
    held.abort()  # idempotent
    assert (lmdb.last_applied(), _get(lmdb, k(1))) == (0, None)
    lmdb.run_write(lambda txn: txn.put("records", k(1), b"real"))
    assert _get(lmdb, k(1)) == b"real"


def _get(store: LogStore, key: bytes) -> bytes | None:
    with store.begin() as txn:
        return txn.get("records", key)
