"""A partition's snapshot is written off the Raft driver thread (issue 17).

One driver thread runs every group of a node. Log compaction wrote a
partition's snapshot (a copy of its whole LMDB, read back for its CRC,
fsynced) in the group's tick, and then closed the replaced journal there:
with W2's 1.2-1.8 million records that stalled every group of the node for
377-683 ms and then 202-277 ms (W4's producer stall, docs/benchmarks.md, "W4's
producer stall"). Here the snapshot write is held (an Event) until the test
lets it go: another group of the same host must keep committing meanwhile,
and the image written must still be the state the snapshot names, not the
later one. No wall-clock bound: the write is blocked until released.
Real replicas (LMDB, journal, snapshot files), no network.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from raft_queue.core.partition import PartitionMachine
from raft_queue.replication import journal, snapshot
from raft_queue.replication.host import RaftHost
from raft_queue.replication.partition import PartitionReplica
from raft_queue.storage.lmdb_store import LmdbStore
from tests.integration.conftest import wait_for
from tests.integration.test_snapshot_install import send
from tests.unit.test_raft_hazards import addr

pytestmark = pytest.mark.integration


def lone_replica(host: RaftHost, key: str, path: Path) -> PartitionReplica:
    def open_() -> PartitionReplica:
        r = PartitionReplica(key, host, addr(), [], str(path), election_timeout_s=(0.05, 0.1))
        host.add(r)
        return r

    replica = host.call(open_).result(10)
    wait_for(replica.is_leader, 10)
    return replica


def test_a_snapshot_being_written_does_not_stop_the_other_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    writing = threading.Event()
    seen: dict[str, str] = {}
    write = snapshot.write

    def held_write(path: str, data: Any, write_image: Any) -> None:
        seen["write"] = threading.current_thread().name
        writing.set()
        release.wait(60)
        write(path, data, write_image)

    close = journal._close_replaced

    def traced_close(old: Any, fd: int) -> None:
        seen["close"] = threading.current_thread().name
        close(old, fd)

    monkeypatch.setattr(snapshot, "write", held_write)
    monkeypatch.setattr(journal, "_close_replaced", traced_close)
    host = RaftHost(idle_tick_s=0.02)
    host.start()
    try:
        big = lone_replica(host, "big/0", tmp_path / "big")
        other = lone_replica(host, "other/0", tmp_path / "other")
        send(big, b"before-", 5)
        named = big.raftLastApplied  # what the snapshot will hold
        host.call(big.forceLogCompaction)
        assert writing.wait(10), "no snapshot was begun"
        # The write is held: the driver must still commit the other group,
        # and the snapshotting group itself, meanwhile.
        send(other, b"other-", 5)
        send(big, b"after-", 3)
        # Another group's snapshot is pinned at once, not after this one.
        host.call(other.forceLogCompaction)
        wait_for(lambda: other._snapshots._job is not None, 10)
        job = other._snapshots._job
        assert job is not None and job.pinned.wait(10), "pinning waited for another snapshot"
        send(other, b"other-after-", 2)
        # Closing that group (a queue deleted) drops its snapshot waiting for
        # its turn: the close does not wait for the held write.
        host.call(lambda: host.remove(other.key)).result(10)
        assert not os.path.exists(os.path.join(other.data_dir, "raft.dump"))
        assert not os.path.exists(os.path.join(other.data_dir, "raft.dump.tmp"))
        assert not release.is_set()
        release.set()
        dump = os.path.join(big.data_dir, "raft.dump")
        wait_for(lambda: os.path.exists(dump), 20)
        wait_for(lambda: big._SyncObj__raftLog[0][1] >= named - 1, 20)  # journal compacted
        wait_for(lambda: "close" in seen, 20)
        assert seen["write"] != "raft-driver"
        assert seen["close"] != "raft-driver"
        (last, _prev, _cluster), image_len = snapshot.read_meta(dump)
        assert last[1] == named
        image = tmp_path / "image"
        image.mkdir()
        snapshot.extract_image(dump, image_len, str(image / "data.mdb"))
        store = LmdbStore(str(image), tables=PartitionMachine.TABLES)
        try:
            # The state as of the entry named, not the later sends.
            assert store.last_applied() == named
        finally:
            store.close()
    finally:
        release.set()
        host.stop()
