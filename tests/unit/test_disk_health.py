"""The free-space watermark and the cluster's low-disk map (server/control/disk.py),
against the real file system of a temporary directory (statvfs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raft_queue import errors
from raft_queue.config import ConfigError, StorageConfig
from raft_queue.core.metadata import ReplicaRef
from raft_queue.server.control.disk import DiskHealth, low_space


def test_below_either_threshold_is_low_and_says_which(tmp_path: Path) -> None:
    assert low_space(str(tmp_path), StorageConfig(min_free_bytes=0)) == ""
    huge = StorageConfig(min_free_bytes=2**62)
    assert "min_free_bytes" in low_space(str(tmp_path), huge)
    assert str(tmp_path) in low_space(str(tmp_path), huge)
    full = StorageConfig(min_free_bytes=0, min_free_percent=99.999)
    assert "min_free_percent" in low_space(str(tmp_path), full)


def test_sends_to_a_partition_with_a_replica_on_a_low_node_are_refused(tmp_path: Path) -> None:
    disk = DiskHealth("n1", str(tmp_path), StorageConfig(min_free_bytes=0))
    replicas = (ReplicaRef("n1", 1), ReplicaRef("n2", 2), ReplicaRef("n3", 3))
    disk.check()
    disk.check_send("q", 0, replicas)  # nobody is low
    disk.adopt({"n2": "disk of /d/n2 has 10 bytes free, below [storage] min_free_bytes = 99"})
    with pytest.raises(errors.ResourceExhausted) as refused:
        disk.check_send("q", 0, replicas)
    assert "node n2" in refused.value.message and "/d/n2" in refused.value.message
    disk.check_send("q", 1, (ReplicaRef("n1", 1), ReplicaRef("n3", 3)))  # n2 not in it
    assert disk.is_low("n2") and not disk.is_low("n3")
    disk.adopt({})  # space came back: the next heartbeat answer clears it
    disk.check_send("q", 0, replicas)


def test_the_metadata_leader_keeps_what_each_node_reports(tmp_path: Path) -> None:
    disk = DiskHealth("n1", str(tmp_path), StorageConfig())
    assert disk.report("n2", "low") == {"n2": "low"}
    assert disk.report("n3", "") == {"n2": "low"}
    assert disk.report("n2", "") == {}


def test_a_failed_replica_is_reported_once_with_its_reason(tmp_path: Path) -> None:
    disk = DiskHealth("n1", str(tmp_path), StorageConfig())
    assert disk.failure() == ""
    disk.replica_failed("q.1.0", "journal sync failed: EIO")
    disk.replica_failed("q.1.0", "later")
    assert disk.failure() == "replica q.1.0 failed: journal sync failed: EIO"


@pytest.mark.parametrize("kwargs", [{"min_free_bytes": -1}, {"min_free_percent": 100.0}])
def test_storage_config_is_checked(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        StorageConfig(**kwargs)  # type: ignore[arg-type]
