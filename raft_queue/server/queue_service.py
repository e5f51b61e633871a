"""QueueService: send, receive, ack and read, routed to partition leaders.

Any node accepts any request. Per partition the work goes to the local
replica when it leads, else is forwarded to the leader's node (one hop).
Queue-wide calls (Receive, GetOffsets) fan out: local leaders first, then a
forwarded call to each remote leader node that answers for its own leaders.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import grpc

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.core import commands as cmd
from raft_queue.server import convert
from raft_queue.server.cluster import Cluster
from raft_queue.server.peers import RemoteError, abort_remote, is_forwarded
from raft_queue.server.status import abort_with

LONG_POLL_STEP_S = 0.02


def now_ms() -> int:
    return int(time.time() * 1000)


def handled(method: Any) -> Any:
    """Map QueueErrors (and remote errors) to gRPC statuses, in one place."""

    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except RemoteError as exc:
            await abort_remote(context, exc)
        except Exception as exc:
            await abort_with(context, exc)

    wrapper.__name__ = method.__name__
    return wrapper


class QueueService(queue_pb2_grpc.QueueServiceServicer):  # type: ignore[misc]
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.node = cluster.node
        self.limits = cluster.node.config.limits

    # ---- queues (metadata) -------------------------------------------------------------
    @handled
    async def CreateQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        name = convert.check_queue_name(request.name)
        config = request.config
        if not config.HasField("replication_factor"):
            # As SQS/JetStream users expect: the default fits the cluster (3, or 1 when smaller).
            config.replication_factor = 3 if len(self.node.view.nodes()) >= 3 else 1
        spec = convert.spec_from_pb(config)
        return await self.c.create_queue(name, spec, forwarded=is_forwarded(context))

    @handled
    async def GetQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.c.queue_info(request.name)

    @handled
    async def ListQueues(self, request: Any, context: Any) -> Any:  # noqa: N802
        infos = [await self.c.queue_info(q.name, depth=False) for q in self.node.view.queues()]
        return queue_pb2.ListQueuesResponse(queues=infos)

    @handled
    async def DeleteQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        await self.c.delete_queue(request.name, forwarded=is_forwarded(context))
        return queue_pb2.DeleteQueueResponse()

    # ---- send -----------------------------------------------------------------------------
    @handled
    async def Send(self, request: Any, context: Any) -> Any:  # noqa: N802
        q = self.node.queue_spec(request.queue)
        spec = q.spec
        if not request.entries:
            raise errors.InvalidArgument("entries", "at least one message is required")
        if len(request.entries) > self.limits.max_batch_messages:
            raise errors.InvalidArgument(
                "entries",
                f"{len(request.entries)} messages; at most {self.limits.max_batch_messages}",
            )
        by_part: dict[int, list[tuple[int, Any]]] = defaultdict(list)
        for i, entry in enumerate(request.entries):
            part = self.c.partition_of(i, entry, spec.partitions)
            by_part[part].append((i, convert.new_record(i, entry, spec)))
        results: list[Any] = [None] * len(request.entries)
        forwarded = is_forwarded(context)
        await asyncio.gather(
            *(
                self._send_partition(request, q, part, items, results, forwarded)
                for part, items in by_part.items()
            )
        )
        return queue_pb2.SendResponse(results=results)

    async def _send_partition(
        self,
        request: Any,
        q: Any,
        part: int,
        items: list[tuple[int, Any]],
        results: list[Any],
        forwarded: bool,
    ) -> None:
        durability = convert.DURABILITY[q.spec.durability]
        replica = self.c.local_leader(q.name, part, forwarded)
        if replica is not None:
            records = tuple(rec for _, rec in items)
            res = await self.c.submit(replica, cmd.Append(records, now_ms()))
            for (i, _), item in zip(items, res.items, strict=True):
                results[i] = queue_pb2.SendResult(
                    partition=part,
                    offset=item.offset,
                    duplicate=item.duplicate,
                    durability=durability,
                )
            return
        sub = queue_pb2.SendRequest(queue=request.queue)
        for i, _ in items:
            entry = sub.entries.add()
            entry.CopyFrom(request.entries[i])
            entry.partition = part
        resp = await self.c.forward_to_leader(q.name, part, "Send", sub)
        for (i, _), res in zip(items, resp.results, strict=True):
            results[i] = res

    # ---- receive / ack ----------------------------------------------------------------------
    @handled
    async def Receive(self, request: Any, context: Any) -> Any:  # noqa: N802
        q = self.node.queue_spec(request.queue)
        max_n = convert.check_range(
            request.max_messages or 1, 1, self.limits.max_receive_messages, "max_messages"
        )
        visibility = q.spec.visibility_timeout_ms
        if request.HasField("visibility_ms"):
            visibility = convert.check_range(
                request.visibility_ms, 0, convert.MAX_VISIBILITY_MS, "visibility_ms"
            )
        wait_ms = convert.check_range(request.wait_ms, 0, self.limits.max_wait_ms, "wait_ms")
        forwarded = is_forwarded(context)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            messages = await self._lease_round(request, q, max_n, visibility, forwarded)
            if messages or time.monotonic() >= deadline or forwarded:
                return queue_pb2.ReceiveResponse(messages=messages)
            await self.c.wait_for_data(q.name, min(deadline - time.monotonic(), 0.5))

    async def _lease_round(
        self, request: Any, q: Any, max_n: int, visibility: int, forwarded: bool
    ) -> list[Any]:
        out: list[Any] = []
        local, remote = self.c.split_partitions(q.name, q.spec.partitions)
        for part, replica in local:
            if len(out) >= max_n:
                return out
            if self.c.maybe_empty(replica):
                continue
            lease = cmd.Lease(request.consumer, max_n - len(out), visibility, now_ms())
            res = await self.c.submit(replica, lease)
            for m in res.messages:
                receipt = convert.encode_receipt(q.uid, part, m.record.offset, m.epoch)
                out.append(convert.message_pb(q.name, part, m.record, receipt, m.receive_count))
        if forwarded:
            return out
        for address in remote:
            if len(out) >= max_n:
                break
            sub = queue_pb2.ReceiveRequest(
                queue=request.queue,
                max_messages=max_n - len(out),
                visibility_ms=visibility,
                consumer=request.consumer,
            )
            try:
                resp = await self.c.peers.forward(address, "Receive", sub, self.c.timeout_s)
            except RemoteError:
                continue  # that node's partitions are skipped this round
            out.extend(resp.messages)
        return out

    async def _receipts(self, request: Any, context: Any, make: Any) -> Any:
        q = self.node.queue_spec(request.queue)
        if not request.receipts:
            raise errors.InvalidArgument("receipts", "at least one receipt is required")
        by_part: dict[int, list[tuple[int, Any]]] = defaultdict(list)
        for i, receipt in enumerate(request.receipts):
            part, ref = convert.decode_receipt(i, receipt, q.uid, q.spec.partitions)
            by_part[part].append((i, ref))
        results: list[Any] = [None] * len(request.receipts)
        forwarded = is_forwarded(context)

        async def one(part: int, items: list[tuple[int, Any]]) -> None:
            replica = self.c.local_leader(q.name, part, forwarded)
            if replica is not None:
                res = await self.c.submit(replica, make(tuple(r for _, r in items), now_ms()))
                for (i, _), outcome in zip(items, res.outcomes, strict=True):
                    results[i] = _receipt_result(request.receipts[i], outcome)
                return
            sub = type(request)()
            sub.CopyFrom(request)
            del sub.receipts[:]
            sub.receipts.extend(request.receipts[i] for i, _ in items)
            resp = await self.c.forward_to_leader(q.name, part, type(self)._method_of(request), sub)
            for (i, _), res in zip(items, resp.results, strict=True):
                results[i] = res

        await asyncio.gather(*(one(p, items) for p, items in by_part.items()))
        return queue_pb2.ReceiptsResponse(results=results)

    @staticmethod
    def _method_of(request: Any) -> str:
        return {
            queue_pb2.AckRequest: "Ack",
            queue_pb2.NackRequest: "Nack",
            queue_pb2.ChangeVisibilityRequest: "ChangeVisibility",
        }[type(request)]

    @handled
    async def Ack(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self._receipts(request, context, cmd.Ack)

    @handled
    async def Nack(self, request: Any, context: Any) -> Any:  # noqa: N802
        delay = convert.check_range(request.delay_ms, 0, convert.MAX_DELAY_MS, "delay_ms")
        return await self._receipts(request, context, lambda refs, now: cmd.Nack(refs, delay, now))

    @handled
    async def ChangeVisibility(self, request: Any, context: Any) -> Any:  # noqa: N802
        vis = convert.check_range(
            request.visibility_ms, 0, convert.MAX_VISIBILITY_MS, "visibility_ms"
        )
        return await self._receipts(
            request, context, lambda refs, now: cmd.ChangeVisibility(refs, vis, now)
        )

    # ---- offsets ---------------------------------------------------------------------------------
    @handled
    async def Read(self, request: Any, context: Any) -> Any:  # noqa: N802
        q = self.node.queue_spec(request.queue)
        part = convert.check_range(request.partition, 0, q.spec.partitions - 1, "partition")
        max_n = convert.check_range(request.max_messages or 100, 1, 10000, "max_messages")
        wait_ms = convert.check_range(request.wait_ms, 0, self.limits.max_wait_ms, "wait_ms")
        replica = self.c.local_leader(q.name, part, is_forwarded(context), reads=True)
        if replica is None:
            return await self.c.forward_to_leader(q.name, part, "Read", request)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            res = replica.read(request.offset, max_n)
            if request.offset < res.earliest_offset:
                raise errors.OutOfRange(
                    f"offset {request.offset} is below the earliest retained offset "
                    f"{res.earliest_offset} of partition {part}"
                )
            if res.records or time.monotonic() >= deadline:
                break
            await asyncio.sleep(LONG_POLL_STEP_S)
        return queue_pb2.ReadResponse(
            messages=[convert.message_pb(q.name, part, r) for r in res.records],
            next_offset=res.next_offset,
            earliest_offset=res.earliest_offset,
            latest_offset=res.latest_offset,
        )

    @handled
    async def GetPartitions(self, request: Any, context: Any) -> Any:  # noqa: N802
        q = self.node.queue_spec(request.queue)
        return queue_pb2.GetPartitionsResponse(partitions=await self.c.partition_infos(q))

    @handled
    async def CommitOffsets(self, request: Any, context: Any) -> Any:  # noqa: N802
        q = self.node.queue_spec(request.queue)
        if not request.group:
            raise errors.InvalidArgument("group", "a consumer group name is required")
        for part in request.offsets:
            convert.check_range(part, 0, q.spec.partitions - 1, f"offsets[{part}]")
        forwarded = is_forwarded(context)
        for part, offset in request.offsets.items():
            replica = self.c.local_leader(q.name, part, forwarded)
            if replica is not None:
                await self.c.submit(replica, cmd.CommitOffset(request.group, offset, request.reset))
            else:
                sub = queue_pb2.CommitOffsetsRequest(
                    queue=q.name, group=request.group, offsets={part: offset}, reset=request.reset
                )
                await self.c.forward_to_leader(q.name, part, "CommitOffsets", sub)
        return queue_pb2.CommitOffsetsResponse()

    @handled
    async def GetOffsets(self, request: Any, context: Any) -> Any:  # noqa: N802
        q = self.node.queue_spec(request.queue)
        out: dict[int, int] = {}
        local, remote = self.c.split_partitions(q.name, q.spec.partitions)
        for part, replica in local:
            got = replica.offsets().get(request.group)
            if got is not None:
                out[part] = got
        if not is_forwarded(context):
            for address in remote:
                resp = await self.c.peers.forward(address, "GetOffsets", request, self.c.timeout_s)
                out.update(resp.offsets)
        return queue_pb2.GetOffsetsResponse(offsets=out)


def _receipt_result(receipt: str, outcome: str) -> Any:
    ok = outcome.lower() == "ok"
    reason = {
        "stale": "stale receipt: the message was received again since",
        "not_found": "not found: already acked, expired or purged",
    }
    return queue_pb2.ReceiptResult(
        receipt=receipt, ok=ok, error="" if ok else reason.get(outcome.lower(), outcome)
    )
