"""load_config's decoded-config table (core/state.py): every apply reads its
partition's config, so a config is decoded once per distinct stored value,
and a new value is read as soon as it is stored."""

from __future__ import annotations

from raft_queue.core import state
from raft_queue.core.commands import Configure, PartitionConfig
from raft_queue.core.partition import PartitionMachine
from raft_queue.core.state import load_config, store_config
from raft_queue.storage import MemoryStore


def _store() -> MemoryStore:
    return MemoryStore(PartitionMachine.TABLES)


def test_a_stored_config_is_decoded_once_and_a_new_one_is_read_at_once() -> None:
    store, machine = _store(), PartitionMachine()
    first = PartitionConfig(ordering="fifo", visibility_timeout_ms=1234)
    with store.begin(write=True) as txn:
        machine.apply(txn, Configure(first))
    with store.begin() as txn:
        a, b = load_config(txn), load_config(txn)
    assert a == first and a is b
    second = PartitionConfig(ordering="none", visibility_timeout_ms=4321, max_receives=3)
    with store.begin(write=True) as txn:
        machine.apply(txn, Configure(second))
        assert load_config(txn) == second  # inside the same transaction
    with store.begin() as txn:
        assert load_config(txn) == second


def test_no_config_stored_reads_as_the_default() -> None:
    with _store().begin() as txn:
        assert load_config(txn) == PartitionConfig()


def test_the_table_stays_bounded() -> None:
    store = _store()
    for i in range(state._CONFIGS_MAX + 10):
        config = PartitionConfig(visibility_timeout_ms=1000 + i)
        with store.begin(write=True) as txn:
            store_config(txn, config)
            assert load_config(txn) == config
        assert len(state._CONFIGS) <= state._CONFIGS_MAX
