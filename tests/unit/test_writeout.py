"""Partition LMDB files are written out steadily off the driver (replication/writeout.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raft_queue.replication import writeout
from raft_queue.replication.host import RaftHost
from raft_queue.replication.partition import PartitionReplica
from tests.unit.test_raft_hazards import addr


def test_a_pass_writes_the_whole_file_out_in_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(writeout, "write_out_in_slices", lambda fd, n: calls.append((fd, n)))
    path = tmp_path / "data.mdb"
    path.write_bytes(b"x" * 12345)
    writeout.write_out(str(path))
    assert [n for _fd, n in calls] == [12345]
    writeout.write_out(str(tmp_path / "gone.mdb"))  # a removed replica's file: nothing
    assert len(calls) == 1


def test_a_replica_registers_its_lmdb_file_while_open(tmp_path: Path) -> None:
    host = RaftHost(idle_tick_s=0.02)
    host.start()
    try:

        def open_() -> Any:
            r = PartitionReplica("w/0", host, addr(), [], str(tmp_path / "r"))
            host.add(r)
            return r

        replica = host.call(open_).result(10)
        data = str(tmp_path / "r" / "lmdb" / "data.mdb")
        assert data in writeout._paths
        host.call(lambda: host.remove(replica.key)).result(10)
        assert data not in writeout._paths
    finally:
        host.stop()
