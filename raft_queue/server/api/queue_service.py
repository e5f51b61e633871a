"""QueueService: the public API, a thin layer over the server's parts.

Any node accepts any request. Per partition the work goes to the local
replica when it leads, else is forwarded to the leader's node (one hop).
Queue-wide calls (Receive, GetOffsets, PurgeQueue) fan out: local leaders
first, then a forwarded call to each remote leader node that answers for
its own leaders. The work itself lives in ``queues`` (lifecycle),
``sending``, ``receiving`` (leases, long polls, receipts), ``reading``
(replay, offsets) and ``subscribing`` (push).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.core import commands as cmd
from raft_queue.observability import metrics
from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.server.api import convert, receipt_results
from raft_queue.server.api.answer import ANSWER, Answer
from raft_queue.server.api.auth import CALLER_PRINCIPAL
from raft_queue.server.api.packed import send_entries
from raft_queue.server.api.send_stream import SendStreamServer
from raft_queue.server.api.status import abort_with
from raft_queue.server.cluster import Cluster
from raft_queue.server.control.queues import Queues
from raft_queue.server.dataplane import bounds, sending
from raft_queue.server.dataplane.autocreate import AutoCreate
from raft_queue.server.dataplane.exporting import Exporter
from raft_queue.server.dataplane.polls import PrincipalPolls
from raft_queue.server.dataplane.reading import Reader
from raft_queue.server.dataplane.receiving import Receiver
from raft_queue.server.dataplane.sending import Sender
from raft_queue.server.dataplane.subscribing import Subscriber
from raft_queue.server.dataplane.withdrawals import poll_id_of
from raft_queue.server.peers import RemoteError, abort_remote, is_forwarded


def handled(method: Any) -> Any:
    """Map QueueErrors (and remote errors) to gRPC statuses, in one place."""

    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except RemoteError as exc:
            await abort_remote(context, exc)
        except errors.NotFound as exc:  # from a view that may be behind: vouch first
            await abort_with(context, await self.cluster.barrier.vouch_miss(exc))
        except Exception as exc:
            await abort_with(context, exc)

    wrapper.__name__ = method.__name__
    return wrapper


class QueueService(queue_pb2_grpc.QueueServiceServicer):
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.node = cluster.node
        self.queues = Queues(cluster)
        self.autocreate = AutoCreate(self.queues)
        self.sender = Sender(cluster)
        self.receiver = Receiver(cluster)
        self.reader = Reader(cluster)
        self.exporter = Exporter(cluster)
        self.subscriber = Subscriber(cluster, self.receiver)
        self.polls = PrincipalPolls(self.node.config.limits.max_long_polls_per_principal)
        self.send_stream = SendStreamServer(self.autocreate, self.sender, cluster.barrier)

    # ---- queues (metadata) -------------------------------------------------------------
    @handled
    async def CreateQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        name = convert.check_queue_name(request.name)
        config = request.config
        if not config.HasField("replication_factor"):
            # As SQS/JetStream users expect: the default fits the cluster (3, or 1 when smaller).
            config.replication_factor = 3 if len(self.node.view.nodes()) >= 3 else 1
        spec = convert.spec_from_pb(config)
        bounds.check_queue_spec(spec, self.node.config.limits)
        return await self.queues.create(name, spec, forwarded=is_forwarded(context))

    @handled
    async def GetQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.queues.info(request.name)

    @handled
    async def ListQueues(self, request: Any, context: Any) -> Any:  # noqa: N802
        infos = [await self.queues.info(q.name, depth=False) for q in self.node.view.queues()]
        return queue_pb2.ListQueuesResponse(queues=infos)

    @handled
    async def UpdateQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.queues.update(request, forwarded=is_forwarded(context))

    @handled
    async def DeleteQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        await self.queues.delete(request.name, forwarded=is_forwarded(context))
        return queue_pb2.DeleteQueueResponse()

    @handled
    async def PurgeQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        removed = await self.queues.purge(request.name, forwarded=is_forwarded(context))
        return queue_pb2.PurgeQueueResponse(removed=removed)

    # ---- send / receive ----------------------------------------------------------------------
    @handled
    async def Send(self, request: Any, context: Any) -> Any:  # noqa: N802
        _stage("s.handler")
        q = await self.autocreate.queue_for_send(request, is_forwarded(context))
        results = await self.sender.send(
            q, send_entries(request), is_forwarded(context), request.request_id
        )
        out = sending.response(results, request.results_as_runs)
        _stage("s.reply")
        return out

    async def SendStream(  # noqa: N802
        self, request_iterator: Any, context: Any
    ) -> AsyncIterator[Any]:
        """Send on one stream (server/api/send_stream.py): each request's
        error is in its answer; only a stream-level failure ends the call."""
        try:
            async for answer in self.send_stream.serve(request_iterator):
                yield answer
        except Exception as exc:
            await abort_with(context, exc)

    @handled
    async def Receive(self, request: Any, context: Any) -> Any:  # noqa: N802
        forwarded = is_forwarded(context)
        poll_id = poll_id_of(context) if forwarded else ""
        # Its Messages are made in place, or runs (answer.py); this task's context alone.
        answer = Answer(runs=request.runs and not forwarded)
        ANSWER.set(answer)
        try:
            if request.wait_ms and not forwarded:  # a client's long poll: its principal's cap
                with self.polls.hold(CALLER_PRINCIPAL.get()):
                    messages, acks = await self.receiver.receive_acking(request, forwarded)
            elif poll_id:  # its caller may withdraw it (dataplane/withdrawals.py)
                work = self.receiver.receive_acking(request, forwarded)
                got = await self.cluster.forwarded_polls.run(poll_id, work)
                messages, acks = got if got is not None else ([], None)
            else:
                messages, acks = await self.receiver.receive_acking(request, forwarded)
        except BaseException:
            answer.close((), None)
            raise
        if not forwarded:  # counted once, by the node that answers the client
            metrics.count_received(request.queue, messages)
        return answer.close(messages, acks)

    async def _settle(self, request: Any, context: Any, make: Any, method: str) -> Any:
        results = await self.receiver.settle(request, is_forwarded(context), make, method)
        return receipt_results.receipts_response(request, results)

    @handled
    async def Ack(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self._settle(request, context, cmd.Ack, "Ack")

    @handled
    async def Nack(self, request: Any, context: Any) -> Any:  # noqa: N802
        delay = convert.check_range(request.delay_ms, 0, convert.MAX_DELAY_MS, "delay_ms")
        if request.release:
            if delay:
                raise errors.InvalidArgument("delay_ms", "must be 0 with release")
            return await self._settle(request, context, cmd.Release, "Nack")
        return await self._settle(
            request, context, lambda refs, now: cmd.Nack(refs, delay, now), "Nack"
        )

    @handled
    async def ChangeVisibility(self, request: Any, context: Any) -> Any:  # noqa: N802
        vis = convert.check_range(
            request.visibility_ms, 0, convert.MAX_VISIBILITY_MS, "visibility_ms"
        )
        return await self._settle(
            request,
            context,
            lambda refs, now: cmd.ChangeVisibility(refs, vis, now),
            "ChangeVisibility",
        )

    async def Subscribe(  # noqa: N802
        self, request_iterator: Any, context: Any
    ) -> AsyncIterator[Any]:
        try:
            async for message in self.subscriber.serve(request_iterator, context):
                yield message
        except RemoteError as exc:
            await abort_remote(context, exc)
        except errors.NotFound as exc:
            await abort_with(context, await self.cluster.barrier.vouch_miss(exc))
        except Exception as exc:
            await abort_with(context, exc)

    # ---- replay ------------------------------------------------------------------------------
    @handled
    async def Read(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.reader.read(request, is_forwarded(context))

    @handled
    async def ExportPartition(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.exporter.export(request, is_forwarded(context))

    @handled
    async def ExportDedup(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.exporter.export_dedup(request, is_forwarded(context))

    @handled
    async def SeedDedup(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.exporter.seed_dedup(request, is_forwarded(context))

    @handled
    async def CarryLeases(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.exporter.carry_leases(request, is_forwarded(context))

    @handled
    async def SettleCarried(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.exporter.settle_carried(request, is_forwarded(context))

    @handled
    async def GetPartitions(self, request: Any, context: Any) -> Any:  # noqa: N802
        q = self.node.queue_spec(request.queue)
        infos = await self.cluster.partition_infos(q)
        return queue_pb2.GetPartitionsResponse(partitions=infos, layout_version=len(infos))

    @handled
    async def CommitOffsets(self, request: Any, context: Any) -> Any:  # noqa: N802
        stored = await self.reader.commit_offsets(request, is_forwarded(context))
        return queue_pb2.CommitOffsetsResponse(offsets=stored)

    @handled
    async def GetOffsets(self, request: Any, context: Any) -> Any:  # noqa: N802
        offsets = await self.reader.get_offsets(request, is_forwarded(context))
        return queue_pb2.GetOffsetsResponse(offsets=offsets)

    @handled
    async def GetHistory(self, request: Any, context: Any) -> Any:  # noqa: N802
        q = self.node.queue_spec(request.queue)
        part = convert.check_range(request.partition, 0, q.spec.partitions - 1, "partition")
        replica = self.cluster.local_leader(q.name, part, is_forwarded(context), reads=True)
        if replica is None:
            return await self.cluster.forward_to_leader(q.name, part, "GetHistory", request)
        history = replica.history(request.offset)
        if history is None:
            raise errors.NotFound(
                f"{q.name}[{part}] offset {request.offset}: no such message or no history"
            )
        return convert.history_pb(history)
