"""A replica refuses partition data written in another data format (never
misreads it): the version is stored with the counters (docs/internals.md,
"Data format")."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from raft_queue import errors
from raft_queue.core.commands import Append, Configure, NewRecord, PartitionConfig
from raft_queue.core.partition import PartitionMachine
from raft_queue.core.state import DATA_FORMAT, META, RECORDS
from raft_queue.replication.partition import PartitionReplica
from raft_queue.storage import LmdbStore, MemoryStore

# Format 1: eleven >Q counters, no version; one records value per record.
FORMAT_1_COUNTERS = struct.pack(">11Q", 2, 0, 0, 0, 5, 5, 40, 0, 0, 0, 0)


def test_a_fresh_store_is_stamped_with_the_format_by_its_first_apply() -> None:
    store, machine = MemoryStore(PartitionMachine.TABLES), PartitionMachine()
    with store.begin(write=True) as txn:
        machine.check_format(txn)  # empty: fine
        machine.apply(txn, Configure(PartitionConfig()))
        raw = txn.get(META, b"counters")
    assert raw is not None and raw[:4] == DATA_FORMAT.to_bytes(4, "big")


@pytest.mark.parametrize("old", ["counters", "records_only"])
def test_format_1_data_is_refused_by_check_and_by_apply(old: str) -> None:
    store, machine = MemoryStore(PartitionMachine.TABLES), PartitionMachine()
    with store.begin(write=True) as txn:
        if old == "counters":
            txn.put(META, b"counters", FORMAT_1_COUNTERS)
        txn.put(RECORDS, (0).to_bytes(8, "big"), b"\x00" * 18)
    with store.begin() as txn, pytest.raises(errors.Internal, match="format 1"):
        machine.check_format(txn)
    if old == "counters":
        with store.begin(write=True) as txn, pytest.raises(errors.Internal, match="format 1"):
            machine.apply(txn, Append((NewRecord(b"x"),), 6))


def test_a_replica_opening_format_1_data_fails_naming_its_path(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "lmdb", PartitionMachine.TABLES)
    with store.begin(write=True) as txn:
        txn.put(META, b"counters", FORMAT_1_COUNTERS)
    store.close()
    with pytest.raises(errors.Internal) as info:
        PartitionReplica("q/0", None, "127.0.0.1:1", [], str(tmp_path))  # type: ignore[arg-type]
    assert str(tmp_path / "lmdb") in info.value.message
    assert "format 1" in info.value.message
    LmdbStore(tmp_path / "lmdb", PartitionMachine.TABLES).close()  # it was closed on the way out


def test_reads_of_a_stopped_replica_are_unavailable_not_internal(tmp_path: Path) -> None:
    """The reconciler stops replicas on its own thread while status calls read them."""
    replica = PartitionReplica.__new__(PartitionReplica)  # its reads only, no Raft group
    replica.key, replica.machine = "q/0", PartitionMachine()
    replica.store = LmdbStore(tmp_path / "lmdb", PartitionMachine.TABLES)
    assert replica.stats(0).messages == 0
    replica.store.close()
    with pytest.raises(errors.Unavailable, match="replica stopped"):
        replica.stats(0)
