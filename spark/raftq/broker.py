"""The one door from the Spark integration to the cluster: the raft_queue SDK, opened late.

Readers and writers are pickled from the driver to executors, so none of them
holds a client: each call opens one with ``connect()`` in the process that
uses it and closes it afterwards. ``raft_queue.client`` (and with it grpc) is
imported inside the functions, so importing the data source, which Spark's
auto-discovery does in a short-lived worker, loads no grpc.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from spark.offsets import Bounds, Layout, OffsetError, Offsets, Range, offset_for_time
from spark.raftq.options import OptionError, TlsOptions

# A Spark task is expensive to fail (local mode does not retry tasks at all), and every
# call it makes is idempotent (reads; sends carry dedup ids): so ride out a leader
# election of up to about a minute instead of the SDK's default ~3 s of retries.
CALL_TIMEOUT_S = 60.0
CALL_RETRIES = 40
BACKOFF_MAX_S = 2.0


@contextmanager
def connect(
    bootstrap: str,
    token: str | None = None,
    tls: TlsOptions | None = None,
    manager: str | None = None,
) -> Iterator[Any]:
    """A client for the duration of a ``with`` block (over TLS if ``tls``): a
    ``raft_queue.Client`` of the cluster at ``bootstrap``, or, with ``manager``,
    a ``ManagedClient`` that finds each partition's cluster through the external
    manager (global partition numbers, as a Client's for a one-cluster queue)."""
    from raft_queue.client import Backoff, Client
    from raft_queue.client.managed import ManagedClient

    common: dict[str, Any] = {
        "token": token,  # None: $RAFTQ_TOKEN or the profile file (client/credentials.py)
        "timeout_s": CALL_TIMEOUT_S,
        "retries": CALL_RETRIES,
        "backoff": Backoff(max_s=BACKOFF_MAX_S),
        **(tls.client_kwargs() if tls is not None else {}),
    }
    client: Any = (
        ManagedClient(manager, **common) if manager else Client(bootstrap=bootstrap, **common)
    )
    try:
        yield client
    finally:
        client.close()


def connect_for(opts: Any) -> Any:
    """``connect`` with a parsed SourceOptions / SinkOptions (its bootstrap or
    manager, token and TLS)."""
    return connect(opts.bootstrap, opts.token, opts.tls, opts.manager)


def layout(client: Any, queues: Sequence[str]) -> Layout:
    """Each queue's partitions and their retained ``[earliest, latest)`` right now.

    An unknown queue is an OptionError naming it, so the query fails before
    any task is planned.
    """
    from raft_queue.errors import NotFound

    out: Layout = {}
    for queue in queues:
        try:
            infos = client.partitions(queue)
        except NotFound as exc:
            raise OptionError(f"raftq: queue {queue!r} does not exist") from exc
        out[queue] = {p.partition: Bounds(p.earliest_offset, p.latest_offset) for p in infos}
    return out


def offsets_for_time(client: Any, shape: Layout, timestamp_ms: int) -> Offsets:
    """Per partition, the first offset stamped at or after ``timestamp_ms`` (else latest).

    One Read with ``timestamp_ms`` per partition (the server's offset-by-time
    lookup, a binary search on the leader: record timestamps never decrease),
    made once on the driver when the query is planned.
    """
    out: Offsets = {}
    for queue, parts in shape.items():
        out[queue] = {}
        for partition, bounds in parts.items():
            found = client.read(queue, partition, 0, max_messages=1, timestamp_ms=timestamp_ms)
            first = found.messages[0].offset if found.messages else None
            out[queue][str(partition)] = offset_for_time(bounds, first)
    return out


def fetch(client: Any, r: Range, fetch_size: int, fail_on_data_loss: bool) -> Iterator[list[Any]]:
    """The records of ``r`` in offset order, a list per Read RPC.

    Offsets missing inside the range (acked records compacted away) are
    skipped silently, as Kafka skips compacted offsets. Records deleted before
    being read, or a partition now shorter than ``r`` (queue recreated), are
    data loss: OffsetError if ``fail_on_data_loss``, else skipped.
    """
    from raft_queue.errors import OutOfRange

    offset = r.start
    while offset < r.end:
        try:
            res = client.read(
                r.queue, r.partition, offset, max_messages=min(fetch_size, r.end - offset)
            )
        except OutOfRange as exc:
            earliest = _earliest(client, r)
            if fail_on_data_loss:
                raise OffsetError(_lost(r, f"offsets [{offset}, {earliest}) were deleted")) from exc
            offset = earliest
            continue
        batch = [m for m in res.messages if m.offset < r.end]
        if batch:
            yield batch
        if res.next_offset <= offset:  # nothing at or after offset
            if fail_on_data_loss:
                raise OffsetError(_lost(r, f"the partition now ends at {res.latest_offset}"))
            return
        offset = res.next_offset


def _earliest(client: Any, r: Range) -> int:
    for info in client.partitions(r.queue):
        if info.partition == r.partition:
            return int(info.earliest_offset)
    raise OffsetError(f"data loss: {r.queue}/{r.partition} no longer exists")


def _lost(r: Range, what: str) -> str:
    return (
        f"data loss reading {r.queue}/{r.partition} [{r.start}, {r.end}): {what}. "
        "Set failOnDataLoss=false to skip missing records."
    )


def partition_count(client: Any, queue: str) -> int:
    """How many partitions ``queue`` has (OptionError if it does not exist)."""
    return len(layout(client, [queue])[queue])


def key_placement(client: Any, queue: str) -> Any:
    """What the sink places keys by: the partition count of a queue never
    split, else its key ranges (raft_queue/core/placement_keys.py)."""
    from raft_queue.client.models import layout_from_infos
    from raft_queue.errors import NotFound

    try:
        ranges = layout_from_infos(client.partitions(queue))
    except NotFound as exc:
        raise OptionError(f"raftq: queue {queue!r} does not exist") from exc
    return ranges if ranges.split else ranges.version


def dedup_window_ms(client: Any, queue: str) -> int:
    """The queue's dedup window: how long a replayed write is still recognised."""
    return int(client.get_queue(queue).config.dedup_window_ms or 0)


def publish(client: Any, queue: str, messages: Sequence[Any]) -> int:
    """Send ``messages`` (OutgoingMessage, each with its dedup id and partition).

    Returns how many were already stored (dedup hits: a replay or retry).
    """
    results = client.send_batch(queue, messages)
    return sum(1 for r in results if r.duplicate)
