"""The SDK against real gRPC servers backed by an in-memory fake cluster.

``FakeCluster`` runs N nodes (``grpc.server`` on 127.0.0.1, port 0) serving
the generated QueueService/AdminService over one shared in-memory state. It
records every call per node, can be told who leads each partition (and then
answers NotLeader with the leader's address, as a node that cannot forward
would), and can fail calls on cue with any QueueError, before or after
applying them (a lost response). Errors go through the real
``server/api/status.py``, so these tests also exercise the wire mapping.
``test_cli.py`` reuses it.
"""

from __future__ import annotations

import random
import re
import socket
import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import pytest

from raft_queue import Client, errors
from raft_queue._proto.raft_queue.v1 import admin_pb2, admin_pb2_grpc, queue_pb2, queue_pb2_grpc
from raft_queue.client import Backoff, OutgoingMessage
from raft_queue.client.partitioner import partition_for_key
from raft_queue.client.retry import Retrier
from raft_queue.server.api.packed import send_entries
from raft_queue.server.api.status import abort_with_sync, to_status
from raft_queue.testing.clock import FakeClock

QUEUE_RPCS = [m.name for m in queue_pb2.DESCRIPTOR.services_by_name["QueueService"].methods]
ADMIN_RPCS = [m.name for m in admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods]

DEFAULT_CONFIG = queue_pb2.QueueConfig(
    partitions=1,
    replication_factor=1,
    durability=queue_pb2.DURABILITY_FSYNC,
    ordering=queue_pb2.ORDERING_NONE,
    visibility_timeout_ms=30000,
    max_receives=0,
    dead_letter_queue="",
    retention_ms=0,
    retention_bytes=0,
    max_message_bytes=1 << 20,
    dedup_window_ms=300000,
    delay_ms=0,
)


@dataclass
class Failure:
    rpc: str
    error: errors.QueueError
    node: int | None
    times: int
    after: bool  # apply the request, then fail: the response is lost


@dataclass
class FakeQueue:
    config: queue_pb2.QueueConfig
    logs: list[list[queue_pb2.Message]]
    dedup: dict[str, tuple[int, int]] = field(default_factory=dict)
    requests: dict[bytes, queue_pb2.SendResponse] = field(default_factory=dict)
    leases: dict[tuple[int, int], int] = field(default_factory=dict)  # -> epoch
    acked: set[tuple[int, int]] = field(default_factory=set)
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)


