"""What each SDK method does, without doing any I/O (sans-IO, as h11).

A *flow* is a generator: it yields ``Call`` (one logical RPC: method,
request, routing target, retry policy), receives the response (or has the
QueueError thrown into it), and returns the method's result. The sync
``Client`` and the asyncio ``AsyncClient`` drive the same flows, so both
have exactly the same behaviour and only their transport differs.

Flows may read and update the ``Router`` (leader cache); they never touch a
channel or sleep.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.client import models
from raft_queue.client.models import Message, OutgoingMessage, SendResult
from raft_queue.client.partitioner import Layout, RoundRobin, partition_for_key
from raft_queue.client.routing import AnyNode, PartitionLeaders, Router, SomeLeaderOf
from raft_queue.errors import Internal, InvalidArgument, NotFound, PartitionSealed

# Entries per Send RPC the SDK sends. Not the server's limit: a node accepts
# up to limits.max_batch_messages (10,000 by default); 1000 keeps one Send
# (one Raft entry) near 150 KB of 100-byte messages.
MAX_BATCH = 1000
REQUEST_ID_BYTES = 16  # random: as unique as a uuid4
RESEAL_REFRESHES = 3  # partition maps fetched again in one send after PartitionSealed

T = TypeVar("T")
Target = AnyNode | PartitionLeaders | SomeLeaderOf
Receipts = str | Message | Iterable[str | Message]


@dataclass(frozen=True, slots=True)
class Call:
    """One logical RPC. ``mutating``: may change state (a lost response is
    OutcomeUnknown, not Unavailable); ``idempotent``: safe to retry after
    OutcomeUnknown; ``extra_s``: time budget added for calls that wait on
    purpose (long polls)."""

    rpc: str
    request: Any
    to: Target | None = None
    admin: bool = False
    mutating: bool = True
    idempotent: bool = True
    extra_s: float = 0.0


Flow = Generator[Call, Any, T]


def receipt_items(receipts: Receipts) -> list[str | Message]:
    """One receipt, a Message, or an iterable of either (a str is one receipt), as a list."""
    return [receipts] if isinstance(receipts, str | Message) else list(receipts)


def receipt_list(receipts: Receipts) -> list[str]:
    """Accept one receipt, a Message, or an iterable of either (a str is one receipt)."""
    out = [r.receipt if isinstance(r, Message) else r for r in receipt_items(receipts)]
    if not all(isinstance(r, str) and r for r in out):
        raise InvalidArgument("receipts", "every receipt must be a non-empty string")
    return out


def _settle_target(queue: str, items: list[str | Message]) -> PartitionLeaders | SomeLeaderOf:
    """Messages say their partition: straight to its leader when they share
    one (no forwarding hop, where the receipts would be parsed twice); bare
    receipt strings go to some leader of the queue. The server routes the rest."""
    parts = {m.partition for m in items if isinstance(m, Message) and m.queue == queue}
    if parts and all(isinstance(m, Message) for m in items):
        return PartitionLeaders(queue, sorted(parts))
    return SomeLeaderOf(queue)


# ---- queues ----------------------------------------------------------------------


def create_queue(router: Router, name: str, config: Mapping[str, Any]) -> Flow[models.QueueInfo]:
    """Idempotent: an existing queue with the same definition is returned."""
    pb_config = models.config_to_pb(config)
    request = models.build_request(queue_pb2.CreateQueueRequest, name=name, config=pb_config)
    router.drop_queue(name)
    return models.queue_info_from_pb((yield Call("CreateQueue", request)))


def update_queue(router: Router, name: str, config: Mapping[str, Any]) -> Flow[models.QueueInfo]:
    """Change the given fields only (None: unchanged)."""
    pb_config = models.config_to_pb(config)
    request = models.build_request(queue_pb2.UpdateQueueRequest, name=name, config=pb_config)
    return models.queue_info_from_pb((yield Call("UpdateQueue", request)))


def get_queue(name: str) -> Flow[models.QueueInfo]:
    request = models.build_request(queue_pb2.GetQueueRequest, name=name)
    return models.queue_info_from_pb((yield Call("GetQueue", request, mutating=False)))


def list_queues() -> Flow[list[models.QueueInfo]]:
    response = yield Call("ListQueues", queue_pb2.ListQueuesRequest(), mutating=False)
    return [models.queue_info_from_pb(q) for q in response.queues]


def delete_queue(router: Router, name: str) -> Flow[None]:
    """Not retried after OutcomeUnknown (a retry would say NotFound)."""
    router.drop_queue(name)
    request = models.build_request(queue_pb2.DeleteQueueRequest, name=name)
    yield Call("DeleteQueue", request, idempotent=False)


def purge_queue(name: str) -> Flow[int]:
    """Drop every message of ``name``; how many were dropped."""
    request = models.build_request(queue_pb2.PurgeQueueRequest, name=name)
    return int((yield Call("PurgeQueue", request)).removed)


def partitions(router: Router, queue: str) -> Flow[list[models.PartitionInfo]]:
    """Describe ``queue``'s partitions, and refresh the leader cache with it."""
    request = models.build_request(queue_pb2.GetPartitionsRequest, queue=queue)
    try:
        response = yield Call("GetPartitions", request, mutating=False)
    except NotFound:
        router.drop_queue(queue)
        raise
    infos = [models.partition_from_pb(p) for p in response.partitions]
    router.update_partitions(queue, infos)
    return infos


