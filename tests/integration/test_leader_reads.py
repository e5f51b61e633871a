"""Leader reads served outside Raft (Read, GetOffsets) wait until the new leader
has applied its own term's first entry (Raft §8).

Found by the power-loss test in CI: after a restart every replica rebuilds LMDB
by replaying its journal, and a leader elected before it had applied that
replay answered Read with the replayed prefix only, so a client saw acknowledged
offsets as missing. Here replay is slowed down so the window is wide.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raft_queue.replication.partition import PartitionReplica
from raft_queue.testing.cluster import free_port
from tests.integration.test_membership import Replicas

pytestmark = pytest.mark.integration

ENTRIES, RECORDS = 150, 10  # Replicas.append writes 10 records an entry


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    r = Replicas(tmp_path)
    yield r
    for address in list(r.hosts):
        r.stop(address)


def test_a_new_leader_serves_reads_only_after_applying_the_replayed_log(
    replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    for a in addrs:  # no compaction: every entry stays in the journal
        replicas.start(a, [x for x in addrs if x != a], compaction=1_000_000)
    replicas.append(ENTRIES, "x")
    for a in addrs:
        replicas.stop(a)
        shutil.rmtree(replicas.base / a.replace(":", "_") / "lmdb")

    original = PartitionReplica.apply_bytes

    def slow_apply(self: PartitionReplica, index: int, data: bytes) -> Any:
        time.sleep(0.004)
        return original(self, index, data)

    monkeypatch.setattr(PartitionReplica, "apply_bytes", slow_apply)
    for a in addrs:
        replicas.start(a, [x for x in addrs if x != a], compaction=1_000_000)

    served = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and served < 20:
        for g in list(replicas.groups.values()):
            if g.is_leader() and g.can_serve_leader_reads():
                assert g.read(0, 1).latest_offset == ENTRIES * RECORDS
                served += 1
        time.sleep(0.005)
    assert served >= 20, "no leader ever served reads"
