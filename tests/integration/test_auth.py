"""Client authentication and authorization on real node processes: tokens,
principals, grants, the audit log and the CLI behind them (docs/security.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import (
    admin_pb2,
    node_pb2_grpc,
    queue_pb2,
    queue_pb2_grpc,
)
from raft_queue.cli.main import main
from raft_queue.client import Client
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "auth")


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Client]:
    with cluster.client(timeout_s=20.0) as c:
        for name in ("m.send", "m.recv.1", "m.read", "m.man.1", "m.other"):
            c.create_queue(name, replication_factor=3)
        yield c


def as_token(cluster: LocalCluster, token: str) -> Client:
    return Client(cluster.bootstrap, timeout_s=10.0, retries=2, token=token)


def offsets(admin: Client, queue: str) -> list[int]:
    return [p.latest_offset for p in admin.partitions(queue)]


def audit_lines(cluster: LocalCluster) -> list[dict[str, Any]]:
    lines = []
    for s in cluster.specs:
        path = s.dir / "data" / "audit.log"
        if path.exists():
            lines += [json.loads(x) for x in path.read_text().splitlines()]
    return lines


# ---- authentication -----------------------------------------------------------------


@pytest.mark.parametrize("token", ["", "rqt_" + "A" * 43, "not even a token"])
def test_no_or_bad_token_is_unauthenticated_and_writes_nothing(cluster, admin, token):
    before = offsets(admin, "m.send")
    with as_token(cluster, token) as c:
        with pytest.raises(errors.Unauthenticated):
            c.send("m.send", b"sneaky", partition=0)
        with pytest.raises(errors.Unauthenticated):
            c.create_queue("m.sneaky")
        with pytest.raises(errors.Unauthenticated):
            c.cluster_status()
    assert offsets(admin, "m.send") == before
    with pytest.raises(errors.NotFound):
        admin.get_queue("m.sneaky")


def test_raw_call_without_metadata_is_unauthenticated_but_health_stays_open(cluster, admin):
    with grpc.insecure_channel(cluster.specs[0].address) as ch:
        request = queue_pb2.SendRequest(queue="m.send", entries=[queue_pb2.SendEntry(body=b"x")])
        with pytest.raises(grpc.RpcError) as info:
            queue_pb2_grpc.QueueServiceStub(ch).Send(request, timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("rpc", "request_pb"),
    [("Heartbeat", admin_pb2.HeartbeatRequest(node="rogue", address="127.0.0.1:1")),
     ("GetMetadata", admin_pb2.GetMetadataRequest()),
     ("NodeStatus", admin_pb2.NodeStatusRequest())],
)  # fmt: skip
def test_node_to_node_calls_refuse_even_the_admin_token(cluster, admin, rpc, request_pb):
    """GetMetadata would hand out every token hash; Heartbeat would register a rogue node."""
    auth = (("authorization", f"Bearer {cluster.token}"),)
    address = cluster.specs[0].address
    with grpc.insecure_channel(address) as ch, pytest.raises(grpc.RpcError) as info:
        getattr(node_pb2_grpc.NodeServiceStub(ch), rpc)(request_pb, timeout=10, metadata=auth)
    # NodeService takes node signatures only (server/api/node_identity.py).
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "rogue" not in {n.id for n in admin.cluster_status().nodes}


# ---- authorization: the grant matrix --------------------------------------------------


@pytest.fixture(scope="module")
def matrix(cluster: LocalCluster, admin: Client) -> Iterator[Client]:
    """One principal: send on m.send, receive on m.recv*, read on m.read, manage on m.man.*."""
    token = admin.create_principal("matrix").token
    for pattern, op in (("m.send", "send"), ("m.recv*", "receive"), ("m.read", "read"),
                        ("m.man.*", "manage")):  # fmt: skip
        admin.add_grant("matrix", pattern, [op])
    admin.send("m.recv.1", b"to receive")
    with as_token(cluster, token) as c:
        yield c


def _receive(c: Client, q: str) -> Any:
    got = c.receive(q, max_messages=1, wait_ms=1000)
    if got:
        c.ack(q, got)
    return got


OPS: dict[str, Callable[[Client, str], Any]] = {
    "send": lambda c, q: c.send(q, b"m"),
    "receive": _receive,
    "read": lambda c, q: c.read(q, partition=0, offset=0),
    "manage": lambda c, q: c.update_queue(q, visibility_timeout_ms=45_000),
}
GRANTED = {"send": "m.send", "receive": "m.recv.1", "read": "m.read", "manage": "m.man.1"}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("queue", sorted({*GRANTED.values(), "m.other"}))
def test_each_operation_is_allowed_only_where_granted(admin, matrix, op, queue):
    before = offsets(admin, queue)
    if GRANTED[op] == queue:
        OPS[op](matrix, queue)
        return
    with pytest.raises(errors.PermissionDenied) as info:
        OPS[op](matrix, queue)
    # A queue without any grant is refused at its description, which the SDK reads first.
    text = str(info.value)
    assert f"may not {op} on queue '{queue}'" in text or f"no grant on queue '{queue}'" in text
    assert offsets(admin, queue) == before
    if queue != GRANTED["manage"]:  # which the allowed case changed
        assert admin.get_queue(queue).config.visibility_timeout_ms != 45_000


def test_prefix_grant_covers_new_queues_and_not_their_neighbours(admin, matrix):
    matrix.create_queue("m.man.new", replication_factor=3)  # manage on m.man.*
    matrix.purge_queue("m.man.new")
    matrix.delete_queue("m.man.new")
    with pytest.raises(errors.PermissionDenied, match="manage on queue 'm.man'"):
        matrix.create_queue("m.man")
    with pytest.raises(errors.PermissionDenied):
        matrix.delete_queue("m.other")
    with pytest.raises(errors.NotFound):
        admin.get_queue("m.man")


def test_admin_operations_need_admin_on_star(admin, matrix):
    calls = (matrix.cluster_status, matrix.list_principals, lambda: matrix.create_principal("x"))
    for call in calls:
        with pytest.raises(errors.PermissionDenied, match="may not admin on the cluster"):
            call()
    assert [p.name for p in admin.list_principals("matrix")] == ["matrix"]


def test_list_queues_shows_only_granted_queues(admin, matrix):
    assert {q.name for q in matrix.list_queues()} == set(GRANTED.values())
    assert "m.other" in {q.name for q in admin.list_queues()}


def test_subscribe_is_refused_without_receive(matrix):
    sub = matrix.subscribe("m.send", prefetch=1)
    try:
        with pytest.raises(errors.PermissionDenied, match="receive on queue 'm.send'"):
            next(iter(sub))
    finally:
        sub.close()


def test_a_forwarded_request_carries_the_callers_token(cluster, admin, matrix):
    """Sent to a node that does not lead the partition: that node forwards with
    the caller's token, and the leader's node checks the same principal again."""
    leader = admin.partitions("m.send")[0].leader_address
    other = next(s.address for s in cluster.specs if s.address != leader)
    token = admin.create_principal("forwarded").token
    admin.add_grant("forwarded", "m.send", ["send"])
    request = queue_pb2.SendRequest(queue="m.send", entries=[queue_pb2.SendEntry(body=b"f")])
    with grpc.insecure_channel(other) as ch:
        stub = queue_pb2_grpc.QueueServiceStub(ch)
        auth = (("authorization", f"Bearer {token}"),)

        def sent() -> bool:  # once this node's view has the grant (milliseconds)
            try:
                return stub.Send(request, timeout=20, metadata=auth).results[0].offset >= 0
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED
                return False

        assert wait_until(sent)
        admin.remove_grant("forwarded", "m.send", ["send"])
        wait_until(lambda: not admin.list_principals("forwarded")[0].grants)
        time.sleep(1.0)  # every node's view has the revocation
        with pytest.raises(grpc.RpcError) as info:
            stub.Send(request, timeout=20, metadata=auth)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


# ---- principals: rotate and delete ----------------------------------------------------


def _works(cluster: LocalCluster, token: str) -> bool:
    with as_token(cluster, token) as c:
        try:
            c.send("m.send", b"probe")
            return True
        except errors.Unauthenticated:
            return False


def test_rotate_invalidates_the_old_token_and_delete_every_token(cluster, admin):
    old = admin.create_principal("rotor").token
    admin.add_grant("rotor", "m.send", ["send"])
    assert wait_until(lambda: _works(cluster, old))
    new = admin.rotate_principal("rotor").token
    assert new != old
    assert wait_until(lambda: not _works(cluster, old))
    assert _works(cluster, new)
    admin.delete_principal("rotor")
    assert wait_until(lambda: not _works(cluster, new))
    with pytest.raises(errors.NotFound):
        admin.list_principals("rotor")


# ---- the audit log ---------------------------------------------------------------------


def test_audit_log_records_manage_ops_and_refusals_with_who_and_where(cluster, admin, matrix):
    admin.create_queue("m.audited", replication_factor=3)
    with pytest.raises(errors.PermissionDenied):
        matrix.purge_queue("m.other")
    with as_token(cluster, "rqt_wrong") as c, pytest.raises(errors.Unauthenticated):
        c.delete_queue("m.other")

    def found() -> bool:
        lines = audit_lines(cluster)
        return (
            any(x["queue"] == "m.audited" and x["principal"] == "admin" and x["result"] == "ok"
                and x["operation"] == "manage" for x in lines)
            and any(x["queue"] == "m.other" and x["principal"] == "matrix"
                    and x["result"] == "denied" and x["method"].endswith("/PurgeQueue")
                    for x in lines)
            and any(x["result"] == "unauthenticated" and x["method"].endswith("/DeleteQueue")
                    for x in lines)
            and any(x["method"].endswith("/CreatePrincipal") and x["target"] == "matrix"
                    and x["principal"] == "admin" and x["result"] == "ok" for x in lines)
        )  # fmt: skip

    assert wait_until(found, timeout_s=10)
    assert all(x["peer"].startswith("ipv4:127.0.0.1:") for x in audit_lines(cluster))
    lines = audit_lines(cluster)
    assert not any(x["method"].endswith("/Send") and x["result"] == "ok" for x in lines)
    path = cluster.specs[0].dir / "data" / "audit.log"
    assert path.stat().st_mode & 0o077 == 0


# ---- the CLI --------------------------------------------------------------------------


def raftq(cluster: LocalCluster, *args: str, token: str | None = None) -> Any:
    argv = ["--server", cluster.bootstrap, "--token", token or cluster.token, *args]
    return CliRunner().invoke(main, argv, input="y\n")


def test_cli_principal_and_grant_commands(cluster, admin):
    made = raftq(cluster, "principal", "create", "cli-user")
    assert made.exit_code == 0, made.output
    token = made.output.strip().splitlines()[-1]
    assert token.startswith("rqt_")
    added = raftq(cluster, "grant", "add", "cli-user", "--queue", "m.read", "--allow", "read,send")
    assert added.exit_code == 0, added.output
    listed = json.loads(raftq(cluster, "grant", "list", "cli-user", "--json").output)
    assert listed[0]["grants"] == [{"pattern": "m.read", "operations": ["read", "send"]}]
    assert "cli-user" in raftq(cluster, "principal", "list").output
    assert token not in raftq(cluster, "principal", "list", "--json").output
    sent = raftq(cluster, "send", "m.read", "from cli", token=token)
    assert sent.exit_code == 0, sent.output
    denied = raftq(cluster, "receive", "m.read", token=token)
    assert denied.exit_code == 1 and "may not receive on queue 'm.read'" in denied.output
    denied = raftq(cluster, "send", "m.other", "nope", token=token)
    assert denied.exit_code == 1 and "no grant on queue 'm.other'" in denied.output
    bad = raftq(cluster, "grant", "add", "cli-user", "--queue", "m.read", "--allow", "fly")
    assert bad.exit_code == 2
    removed = raftq(cluster, "grant", "remove", "cli-user", "--queue", "m.read", "--allow", "send")
    assert removed.exit_code == 0, removed.output
    # Each node serves the metadata view it has applied (docs/security.md): wait for it.
    wait_until(lambda: admin.list_principals("cli-user")[0].grants[0].operations == ["read"], 10)
    rotated = raftq(cluster, "principal", "rotate", "cli-user")
    assert rotated.exit_code == 0 and rotated.output.strip().splitlines()[-1] != token
    assert raftq(cluster, "principal", "delete", "cli-user", "--yes").exit_code == 0
    wait_until(lambda: "cli-user" not in {p.name for p in admin.list_principals()}, 10)


def test_cli_without_a_token_says_so_on_one_line(cluster, monkeypatch):
    monkeypatch.delenv("RAFTQ_TOKEN", raising=False)
    monkeypatch.setenv("RAFTQ_CREDENTIALS_FILE", "/nonexistent")
    result = CliRunner().invoke(main, ["--server", cluster.bootstrap, "queue", "list"])
    assert result.exit_code == 1 and "bearer token is required" in result.output


# ---- insecure ---------------------------------------------------------------------------


def test_an_insecure_cluster_without_a_secret_serves_callers_without_a_token(tmp_path: Path):
    """Nodes with no secret have no node token: they register (wait_ready) as anonymous."""
    open_ = {"insecure": True, "cluster_secret_file": ""}
    c = LocalCluster(tmp_path / "open", nodes=2, security=open_)
    c.start()
    try:
        c.wait_ready(60)
        with Client(c.bootstrap, timeout_s=20.0, token="") as anonymous:
            assert len(anonymous.cluster_status().nodes) == 2
            anonymous.create_queue("open", replication_factor=1)
            assert anonymous.send("open", b"hi").offset == 0
        with as_token(c, "rqt_wrong") as wrong, pytest.raises(errors.Unauthenticated):
            wrong.send("open", b"no")
        assert "insecure = true" in c.log_path(0).read_text()
    finally:
        c.stop()


def test_a_send_that_may_create_its_queue_needs_manage_too(cluster, admin, matrix):
    """SendRequest.create makes a Send a manage operation as well (auto-create)."""
    admin.add_grant("matrix", "m.auto*", ["send"])

    def refused_for_manage() -> bool:  # each node serves the grants its view has applied
        try:
            matrix.send("m.auto.1", b"x", create=True)
        except errors.PermissionDenied as exc:
            return "manage" in str(exc)
        raise AssertionError("a creating Send without manage went through")

    wait_until(refused_for_manage, 10)
    with pytest.raises(errors.NotFound):
        admin.get_queue("m.auto.1")  # nothing created
    admin.add_grant("matrix", "m.auto*", ["manage"])
    sent: list[Any] = []

    def created() -> bool:
        try:
            sent.append(matrix.send("m.auto.1", b"x", create=True))
        except errors.PermissionDenied:
            return False
        return True

    wait_until(created, 10)
    assert sent[0].offset == 0


def http_get(url: str, token: str = "") -> int:
    """The HTTP status of a GET (no redirects followed)."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_status_page_needs_the_admin_token_and_the_probes_stay_open(cluster, admin):
    """docs/operations.md "Monitoring", Access: on a secured node the page and
    /api/status take only the admin token; /metrics, /healthz, /readyz stay open
    (open_probes = true), and /metrics names the queues."""
    principal_token = admin.create_principal("pager").token
    admin.add_grant("pager", "*", ["admin", "manage", "read"])
    base = cluster.specs[0].metrics_url
    assert http_get(base + "/api/status") == 401
    assert http_get(base + "/api/status", "rqt_" + "C" * 43) == 401
    assert http_get(base + "/api/status", principal_token) == 401  # grants do not open it
    assert http_get(base + "/api/status", cluster.token) == 200
    assert http_get(base + "/") == 303  # to /login
    for probe in ("/metrics", "/healthz", "/readyz"):
        assert http_get(base + probe) == 200, probe
    import urllib.request

    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    assert 'queue="m.send"' in text
