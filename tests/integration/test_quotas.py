"""Quotas and usage on real node processes (docs/operations.md "Quotas and
usage"): token buckets at the API door, RESOURCE_EXHAUSTED with
retry-after-ms before anything is applied, the SDK pacing itself on it,
usage counters flushed exactly once to the metadata group, and the CLI."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator

import grpc
import pytest
from click.testing import CliRunner

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.cli.main import main
from raft_queue.client import Client
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "quotas")


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=30.0) as c:
        yield c


def principal_token(admin: Client, name: str, queues: list[str]) -> str:
    """A new principal that may send, receive and read on ``queues`` (created, 1 partition)."""
    token = admin.create_principal(name).token
    for q in queues:
        admin.create_queue(q, partitions=1, replication_factor=3)
        admin.add_grant(name, q, ["send", "receive", "read"])
    return str(token)


def principal(admin: Client, cluster: LocalCluster, name: str, queues: list[str]) -> Client:
    return Client(cluster.bootstrap, timeout_s=60.0, token=principal_token(admin, name, queues))


def seen_by_every_node(admin: Client, cluster: LocalCluster) -> None:
    time.sleep(1.0)  # views follow the metadata log within milliseconds; be generous


def total(admin: Client, queue: str) -> int:
    return sum(p.latest_offset for p in admin.partitions(queue))


def send_request(queue: str, n: int) -> queue_pb2.SendRequest:
    return queue_pb2.SendRequest(
        queue=queue, entries=[queue_pb2.SendEntry(body=b"x%d" % i) for i in range(n)]
    )


def raw_send(cluster: LocalCluster, token: str, queue: str, n: int = 1) -> queue_pb2.SendResponse:
    with Client(cluster.bootstrap, token=token) as c:
        leader = c.partitions(queue)[0].leader_address
    return send_to(leader, token, queue, n)


def send_to(address: str, token: str, queue: str, n: int = 1) -> queue_pb2.SendResponse:
    """One Send of ``n`` messages to the node at ``address``, no retries."""
    with grpc.insecure_channel(address) as ch:
        stub = queue_pb2_grpc.QueueServiceStub(ch)
        request = send_request(queue, n)
        return stub.Send(request, timeout=10, metadata=(("authorization", f"Bearer {token}"),))


# ---- quotas -----------------------------------------------------------------------------


def test_quota_of_200_per_s_paces_2000_sdk_sends_and_all_are_acked(cluster, admin):
    alice = principal(admin, cluster, "alice", ["qt.pace", "qt.free"])
    batches = [[b"m%d" % (i * 50 + j) for j in range(50)] for i in range(40)]
    with alice:
        started = time.monotonic()
        for batch in batches:  # no quota yet: the same work, for comparison
            alice.send_batch("qt.free", batch)
        unlimited_s = time.monotonic() - started
        admin.set_quota("alice", messages_per_s=200, burst_s=1.0)
        seen_by_every_node(admin, cluster)
        started = time.monotonic()
        results = [r for batch in batches for r in alice.send_batch("qt.pace", batch)]
        paced_s = time.monotonic() - started
    assert len(results) == 2000 and all(r.offset >= 0 for r in results)
    assert len({(r.partition, r.offset) for r in results}) == 2000
    assert total(admin, "qt.pace") == 2000
    # 200 in the first second's burst, then 1800 at 200/s: 9 s.
    assert paced_s >= 8.5, (paced_s, unlimited_s)
    assert paced_s < 30, paced_s
    print(f"2000 sends: {unlimited_s:.1f} s without quota, {paced_s:.1f} s at 200 msgs/s")


def test_over_quota_raw_call_is_resource_exhausted_with_retry_after_and_writes_nothing(
    cluster, admin
):
    token = admin.create_principal("bob").token
    admin.create_queue("qt.raw", partitions=1, replication_factor=3)
    admin.add_grant("bob", "qt.raw", ["send"])
    admin.set_quota("bob", queue="qt.raw", messages_per_s=1, burst_s=5.0)
    seen_by_every_node(admin, cluster)
    assert len(raw_send(cluster, token, "qt.raw", 5).results) == 5  # the burst
    before = total(admin, "qt.raw")
    with pytest.raises(grpc.RpcError) as info:
        raw_send(cluster, token, "qt.raw", 3)
    err = info.value
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(err.trailing_metadata())
    assert 0 < int(trailers["retry-after-ms"]) <= 3000, trailers
    assert "over quota for principal 'bob'" in err.details()
    time.sleep(0.5)
    assert total(admin, "qt.raw") == before == 5


def test_per_queue_quota_limits_that_queue_only(cluster, admin):
    token = admin.create_principal("carol").token
    for q in ("qt.slow", "qt.fast"):
        admin.create_queue(q, partitions=1, replication_factor=3)
        admin.add_grant("carol", q, ["send"])
    admin.set_quota("carol", queue="qt.slow", messages_per_s=1, burst_s=2.0)
    seen_by_every_node(admin, cluster)
    raw_send(cluster, token, "qt.slow", 2)
    with pytest.raises(grpc.RpcError) as info:
        raw_send(cluster, token, "qt.slow", 1)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for _ in range(5):
        raw_send(cluster, token, "qt.fast", 20)
    assert total(admin, "qt.fast") == 100


def test_sdk_says_over_quota_once_its_deadline_passes(cluster, admin):
    token = admin.create_principal("dan").token
    admin.create_queue("qt.tiny", partitions=1, replication_factor=3)
    admin.add_grant("dan", "qt.tiny", ["send"])
    admin.set_quota("dan", queue="qt.tiny", messages_per_s=1, burst_s=1.0)
    seen_by_every_node(admin, cluster)
    with Client(cluster.bootstrap, timeout_s=2.0, token=token) as dan:
        dan.send("qt.tiny", b"first")
        # Bigger than the burst: passes once the bucket is full again (~1 s),
        # leaving 9 s of debt; the next send would wait 10 s in a 2 s budget.
        dan.send_batch("qt.tiny", [b"x"] * 10)
        started = time.monotonic()
        with pytest.raises(errors.OverQuota) as info:
            dan.send("qt.tiny", b"one too many")
    assert "over quota for principal 'dan'" in str(info.value)
    assert "retried for" in str(info.value)
    assert time.monotonic() - started < 5


def run_cli(cluster: LocalCluster, *args: str) -> str:
    result = CliRunner().invoke(
        main, ["--server", cluster.bootstrap, "--token", cluster.token, *args]
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_quota_set_list_remove(cluster, admin):
    admin.create_principal("erin")
    out = run_cli(cluster, "quota", "set", "erin", "--messages-per-s", "50",
                  "--bytes-per-s", "1000", "--burst", "2s")  # fmt: skip
    assert "erin" in out
    run_cli(cluster, "quota", "set", "erin", "--queue", "qt.x", "--messages-per-s", "7")
    listed = json.loads(run_cli(cluster, "quota", "list", "--principal", "erin", "--json"))
    assert listed == [
        {"principal": "erin", "queue": "", "messages_per_s": 50, "bytes_per_s": 1000,
         "burst_s": 2.0},
        {"principal": "erin", "queue": "qt.x", "messages_per_s": 7, "bytes_per_s": 0,
         "burst_s": 1.0},
    ]  # fmt: skip
    assert "erin" in run_cli(cluster, "quota", "list")
    run_cli(cluster, "quota", "remove", "erin", "--queue", "qt.x")
    listed = json.loads(run_cli(cluster, "quota", "list", "--principal", "erin", "--json"))
    assert [x["queue"] for x in listed] == [""]
    bad = CliRunner().invoke(main, ["--server", cluster.bootstrap, "--token", cluster.token,
                                    "quota", "set", "erin"])  # fmt: skip
    assert bad.exit_code != 0 and "messages_per_s" in bad.output
    gone = CliRunner().invoke(main, ["--server", cluster.bootstrap, "--token", cluster.token,
                                     "quota", "remove", "erin", "--queue", "qt.none"])  # fmt: skip
    assert gone.exit_code != 0 and "no quota" in gone.output


# ---- usage ------------------------------------------------------------------------------


def usage_of(admin: Client, who: str, queue: str) -> dict[str, tuple[int, int, int]]:
    rows = admin.usage(principal=who, queue=queue)
    found: dict[str, tuple[int, int, int]] = {}
    for r in rows:
        a, b, c = found.get(r.operation, (0, 0, 0))
        found[r.operation] = (a + r.requests, b + r.messages, c + r.bytes)
    return found


def wait_usage(admin: Client, who: str, queue: str, op: str, want: tuple[int, ...]) -> None:
    """Until ``op``'s (requests, messages[, bytes]) are exactly ``want``."""

    def exact() -> bool:
        try:
            return usage_of(admin, who, queue).get(op, (0, 0, 0))[: len(want)] == want
        except errors.QueueError:  # a metadata election after a restart
            return False

    try:
        wait_until(exact, timeout_s=20)
    except AssertionError:
        raise AssertionError(f"{usage_of(admin, who, queue)} != {op}: {want}") from None


