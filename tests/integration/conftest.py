"""Fixtures for tests against real node processes (real gRPC, LMDB, fsync)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from raft_queue.errors import Unavailable
from raft_queue.replication.host import RaftHost
from raft_queue.replication.partition import PartitionReplica
from raft_queue.testing.cluster import LocalCluster, free_port


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster", nodes=3)
    c.start()
    try:
        c.wait_ready(60)
        yield c
    except BaseException:
        for i in range(c.nodes):
            print(f"--- n{i + 1} log tail ---")
            print("\n".join(c.log_path(i).read_text(errors="replace").splitlines()[-30:]))
        raise
    finally:
        c.stop()


@dataclass
class Producer:
    """Sends numbered batches in a thread; records every acknowledged message."""

    client: Any
    queue: str
    batch: int = 50
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    ack_times: list[tuple[float, int]] = field(default_factory=list)  # (time, partition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    seq: int = 0

    def start(self) -> Producer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            bodies = [b"msg-%08d" % (self.seq + k) for k in range(self.batch)]
            self.seq += self.batch
            try:
                results = self.client.send_batch(self.queue, bodies)
            except Exception as exc:  # outcome unknown: not counted as acked
                self.errors.append(repr(exc))
                time.sleep(0.05)
                continue
            now = time.monotonic()
            for body, res in zip(bodies, results, strict=True):
                self.acked[body] = (res.partition, res.offset)
                self.ack_times.append((now, res.partition))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)


def read_all(client: Any, queue: str) -> dict[tuple[int, int], bytes]:
    """Every retained record of every partition, by (partition, offset)."""
    out: dict[tuple[int, int], bytes] = {}
    parts = client.partitions(queue)
    if not all(p.leader for p in parts):
        raise Unavailable(f"{queue}: a partition has no leader yet")
    for p in parts:
        offset = p.earliest_offset
        while offset < p.latest_offset:
            res = client.read(queue, p.partition, offset, max_messages=1000)
            for m in res.messages:
                out[(p.partition, m.offset)] = m.body
            if res.next_offset <= offset:
                break
            offset = res.next_offset
    return out


def wait_identical_replicas(client: Any, queue: str, timeout_s: float = 60.0) -> dict:
    """Poll until every replica of every partition has the same digest."""
    deadline = time.monotonic() + timeout_s
    last: dict[int, set[str]] = {}
    seen: list[str] = []  # each replica's state, for the failure's message
    while time.monotonic() < deadline:
        status = client.cluster_status(include_digests=True)
        digests: dict[int, set[str]] = {}
        counts: dict[int, int] = {}
        seen = []
        for r in status.replicas:
            if r.queue == queue:
                digests.setdefault(r.partition, set()).add(r.digest)
                counts[r.partition] = counts.get(r.partition, 0) + 1
                seen.append(
                    f"p{r.partition}@{r.node}: {r.role} term {r.term} commit {r.commit_index}"
                    f" applied {r.last_applied} next_offset {r.next_offset} {r.digest[:12]}"
                    + (f" failed: {r.failure}" if r.failure else "")
                )
        if (
            digests
            and all(len(d) == 1 for d in digests.values())
            and all(c == 3 for c in counts.values())
        ):
            return digests
        last = digests
        time.sleep(0.5)
    replicas = "\n  ".join(sorted(seen))
    raise AssertionError(f"replicas still differ after {timeout_s}s: {last}\n  {replicas}")


def wait_for(pred: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[list[PartitionReplica]]:
    """Three replicas of one partition in this process, each on its own
    RaftHost (driver thread), over loopback TCP with journals and LMDB."""
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    hosts, replicas = [], []
    for a in addrs:
        host = RaftHost(idle_tick_s=0.02)
        host.start()
        peers = [x for x in addrs if x != a]

        def open_(a: str = a, host: RaftHost = host, peers: list[str] = peers) -> PartitionReplica:
            r = PartitionReplica(
                "p0", host, a, peers, str(tmp_path / a.replace(":", "_")),
                election_timeout_s=(0.4, 0.8),
            )  # fmt: skip
            host.add(r)
            return r

        replicas.append(host.call(open_).result(10))
        hosts.append(host)
    yield replicas
    for h in hosts:
        h.stop()
