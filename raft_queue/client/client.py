"""The synchronous SDK client: one object per application, safe to share between threads.

Every method is one logical call: it is routed (``routing.py``), retried
(``retry.py``) and its gRPC errors are turned into ``QueueError`` subclasses
(``client/errors.py``), so callers only ever see the error tree of
``raft_queue.errors``.

Delivery contract: sends are at-least-once on the wire and exactly-once in
the log within the queue's dedup window, because every message carries a
dedup id (the caller's, or a uuid4 made once per message) that is reused by
every retry. Receives are at-least-once (a lease lost in transit expires and
the message is delivered again).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.client import models
from raft_queue.client.errors import from_rpc_error
from raft_queue.client.models import (
    ClusterStatus,
    Message,
    OutgoingMessage,
    PartitionInfo,
    QueueInfo,
    ReadResult,
    ReceiptResult,
    SendResult,
)
from raft_queue.client.partitioner import RoundRobin, partition_for_key
from raft_queue.client.retry import Backoff, Retrier
from raft_queue.client.routing import AnyNode, PartitionLeaders, Router, SomeLeaderOf
from raft_queue.errors import Internal, InvalidArgument, NotFound

MAX_BATCH = 1000  # entries per Send RPC (the server's limit)

Receipts = str | Message | Iterable[str | Message]
Target = AnyNode | PartitionLeaders | SomeLeaderOf


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """``"h1:p1,h2:p2"`` or a list of addresses -> a list without blanks."""
    parts = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [p.strip() for p in parts if p and p.strip()]
    if not addresses:
        raise InvalidArgument("bootstrap", "needs at least one host:port address")
    return addresses


def _receipt_list(receipts: Receipts) -> list[str]:
    """Accept one receipt, a Message, or an iterable of either (a str is one receipt)."""
    items = [receipts] if isinstance(receipts, str | Message) else list(receipts)
    out = [r.receipt if isinstance(r, Message) else r for r in items]
    if not all(isinstance(r, str) and r for r in out):
        raise InvalidArgument("receipts", "every receipt must be a non-empty string")
    return out


class Client:
    """A connection to a raft_queue cluster through any of its nodes.

    ``bootstrap``: comma-separated ``host:port`` list (or a sequence); any node
    accepts any request. ``timeout_s`` bounds each method including its
    retries (long polls add their wait); ``retries`` bounds the retries.
    ``backoff`` and ``sleep`` tune or replace the waits between retries.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "127.0.0.1:7101",
        timeout_s: float = 10.0,
        retries: int = 5,
        *,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._router = Router(parse_bootstrap(bootstrap))
        self._retrier = Retrier(retries, timeout_s, backoff, sleep=sleep)
        self._round_robin = RoundRobin()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every channel. Idempotent; later calls raise FailedPrecondition."""
        self._router.close()

    # ---- the one call path -------------------------------------------------

    def _call(
        self,
        rpc: str,
        request: Any,
        to: Target | None = None,
        *,
        admin: bool = False,
        mutating: bool = True,
        idempotent: bool = True,
        extra_s: float = 0.0,
    ) -> Any:
        """Run ``rpc`` with routing and retries; raise QueueError, never grpc.RpcError."""
        target = to or AnyNode()
        router = self._router

        def attempt(timeout_s: float) -> Any:
            address = target.address(router)
            stub = router.admin_stub(address) if admin else router.queue_stub(address)
            try:
                return getattr(stub, rpc)(request, timeout=timeout_s)
            except grpc.RpcError as exc:
                err = from_rpc_error(exc, mutating=mutating)
                target.failed(router, address, err)
                raise err from exc

        return self._retrier.run(attempt, idempotent=idempotent, extra_s=extra_s)

    # ---- queues --------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        **config: Any,
    ) -> QueueInfo:
        """Create ``name``; ``config`` keys are QueueConfig field names of queue.proto.

        Idempotent: creating an existing queue with the same definition
        succeeds, so it is retried; a different definition is AlreadyExists.
        """
        pb_config = models.config_to_pb(
            {"partitions": partitions, "replication_factor": replication_factor, **config}
        )
        request = models.build_request(queue_pb2.CreateQueueRequest, name=name, config=pb_config)
        self._router.drop_queue(name)
        return models.queue_info_from_pb(self._call("CreateQueue", request))

    def get_queue(self, name: str) -> QueueInfo:
        request = models.build_request(queue_pb2.GetQueueRequest, name=name)
        return models.queue_info_from_pb(self._call("GetQueue", request, mutating=False))

    def list_queues(self) -> list[QueueInfo]:
        response = self._call("ListQueues", queue_pb2.ListQueuesRequest(), mutating=False)
        return [models.queue_info_from_pb(q) for q in response.queues]

    def delete_queue(self, name: str) -> None:
        """Delete ``name``. Not retried after OutcomeUnknown (a retry would say NotFound)."""
        self._router.drop_queue(name)
        self._call(
            "DeleteQueue",
            models.build_request(queue_pb2.DeleteQueueRequest, name=name),
            idempotent=False,
        )

    def partitions(self, queue: str) -> list[PartitionInfo]:
        """Describe ``queue``'s partitions, and refresh the client's leader cache with it."""
        request = models.build_request(queue_pb2.GetPartitionsRequest, queue=queue)
        try:
            response = self._call("GetPartitions", request, mutating=False)
        except NotFound:
            self._router.drop_queue(queue)
            raise
        infos = [models.partition_from_pb(p) for p in response.partitions]
        self._router.update_partitions(queue, infos)
        return infos

    def _partition_count(self, queue: str) -> int:
        count = self._router.partition_count(queue)
        if count is None:
            count = len(self.partitions(queue))
        if count < 1:
            raise Internal(f"queue {queue!r} reports no partitions")
        return count

    # ---- send ------------------------------------------------------------------

    def send(
        self,
        queue: str,
        body: bytes | str,
        key: str = "",
        headers: Mapping[str, bytes | str] | None = None,
        dedup_id: str | None = None,
        delay_ms: int = 0,
        partition: int | None = None,
    ) -> SendResult:
        """Send one message; see ``send_batch`` for placement and dedup."""
        message = OutgoingMessage(body, key, headers, dedup_id, delay_ms, partition)
        return self.send_batch(queue, [message])[0]

    def send_batch(
        self, queue: str, messages: Iterable[OutgoingMessage | bytes | str]
    ) -> list[SendResult]:
        """Send messages; results come back in the order given.

        Placement: the explicit ``partition``, else the stable hash of ``key``,
        else round robin. Entries are grouped by the partition's cached leader
        and sent one RPC per leader per chunk of ``MAX_BATCH``, one after the
        other. If a later chunk fails, earlier ones are stored: to re-send the
        batch without duplicates, give the messages your own dedup ids.
        """
        pending = list(messages)
        if not pending:
            return []
        self._partition_count(queue)  # learn the leaders (cached) before grouping by them
        prepared = [self._prepare(queue, m) for m in pending]
        results: list[SendResult | None] = [None] * len(prepared)
        for indexes in self._plan(queue, prepared):
            entries = [prepared[i] for i in indexes]
            request = models.build_request(queue_pb2.SendRequest, queue=queue, entries=entries)
            target = PartitionLeaders(queue, [e.partition for e in entries])
            response = self._send_chunk(queue, request, target)
            if len(response.results) != len(indexes):
                raise Internal(f"Send returned {len(response.results)} results for {len(indexes)}")
            for i, result in zip(indexes, response.results, strict=True):
                results[i] = models.send_result_from_pb(result)
        return [r for r in results if r is not None]

    def _send_chunk(self, queue: str, request: Any, target: PartitionLeaders) -> Any:
        try:
            return self._call("Send", request, target)
        except NotFound:
            self._router.drop_queue(queue)  # deleted or recreated: placement is stale
            raise

    def _prepare(self, queue: str, message: OutgoingMessage | bytes | str) -> queue_pb2.SendEntry:
        """Fix a message's partition and dedup id once, so every retry sends the same entry."""
        if not isinstance(message, OutgoingMessage):
            message = OutgoingMessage(body=message)
        if message.partition is not None and message.partition < 0:
            raise InvalidArgument("partition", f"must be >= 0, got {message.partition}")
        if message.partition is not None:
            partition = message.partition
        elif message.key:
            partition = partition_for_key(message.key, self._partition_count(queue))
        else:
            partition = self._round_robin.next(queue, self._partition_count(queue))
        dedup_id = message.dedup_id or uuid.uuid4().hex
        return models.entry_to_pb(message, partition, dedup_id)

    def _plan(self, queue: str, entries: Sequence[queue_pb2.SendEntry]) -> list[list[int]]:
        """Indexes of ``entries`` grouped by cached leader ("" = unknown), chunked."""
        groups: dict[str, list[int]] = {}
        for i, entry in enumerate(entries):
            leader = self._router.leader(queue, entry.partition) or ""
            groups.setdefault(leader, []).append(i)
        return [
            group[start : start + MAX_BATCH]
            for group in groups.values()
            for start in range(0, len(group), MAX_BATCH)
        ]

    # ---- receive and receipts ---------------------------------------------------

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        visibility_ms: int | None = None,
        wait_ms: int = 0,
        consumer: str = "",
    ) -> list[Message]:
        """Lease up to ``max_messages`` (as SQS ReceiveMessage); [] when none within ``wait_ms``.

        Leased messages are invisible for ``visibility_ms`` (default: the
        queue's visibility timeout) and come back unless acked.
        """
        fields: dict[str, Any] = {
            "queue": queue,
            "max_messages": max_messages,
            "wait_ms": wait_ms,
            "consumer": consumer,
        }
        if visibility_ms is not None:
            fields["visibility_ms"] = visibility_ms
        request = models.build_request(queue_pb2.ReceiveRequest, **fields)
        self._partition_count(queue)  # learn the leaders, to prefer one of them
        response = self._call("Receive", request, SomeLeaderOf(queue), extra_s=wait_ms / 1000)
        return [models.message_from_pb(m) for m in response.messages]

    def _receipts_call(
        self, rpc: str, request_cls: Any, queue: str, receipts: Receipts, **fields: Any
    ) -> list[ReceiptResult]:
        """Ack-like calls go to any node (the server routes each receipt to its partition).

        Retried even after OutcomeUnknown: a repeat reports the receipt as
        not ok ("not found" / "stale") although the first attempt took effect.
        """
        request = models.build_request(
            request_cls, queue=queue, receipts=_receipt_list(receipts), **fields
        )
        response = self._call(rpc, request)
        return [models.receipt_result_from_pb(r) for r in response.results]

    def ack(self, queue: str, receipts: Receipts) -> list[ReceiptResult]:
        """Delete leased messages (as SQS DeleteMessage); one result per receipt."""
        return self._receipts_call("Ack", queue_pb2.AckRequest, queue, receipts)

    def nack(self, queue: str, receipts: Receipts, delay_ms: int = 0) -> list[ReceiptResult]:
        """Give leased messages back, visible again after ``delay_ms``."""
        return self._receipts_call(
            "Nack", queue_pb2.NackRequest, queue, receipts, delay_ms=delay_ms
        )

    def change_visibility(
        self, queue: str, receipts: Receipts, visibility_ms: int
    ) -> list[ReceiptResult]:
        """Move leases' deadlines to now + ``visibility_ms`` (as SQS ChangeMessageVisibility)."""
        return self._receipts_call(
            "ChangeVisibility",
            queue_pb2.ChangeVisibilityRequest,
            queue,
            receipts,
            visibility_ms=visibility_ms,
        )

    # ---- offset reads -------------------------------------------------------------

    def read(
        self,
        queue: str,
        partition: int,
        offset: int,
        max_messages: int = 100,
        wait_ms: int = 0,
    ) -> ReadResult:
        """Read committed messages of one partition from ``offset`` (as a Kafka fetch).

        Leases are untouched. OutOfRange when ``offset`` is below the earliest
        retained one; continue from ``next_offset``.
        """
        request = models.build_request(
            queue_pb2.ReadRequest,
            queue=queue,
            partition=partition,
            offset=offset,
            max_messages=max_messages,
            wait_ms=wait_ms,
        )
        self._partition_count(queue)  # learn the leaders (cached)
        target = PartitionLeaders(queue, [partition])
        response = self._call("Read", request, target, mutating=False, extra_s=wait_ms / 1000)
        return models.read_result_from_pb(response)

    def commit_offsets(
        self, queue: str, group: str, offsets: Mapping[int, int], reset: bool = False
    ) -> None:
        """Store ``group``'s next offset per partition; backwards only with ``reset``."""
        request = models.build_request(
            queue_pb2.CommitOffsetsRequest,
            queue=queue,
            group=group,
            offsets=dict(offsets),
            reset=reset,
        )
        self._call("CommitOffsets", request)

    def get_offsets(self, queue: str, group: str) -> dict[int, int]:
        request = models.build_request(queue_pb2.GetOffsetsRequest, queue=queue, group=group)
        response = self._call("GetOffsets", request, mutating=False)
        return dict(response.offsets)

    # ---- admin -----------------------------------------------------------------

    def cluster_status(self, include_digests: bool = False) -> ClusterStatus:
        """Nodes and every replica's Raft state; digests compare replicas' data."""
        request = models.build_request(
            admin_pb2.ClusterStatusRequest, include_digests=include_digests
        )
        response = self._call("ClusterStatus", request, admin=True, mutating=False)
        return models.cluster_status_from_pb(response)