def leader_of(cluster: LocalCluster, admin: Client, queue: str) -> int:
    """The index of the node leading partition 0 of ``queue`` (once one does)."""
    address = wait_until(lambda: admin.partitions(queue)[0].leader_address, timeout_s=30)
    return next(i for i, s in enumerate(cluster.specs) if s.address == address)


def test_usage_counts_match_sends_exactly_across_node_restarts(cluster, admin):
    token = principal_token(admin, "frank", ["qt.use"])
    with Client(cluster.bootstrap, timeout_s=60.0, token=token) as frank:
        for _ in range(7):
            frank.send_batch("qt.use", [b"%03d" % j for j in range(10)])  # 7 x 10 x 3 bytes
        frank.send("qt.use", b"12345")
        got = frank.receive("qt.use", max_messages=10, wait_ms=5000)
        acked = frank.ack("qt.use", [m.receipt for m in got])
    wait_usage(admin, "frank", "qt.use", "send", (8, 71))
    assert usage_of(admin, "frank", "qt.use")["send"][2] > 215  # bodies + framing
    received = usage_of(admin, "frank", "qt.use")["receive"]
    assert received[:2] == (1, len(got)) and received[2] > sum(len(m.body) for m in got)
    assert usage_of(admin, "frank", "qt.use")["ack"][:2] == (1, sum(r.ok for r in acked))

    # A clean stop right after sending: the node flushes before it exits.
    leader = leader_of(cluster, admin, "qt.use")
    with Client(cluster.bootstrap, timeout_s=60.0, token=token) as f2:
        f2.send_batch("qt.use", [b"ab"] * 9)
        cluster.stop(leader)
    cluster.start(leader)
    wait_usage(admin, "frank", "qt.use", "send", (9, 80))
    cluster.wait_ready(60)

    # Killed (SIGKILL) after a flush: flushed counts stay; nothing counts twice.
    leader = leader_of(cluster, admin, "qt.use")
    with Client(cluster.bootstrap, timeout_s=60.0, token=token) as f3:
        f3.send("qt.use", b"z")
        wait_usage(admin, "frank", "qt.use", "send", (10, 81))
        cluster.kill(leader)
        cluster.start(leader)
        cluster.wait_ready(60)
        f3.send("qt.use", b"y")
    wait_usage(admin, "frank", "qt.use", "send", (11, 82))
    time.sleep(2.5)  # several more flush periods: still exact
    assert usage_of(admin, "frank", "qt.use")["send"][:2] == (11, 82)


