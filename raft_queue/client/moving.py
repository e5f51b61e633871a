"""SDK flows of a queue move between clusters (the manager's mover calls
them; docs/operations.md "Moving a queue between clusters"): fence a queue,
export one partition's records with their delivery state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.client.calls import Call, Flow, partition_count
from raft_queue.client.routing import PartitionLeaders, Router


def fence_queue(queue: str, fenced: bool, partitions: Sequence[int] = ()) -> Flow[Any]:
    """FenceQueueResponse (fenced, partitions, fenced_partitions); on the
    metadata leader. ``partitions``: only these (a partial move); (): all."""
    request = admin_pb2.FenceQueueRequest(queue=queue, fenced=fenced, partitions=partitions)
    response = yield Call("FenceQueue", request, admin=True, mutating=True, idempotent=True)
    return response


def export_partition(
    router: Router, queue: str, partition: int, offset: int, max_messages: int
) -> Flow[Any]:
    """ExportPartitionResponse of one partition from ``offset``, on its leader."""
    request = queue_pb2.ExportPartitionRequest(
        queue=queue, partition=partition, offset=offset, max_messages=max_messages
    )
    yield from partition_count(router, queue)  # learn the leaders (cached)
    target = PartitionLeaders(queue, [partition])
    response = yield Call("ExportPartition", request, target, mutating=False)
    return response


def export_dedup(
    router: Router, queue: str, partition: int, after: bytes, max_entries: int
) -> Flow[Any]:
    """ExportDedupResponse: a page of one partition's live dedup entries
    after key ``after`` (b"": from the first), on its leader."""
    request = queue_pb2.ExportDedupRequest(
        queue=queue, partition=partition, after=after, max_entries=max_entries
    )
    yield from partition_count(router, queue)
    target = PartitionLeaders(queue, [partition])
    response = yield Call("ExportDedup", request, target, mutating=False)
    return response


def seed_dedup(router: Router, queue: str, partition: int, entries: Sequence[Any]) -> Flow[Any]:
    """SeedDedupResponse (how many were planted); on the partition's leader.
    Idempotent: an entry whose key is live there already is left as it is."""
    request = queue_pb2.SeedDedupRequest(queue=queue, partition=partition, entries=entries)
    yield from partition_count(router, queue)
    target = PartitionLeaders(queue, [partition])
    response = yield Call("SeedDedup", request, target, mutating=True, idempotent=True)
    return response


def carry_leases(router: Router, queue: str, partition: int, leases: Sequence[Any]) -> Flow[Any]:
    """CarryLeasesResponse (how many were leased); on the partition's leader.
    ``leases``: CarriedLease messages. Idempotent (carried ones are skipped)."""
    request = queue_pb2.CarryLeasesRequest(queue=queue, partition=partition, leases=leases)
    yield from partition_count(router, queue)
    target = PartitionLeaders(queue, [partition])
    response = yield Call("CarryLeases", request, target, mutating=True, idempotent=True)
    return response


def settle_carried(
    router: Router, queue: str, partition: int, offsets: Sequence[int], action: str, until_ms: int
) -> Flow[Any]:
    """SettleCarriedResponse (an outcome per offset); on the partition's
    leader. Idempotent: a carried lease settled before answers stale/not_found."""
    request = queue_pb2.SettleCarriedRequest(
        queue=queue, partition=partition, offsets=offsets, action=action, until_ms=until_ms
    )
    yield from partition_count(router, queue)
    target = PartitionLeaders(queue, [partition])
    response = yield Call("SettleCarried", request, target, mutating=True, idempotent=True)
    return response
