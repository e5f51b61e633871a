"""The cluster and queues the benchmarks run on, and waits that keep runs apart.

A benchmark must measure the workload, not the aftermath of the previous one
(elections, hundreds of groups being deleted) nor a half-made queue: every
wait here ends in a known state or raises/returns how long it took.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

from raft_queue.client import Client
from raft_queue.errors import NotFound, QueueError
from raft_queue.testing.cluster import LocalCluster, free_block


def wait_leaders(
    client: Client, queue: str, timeout_s: float = 60.0, preferred_s: float = 10.0
) -> None:
    """Until every partition of ``queue`` reports a leader (and the client caches them),
    and for up to ``preferred_s`` more until each is its preferred (first) replica:
    otherwise the nodes' hand-over to it (an election) would fall inside the workload.

    NotFound counts as "not yet": a node whose metadata replica lags may not know
    a queue that the metadata leader has just created."""
    deadline = time.monotonic() + timeout_s
    settle: float | None = None
    while True:
        with contextlib.suppress(NotFound):
            parts = client.partitions(queue)
            if all(p.leader for p in parts):
                settle = settle or time.monotonic() + preferred_s
                if time.monotonic() > settle or all(
                    not p.replicas or p.leader == p.replicas[0] for p in parts
                ):
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{queue}: partitions without a leader after {timeout_s}s")
        time.sleep(0.1)


def drop_queue(client: Client, queue: str) -> None:
    with contextlib.suppress(NotFound):
        client.delete_queue(queue)


@contextlib.contextmanager
def bench_queue(
    client: Client, name: str, partitions: int, durability: str, encryption: bool = True
) -> Iterator[str]:
    """A fresh, empty queue (replication 3) for one workload; deleted afterwards."""
    drop_queue(client, name)
    client.create_queue(
        name,
        partitions=partitions,
        replication_factor=3,
        durability=durability,
        encryption=encryption,
    )
    wait_leaders(client, name)
    try:
        yield name
    finally:
        drop_queue(client, name)


def local_cluster(
    base_dir: Path, nodes: int = 3, ports_per_node: int = 400, tls: bool = False
) -> LocalCluster:
    """A LocalCluster whose nodes get ``ports_per_node`` partition ports each (one per
    replica), in one block so nodes never share a port. LocalCluster's default (100 per
    node, blocks chosen independently) cannot host the 256-replica idle test."""
    cluster = LocalCluster(base_dir, nodes=nodes, tls=tls)
    start = free_block(nodes * ports_per_node)
    cluster.specs = [
        dataclasses.replace(
            s,
            raft_port_min=start + i * ports_per_node,
            raft_port_max=start + (i + 1) * ports_per_node - 1,
        )
        for i, s in enumerate(cluster.specs)
    ]
    return cluster


def wait_replicas_gone(client: Client, queues: set[str], timeout_s: float = 300) -> float:
    """Until no node reports a replica of ``queues`` (deleting hundreds of groups takes
    a while; the next workload must not pay for it); the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() < t0 + timeout_s:
        with contextlib.suppress(QueueError):
            if not [r for r in client.cluster_status().replicas if r.queue in queues]:
                break
        time.sleep(1.0)
    return round(time.monotonic() - t0, 1)


def wait_healthy(client: Client, timeout_s: float = 120) -> float:
    """Until the cluster has a metadata leader and every node answers, so a workload
    does not measure (or fail on) the aftermath of the previous one; seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() < t0 + timeout_s:
        with contextlib.suppress(QueueError):
            status = client.cluster_status()
            if status.metadata_leader and not status.unreachable:
                break
        time.sleep(0.5)
    return round(time.monotonic() - t0, 1)


def replicas_per_node(client: Client) -> dict[str, int]:
    """Partition replicas each node reports hosting (to check the idle set-up)."""
    return dict(collections.Counter(r.node for r in client.cluster_status().replicas))