def metadata_leader(admin: Client) -> str:
    try:
        return admin.cluster_status().metadata_leader
    except errors.QueueError:  # an election
        return ""


def test_usage_counts_stay_exact_across_a_metadata_leader_change(cluster, admin):
    """The metadata leader (where usage lives) takes sends itself, then
    stops cleanly at once (its unflushed counts go out in its final flush)
    and another node takes over: every count lands once, none twice."""
    token = principal_token(admin, "hank", ["qt.meta"])
    old = wait_until(lambda: metadata_leader(admin), timeout_s=30)
    index = next(i for i, s in enumerate(cluster.specs) if s.node_id == old)
    with grpc.insecure_channel(cluster.specs[index].address) as ch:
        stub = queue_pb2_grpc.QueueServiceStub(ch)  # this node takes (and forwards) them
        for _ in range(5):
            stub.Send(send_request("qt.meta", 4), timeout=10,
                      metadata=(("authorization", f"Bearer {token}"),))  # fmt: skip
    cluster.stop(index)  # right after the sends: they are not flushed yet
    wait_until(lambda: metadata_leader(admin) not in ("", old), timeout_s=60)
    with Client(cluster.bootstrap, timeout_s=60.0, token=token) as hank:
        for _ in range(3):
            hank.send("qt.meta", b"after")
    cluster.start(index)
    cluster.wait_ready(60)
    wait_usage(admin, "hank", "qt.meta", "send", (8, 23))
    time.sleep(2.5)  # several more flush periods (and retries): still exact
    assert usage_of(admin, "hank", "qt.meta")["send"][:2] == (8, 23)


def test_usage_cli_json_and_csv(cluster, admin):
    gina = principal(admin, cluster, "gina", ["qt.cli"])
    with gina:
        gina.send_batch("qt.cli", [b"abcd"] * 6)
    wait_usage(admin, "gina", "qt.cli", "send", (1, 6))
    size = usage_of(admin, "gina", "qt.cli")["send"][2]
    rows = json.loads(run_cli(cluster, "usage", "--principal", "gina", "--json"))
    assert [(r["queue"], r["operation"], r["requests"], r["messages"], r["bytes"]) for r in rows] \
        == [("qt.cli", "send", 1, 6, size)]  # fmt: skip
    assert rows[0]["hour"].endswith(":00Z")
    out = run_cli(cluster, "usage", "--principal", "gina", "--queue", "qt.cli", "--csv",
                  "--since", "1h")  # fmt: skip
    parsed = list(csv.DictReader(io.StringIO(out)))
    assert [(r["operation"], r["messages"], r["bytes"]) for r in parsed] == [
        ("send", "6", str(size))
    ]
    assert run_cli(cluster, "usage", "--principal", "nobody", "--json").strip() == "[]"


