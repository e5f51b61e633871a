"""Gauges read when /metrics is scraped (a prometheus-client custom collector).

Levels (queue depth, Raft term and indexes, follower lag, disk free,
connections, standing long polls) are read from the replicas at scrape time
instead of being updated on every event: the request and Raft paths pay
nothing for them. Runs on the asyncio thread (the HTTP server's), as
``Cluster.local_status`` always does.

Per-queue series are exported by each partition's *leader* only, so summing
over nodes counts every partition once.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from raft_queue.observability.metrics import METADATA_QUEUE

# A follower at most this many entries behind, heard from within the
# health quorum timeout, counts as in sync (raftq_partition_replicas_in_sync).
IN_SYNC_MAX_LAG = 1000

_GROUP = ["queue", "partition"]


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class NodeCollector(Collector):
    def __init__(self, cluster: Any, health: Any) -> None:
        self.cluster = cluster
        self.node = cluster.node
        self.health = health

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._node()
        yield from self._groups()

    # ---- the node --------------------------------------------------------------------------
    def _node(self) -> Iterator[GaugeMetricFamily]:
        node = self.node
        verdict = self.health.verdict
        checks = _gauge("raftq_node_ready", "1 while /readyz passes (all checks)")
        checks.add_metric([], 1.0 if verdict.ready else 0.0)
        yield checks
        quorum = _gauge("raftq_metadata_quorum", "1 while the node reaches the metadata quorum")
        quorum.add_metric([], 1.0 if verdict.metadata_quorum else 0.0)
        yield quorum
        leads = _gauge("raftq_metadata_leader", "1 on the metadata group's leader")
        leads.add_metric(
            [], 1.0 if node.metadata is not None and node.metadata.is_leader() else 0.0
        )
        yield leads
        try:
            usage = shutil.disk_usage(node.config.data_dir)
            free, total = float(usage.free), float(usage.total)
        except OSError:
            free = total = 0.0
        g = _gauge("raftq_disk_free_bytes", "Free bytes on the data directory's file system")
        g.add_metric([], free)
        yield g
        g = _gauge("raftq_disk_total_bytes", "Size of the data directory's file system")
        g.add_metric([], total)
        yield g
        g = _gauge("raftq_grpc_connections", "Established TCP connections to the gRPC port")
        g.add_metric([], float(established(node.config.grpc_port)))
        yield g
        replicas = list(node.replicas.values())
        g = _gauge("raftq_replicas", "Partition replicas hosted by this node")
        g.add_metric([], float(len(replicas)))
        yield g
        groups = [*replicas, *([node.metadata] if node.metadata is not None else [])]
        g = _gauge("raftq_raft_peer_connections", "Connected Raft peers, summed over groups")
        g.add_metric([], float(sum(_connected(r) for r in groups)))
        yield g
        g = _gauge("raftq_long_polls", "Receive long polls standing on this node's leaders")
        g.add_metric([], float(sum(len(r.standing) for r in replicas)))
        yield g

    # ---- Raft groups and queues ---------------------------------------------------------------
    def _groups(self) -> Iterator[GaugeMetricFamily]:
        fams = {
            "term": _gauge("raftq_raft_term", "Current Raft term", _GROUP),
            "commit": _gauge("raftq_raft_commit_index", "Raft commit index", _GROUP),
            "applied": _gauge("raftq_raft_applied_index", "Last applied Raft index", _GROUP),
            "log": _gauge("raftq_raft_log_entries", "Entries in the Raft journal", _GROUP),
            "leader": _gauge("raftq_raft_is_leader", "1 if this replica leads", _GROUP),
            "has_leader": _gauge(
                "raftq_raft_has_leader", "1 if this replica knows a leader", _GROUP
            ),
            "lag": _gauge(
                "raftq_raft_follower_lag_entries",
                "Leader: entries a follower is behind the leader's log",
                [*_GROUP, "follower"],
            ),
            "replicas": _gauge("raftq_partition_replicas", "Leader: replicas of the group", _GROUP),
            "in_sync": _gauge(
                "raftq_partition_replicas_in_sync",
                f"Leader: replicas heard recently and at most {IN_SYNC_MAX_LAG} entries behind",
                _GROUP,
            ),
        }
        queue = {
            "messages": ("raftq_queue_messages", "Messages stored, not acked"),
            "in_flight": ("raftq_queue_in_flight", "Messages leased, not acked"),
            "delayed": ("raftq_queue_delayed", "Messages invisible until a delay passes"),
            "dead": ("raftq_queue_dead", "Messages over max_receives, not yet moved out"),
            "bytes": ("raftq_queue_bytes", "Payload bytes retained"),
        }
        qfams = {k: _gauge(n, d, _GROUP) for k, (n, d) in queue.items()}
        age = _gauge(
            "raftq_queue_oldest_message_age_seconds", "Age of the oldest unacked message", _GROUP
        )
        names = self.node.raft_address_to_node()
        now = time.time()
        within = self.health.config.quorum_timeout_s
        for st in self.cluster.local_status(False):
            labels = [st.queue, str(st.partition)]
            self._raft(fams, labels, st.term, st.commit_index, st.last_applied, st.log_len,
                       st.role == "leader", bool(st.leader))  # fmt: skip
            if st.role != "leader":
                continue
            for key, fam in qfams.items():
                fam.add_metric(labels, float(getattr(st, key)))
            oldest = st.oldest_timestamp_ms
            age.add_metric(labels, max(0.0, now - oldest / 1000) if oldest else 0.0)
            replica = self.node.replica(st.queue, st.partition)
            if replica is not None:
                self._followers(fams, labels, replica, names, within)
        md = self.node.metadata
        if md is not None:
            s = md.status()
            labels = [METADATA_QUEUE, "0"]
            self._raft(fams, labels, s["term"], s["commit_index"], s["last_applied"],
                       s["log_len"], s["role"] == "leader", bool(s["leader"]))  # fmt: skip
            if s["role"] == "leader":
                self._followers(fams, labels, md, names, within)
        yield from fams.values()
        yield from qfams.values()
        yield age

    @staticmethod
    def _raft(fams: dict[str, GaugeMetricFamily], labels: list[str], *values: Any) -> None:
        term, commit, applied, log_len, leads, has_leader = values
        fams["term"].add_metric(labels, float(term))
        fams["commit"].add_metric(labels, float(commit))
        fams["applied"].add_metric(labels, float(applied))
        fams["log"].add_metric(labels, float(log_len))
        fams["leader"].add_metric(labels, 1.0 if leads else 0.0)
        fams["has_leader"].add_metric(labels, 1.0 if has_leader else 0.0)

    @staticmethod
    def _followers(
        fams: dict[str, GaugeMetricFamily],
        labels: list[str],
        group: Any,
        names: dict[str, str],
        within_s: float,
    ) -> None:
        progress = group.follower_progress()
        in_sync = 1  # the leader
        for address, lag, heard_s in progress:
            fams["lag"].add_metric([*labels, names.get(address, address)], float(lag))
            in_sync += lag <= IN_SYNC_MAX_LAG and heard_s <= within_s
        fams["replicas"].add_metric(labels, float(len(progress) + 1))
        fams["in_sync"].add_metric(labels, float(in_sync))


def _connected(group: Any) -> int:
    try:
        return len(group._SyncObj__connectedNodes)
    except AttributeError:
        return 0


def established(port: int) -> int:
    """TCP connections in state ESTABLISHED whose local port is ``port``
    (Linux /proc/net/tcp and tcp6; 0 elsewhere)."""
    want = f":{port:04X}"
    count = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f, None)
                for line in f:
                    fields = line.split(None, 4)
                    if len(fields) > 3 and fields[1].endswith(want) and fields[3] == "01":
                        count += 1
        except OSError:
            continue
    return count
