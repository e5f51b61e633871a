"""Where to send each request: channels per node, the leader cache, and call targets.

Any node accepts any request and forwards it one hop to the partition's
leader, so routing is only an optimisation and a stale cache is never wrong,
just slower. The cache learns leaders from GetPartitions (``leader_address``)
and from NotLeader errors (the ``raftq-leader`` trailer); it forgets a leader
when its node fails. Requests with no known leader go to a bootstrap node,
starting with the first and moving on when one fails.

A *target* is one logical call's routing state: ``address()`` picks the node
for the next attempt and ``failed()`` learns from the error of the last one.
Thread safety: ``Router`` takes its lock for every read and write of its
maps; targets belong to one call (one thread).
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import admin_pb2_grpc, queue_pb2_grpc
from raft_queue.client.models import PartitionInfo, layout_from_infos
from raft_queue.core.placement_keys import Layout
from raft_queue.errors import FailedPrecondition, NotLeader, OutcomeUnknown, QueueError, Unavailable

MAX_MESSAGE_BYTES = 64 * 1024 * 1024

CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Reconnect quickly after a node restarts: failover is our normal case.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)

ChannelFactory = Callable[[str], grpc.Channel]


def insecure_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


class Router:
    """Channels (one per node address) plus what the client knows of leaders and partitions."""

    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        channel_factory: ChannelFactory = insecure_channel,
        partitions_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not bootstrap:
            raise ValueError("bootstrap needs at least one address")
        self._bootstrap = list(bootstrap)
        self._cursor = 0
        self._factory = channel_factory
        self._ttl_s = partitions_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stubs: dict[str, tuple[grpc.Channel, Any, Any]] = {}
        self._leaders: dict[tuple[str, int], str] = {}
        self._layouts: dict[str, tuple[Layout, float]] = {}
        self._turn = 0
        self._closed = False
        # Names this client's receives when the caller gives no consumer id:
        # delivery history shows it, and the server keeps a lingering lease
        # for a consumer it can recognise (server/dataplane/lingering.py).
        self.consumer_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        # Call metadata every RPC carries (the bearer token: client/credentials.py).
        self.metadata: tuple[tuple[str, str], ...] = ()

    # ---- channels ---------------------------------------------------------

    def _entry(self, address: str) -> tuple[grpc.Channel, Any, Any]:
        with self._lock:
            if self._closed:
                raise FailedPrecondition("client is closed")
            entry = self._stubs.get(address)
            if entry is None:
                channel = self._factory(address)
                entry = (
                    channel,
                    queue_pb2_grpc.QueueServiceStub(channel),
                    admin_pb2_grpc.AdminServiceStub(channel),
                )
                self._stubs[address] = entry
            return entry

    def queue_stub(self, address: str) -> queue_pb2_grpc.QueueServiceStub:
        stub: queue_pb2_grpc.QueueServiceStub = self._entry(address)[1]
        return stub

    def admin_stub(self, address: str) -> admin_pb2_grpc.AdminServiceStub:
        stub: admin_pb2_grpc.AdminServiceStub = self._entry(address)[2]
        return stub

    def close(self) -> None:
        """Close every channel; later calls raise FailedPrecondition. Idempotent."""
        for channel in self.detach():
            channel.close()

    def detach(self) -> list[Any]:
        """Refuse further calls and hand over the channels to close (an
        asyncio channel's close must be awaited by its owner)."""
        with self._lock:
            self._closed = True
            entries, self._stubs = list(self._stubs.values()), {}
        return [channel for channel, _, _ in entries]

    # ---- nodes ------------------------------------------------------------

    def any_address(self) -> str:
        """The bootstrap node currently in use (the first one until it fails)."""
        with self._lock:
            return self._bootstrap[self._cursor % len(self._bootstrap)]

    def move_off(self, address: str) -> None:
        """Ask the next bootstrap node from now on if ``address`` is the one in
        use: it answered NotLeader naming no leader (an election, or a node
        cut off from the group, which says so until it rejoins)."""
        with self._lock:
            self._move_off(address)

    def _move_off(self, address: str) -> None:  # the lock held
        if self._bootstrap[self._cursor % len(self._bootstrap)] == address:
            self._cursor += 1

    def node_failed(self, address: str) -> None:
        """Stop preferring ``address``: move off it as bootstrap, forget it as
        leader, and let the next call of each queue it led ask GetPartitions
        again (failover: the new leaders, instead of a forward through the
        bootstrap node until the partition count's TTL runs out)."""
        with self._lock:
            self._move_off(address)
            for key in [k for k, v in self._leaders.items() if v == address]:
                del self._leaders[key]
                self._layouts.pop(key[0], None)

    # ---- leaders and partitions -------------------------------------------

    def leader(self, queue: str, partition: int) -> str | None:
        with self._lock:
            return self._leaders.get((queue, partition))

    def set_leader(self, queue: str, partition: int, address: str) -> None:
        with self._lock:
            self._leaders[(queue, partition)] = address

    def forget_leaders(self, queue: str, partitions: Iterable[int]) -> None:
        with self._lock:
            for partition in partitions:
                self._leaders.pop((queue, partition), None)

    def some_leader_of(self, queue: str) -> str | None:
        """A known leader address of one of ``queue``'s partitions, rotating per call.

        Rotation spreads consumers over the leaders instead of all hitting one node.
        """
        with self._lock:
            found = sorted((p, a) for (q, p), a in self._leaders.items() if q == queue)
            leaders = list(dict.fromkeys(a for _, a in found))
            if not leaders:
                return None
            self._turn += 1
            return leaders[self._turn % len(leaders)]

    def update_partitions(self, queue: str, infos: Sequence[PartitionInfo]) -> None:
        """Replace what is known of ``queue`` with a fresh GetPartitions answer."""
        with self._lock:
            for key in [k for k in self._leaders if k[0] == queue]:
                del self._leaders[key]
            for info in infos:
                if info.leader_address:
                    self._leaders[(queue, info.partition)] = info.leader_address
            self._layouts[queue] = (layout_from_infos(infos), self._clock())

    def layout(self, queue: str) -> Layout | None:
        """The cached key ranges (core/placement_keys.py), or None when unknown
        or older than the TTL. A split makes sends by an older one refused
        (PartitionSealed) and the flow refreshes it (client/calls.py)."""
        with self._lock:
            cached = self._layouts.get(queue)
        if cached is None or self._clock() - cached[1] > self._ttl_s:
            return None
        return cached[0]

    def partition_count(self, queue: str) -> int | None:
        """The cached partition count, or None when unknown or older than the TTL."""
        layout = self.layout(queue)
        return None if layout is None else layout.version

    def drop_queue(self, queue: str) -> None:
        """Forget ``queue`` entirely (deleted, recreated, or not found)."""
        with self._lock:
            self._layouts.pop(queue, None)
            for key in [k for k in self._leaders if k[0] == queue]:
                del self._leaders[key]


def _node_trouble(err: QueueError) -> bool:
    return isinstance(err, Unavailable | OutcomeUnknown)


class AnyNode:
    """Any node will do (the server routes); follow a NotLeader hint for this call."""

    def __init__(self) -> None:
        self.hint = ""

    def address(self, router: Router) -> str:
        return self.hint or router.any_address()

    def failed(self, router: Router, address: str, err: QueueError) -> None:
        if isinstance(err, NotLeader):
            self.hint = err.leader
            if not err.leader:
                router.move_off(address)
        elif _node_trouble(err):
            self.hint = ""
            router.node_failed(address)


class PartitionLeaders(AnyNode):
    """Partition-specific calls: straight to the leader when all ``partitions`` share one.

    A NotLeader hint is only trusted for a single partition; for a group the
    leaders are forgotten and the next attempt goes through a bootstrap node.
    """

    def __init__(self, queue: str, partitions: Sequence[int]) -> None:
        super().__init__()
        self.queue = queue
        self.partitions = tuple(dict.fromkeys(partitions))

    def address(self, router: Router) -> str:
        leaders = {router.leader(self.queue, p) for p in self.partitions}
        if len(leaders) == 1 and None not in leaders:
            return str(leaders.pop())
        return router.any_address()

    def failed(self, router: Router, address: str, err: QueueError) -> None:
        if isinstance(err, NotLeader) and err.leader and len(self.partitions) == 1:
            router.set_leader(self.queue, self.partitions[0], err.leader)
        elif isinstance(err, NotLeader) or _node_trouble(err):
            if _node_trouble(err):
                router.node_failed(address)  # first: it sees what ``address`` led
            else:
                router.move_off(address)
            router.forget_leaders(self.queue, self.partitions)


class SomeLeaderOf(AnyNode):
    """Queue-wide calls (Receive): prefer a node that leads some partition of ``queue``.

    The server fans out across partitions from there; a node failure makes
    ``Router.node_failed`` forget it, so the next attempt picks another.
    """

    def __init__(self, queue: str) -> None:
        super().__init__()
        self.queue = queue

    def address(self, router: Router) -> str:
        return self.hint or router.some_leader_of(self.queue) or router.any_address()
