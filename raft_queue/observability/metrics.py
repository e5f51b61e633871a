"""The node's Prometheus metrics: one prometheus-client registry per process.

Everything that is *counted* or *timed* lives here as a module-level metric,
incremented where the work already happens (the send path, the Raft apply
loop, the journal's sync threads) with as little code as a call: no label
look-up on a hot path that can be cached (``RaftProbe`` binds its children
once per group). Everything that is a *level* (depth, term, commit index,
disk free) is read when /metrics is scraped, by ``collector.NodeCollector``,
never updated per event.

Naming follows Prometheus: the ``raftq_`` prefix, base units (seconds,
bytes), ``_total`` on counters (prometheus-client appends it). Labels are
bounded: method and code, queue and partition, a follower's node id, a
rejection reason; never receipt, message or consumer ids.

``configure(enabled=False)`` (``[metrics] enabled = false``) makes every
helper here a no-op, for the cost measurement in docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter as Tally
from operator import attrgetter
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.process_collector import ProcessCollector

# No ``*_created`` series: they double the exposition and nothing here reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes

# Latencies from 0.5 ms to 10 s: an fsync on a good disk is ~1 ms, a commit
# a few ms, a long poll up to max_wait_ms (20 s is the +Inf bucket).
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
METADATA_QUEUE = "__metadata__"  # the queue label of the metadata group
REJECTION_REASONS = ("auth", "quota", "limits")

_enabled = True


def configure(enabled: bool) -> None:
    global _enabled
    _enabled = enabled


def enabled() -> bool:
    return _enabled


# ---- RPCs (server/api/metrics.py) -------------------------------------------------------
RPC_REQUESTS = Counter(
    "raftq_rpc_requests", "gRPC calls answered, by method and status code",
    ["method", "code"], registry=REGISTRY,
)  # fmt: skip
RPC_DURATION = Histogram(
    "raftq_rpc_duration_seconds", "gRPC call latency, by method and status code",
    ["method", "code"], buckets=LATENCY_BUCKETS + (20.0,), registry=REGISTRY,
)  # fmt: skip
RPC_IN_FLIGHT = Gauge(
    "raftq_rpc_in_flight", "gRPC calls being served now (long polls included)",
    ["method"], registry=REGISTRY,
)  # fmt: skip
REJECTIONS = Counter(
    "raftq_rejections", "Requests refused before any work, by reason (auth, quota, limits)",
    ["reason"], registry=REGISTRY,
)  # fmt: skip
for _reason in REJECTION_REASONS:
    REJECTIONS.labels(_reason)


def count_rejection(reason: str) -> None:
    """A request refused for ``reason`` (one of REJECTION_REASONS): ``auth``
    by the API door (server/api/auth.py: UNAUTHENTICATED, PERMISSION_DENIED),
    ``quota`` by the quota gate (server/api/usage.py ``Meter.before``),
    ``limits`` where a request is checked against ``[limits]``."""
    if _enabled:
        REJECTIONS.labels(reason).inc()


# ---- messages, per queue and partition ---------------------------------------------------
SENT = Counter(
    "raftq_messages_sent", "Messages appended by this node as partition leader",
    ["queue", "partition"], registry=REGISTRY,
)  # fmt: skip
RECEIVED = Counter(
    "raftq_messages_received", "Messages delivered by Receive to clients of this node",
    ["queue", "partition"], registry=REGISTRY,
)  # fmt: skip
ACKED = Counter(
    "raftq_messages_acked", "Receipts acknowledged (deleted) through this node",
    ["queue", "partition"], registry=REGISTRY,
)  # fmt: skip
DEAD_LETTERED = Counter(
    "raftq_messages_dead_lettered", "Messages over max_receives moved out by this leader",
    ["queue", "partition"], registry=REGISTRY,
)  # fmt: skip


def count_sent(queue: str, partition: int, n: int) -> None:
    if _enabled:
        SENT.labels(queue, str(partition)).inc(n)


_PARTITION = attrgetter("partition")


def count_received(queue: str, messages: Any) -> None:
    """``messages``: the ReceivedMessage protos a Receive returns."""
    if not _enabled or not messages:
        return
    for part, n in Tally(map(_PARTITION, messages)).items():  # C loops: per answer
        RECEIVED.labels(queue, str(part)).inc(n)


def count_acked(queue: str, partition: int, n: int) -> None:
    if _enabled and n:
        ACKED.labels(queue, str(partition)).inc(n)


def count_dead_lettered(queue: str, partition: int, n: int) -> None:
    if _enabled and n:
        DEAD_LETTERED.labels(queue, str(partition)).inc(n)


# ---- Raft, per group -------------------------------------------------------------------------
_GROUP = ["queue", "partition"]
COMMIT = Histogram(
    "raftq_raft_commit_duration_seconds",
    "Leader: from proposing an entry to its commit and apply",
    _GROUP, buckets=LATENCY_BUCKETS, registry=REGISTRY,
)  # fmt: skip
FSYNC = Histogram(
    "raftq_raft_fsync_duration_seconds", "One fdatasync of a group's Raft journal",
    _GROUP, buckets=LATENCY_BUCKETS, registry=REGISTRY,
)  # fmt: skip
ENTRIES = Counter(
    "raftq_raft_entries_appended", "Entries appended to the group's journal (any role)",
    _GROUP, registry=REGISTRY,
)  # fmt: skip
ENTRY_BYTES = Counter(
    "raftq_raft_appended_bytes", "Bytes of entries appended to the group's journal",
    _GROUP, registry=REGISTRY,
)  # fmt: skip
ELECTIONS = Counter(
    "raftq_raft_elections", "Elections this replica started (became candidate in a new term)",
    _GROUP, registry=REGISTRY,
)  # fmt: skip
LEADER_CHANGES = Counter(
    "raftq_raft_leader_changes", "Times this replica saw the group's leader change",
    _GROUP, registry=REGISTRY,
)  # fmt: skip
SNAPSHOTS = Counter(
    "raftq_raft_snapshots", "Snapshots written (create) or installed from the leader (install)",
    _GROUP + ["kind"], registry=REGISTRY,
)  # fmt: skip
SNAPSHOT_DURATION = Histogram(
    "raftq_raft_snapshot_duration_seconds", "Time to write or install one snapshot",
    _GROUP + ["kind"], buckets=LATENCY_BUCKETS + (30.0, 60.0), registry=REGISTRY,
)  # fmt: skip
_PER_GROUP = (COMMIT, FSYNC, ENTRIES, ENTRY_BYTES, ELECTIONS, LEADER_CHANGES)


class NullProbe:
    """What a group reports to when metrics are off (and before it is named)."""

    def committed(self, seconds: float) -> None: ...
    def synced(self, seconds: float) -> None: ...
    def appended(self, nbytes: int) -> None: ...
    def election(self) -> None: ...
    def leader_changed(self) -> None: ...
    def snapshot(self, kind: str, seconds: float) -> None: ...
    def close(self) -> None: ...


NULL_PROBE = NullProbe()


class RaftProbe(NullProbe):
    """One Raft group's counters and histograms, children bound once (the
    label look-up takes a lock and a dict probe; a bound child does not).
    Driver thread and the journal's sync path only."""

    def __init__(self, queue: str, partition: int) -> None:
        self.labels = (queue, str(partition))
        self._commit = COMMIT.labels(*self.labels)
        self._fsync = FSYNC.labels(*self.labels)
        self._entries = ENTRIES.labels(*self.labels)
        self._bytes = ENTRY_BYTES.labels(*self.labels)
        self._elections = ELECTIONS.labels(*self.labels)
        self._leaders = LEADER_CHANGES.labels(*self.labels)

    def committed(self, seconds: float) -> None:
        self._commit.observe(seconds)

    def synced(self, seconds: float) -> None:
        self._fsync.observe(seconds)

    def appended(self, nbytes: int) -> None:
        self._entries.inc()
        self._bytes.inc(nbytes)

    def election(self) -> None:
        self._elections.inc()

    def leader_changed(self) -> None:
        self._leaders.inc()

    def snapshot(self, kind: str, seconds: float) -> None:
        SNAPSHOTS.labels(*self.labels, kind).inc()
        SNAPSHOT_DURATION.labels(*self.labels, kind).observe(seconds)

    def close(self) -> None:
        """The replica left this node: drop its series (a moved partition
        must not be exported forever by its old home)."""
        for metric in _PER_GROUP:
            with contextlib.suppress(KeyError):
                metric.remove(*self.labels)
        for metric in (SNAPSHOTS, SNAPSHOT_DURATION):
            for kind in ("create", "install"):
                with contextlib.suppress(KeyError):
                    metric.remove(*self.labels, kind)


def probe_for(queue: str, partition: int) -> NullProbe:
    return RaftProbe(queue, partition) if _enabled else NULL_PROBE


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