class FakeCluster:
    """Shared state of N fake nodes; ``node`` arguments are node indexes."""

    def __init__(self, nodes: int = 2) -> None:
        self.lock = threading.RLock()
        self.servers: list[grpc.Server] = []
        self.addresses: list[str] = []
        for index in range(nodes):
            self._start_node(index)
        self.reset()

    def _start_node(self, index: int) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        queue_pb2_grpc.add_QueueServiceServicer_to_server(FakeQueueService(self, index), server)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(FakeAdminService(self, index), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.servers.append(server)
        self.addresses.append(f"127.0.0.1:{port}")

    def __enter__(self) -> FakeCluster:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def reset(self) -> FakeCluster:
        """Forget all state between tests (servers keep running); returns self."""
        with self.lock:
            self.queues: dict[str, FakeQueue] = {}
            self.leaders: dict[tuple[str, int], int] = {}
            self.calls: list[tuple[int, str, object]] = []
            self.failures: list[Failure] = []
            self.forward = True  # False: non-leaders answer NotLeader
            self.full_receipt_results = False  # True: ignore failures_only (older servers)
            self.full_send_results = False  # True: ignore results_as_runs (older servers)
            self.serve_streams = True  # False: SendStream is UNIMPLEMENTED (older servers)
            self.break_streams = 0  # SendStream requests to store, then break the stream on
            self.streams_opened: list[int] = []  # node of each SendStream opened
            self.streamed: list[tuple[int, bytes]] = []  # (node, request id) sent on a stream
            self.streams_ended: list[int] = []  # node of each SendStream that ended
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop(None)

    # ---- test controls -------------------------------------------------------

    def fail(self, rpc, error, *, node=None, times=1, after=False) -> None:
        self.failures.append(Failure(rpc, error, node, times, after))

    def calls_of(self, rpc: str) -> list[tuple[int, object]]:
        return [(node, req) for node, name, req in self.calls if name == rpc]

    def add_queue(self, name: str, partitions: int = 1, leaders=None) -> None:
        config = queue_pb2.QueueConfig()
        config.CopyFrom(DEFAULT_CONFIG)
        config.partitions = partitions
        with self.lock:
            self.queues[name] = FakeQueue(config, [[] for _ in range(partitions)])
            for p in range(partitions):
                self.leaders[(name, p)] = leaders[p] if leaders else p % len(self.addresses)

    # ---- dispatch --------------------------------------------------------------

    def dispatch(self, node: int, rpc: str, request, context):
        try:
            return self._apply(node, rpc, request)
        except errors.QueueError as exc:
            err = exc
        abort_with_sync(context, err)

    def _apply(self, node: int, rpc: str, request):
        with self.lock:
            self.calls.append((node, rpc, request))
            failure = self._take_failure(rpc, node)
            if failure and not failure.after:
                raise failure.error
            response = getattr(self, f"rpc_{rpc}")(node, request)
            if failure:
                raise failure.error
            return response

    def send_stream(self, node: int, requests, context):
        """SendStream as a node serves it: each request is a Send (recorded,
        failed on cue as "Send"), its error answered as data. Off
        (``serve_streams``): UNIMPLEMENTED, as an older node. ``break_streams``:
        that many requests are stored, then their stream breaks unanswered."""
        if not self.serve_streams:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        with self.lock:
            self.streams_opened.append(node)
        try:
            yield from self._stream_answers(node, requests, context)
        finally:
            with self.lock:
                self.streams_ended.append(node)

    def _stream_answers(self, node: int, requests, context):
        for request in requests:
            try:
                answer = queue_pb2.SendStreamResponse(response=self._apply(node, "Send", request))
            except errors.QueueError as exc:
                code, details, trailers = to_status(exc)
                error = queue_pb2.SendStreamError(
                    code=code.value[0], details=details, trailers=dict(trailers)
                )
                answer = queue_pb2.SendStreamResponse(error=error)
            with self.lock:
                self.streamed.append((node, request.request_id))
                broken, self.break_streams = self.break_streams > 0, max(0, self.break_streams - 1)
            if broken:
                context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset by peer")
            yield answer

    def _take_failure(self, rpc: str, node: int) -> Failure | None:
        for failure in self.failures:
            if failure.rpc == rpc and failure.node in (None, node) and failure.times > 0:
                failure.times -= 1
                return failure
        return None

    def _queue(self, name: str) -> FakeQueue:
        if name not in self.queues:
            raise errors.NotFound(f"queue {name!r} does not exist")
        return self.queues[name]

    def _check_leader(self, node: int, queue: str, partition: int) -> None:
        leader = self.leaders[(queue, partition)]
        if not self.forward and leader != node:
            raise errors.NotLeader("not the leader", leader=self.addresses[leader])

    # ---- QueueService ----------------------------------------------------------

    def _info(self, name: str) -> queue_pb2.QueueInfo:
        q = self.queues[name]
        stored = sum(len(log) for log in q.logs) - len(q.acked)
        return queue_pb2.QueueInfo(
            name=name, config=q.config, created_ms=1000, messages=stored, in_flight=len(q.leases)
        )

    def rpc_CreateQueue(self, node, req):
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", req.name):
            raise errors.InvalidArgument("name", "must match [A-Za-z0-9._-]{1,100}")
        config = queue_pb2.QueueConfig()
        config.CopyFrom(DEFAULT_CONFIG)
        config.MergeFrom(req.config)
        if req.name in self.queues:
            if self.queues[req.name].config != config:
                raise errors.AlreadyExists(f"queue {req.name!r} exists with another config")
            return self._info(req.name)
        self.add_queue(req.name, config.partitions)
        self.queues[req.name].config = config
        return self._info(req.name)

    def rpc_GetQueue(self, node, req):
        self._queue(req.name)
        return self._info(req.name)

    def rpc_ListQueues(self, node, req):
        return queue_pb2.ListQueuesResponse(queues=[self._info(n) for n in sorted(self.queues)])

    def rpc_DeleteQueue(self, node, req):
        self._queue(req.name)
        del self.queues[req.name]
        return queue_pb2.DeleteQueueResponse()

    def rpc_GetPartitions(self, node, req):
        q = self._queue(req.queue)
        infos = []
        for p, log in enumerate(q.logs):
            leader = self.leaders[(req.queue, p)]
            infos.append(
                queue_pb2.PartitionInfo(
                    partition=p,
                    latest_offset=len(log),
                    leader=f"n{leader}",
                    leader_address=self.addresses[leader],
                    replicas=[f"n{i}" for i in range(len(self.addresses))],
                    epoch=1,
                )
            )
        return queue_pb2.GetPartitionsResponse(partitions=infos)

    def rpc_Send(self, node, req):
        q = self._queue(req.queue)
        if req.request_id and req.request_id in q.requests:  # a retry: the first results
            first = q.requests[req.request_id]
            for r in first.results:
                r.duplicate = True
            return first
        results = []
        for entry in send_entries(req):  # entries, or packed bodies (the bulk case)
            p = entry.partition if entry.HasField("partition") else 0
            if p >= len(q.logs):
                raise errors.InvalidArgument("entries.partition", f"{p} >= {len(q.logs)}")
            self._check_leader(node, req.queue, p)
            if entry.dedup_id in q.dedup:
                p, offset = q.dedup[entry.dedup_id]
                results.append(queue_pb2.SendResult(partition=p, offset=offset, duplicate=True))
                continue
            offset = len(q.logs[p])
            q.logs[p].append(
                queue_pb2.Message(
                    queue=req.queue,
                    partition=p,
                    offset=offset,
                    body=entry.body,
                    key=entry.key,
                    headers=entry.headers,
                    timestamp_ms=5000 + offset,
                    dedup_id=entry.dedup_id,
                )
            )
            if entry.dedup_id:
                q.dedup[entry.dedup_id] = (p, offset)
            durability = queue_pb2.DURABILITY_FSYNC
            results.append(queue_pb2.SendResult(partition=p, offset=offset, durability=durability))
        response = queue_pb2.SendResponse(results=results)
        if req.results_as_runs and not self.full_send_results:
            del response.results[:]
            for r in results:
                response.runs.add(
                    partition=r.partition,
                    offset=r.offset,
                    count=1,
                    duplicate=r.duplicate,
                    durability=r.durability,
                )
        if req.request_id:
            q.requests[req.request_id] = queue_pb2.SendResponse(results=results)
        return response

    def rpc_Receive(self, node, req):
        q = self._queue(req.queue)
        if req.max_messages > 1000:
            raise errors.InvalidArgument("max_messages", "must be <= 1000")
        out = []
        for p, log in enumerate(q.logs):
            for msg in log:
                key = (p, msg.offset)
                if len(out) >= (req.max_messages or 1) or key in q.leases or key in q.acked:
                    continue
                q.leases[key] = q.leases.get(key, 0) + 1
                leased = queue_pb2.Message()
                leased.CopyFrom(msg)
                leased.receipt = f"{req.queue}/{p}/{msg.offset}/{q.leases[key]}"
                leased.receive_count = 1
                out.append(leased)
        return queue_pb2.ReceiveResponse(messages=out)

    def _receipts(self, req, apply) -> queue_pb2.ReceiptsResponse:
        q = self._queue(req.queue)
        results = []
        for receipt in req.receipts:
            _, p, offset, _ = receipt.split("/")
            key = (int(p), int(offset))
            ok = key in q.leases
            if ok:
                apply(q, key)
            results.append(
                queue_pb2.ReceiptResult(receipt=receipt, ok=ok, error="" if ok else "not found")
            )
        if not req.failures_only or self.full_receipt_results:  # as servers before the field
            return queue_pb2.ReceiptsResponse(results=results)
        failed = [i for i, r in enumerate(results) if not r.ok]
        return queue_pb2.ReceiptsResponse(
            results=[results[i] for i in failed], failed=failed, failures_only=True
        )

    def rpc_Ack(self, node, req):
        def ack(q, key):
            del q.leases[key]
            q.acked.add(key)

        return self._receipts(req, ack)

    def rpc_Nack(self, node, req):
        return self._receipts(req, lambda q, key: q.leases.pop(key))

    def rpc_ChangeVisibility(self, node, req):
        return self._receipts(req, lambda q, key: None)

    def rpc_Read(self, node, req):
        q = self._queue(req.queue)
        self._check_leader(node, req.queue, req.partition)
        log = q.logs[req.partition]
        batch = log[req.offset : req.offset + (req.max_messages or 100)]
        return queue_pb2.ReadResponse(
            messages=batch,
            next_offset=req.offset + len(batch),
            earliest_offset=0,
            latest_offset=len(log),
        )

    def rpc_CommitOffsets(self, node, req):
        self._queue(req.queue).offsets.setdefault(req.group, {}).update(req.offsets)
        return queue_pb2.CommitOffsetsResponse()

    def rpc_GetOffsets(self, node, req):
        offsets = self._queue(req.queue).offsets.get(req.group, {})
        return queue_pb2.GetOffsetsResponse(offsets=offsets)

    # ---- AdminService ----------------------------------------------------------

    def rpc_ClusterStatus(self, node, req):
        nodes = [
            admin_pb2.NodeInfo(
                id=f"n{i}", address=a, state="alive", controller=True, metadata_leader=i == 0
            )
            for i, a in enumerate(self.addresses)
        ]
        replicas = [
            admin_pb2.ReplicaStatus(
                queue=q,
                partition=p,
                node=f"n{leader}",
                role="leader",
                leader=f"n{leader}",
                term=2,
                commit_index=7,
                has_quorum=True,
                digest="ab" if req.include_digests else "",
            )
            for (q, p), leader in sorted(self.leaders.items())
        ]
        return admin_pb2.ClusterStatusResponse(
            nodes=nodes, metadata_leader="n0", metadata_version=3, replicas=replicas
        )


def _servicer(base, rpcs):
    """A servicer class whose every RPC is ``cluster.dispatch(node, name, ...)``."""

    def method(name):
        def call(self, request, context):
            if name == "SendStream":
                return self.cluster.send_stream(self.node, request, context)
            return self.cluster.dispatch(self.node, name, request, context)

        return call

    def init(self, cluster, node):
        self.cluster, self.node = cluster, node

    return type(
        f"Fake{base.__name__}", (base,), {"__init__": init} | {name: method(name) for name in rpcs}
    )


FakeQueueService = _servicer(queue_pb2_grpc.QueueServiceServicer, QUEUE_RPCS)
FakeAdminService = _servicer(admin_pb2_grpc.AdminServiceServicer, ADMIN_RPCS)


# ---- fixtures -------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_servers():
    with FakeCluster(nodes=2) as servers:
        yield servers


@pytest.fixture
def cluster(cluster_servers):
    return cluster_servers.reset()


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def client(cluster, sleeps):
    """A client bootstrapped on node 0 only; its backoff sleeps are recorded, not slept."""
    with Client(cluster.addresses[0], timeout_s=5.0, retries=5, sleep=sleeps.append) as c:
        yield c


def nodes_called(cluster, rpc):
    return [node for node, _ in cluster.calls_of(rpc)]


# ---- queues -------------------------------------------------------------------


def test_create_queue_sends_config_and_returns_effective_values(client, cluster):
    info = client.create_queue(
        "orders", partitions=3, durability="quorum", ordering="fifo", visibility_timeout_ms=5000
    )
    assert info.name == "orders" and info.partitions == 3
    assert info.config.durability == "quorum" and info.config.ordering == "fifo"
    assert info.config.visibility_timeout_ms == 5000
    assert info.config.dedup_window_ms == 300000  # server default filled in
    ((_, request),) = cluster.calls_of("CreateQueue")
    assert not request.config.HasField("replication_factor")  # None = server default


@pytest.mark.parametrize(
    ("config", "field_name"),
    [
        ({"visibility_timeout": 5}, "visibility_timeout"),
        ({"durability": "disk"}, "durability"),
        ({"ordering": "strict"}, "ordering"),
        ({"max_receives": -1}, "max_receives"),
        ({"dead_letter_queue": 7}, "dead_letter_queue"),
    ],
)
def test_bad_queue_config_is_rejected_locally_naming_the_field(client, cluster, config, field_name):
    with pytest.raises(errors.InvalidArgument) as caught:
        client.create_queue("q", **config)
    assert caught.value.field == field_name
    assert cluster.calls_of("CreateQueue") == []


def test_server_side_invalid_argument_keeps_its_field(client):
    with pytest.raises(errors.InvalidArgument) as caught:
        client.create_queue("bad name!")
    assert caught.value.field == "name"
    assert caught.value.message.startswith("name: ")


def test_get_list_delete_queue(client):
    client.create_queue("a")
    client.create_queue("b", partitions=2)
    assert client.get_queue("b").partitions == 2
    assert [q.name for q in client.list_queues()] == ["a", "b"]
    client.delete_queue("a")
    with pytest.raises(errors.NotFound):
        client.get_queue("a")


def test_a_send_to_a_queue_not_found_leaves_creation_to_the_server(client, cluster):
    """One Send, placed by the server, with create as the caller gave it;
    a server that may not create answers NotFound, raised as such."""
    with pytest.raises(errors.NotFound):
        client.send("later", b"x", key="k")
    with pytest.raises(errors.NotFound):
        client.send_batch("later", [b"y", OutgoingMessage(b"z", partition=0)], create=True)
    asks = [req for _, req in cluster.calls_of("Send")]
    assert [r.create for r in asks] == [False, True]
    assert [e.HasField("partition") for e in asks[1].entries] == [False, True]
    assert asks[0].entries[0].key == "k" and not asks[0].entries[0].HasField("partition")


def test_create_with_a_different_definition_is_already_exists(client):
    client.create_queue("q", partitions=1)
    client.create_queue("q", partitions=1)  # same definition: idempotent
    with pytest.raises(errors.AlreadyExists):
        client.create_queue("q", partitions=2)


# ---- send: dedup ids, retries ------------------------------------------------------


def test_send_gives_each_rpc_a_random_request_id_and_reports_placement(client, cluster):
    cluster.add_queue("q")
    result = client.send("q", "hello", headers={"trace": "abc"})
    assert (result.partition, result.offset, result.duplicate) == (0, 0, False)
    assert result.durability == "fsync"
    client.send_batch("q", [b"a", b"b"])
    (_, request), (_, other) = cluster.calls_of("Send")
    entry = request.entries[0]
    assert entry.dedup_id == ""  # no per-message id unless the caller gives one
    assert len(request.request_id) == 16 and request.request_id != other.request_id
    assert entry.body == b"hello" and entry.headers["trace"] == b"abc"
    # bare bodies for one partition go packed: no SendEntry, no per-message id
    assert not other.entries and other.packed.bodies == b"ab"
    assert list(other.packed.lengths) == [1, 1] and other.packed.partition == 0


def test_explicit_dedup_id_is_sent_and_repeats_are_duplicates(client, cluster):
    cluster.add_queue("q")
    first = client.send("q", b"x", dedup_id="order-17")
    again = client.send("q", b"x", dedup_id="order-17")
    assert again.duplicate and again.offset == first.offset
    assert [r.entries[0].dedup_id for _, r in cluster.calls_of("Send")] == ["order-17"] * 2


@pytest.mark.parametrize("full", [False, True])
def test_send_results_come_as_runs_or_one_per_entry(client, cluster, full):
    cluster.add_queue("q", partitions=2)
    cluster.full_send_results = full
    sent = [OutgoingMessage(b"m", partition=p) for p in (0, 0, 1, 0)]
    results = client.send_batch("q", sent)
    assert [(r.partition, r.offset, r.duplicate) for r in results] == [
        (0, 0, False),
        (0, 1, False),
        (1, 0, False),
        (0, 2, False),
    ]
    assert {r.durability for r in results} == {"fsync"}
    assert cluster.calls_of("Send")[0][1].results_as_runs


def test_unavailable_is_retried_with_backoff_and_the_same_request_id(client, cluster, sleeps):
    cluster.add_queue("q")
    cluster.fail("Send", errors.Unavailable("no quorum"), times=2)
    result = client.send("q", b"payload")
    assert result.offset == 0
    request_ids = [r.request_id for _, r in cluster.calls_of("Send")]
    assert len(request_ids) == 3 and len(set(request_ids)) == 1
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= 0.05 and 0 <= sleeps[1] <= 0.1  # full jitter under the ceilings


def test_lost_response_is_retried_without_duplicating_the_message(client, cluster):
    cluster.add_queue("q")
    cluster.fail("Send", errors.OutcomeUnknown("timed out after append"), after=True)
    result = client.send("q", b"once")
    assert result.duplicate and result.offset == 0
    assert len(cluster.queues["q"].logs[0]) == 1
    first, second = (r.request_id for _, r in cluster.calls_of("Send"))
    assert first == second


def test_retries_are_bounded(cluster, sleeps):
    cluster.add_queue("q")
    cluster.fail("Send", errors.Unavailable("no quorum"), times=100)
    c = Client(cluster.addresses[0], retries=2, sleep=sleeps.append)
    with c, pytest.raises(errors.Unavailable):
        c.send("q", b"x")
    assert len(cluster.calls_of("Send")) == 3


@pytest.mark.parametrize(
    ("rpc", "error", "call"),
    [
        ("Send", errors.FailedPrecondition("queue is being deleted"), lambda c: c.send("q", "x")),
        # A retried delete would answer NotFound although the first one worked.
        ("DeleteQueue", errors.OutcomeUnknown("not confirmed"), lambda c: c.delete_queue("q")),
    ],
)
def test_errors_not_safe_to_retry_are_raised_at_once(client, cluster, rpc, error, call):
    cluster.add_queue("q")
    cluster.fail(rpc, error)
    with pytest.raises(type(error)):
        call(client)
    assert len(cluster.calls_of(rpc)) == 1


# ---- routing ----------------------------------------------------------------------


def test_not_leader_reroutes_at_once_to_the_hinted_leader(client, cluster, sleeps):
    cluster.add_queue("q", leaders=[0])
    client.partitions("q")  # the client now believes node 0 leads
    cluster.leaders[("q", 0)] = 1
    cluster.forward = False
    client.send("q", b"a")
    assert nodes_called(cluster, "Send") == [0, 1]
    first, second = (r.request_id for _, r in cluster.calls_of("Send"))
    assert first == second
    assert sleeps == []  # a redirect is not a backoff
    client.send("q", b"b")  # the hint was cached
    assert nodes_called(cluster, "Send") == [0, 1, 1]


def test_partition_requests_go_straight_to_the_leader(client, cluster):
    cluster.add_queue("q", partitions=2, leaders=[0, 1])
    cluster.forward = False
    client.send("q", b"x", partition=1)
    client.read("q", partition=1, offset=0)
    assert nodes_called(cluster, "Send") == [1]
    assert nodes_called(cluster, "Read") == [1]
    assert nodes_called(cluster, "GetPartitions") == [0]  # learnt through the bootstrap node


def test_not_leader_without_hint_backs_off_then_asks_the_bootstrap_node(client, cluster, sleeps):
    cluster.add_queue("q")
    cluster.fail("Read", errors.NotLeader("election in progress"))
    client.read("q", 0, 0)
    assert len(sleeps) == 1 and nodes_called(cluster, "Read") == [0, 0]


def test_a_bootstrap_node_that_knows_no_leader_is_left_for_the_next_one(sleeps):
    # A node cut off from the metadata group answers "not the leader" naming
    # none until it rejoins: asking it again until the deadline would stall
    # a call that another bootstrap node answers at once.
    with FakeCluster(nodes=2) as cluster:
        cluster.add_queue("q")
        cluster.fail("GetQueue", errors.NotLeader("no metadata leader"), node=0, times=100)
        with Client(cluster.addresses, sleep=sleeps.append) as c:
            assert c.get_queue("q").name == "q"
            assert c.get_queue("q").name == "q"  # and stays on node 1
        assert nodes_called(cluster, "GetQueue") == [0, 1, 1]


def test_dead_bootstrap_node_is_skipped(cluster, sleeps):
    cluster.add_queue("q")
    with Client(f"127.0.0.1:1,{cluster.addresses[0]}", sleep=sleeps.append) as c:
        assert c.get_queue("q").name == "q"
        assert c.get_queue("q").name == "q"
    assert len(cluster.calls_of("GetQueue")) == 2
    assert len(sleeps) == 1  # only the first call met the dead node


def test_after_its_leader_fails_the_next_send_learns_the_new_leader(sleeps):
    # Failover: the send that meets the dead leader is re-routed through the
    # bootstrap node (which forwards); the next one asks GetPartitions again
    # and goes straight to the new leader, not through the bootstrap node.
    with FakeCluster(nodes=3) as cluster:
        cluster.add_queue("q", leaders=[1])
        with Client(cluster.addresses[0], sleep=sleeps.append) as c:
            c.partitions("q")
            cluster.leaders[("q", 0)] = 2
            cluster.fail("Send", errors.Unavailable("connection refused"), node=1)
            c.send("q", b"a")
            assert nodes_called(cluster, "Send") == [1, 0]
            c.send("q", b"b")
            assert nodes_called(cluster, "Send") == [1, 0, 2]
            assert nodes_called(cluster, "GetPartitions") == [0, 0]


def test_a_mute_node_costs_a_connect_timeout_not_the_calls_budget(cluster, sleeps):
    # A node that accepts TCP but never speaks (a paused or wedged process):
    # the first attempt gets the call's whole budget; had it waited for its
    # deadline, no time would be left for the attempt on the next node.
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        cluster.add_queue("q")
        boot = [f"127.0.0.1:{mute.getsockname()[1]}", cluster.addresses[0]]
        with Client(boot, timeout_s=3.0, sleep=sleeps.append) as c:
            assert c.get_queue("q").name == "q"
        assert len(cluster.calls_of("GetQueue")) == 1


def test_receive_prefers_a_node_leading_the_queue(client, cluster):
    cluster.add_queue("q", leaders=[1])
    client.receive("q")
    assert nodes_called(cluster, "Receive") == [1]


def test_send_batch_groups_per_leader_and_keeps_input_order(client, cluster):
    cluster.add_queue("q", partitions=3, leaders=[0, 1, 1])
    messages = [OutgoingMessage(f"m{i}", partition=p) for i, p in enumerate([2, 0, 1, 0, 2])]
    results = client.send_batch("q", messages)
    assert [r.partition for r in results] == [2, 0, 1, 0, 2]
    assert [r.offset for r in results] == [0, 0, 0, 1, 1]
    sends = cluster.calls_of("Send")
    assert sorted((node, len(req.entries)) for node, req in sends) == [(0, 2), (1, 3)]


def test_send_batch_chunks_at_1000_entries(client, cluster):
    cluster.add_queue("q")
    results = client.send_batch("q", [b"x"] * 2500)
    assert [r.offset for r in results] == list(range(2500))
    assert [len(r.packed.lengths) for _, r in cluster.calls_of("Send")] == [1000, 1000, 500]


def test_empty_batch_makes_no_call(client, cluster):
    assert client.send_batch("q", []) == []
    assert cluster.calls == []


def test_keyed_messages_follow_the_hash_and_keyless_go_round_robin(client, cluster):
    cluster.add_queue("q", partitions=3)
    keyed = client.send_batch("q", [OutgoingMessage("v", key=k) for k in ("a", "b", "c", "a")])
    assert [r.partition for r in keyed] == [partition_for_key(k, 3) for k in "abca"]
    keyless = client.send_batch("q", ["1", "2", "3", "4"])
    assert [r.partition for r in keyless] == [0, 1, 2, 0]


def test_negative_partition_is_invalid(client, cluster):
    cluster.add_queue("q")
    with pytest.raises(errors.InvalidArgument) as caught:
        client.send("q", b"x", partition=-1)
    assert caught.value.field == "partition"


# ---- receive, receipts, reads, offsets --------------------------------------------------


def test_receive_then_ack_and_a_second_ack_is_not_ok(client, cluster):
    cluster.add_queue("q")
    client.send("q", b"job", key="k")
    (msg,) = client.receive("q", max_messages=10, visibility_ms=1000, wait_ms=10)
    assert (msg.body, msg.key, msg.receive_count) == (b"job", "k", 1)
    assert [r.ok for r in client.ack("q", [msg])] == [True]
    (again,) = client.ack("q", msg.receipt)
    assert not again.ok and again.error == "not found"
    ((_, request),) = cluster.calls_of("Receive")
    assert request.visibility_ms == 1000 and request.wait_ms == 10


@pytest.mark.parametrize("full", [False, True])
def test_receipt_results_are_one_per_receipt_whether_the_server_lists_all_or_failures(
    client, cluster, full
):
    cluster.add_queue("q")
    cluster.full_receipt_results = full
    client.send_batch("q", [b"1", b"2", b"3"])
    a, b, c = client.receive("q", max_messages=3)
    client.ack("q", b)
    results = client.ack("q", [a, b, c.receipt, b])
    assert [(r.receipt, r.ok) for r in results] == [
        (a.receipt, True),
        (b.receipt, False),
        (c.receipt, True),
        (b.receipt, False),
    ]
    assert results[1].error == "not found"
    (_, request) = cluster.calls_of("Ack")[-1]
    assert request.failures_only


def test_nack_and_change_visibility_return_one_result_per_receipt(client, cluster):
    cluster.add_queue("q")
    client.send_batch("q", [b"1", b"2"])
    leased = client.receive("q", max_messages=2)
    assert [r.ok for r in client.change_visibility("q", leased, 60000)] == [True, True]
    assert [r.ok for r in client.nack("q", leased, delay_ms=5)] == [True, True]
    assert cluster.calls_of("Nack")[0][1].delay_ms == 5
    assert len(client.receive("q", max_messages=5)) == 2


def test_acks_of_received_messages_go_to_their_partition_leader(client, cluster):
    cluster.add_queue("q", partitions=2, leaders=[1, 0])
    client.send_batch("q", [OutgoingMessage(b"a", partition=0), OutgoingMessage(b"b", partition=1)])
    leased = sorted(client.receive("q", max_messages=10), key=lambda m: m.partition)
    assert [r.ok for r in client.ack("q", leased[1])] == [True]
    assert [r.ok for r in client.nack("q", [leased[0]])] == [True]
    assert [r.ok for r in client.change_visibility("q", leased[0].receipt, 5)] == [False]
    assert nodes_called(cluster, "Ack") == [0] and nodes_called(cluster, "Nack") == [1]
    assert len(nodes_called(cluster, "ChangeVisibility")) == 1  # a bare receipt: some leader


def test_out_of_range_request_values_name_the_field(client, cluster):
    cluster.add_queue("q")
    with pytest.raises(errors.InvalidArgument) as caught:
        client.receive("q", max_messages=-1)
    assert caught.value.field == "max_messages"
    with pytest.raises(errors.InvalidArgument) as caught:
        client.ack("q", [""])
    assert caught.value.field == "receipts"


def test_read_returns_messages_and_offsets(client, cluster):
    cluster.add_queue("q")
    client.send_batch("q", [b"a", b"b", b"c"])
    result = client.read("q", 0, 1, max_messages=5)
    assert [m.body for m in result.messages] == [b"b", b"c"]
    assert (result.next_offset, result.earliest_offset, result.latest_offset) == (3, 0, 3)


def test_commit_and_get_offsets(client, cluster):
    cluster.add_queue("q", partitions=2)
    client.commit_offsets("q", "spark", {0: 5, 1: 7})
    assert client.get_offsets("q", "spark") == {0: 5, 1: 7}
    assert client.get_offsets("q", "other") == {}


def test_cluster_status(client, cluster):
    cluster.add_queue("q")
    status = client.cluster_status(include_digests=True)
    assert [n.id for n in status.nodes] == ["n0", "n1"]
    assert status.metadata_leader == "n0" and status.metadata_version == 3
    assert status.replicas[0].digest == "ab" and status.replicas[0].has_quorum


def test_closed_client_refuses_calls(cluster):
    c = Client(cluster.addresses[0])
    c.close()
    c.close()
    with pytest.raises(errors.FailedPrecondition):
        c.list_queues()


def test_empty_bootstrap_is_invalid():
    with pytest.raises(errors.InvalidArgument) as caught:
        Client(" , ")
    assert caught.value.field == "bootstrap"


# ---- the retry policy alone ----------------------------------------------------------------


def failing(errs):
    """An attempt function raising ``errs`` in turn, then returning "ok"."""
    seen = []

    def attempt(timeout_s):
        seen.append(timeout_s)
        if len(seen) <= len(errs):
            raise errs[len(seen) - 1]
        return "ok"

    return attempt, seen


def test_backoff_is_full_jitter_under_an_exponential_ceiling():
    backoff, rng = Backoff(base_s=0.1, max_s=1.0), random.Random(7)
    for attempt, ceiling in [(0, 0.1), (1, 0.2), (3, 0.8), (10, 1.0)]:
        delays = [backoff.delay_s(attempt, rng) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8


def test_time_budget_stops_retries_before_the_attempt_count():
    clock = FakeClock()
    retrier = Retrier(
        100, 1.0, Backoff(0.3, 0.3), sleep=clock.sleep, clock=clock, rng=random.Random(1)
    )
    attempt, seen = failing([errors.Unavailable("down")] * 100)
    with pytest.raises(errors.Unavailable):
        retrier.run(attempt)
    assert clock.monotonic() <= 1.0 and len(seen) < 20
    assert all(0 < t <= 1.0 for t in seen)


def test_an_election_is_waited_out_until_the_deadline_not_the_retry_count():
    """A NotLeader naming no leader (an election runs) does not use up
    ``retries``; only the call's deadline ends the wait. A metadata election
    of 1.3 s outlasted five quick retries (a CI failure of CreateQueue)."""
    clock = FakeClock()
    retrier = Retrier(2, 10.0, sleep=clock.sleep, clock=clock, rng=random.Random(5))
    attempt, seen = failing([errors.NotLeader("not the metadata leader")] * 8)
    assert retrier.run(attempt) == "ok" and len(seen) == 9
    endless, seen = failing([errors.NotLeader("electing")] * 1000)
    started = clock.monotonic()
    with pytest.raises(errors.NotLeader):
        retrier.run(endless)
    assert 9.0 <= clock.monotonic() - started <= 10.0 and len(seen) > 3
    other, seen = failing([errors.Unavailable("down")] * 10)  # still bounded by the count
    with pytest.raises(errors.Unavailable):
        retrier.run(other)
    assert len(seen) == 3


def test_long_polls_extend_the_budget():
    clock = FakeClock()
    attempt, seen = failing([])
    Retrier(1, 2.0, sleep=clock.sleep, clock=clock).run(attempt, extra_s=20.0)
    assert seen == [22.0]


def test_repeated_redirects_back_off():
    clock, sleeps = FakeClock(), []
    retrier = Retrier(5, 10.0, sleep=sleeps.append, clock=clock, rng=random.Random(3))
    hop = errors.NotLeader("no", leader="h:1")
    attempt, seen = failing([hop, hop, hop])
    assert retrier.run(attempt) == "ok"
    assert len(seen) == 4 and len(sleeps) == 2  # first redirect free, ping-pong waits


def test_a_send_refused_by_a_sealed_partition_fetches_the_map_again_and_is_sent_once(
    client, cluster
):
    """The queue was split after the client cached its map: the refused RPC
    stored nothing, so the SDK asks GetPartitions again and re-places."""
    cluster.add_queue("q", partitions=2)
    client.send("q", "warm", key="a")  # the map is cached now
    maps_before = len(cluster.calls_of("GetPartitions"))
    cluster.fail("Send", errors.PartitionSealed("partition 1 was split (sealed)"))
    results = client.send_batch("q", [OutgoingMessage(f"v{i}", key=f"k{i}") for i in range(6)])
    assert len(results) == 6
    assert len(cluster.calls_of("GetPartitions")) == maps_before + 1
    stored = [m.body for log in cluster.queues["q"].logs for m in log]
    assert sorted(stored) == sorted([b"warm", *(f"v{i}".encode() for i in range(6))])


def test_a_sealed_partition_named_explicitly_is_an_error_after_the_refreshes(client, cluster):
    cluster.add_queue("q", partitions=2)
    cluster.fail("Send", errors.PartitionSealed("partition 0 was split (sealed)"), times=10)
    with pytest.raises(errors.PartitionSealed):
        client.send("q", "x", partition=0)
    assert len(cluster.calls_of("Send")) == 4  # the first try and 3 refreshed ones
