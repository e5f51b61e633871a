"""Usage counting where requests enter, and its flush to the metadata group.

``Meter`` is what the API door calls: ``before`` (quota, Send only) and
``after`` (usage). Counting is a dict increment per request, in memory.
``UsageFlusher`` sends the counts to the metadata leader every
``period_s`` as one batch with a sequence number (``FlushUsage`` on
NodeService, or a local ``RecordUsage`` on the leader itself). The batch
is kept until the leader says it is applied; a retry carries the same
sequence, so a flush is counted once even when its answer was lost.

What a crash loses: a node killed with SIGKILL loses what it counted since
its last applied flush (at most ``period_s`` of its requests plus a flush in
flight). A stopped node (SIGTERM) flushes once more after its server has
stopped taking requests. Sequences are ``boot time in ms * 10**6 + n``, so a
restarted node's flushes are newer than its previous life's.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta
from raft_queue.core import usage as u
from raft_queue.observability import metrics
from raft_queue.server.api.answer import answered
from raft_queue.server.api.packed import message_count
from raft_queue.server.api.quota import QuotaGate

if TYPE_CHECKING:
    from raft_queue.server.cluster import Cluster
    from raft_queue.server.node import Node

log = logging.getLogger(__name__)

_Q = "/raft_queue.v1.QueueService/"
#: Method -> usage operation (other methods are not counted).
_SEND = _Q + "Send"
METERED = {_SEND: u.SEND, _Q + "Receive": u.RECEIVE, _Q + "Ack": u.ACK, _Q + "Read": u.READ}


#: The wire size of the current call's request: set by the door's deserializer
#: (``sized_deserializer``), so a size costs nothing (``ByteSize`` on a parsed
#: 4,096-message Send walks it: ~650 us, 4x the parse).
REQUEST_BYTES: contextvars.ContextVar[int] = contextvars.ContextVar(
    "raftq_request_bytes", default=-1
)
#: A Receive/Read answer to count once serialized: (principal, queue, op, messages).
_ANSWER: contextvars.ContextVar[tuple[str, str, str, int] | None] = contextvars.ContextVar(
    "raftq_usage_answer", default=None
)


class UsageCounter:
    def __init__(self, wall_ms: Callable[[], int] | None = None) -> None:
        self._wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self._counts: dict[u.Key, u.Counts] = {}
        self._pending: tuple[int, tuple[u.Row, ...]] | None = None
        self._seq = self._wall_ms() * 1_000_000

    def count(self, principal: str, queue: str, op: str, messages: int, nbytes: int) -> None:
        key = (principal, queue, u.hour_of(self._wall_ms()), op)
        c = self._counts.get(key)
        if c is None:
            c = self._counts[key] = [0, 0, 0]
        c[0] += 1
        c[1] += messages
        c[2] += nbytes

    def batch(self) -> tuple[int, tuple[u.Row, ...]] | None:
        """The batch to flush: the unacknowledged one again, else a new one."""
        if self._pending is None and self._counts:
            self._seq += 1
            self._pending = (self._seq, u.to_rows(self._counts))
            self._counts = {}
        return self._pending

    def flushed(self, applied_seq: int) -> None:
        if self._pending is not None and self._pending[0] <= applied_seq:
            self._pending = None


def _request_bytes(request: Any) -> int:
    size = REQUEST_BYTES.get()
    return size if size >= 0 else int(request.ByteSize())


class Meter:
    """Quota before, usage after, for calls a node takes from clients. Bytes:
    the size on the wire of the request (send, ack) or of the answer
    (receive, read), taken from the (de)serializers the door wraps."""

    def __init__(self, view: Callable[[], Any]) -> None:
        self.gate = QuotaGate(view)
        self.usage = UsageCounter()
        self.wired = False  # True once the door wraps the (de)serializers

    def before(self, principal: str, method: str, request: Any) -> int:
        """Charge a Send to the quota (OverQuota: nothing charged); returns the
        request's size for ``after`` (0 for calls that are not metered)."""
        if method not in METERED:
            return 0
        nbytes = _request_bytes(request)
        if method == _SEND:
            messages = message_count(request)
            try:
                self.gate.check(principal, request.queue, messages, nbytes)
            except errors.OverQuota:
                self.usage.count(principal, request.queue, u.REJECTED_QUOTA, messages, nbytes)
                metrics.count_rejection("quota")
                raise
        return nbytes

    def after(self, principal: str, method: str, request: Any, response: Any, size: int) -> None:
        op = METERED.get(method)
        if op == u.SEND:
            self.usage.count(principal, request.queue, op, message_count(request), size)
        elif op == u.ACK:  # messages: the receipts acked (failures_only: all but ``failed``)
            if response.failures_only:
                acked = len(request.receipts) - len(response.failed)
            else:
                acked = sum(1 for r in response.results if r.ok)
            self.usage.count(principal, request.queue, op, acked, size)
        elif op is not None:
            if op == u.RECEIVE and request.ack:  # the acks it carried count as an Ack
                acked = len(request.ack) - len(response.acks.failed)
                self.usage.count(principal, request.queue, u.ACK, acked, 0)
            messages = answered(response) if op == u.RECEIVE else len(response.messages)
            if self.wired:  # counted with its size once serialized
                _ANSWER.set((principal, request.queue, op, messages))
            else:
                self.usage.count(principal, request.queue, op, messages, response.ByteSize())

    def rejected_auth(self, principal: str, queue: str) -> None:
        self.usage.count(principal or "unauthenticated", queue, u.REJECTED_AUTH, 0, 0)

    def sized_deserializer(self, load: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        def sized(raw: bytes) -> Any:
            REQUEST_BYTES.set(len(raw))
            return load(raw)

        return sized

    def counting_serializer(self, dump: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
        self.wired = True

        def counting(message: Any) -> bytes:
            raw = dump(message)
            answer = _ANSWER.get()
            if answer is not None:
                _ANSWER.set(None)
                self.usage.count(*answer, len(raw))
            return raw

        return counting


def rows_pb(rows: Any) -> list[Any]:
    return [admin_pb2.UsageRow(principal=r[0], queue=r[1], hour_ms=r[2], operation=r[3],
                               requests=r[4], messages=r[5], bytes=r[6]) for r in rows]  # fmt: skip


def rows_of(pbs: Any) -> tuple[u.Row, ...]:
    return tuple((r.principal, r.queue, r.hour_ms, r.operation, r.requests, r.messages, r.bytes)
                 for r in pbs)  # fmt: skip


async def record(node: Node, node_id: str, seq: int, rows: tuple[u.Row, ...]) -> int:
    """On the metadata leader: apply one batch; the node's last applied sequence."""
    return int(await node.submit_metadata(meta.RecordUsage(node_id, seq, rows)))


def get_usage(node: Node, req: Any) -> Any:
    """GetUsage: from the metadata leader's live machine. Usage does not bump
    the view's version, so the published copies (``node.view``) are not
    remade for it; ``usage`` copies the rows at once (under the GIL)."""
    md = node.metadata
    if md is None or not md.is_leader():
        raise errors.NotLeader("not the metadata leader", node.metadata_leader_address())
    rows = md.machine.usage(req.principal, req.queue, req.since_ms)
    return admin_pb2.GetUsageResponse(rows=rows_pb(rows))


class UsageFlusher:
    def __init__(self, cluster: Cluster, counter: UsageCounter, period_s: float = 1.0) -> None:
        self.cluster = cluster
        self.counter = counter
        self.period_s = period_s

    async def flush(self) -> bool:
        """Send the pending batch once; whether nothing is left pending."""
        batch = self.counter.batch()
        if batch is None:
            return True
        seq, rows = batch
        node = self.cluster.node
        if node.metadata is not None and node.metadata.is_leader():
            applied = await record(node, node.id, seq, rows)
        else:
            address = node.metadata_leader_address()
            if not address or address == node.address:
                return False
            req = admin_pb2.FlushUsageRequest(node=node.id, seq=seq, rows=rows_pb(rows))
            ans = await self.cluster.peers.node(address).FlushUsage(req, timeout=3.0)
            applied = ans.applied_seq
        self.counter.flushed(applied)
        return self.counter.batch() is None

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            try:
                await self.flush()
            except Exception as exc:  # the next round retries the same batch
                log.debug("usage flush failed: %s", exc)

    async def final(self, timeout_s: float = 3.0) -> None:
        """On a clean stop: flush until nothing is pending, within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                # Bounded: a flush waits for a metadata commit, which never comes
                # when the other nodes stopped first (a whole cluster stopping).
                left = max(0.01, deadline - time.monotonic())
                if await asyncio.wait_for(self.flush(), left):
                    return
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    # The metadata leader is gone (not slow): the whole cluster
                    # is stopping, and no new leader will come to retry on.
                    break
                log.debug("final usage flush failed: %s", exc)
            except Exception as exc:
                log.debug("final usage flush failed: %s", exc)
            await asyncio.sleep(0.1)
        log.warning("usage not flushed before stopping: counts since the last flush are lost")