def test_usage_counts_quota_and_auth_rejections(cluster, admin):
    token = admin.create_principal("hal").token
    admin.create_queue("qt.rej", partitions=1, replication_factor=3)
    admin.add_grant("hal", "qt.rej", ["send"])
    admin.set_quota("hal", messages_per_s=1, burst_s=1.0)
    seen_by_every_node(admin, cluster)
    raw_send(cluster, token, "qt.rej", 1)
    with pytest.raises(grpc.RpcError):
        raw_send(cluster, token, "qt.rej", 4)
    # bytes: the request's size on the wire, exactly
    wait_usage(
        admin, "hal", "qt.rej", "rejected_quota", (1, 4, send_request("qt.rej", 4).ByteSize())
    )
    wait_usage(admin, "hal", "qt.rej", "send", (1, 1, send_request("qt.rej", 1).ByteSize()))
    hal = Client(cluster.bootstrap, timeout_s=5.0, retries=0, token=token)
    with hal, pytest.raises(errors.PermissionDenied):
        hal.send("qt.raw", b"not mine")
    wait_usage(admin, "hal", "qt.raw", "rejected_auth", (1, 0, 0))


def test_flush_usage_is_a_node_call_naming_its_own_node(cluster, admin):
    """A client token cannot add usage, and a node cannot flush as another."""
    from raft_queue._proto.raft_queue.v1 import admin_pb2
    from raft_queue.security.node_identity import NodeSigner
    from raft_queue.security.secret import load_secret

    path = "/raft_queue.v1.NodeService/FlushUsage"
    row = admin_pb2.UsageRow(principal="mallory", queue="q", hour_ms=0, operation="send",
                             requests=1, messages=10**6, bytes=1)  # fmt: skip
    data = admin_pb2.FlushUsageRequest(node="n2", seq=1, rows=[row]).SerializeToString()
    signer = NodeSigner(load_secret(cluster.secret_path), "n1")
    for address in [s.address for s in cluster.specs]:
        with grpc.insecure_channel(address) as ch:
            call = ch.unary_unary(path, request_serializer=None, response_deserializer=None)
            for metadata in ((("authorization", f"Bearer {cluster.token}"),),
                             signer.metadata(path, data, time.time())):  # fmt: skip
                with pytest.raises(grpc.RpcError) as info:
                    call(data, metadata=tuple(metadata), timeout=10)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert admin.usage(principal="mallory") == []


def test_auth_and_quota_refusals_move_their_rejection_series_on_metrics(cluster, admin):
    """``raftq_rejections_total{reason}`` on /metrics: a bad token moves
    ``auth``, a missing grant moves ``auth``, an over-quota Send ``quota``."""
    from tests.integration.test_observability import cluster_total

    def rejections() -> dict[str, float]:
        return {
            r: cluster_total(cluster, "raftq_rejections_total", reason=r)
            for r in ("auth", "quota", "limits")
        }

    token = principal_token(admin, "ivy", ["qt.metric"])
    admin.set_quota("ivy", queue="qt.metric", messages_per_s=1, burst_s=2.0)
    seen_by_every_node(admin, cluster)
    raw_send(cluster, token, "qt.metric", 2)  # the burst
    start = rejections()
    with pytest.raises(grpc.RpcError) as info:
        raw_send(cluster, token, "qt.metric", 2)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    after_quota = rejections()
    assert after_quota["quota"] - start["quota"] == 1
    assert after_quota["auth"] == start["auth"]
    node = cluster.specs[0].address  # one raw call each, no SDK retries
    with pytest.raises(grpc.RpcError) as info:
        send_to(node, "rqt_" + "B" * 43, "qt.metric", 1)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    after_token = rejections()
    assert after_token["auth"] - after_quota["auth"] == 1
    admin.create_queue("qt.metric.other", partitions=1, replication_factor=3)
    with pytest.raises(grpc.RpcError) as info:  # a real token without a grant on the queue
        send_to(node, token, "qt.metric.other", 1)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    end = rejections()
    assert end["auth"] - after_token["auth"] == 1
    assert end["quota"] == after_quota["quota"] and end["limits"] == start["limits"]
