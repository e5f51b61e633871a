"""A snapshot received from a leader replaces a follower's state, always.

pysyncobj moved a follower's commit index on every snapshot chunk, so a
follower holding uncommitted entries of an old term applied them (fixed in
appends.py, tests/unit/test_raft_hazards.py hazard 7). The partition's
snapshot install then skipped the leader's image whenever its own LMDB was at
or past the snapshot's index, which kept that wrong state for good: in a
chaos campaign the follower later led and served it (acked sends displaced).
Real replicas (LMDB, journal, snapshot files), no network.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from raft_queue.core import commands as cmd
from raft_queue.replication.host import RaftHost
from raft_queue.replication.partition import PartitionReplica
from tests.integration.conftest import wait_for
from tests.unit.test_raft_hazards import addr

pytestmark = pytest.mark.integration


def lone_replica(host: RaftHost, path: Path) -> PartitionReplica:
    def open_() -> PartitionReplica:
        r = PartitionReplica("p0", host, addr(), [], str(path), election_timeout_s=(0.05, 0.1))
        host.add(r)
        return r

    replica = host.call(open_).result(10)
    wait_for(replica.is_leader, 10)
    return replica


def send(replica: PartitionReplica, prefix: bytes, count: int) -> None:
    for i in range(count):
        record = cmd.NewRecord(body=prefix + b"%03d" % i)
        replica.submit(cmd.Append((record,), now_ms=1_000 + i)).result(10)


def test_a_received_snapshot_replaces_state_ahead_of_it(tmp_path: Path) -> None:
    host = RaftHost(idle_tick_s=0.02)
    host.start()
    try:
        source = lone_replica(host, tmp_path / "a")
        send(source, b"leader-", 5)
        dump = os.path.join(source.data_dir, "raft.dump")
        host.call(source.forceLogCompaction).result(10)
        wait_for(lambda: os.path.exists(dump), 20)
        wait_for(lambda: source.raftLastApplied == source._SyncObj__raftLog[0][1] + 1, 20)
        wanted = source.digest()
        # A replica whose own state went further, with other records (what
        # a follower that applied stale entries holds).
        other = lone_replica(host, tmp_path / "b")
        send(other, b"stale-", 12)
        assert other.store.last_applied() > source._SyncObj__raftLog[1][1]
        assert other.digest() != wanted

        def install() -> Any:
            other._loading_at_start = False  # received from a leader, not our own at start
            return other._deserialize(dump)

        host.call(install).result(10)
        assert other.digest() == wanted, "the received snapshot was not installed"
    finally:
        host.stop()