def partition_count(router: Router, queue: str) -> Flow[int]:
    return (yield from partition_layout(router, queue)).version


def partition_layout(router: Router, queue: str) -> Flow[Layout]:
    """The queue's key ranges (cached; GetPartitions when unknown or old)."""
    layout = router.layout(queue)
    if layout is None:
        if not (yield from partitions(router, queue)):
            raise Internal(f"queue {queue!r} reports no partitions")
        layout = router.layout(queue)
    if layout is None:
        raise Internal(f"queue {queue!r}: no partition map")
    return layout


# ---- send --------------------------------------------------------------------------


def send_batch(
    router: Router,
    round_robin: RoundRobin,
    queue: str,
    messages: Iterable[OutgoingMessage | bytes | str],
    create: bool = False,
    refreshes: int = RESEAL_REFRESHES,
) -> Flow[list[SendResult]]:
    """Placement: the explicit ``partition``, else the hash of ``key``, else
    the hash of a caller-given ``dedup_id`` (a re-send finds the partition
    that remembers it), else round robin. Entries are grouped by cached
    leader, one RPC per leader per chunk of ``MAX_BATCH``, in sequence.
    Each RPC carries a random request id that its retries repeat, so a retry
    is stored once (``SendRequest.request_id``). A queue we do not find is
    left to the server's one decision (server/dataplane/autocreate.py): the first chunk
    goes to any node with ``SendRequest.create`` = ``create`` and is placed
    there; the node creates the queue if asked to or if the cluster's
    ``auto_create_queues`` is on, and answers NotFound otherwise.
    Keys are placed by the cached key ranges; if the queue was split since
    (PartitionSealed: nothing of that RPC was stored), the map is fetched
    again and the entries not yet sent are placed again, ``refreshes`` times."""
    pending = list(messages)
    if not pending:
        return []
    try:
        layout = yield from partition_layout(router, queue)
    except NotFound:
        first = yield from _send_creating(router, queue, pending[:MAX_BATCH], create)
        rest = yield from send_batch(router, round_robin, queue, pending[MAX_BATCH:], create)
        return first + rest
    placing: int | Layout = layout if layout.split else layout.version
    if placing == 1:  # one partition: a bare body needs no placement (the bulk case)
        prepared = [
            (0, m) if type(m) is bytes else _prepare(round_robin, queue, 1, m) for m in pending
        ]
    else:
        prepared = [_prepare(round_robin, queue, placing, m) for m in pending]
    partitions = [p for p, _ in prepared]
    results: list[SendResult | None] = [None] * len(prepared)
    for indexes in _plan(router, queue, partitions):
        request = _send_request(queue, _pick(prepared, indexes))
        # Still asked for: a queue another sender has just created may be
        # electing its first leaders, and the node waits for them then.
        request.create = create
        target = PartitionLeaders(queue, _pick(partitions, indexes))
        try:
            response = yield Call("Send", request, target)
        except NotFound:
            router.drop_queue(queue)  # deleted or recreated: placement is stale
            raise
        except PartitionSealed:
            router.drop_queue(queue)  # split since we placed: place again
            if refreshes <= 0:
                raise
            unsent = [pending[i] for i, r in enumerate(results) if r is None]
            again = yield from send_batch(router, round_robin, queue, unsent, create, refreshes - 1)
            return _merge(results, again)
        got = models.send_results_from_pb(response)
        if len(got) != len(indexes):
            raise Internal(f"Send returned {len(got)} results for {len(indexes)}")
        if isinstance(indexes, range):
            results[indexes.start : indexes.stop] = got
        else:
            for i, result in zip(indexes, got, strict=True):
                results[i] = result
    return cast("list[SendResult]", results)  # _plan's chunks cover every index once


