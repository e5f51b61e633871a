"""The synchronous SDK client: one object per application, safe to share between threads.

Every method runs a flow of ``calls.py`` (what to call, in which order):
each call is routed (``routing.py``), retried (``retry.py``) and its gRPC
errors are turned into ``QueueError`` subclasses (``client/errors.py``), so
callers only ever see the error tree of ``raft_queue.errors``. The asyncio
client (``aio.py``) drives the same flows.

Delivery contract: sends are at-least-once on the wire and exactly-once in
the log within the queue's dedup window, because every Send RPC carries a
random request id that each retry of it repeats (one dedup entry per
partition append, as Kafka's idempotent producer); a message's own
``dedup_id`` (the caller's) is also kept across calls. Receives are
at-least-once (a lease lost in transit expires and the message is
delivered again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.client import calls
from raft_queue.client.acks import FLUSH_MS, BackgroundAcks
from raft_queue.client.admin import AdminSurface
from raft_queue.client.calls import MAX_BATCH, Call, Flow, Receipts
from raft_queue.client.credentials import call_metadata, resolve_token
from raft_queue.client.errors import from_rpc_error
from raft_queue.client.models import (
    ClusterStatus,
    History,
    OutgoingMessage,
    PartitionInfo,
    QueueInfo,
    ReadResult,
    ReceiptResult,
    Received,
    SendResult,
)
from raft_queue.client.partitioner import RoundRobin
from raft_queue.client.redirect import Redirects, follows_redirects
from raft_queue.client.redrive import RedriveProgress, redrive
from raft_queue.client.retry import Backoff, Retrier
from raft_queue.client.routing import AnyNode, Router
from raft_queue.client.send_stream import SendStreams
from raft_queue.client.subscription import Subscription
from raft_queue.client.tls import ClientTls, sync_factory
from raft_queue.errors import InvalidArgument, QueueError

T = TypeVar("T")
__all__ = ["MAX_BATCH", "Client", "parse_bootstrap"]


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """``"h1:p1,h2:p2"`` or a list of addresses -> a list without blanks."""
    parts = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [p.strip() for p in parts if p and p.strip()]
    if not addresses:
        raise InvalidArgument("bootstrap", "needs at least one host:port address")
    return addresses


class Surface(AdminSurface):
    """Every SDK method, written once: each returns ``self._run(flow)``. The
    sync ``Client`` runs the flow to its result; ``aio.AsyncClient`` returns
    a coroutine of it, so the same methods are awaited there."""

    _router: Router
    _round_robin: RoundRobin

    def _run(self, flow: Flow[Any]) -> Any:
        raise NotImplementedError

    # ---- queues --------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        **config: Any,
    ) -> QueueInfo:
        """Create ``name``; ``config`` keys are QueueConfig field names of queue.proto
        (``visibility_timeout_ms``, ``max_receives``, ``dead_letter_queue``,
        ``ordering``, ``delay_ms``, ``dedup_window_ms``, ``durability``,
        ``retention_ms``, ``retention_bytes``, ``max_message_bytes``).

        Idempotent: creating an existing queue with the same definition
        succeeds, so it is retried; a different definition is AlreadyExists.
        """
        fields = {"partitions": partitions, "replication_factor": replication_factor, **config}
        return self._run(calls.create_queue(self._router, name, fields))

    def update_queue(self, name: str, **config: Any) -> QueueInfo:
        """Change the given QueueConfig fields of ``name``; the others stay.
        ``partitions``, ``replication_factor`` and ``ordering`` cannot change."""
        return self._run(calls.update_queue(self._router, name, config))

    def get_queue(self, name: str) -> QueueInfo:
        """Config and depth (messages, in flight, delayed, dead, oldest message age)."""
        return self._run(calls.get_queue(name))

    def list_queues(self) -> list[QueueInfo]:
        return self._run(calls.list_queues())

    def delete_queue(self, name: str) -> None:
        """Delete ``name``. Not retried after OutcomeUnknown (a retry would say NotFound)."""
        self._run(calls.delete_queue(self._router, name))

    def purge_queue(self, name: str) -> int:
        """Drop every message of ``name`` (as SQS PurgeQueue); how many were dropped."""
        return self._run(calls.purge_queue(name))

    def partitions(self, queue: str) -> list[PartitionInfo]:
        """Describe ``queue``'s partitions, and refresh the client's leader cache with it."""
        return self._run(calls.partitions(self._router, queue))

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
        create: bool = False,
    ) -> SendResult:
        """Send one message; see ``send_batch`` for placement, dedup and ``create``."""
        message = OutgoingMessage(body, key, headers, dedup_id, delay_ms, partition)
        flow = calls.send_batch(self._router, self._round_robin, queue, [message], create)
        return self._run(calls.first(flow))

    def send_batch(
        self, queue: str, messages: Iterable[OutgoingMessage | bytes | str], create: bool = False
    ) -> list[SendResult]:
        """Send messages; results come back in the order given.

        Placement: the explicit ``partition``, else the stable hash of ``key``,
        else the hash of your ``dedup_id``, else round robin. Entries are
        grouped by the partition's cached leader and sent one RPC per leader
        per chunk of ``MAX_BATCH``, one after the other. If a later chunk
        fails, earlier ones are stored: to re-send the batch without
        duplicates, give the messages your own dedup ids.

        ``create``: if ``queue`` does not exist, create it from the cluster's
        ``[queue_defaults]`` (whatever ``auto_create_queues`` says): a request
        to manage queues. Concurrent creates of one queue make one queue.
        """
        flow = calls.send_batch(self._router, self._round_robin, queue, messages, create)
        return self._run(flow)

    # ---- receive and receipts ---------------------------------------------------

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        visibility_ms: int | None = None,
        wait_ms: int = 0,
        consumer: str = "",
        ack: Receipts | None = None,
    ) -> Received:
        """Lease up to ``max_messages`` (as SQS ReceiveMessage); [] when none within ``wait_ms``.

        Leased messages are invisible for ``visibility_ms`` (default: the
        queue's visibility timeout) and come back unless acked. A long poll
        (``wait_ms`` > 0) returns as soon as a message is visible.

        ``ack``: receipts (or Messages) of this queue to ack first, in the
        same call: a consume loop acks its last batch with its next receive,
        one round trip instead of two. The result (a list of the messages)
        holds their results in ``.acks``. Receipts waiting from
        ``ack(..., wait=False)`` ride along too (client/acks.py).
        """
        listed = calls.receipt_list(ack) if ack is not None else []
        flow = calls.receive(
            self._router, queue, max_messages, visibility_ms, wait_ms, consumer, listed
        )
        return self._run(flow)

    def ack(self, queue: str, receipts: Receipts, wait: bool = True) -> list[ReceiptResult]:
        """Delete leased messages (as SQS DeleteMessage); one result per receipt.
        A receipt whose lease expired and was re-leased since is refused (``stale``).

        ``wait=False``: a *background ack* (as nats-py's ``msg.ack()``): returns
        [] at once; the receipts leave with the next ``receive`` of ``queue``,
        within ``ack_flush_ms``, or at ``flush_acks``/``close``. One never
        sent (the process died first) means a redelivery after the
        visibility timeout, never a loss (docs/semantics.md)."""
        if not wait:
            self._ack_later(queue, calls.receipt_list(receipts))
            return []
        return self._run(calls.settle("Ack", queue_pb2.AckRequest, queue, receipts))

    def _ack_later(self, queue: str, receipts: list[str]) -> None:
        raise InvalidArgument("wait", "background acks need the synchronous Client")

    def nack(
        self, queue: str, receipts: Receipts, delay_ms: int = 0, release: bool = False
    ) -> list[ReceiptResult]:
        """Give leased messages back, visible again after ``delay_ms``. With
        ``release`` (delay 0), the messages never reached your code (say, a
        prefetch buffer at shutdown): the lease is undone, each message's
        receive count and delivery history restored."""
        fields = {"delay_ms": delay_ms, "release": release}
        flow = calls.settle("Nack", queue_pb2.NackRequest, queue, receipts, **fields)
        return self._run(flow)

    def change_visibility(
        self, queue: str, receipts: Receipts, visibility_ms: int
    ) -> list[ReceiptResult]:
        """Move leases' deadlines to now + ``visibility_ms`` (as SQS ChangeMessageVisibility)."""
        flow = calls.settle(
            "ChangeVisibility",
            queue_pb2.ChangeVisibilityRequest,
            queue,
            receipts,
            visibility_ms=visibility_ms,
        )
        return self._run(flow)

    def get_history(self, queue: str, partition: int, offset: int) -> History:
        """A message's delivery history: state, receive count and its last 16
        leases (time, consumer id, deadline), until it is acked or dead-
        lettered (then state ``done``, no leases); NotFound once it left the
        log. The cap is documented in docs/semantics.md."""
        return self._run(calls.get_history(self._router, queue, partition, offset))

    # ---- offset reads -------------------------------------------------------------

    def read(
        self,
        queue: str,
        partition: int,
        offset: int = 0,
        max_messages: int = 100,
        wait_ms: int = 0,
        timestamp_ms: int | None = None,
    ) -> ReadResult:
        """Read committed messages of one partition from ``offset`` (as a Kafka
        fetch), or from the first message appended at or after
        ``timestamp_ms`` when given. Leases are untouched. OutOfRange when
        ``offset`` is below the earliest retained one; continue from
        ``next_offset``. ``wait_ms`` waits for new messages at the end."""
        flow = calls.read(
            self._router, queue, partition, offset, max_messages, wait_ms, timestamp_ms
        )
        return self._run(flow)

    def commit_offsets(
        self, queue: str, group: str, offsets: Mapping[int, int], reset: bool = False
    ) -> dict[int, int]:
        """Store ``group``'s next offset per partition; never backwards unless
        ``reset``. Returns the offsets stored (the old one where it was higher)."""
        return self._run(calls.commit_offsets(queue, group, offsets, reset))

    def get_offsets(self, queue: str, group: str) -> dict[int, int]:
        return self._run(calls.get_offsets(queue, group))

    # ---- admin -----------------------------------------------------------------

    def cluster_status(
        self, include_digests: bool = False, include_counters: bool = False
    ) -> ClusterStatus:
        """Nodes and every replica's Raft state; digests compare replicas' data;
        counters are each node's message totals per partition."""
        return self._run(calls.cluster_status(include_digests, include_counters))


@follows_redirects  # a managed cluster's NotFound names its manager: client/redirect.py
class Client(Surface):
    """A connection to a raft_queue cluster through any of its nodes.

    ``bootstrap``: comma-separated ``host:port`` list (or a sequence); any node
    accepts any request. ``timeout_s`` bounds each method including its
    retries (long polls add their wait); ``retries`` bounds the retries (a
    leader election's NotLeader and an OverQuota wait until the deadline; a
    NotLeader naming no leader also moves the client to its next bootstrap
    node, since a node cut off from its group answers so until it rejoins).
    ``backoff`` and ``sleep`` tune or replace the waits between retries.
    ``token``: the bearer token every call carries; None looks in
    ``$RAFTQ_TOKEN``, then the profile file (client/credentials.py); ``""``
    sends none (a node with ``[security] insecure = true``).
    ``tls=True``: connect over TLS, checking the nodes against ``ca_file``
    (PEM; default: the system roots); ``cert_file`` + ``key_file``: this
    client's certificate, for nodes that require one (docs/security.md).
    ``follow_redirects``: a queue this cluster does not hold, when an external
    manager manages it, is reached through that manager (client/redirect.py);
    False raises the NotFound instead.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "127.0.0.1:7101",
        timeout_s: float = 10.0,
        retries: int = 5,
        *,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
        token: str | None = None,
        tls: bool = False,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        ack_flush_ms: int = FLUSH_MS,
        follow_redirects: bool = True,
        send_stream: bool = True,
    ) -> None:
        tls_args = {"tls": tls, "ca_file": ca_file, "cert_file": cert_file, "key_file": key_file}
        self._redirects = Redirects(follow_redirects, token, timeout_s=timeout_s, retries=retries,
                                    **tls_args)  # fmt: skip
        factory = sync_factory(ClientTls.of(tls, ca_file, cert_file, key_file))
        self._router = Router(parse_bootstrap(bootstrap), channel_factory=factory)
        # token=, else $RAFTQ_TOKEN, else the profile file (client/credentials.py)
        self._router.metadata = call_metadata(resolve_token(token))
        self._retrier = Retrier(retries, timeout_s, backoff, sleep=sleep)
        self._round_robin = RoundRobin()
        # ack(wait=False): flushed by receive, a timer, flush_acks, close (client/acks.py)
        self.background_acks = BackgroundAcks(self._send_acks, ack_flush_ms)
        # send_stream: a Send with no other in flight to its node rides one
        # long-lived SendStream (client/send_stream.py); False: unary only.
        self._streams = SendStreams(self._router) if send_stream else None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Send the background acks (``ack(wait=False)``) still waiting, then
        close every channel. Idempotent; later calls raise FailedPrecondition."""
        try:
            self.background_acks.close()
        finally:
            if self._streams is not None:
                self._streams.close()
            self._router.close()

    def flush_acks(self) -> None:
        """Send every background ack still waiting now, and wait for them."""
        self.background_acks.flush()

    def _ack_later(self, queue: str, receipts: list[str]) -> None:
        self.background_acks.add(queue, receipts)

    def _send_acks(self, queue: str, receipts: list[str]) -> int:
        """A background flush: one Ack call; how many were refused."""
        results = self._run(calls.settle("Ack", queue_pb2.AckRequest, queue, receipts))
        return sum(1 for r in results if not r.ok)

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        visibility_ms: int | None = None,
        wait_ms: int = 0,
        consumer: str = "",
        ack: Receipts | None = None,
    ) -> Received:
        background = self.background_acks
        carried = background.take(queue)
        if not carried:
            return super().receive(queue, max_messages, visibility_ms, wait_ms, consumer, ack)
        listed = calls.receipt_list(ack) if ack is not None else []
        if not listed:  # background acks only: the answer does not wait for their commit
            flow = calls.receive(
                self._router, queue, max_messages, visibility_ms, wait_ms, consumer, carried, True
            )
            try:
                got = self._run(flow)
            except QueueError:
                background.give_back(queue, carried)
                raise
            background.carried(len(carried), 0)  # not confirmed: refusals are not known
            return got
        try:
            got = super().receive(
                queue, max_messages, visibility_ms, wait_ms, consumer, listed + carried
            )
        except QueueError:
            background.give_back(queue, carried)
            raise
        mine, theirs = got.acks[: len(listed)], got.acks[len(listed) :]
        background.carried(len(carried), sum(1 for r in theirs if not r.ok))
        got.acks = mine
        return got

    # ---- the one call path -------------------------------------------------

    def _run(self, flow: Flow[T]) -> T:
        """Drive ``flow``: perform each Call it yields, send back the response
        or throw the QueueError in, and return what it returns."""
        try:
            call = next(flow)
            while True:
                try:
                    response = self._call(call)
                except QueueError as exc:
                    call = flow.throw(exc)
                else:
                    call = flow.send(response)
        except StopIteration as stop:
            return stop.value

    def _call(self, call: Call) -> Any:
        """Run one Call with routing and retries; raise QueueError, never grpc.RpcError."""
        target = call.to or AnyNode()
        router = self._router
        streams = self._streams if call.rpc == "Send" else None

        def attempt(timeout_s: float) -> Any:
            address = target.address(router)
            if streams is not None:
                try:
                    answer = streams.send(address, call.request, timeout_s)
                except QueueError as refused:
                    target.failed(router, address, refused)
                    raise
                if answer is not None:
                    return answer
            stub = router.admin_stub(address) if call.admin else router.queue_stub(address)
            try:
                return getattr(stub, call.rpc)(
                    call.request, timeout=timeout_s, metadata=router.metadata
                )
            except grpc.RpcError as exc:
                err = from_rpc_error(exc, mutating=call.mutating)
                target.failed(router, address, err)
                raise err from exc

        return self._retrier.run(attempt, idempotent=call.idempotent, extra_s=call.extra_s)

    def subscribe(
        self,
        queue: str,
        prefetch: int = 10,
        visibility_ms: int | None = None,
        consumer: str = "",
        auto_grant: bool = True,
    ) -> Subscription:
        """Push delivery (server stream, credit-based): iterate the returned
        Subscription; at most ``prefetch`` messages are unacked at a time when
        you ack each before asking for the next (``auto_grant``), or grant
        credit yourself with ``Subscription.grant``. See client/subscription.py."""
        stub = self._router.queue_stub(self._router.any_address())
        return Subscription(
            stub, queue, prefetch, visibility_ms, consumer, auto_grant, self._router.metadata
        )

    def redrive(
        self,
        dlq: str,
        to: str,
        rate_per_s: float = 100.0,
        max_messages: int | None = None,
        on_progress: Callable[[RedriveProgress], None] | None = None,
    ) -> int:
        """Move messages from dead-letter queue ``dlq`` back to ``to`` at most
        ``rate_per_s`` a second (see ``redrive.py``); how many moved."""
        return redrive(self, dlq, to, rate_per_s, max_messages, on_progress)