def _pick(items: list[T], indexes: Sequence[int]) -> list[T]:
    """``items`` at ``indexes``: a slice for a range (one partition's chunk)."""
    if isinstance(indexes, range):
        return items[indexes.start : indexes.stop]
    return [items[i] for i in indexes]


def _merge(results: list[SendResult | None], again: list[SendResult]) -> list[SendResult]:
    """``results`` with its gaps filled from ``again``, in order."""
    rest = iter(again)
    return [r if r is not None else next(rest) for r in results]


def first(flow: Flow[list[T]]) -> Flow[T]:
    """The first result of ``flow``."""
    results = yield from flow
    return results[0]


def _send_creating(
    router: Router, queue: str, chunk: list[OutgoingMessage | bytes | str], create: bool
) -> Flow[list[SendResult]]:
    """One Send (``create`` as given) to any node, for a queue we did not
    find: entries keep an explicit partition, the rest are placed by the
    server (key hash, dedup id hash, round robin: the same rule as ours)."""
    request = _send_request(queue, [])
    request.create = create
    for message in chunk:
        if isinstance(message, OutgoingMessage):
            entry = models.entry_to_pb(message, message.partition or 0)
            if message.partition is None:
                entry.ClearField("partition")
            request.entries.append(entry)
        else:
            body = message if type(message) is bytes else models.to_body(message)
            request.entries.add(body=body)
    router.drop_queue(queue)
    response = yield Call("Send", request)
    got = models.send_results_from_pb(response)
    if len(got) != len(chunk):
        raise Internal(f"Send returned {len(got)} results for {len(chunk)}")
    return got


# A prepared entry: its partition, and either the SendEntry or, for a bare
# body (the bulk case), the body to be added straight into the request.
Prepared = tuple[int, queue_pb2.SendEntry | bytes]


def _prepare(
    round_robin: RoundRobin,
    queue: str,
    count: int | Layout,
    message: OutgoingMessage | bytes | str,
) -> Prepared:
    """Fix a message's partition once, so every retry sends the same entry.
    ``count``: the partition count of a queue never split, else its layout."""
    if not isinstance(message, OutgoingMessage):
        body = message if type(message) is bytes else models.to_body(message)
        partition = round_robin.next(queue, count) if count != 1 else 0
        return partition, body
    if message.partition is not None and message.partition < 0:
        raise InvalidArgument("partition", f"must be >= 0, got {message.partition}")
    if message.partition is not None:
        partition = message.partition
    elif message.key:
        partition = partition_for_key(message.key, count)
    elif message.dedup_id:
        partition = partition_for_key(message.dedup_id, count)
    else:
        partition = round_robin.next(queue, count) if count != 1 else 0
    return partition, models.entry_to_pb(message, partition)


def _send_request(queue: str, chunk: list[Prepared]) -> queue_pb2.SendRequest:
    """One Send RPC's request, with a fresh random request id (the RPC's
    retries resend this very request). Bare bodies all for one partition
    (the bulk case) go packed, end to end (``SendRequest.packed``: no
    SendEntry per message on either side); otherwise bare bodies are added
    in place (no SendEntry built and then copied)."""
    request = models.build_request(
        queue_pb2.SendRequest,
        queue=queue,
        request_id=os.urandom(REQUEST_ID_BYTES),
        results_as_runs=True,
    )
    if len(chunk) > 1 and len({p for p, _ in chunk}) == 1:
        bodies = [item for _, item in chunk]
        if all(type(b) is bytes for b in bodies):
            raw = cast("list[bytes]", bodies)
            packed = request.packed
            packed.partition = chunk[0][0]
            packed.lengths.extend(map(len, raw))
            packed.bodies = b"".join(raw)
            return request
    entries = request.entries
    add = entries.add
    for partition, item in chunk:
        if type(item) is bytes:
            add(body=item, partition=partition)
        else:
            entries.append(item)
    return request


def _plan(router: Router, queue: str, partitions: list[int]) -> list[Sequence[int]]:
    """Indexes of the entries (given by partition) grouped by cached leader
    ("" = unknown), chunked; one leader lookup per partition, not per entry.
    All of one partition (a queue of one): ranges, in order."""
    n = len(partitions)
    if n and partitions.count(partitions[0]) == n:
        return [range(start, min(start + MAX_BATCH, n)) for start in range(0, n, MAX_BATCH)]
    leaders: dict[int, str] = {}
    groups: dict[str, list[int]] = {}
    for i, partition in enumerate(partitions):
        leader = leaders.get(partition)
        if leader is None:
            leader = leaders[partition] = router.leader(queue, partition) or ""
        groups.setdefault(leader, []).append(i)
    return [
        group[start : start + MAX_BATCH]
        for group in groups.values()
        for start in range(0, len(group), MAX_BATCH)
    ]


# ---- receive and receipts ---------------------------------------------------------------


def receive(
    router: Router,
    queue: str,
    max_messages: int,
    visibility_ms: int | None,
    wait_ms: int,
    consumer: str,
    ack: Sequence[str] = (),
    ack_background: bool = False,
) -> Flow[models.Received]:
    """Lease messages; ``ack``: receipts (checked by ``receipt_list``) to
    ack first, in the same call (and Raft entry, where one node leads both).
    Retried as a whole: a repeat answers "not found" for acks that applied.
    ``ack_background``: ``ack`` holds background acks only; the answer does
    not wait for their commit and carries no results for them."""
    fields: dict[str, Any] = {
        "queue": queue,
        "max_messages": max_messages,
        "wait_ms": wait_ms,
        "consumer": consumer or router.consumer_id,
    }
    if visibility_ms is not None:
        fields["visibility_ms"] = visibility_ms
    request = models.build_request(queue_pb2.ReceiveRequest, **fields)
    request.ack.extend(ack)
    request.ack_background = bool(ack) and ack_background
    request.runs = True  # bare records come as MessageRuns (received_from_pb reads them)
    yield from partition_count(router, queue)  # learn the leaders, to prefer one of them
    response = yield Call("Receive", request, SomeLeaderOf(queue), extra_s=wait_ms / 1000)
    messages = models.received_from_pb(queue, response)
    acks = []
    if ack and not request.ack_background:
        acks = models.receipt_results_from_pb(list(ack), response.acks)
    return models.Received(messages, acks)


def settle(
    rpc: str, request_cls: Any, queue: str, receipts: Receipts, **fields: Any
) -> Flow[list[models.ReceiptResult]]:
    """Ack-like calls go to a leader of the receipts' partitions (any node
    would do: the server routes each receipt).

    Retried even after OutcomeUnknown: a repeat reports the receipt as not
    ok ("not found" / "stale") although the first attempt took effect.
    """
    items = receipt_items(receipts)
    listed = receipt_list(items)
    request = models.build_request(
        request_cls, queue=queue, receipts=listed, failures_only=True, **fields
    )
    response = yield Call(rpc, request, _settle_target(queue, items))
    return models.receipt_results_from_pb(listed, response)


# ---- replay -----------------------------------------------------------------------------


def read(
    router: Router,
    queue: str,
    partition: int,
    offset: int,
    max_messages: int,
    wait_ms: int,
    timestamp_ms: int | None = None,
) -> Flow[models.ReadResult]:
    fields: dict[str, Any] = {}
    if timestamp_ms is not None:
        fields["timestamp_ms"] = timestamp_ms
    request = models.build_request(
        queue_pb2.ReadRequest,
        queue=queue,
        partition=partition,
        offset=offset,
        max_messages=max_messages,
        wait_ms=wait_ms,
        **fields,
    )
    yield from partition_count(router, queue)  # learn the leaders (cached)
    target = PartitionLeaders(queue, [partition])
    response = yield Call("Read", request, target, mutating=False, extra_s=wait_ms / 1000)
    return models.read_result_from_pb(response)


def commit_offsets(
    queue: str, group: str, offsets: Mapping[int, int], reset: bool
) -> Flow[dict[int, int]]:
    request = models.build_request(
        queue_pb2.CommitOffsetsRequest,
        queue=queue,
        group=group,
        offsets=dict(offsets),
        reset=reset,
    )
    return dict((yield Call("CommitOffsets", request)).offsets)


def get_offsets(queue: str, group: str) -> Flow[dict[int, int]]:
    request = models.build_request(queue_pb2.GetOffsetsRequest, queue=queue, group=group)
    return dict((yield Call("GetOffsets", request, mutating=False)).offsets)


def get_history(router: Router, queue: str, partition: int, offset: int) -> Flow[models.History]:
    request = models.build_request(
        queue_pb2.GetHistoryRequest, queue=queue, partition=partition, offset=offset
    )
    yield from partition_count(router, queue)
    target = PartitionLeaders(queue, [partition])
    return models.history_from_pb((yield Call("GetHistory", request, target, mutating=False)))


def cluster_status(
    include_digests: bool, include_counters: bool = False
) -> Flow[models.ClusterStatus]:
    request = models.build_request(
        admin_pb2.ClusterStatusRequest,
        include_digests=include_digests,
        include_counters=include_counters,
    )
    response = yield Call("ClusterStatus", request, admin=True, mutating=False)
    return models.cluster_status_from_pb(response)
