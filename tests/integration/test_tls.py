"""TLS on real node processes: SDK, asyncio SDK, CLI and forwarding over TLS;
plaintext, wrong-CA and (with require_client_cert) certificate-less clients refused;
``raftq dev up --tls`` end to end."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2, queue_pb2_grpc
from raft_queue.client import Client
from raft_queue.client.aio import AsyncClient
from raft_queue.errors import PermissionDenied, QueueError, Unauthenticated
from raft_queue.security.tls import write_dev_tls
from raft_queue.testing.cluster import LocalCluster, free_block
from tests.integration.test_delivery import module_cluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "tls", tls=True)


@pytest.fixture(scope="module")
def mtls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    options = {"require_client_cert": True}
    yield from module_cluster(tmp_path_factory, "mtls", tls=True, tls_options=options)


def _queue(c: LocalCluster, name: str) -> tuple[str, str]:
    """Create a 1-partition queue replicated on every node: (leader, a non-leader) addresses."""
    with c.client() as client:
        client.create_queue(name, partitions=1, replication_factor=3)
        deadline = time.monotonic() + 30
        while not (leader := client.partitions(name)[0].leader_address):
            assert time.monotonic() < deadline, "no leader"
            time.sleep(0.1)
    other = next(s.address for s in c.specs if s.address != leader)
    return leader, other


def _latest(c: LocalCluster, queue: str) -> int:
    with c.client() as client:
        return client.partitions(queue)[0].latest_offset


def _channel(c: LocalCluster, address: str) -> grpc.Channel:
    opts = c.client_options()
    read = lambda key: Path(opts[key]).read_bytes() if opts.get(key) else None  # noqa: E731
    creds = grpc.ssl_channel_credentials(read("ca_file"), read("key_file"), read("cert_file"))
    return grpc.secure_channel(address, creds)


def _forwarded_send(c: LocalCluster, address: str, queue: str, body: bytes) -> None:
    """Send straight to ``address`` (a non-leader), which must forward it to the leader."""
    with _channel(c, address) as ch:
        entry = queue_pb2.SendEntry(body=body, partition=0)
        req = queue_pb2.SendRequest(queue=queue, entries=[entry], request_id=os.urandom(16))
        auth = (("authorization", f"Bearer {c.token}"),)
        queue_pb2_grpc.QueueServiceStub(ch).Send(req, timeout=10, metadata=auth)


def test_sdk_sends_receives_and_reads_over_tls(tls_cluster: LocalCluster) -> None:
    _queue(tls_cluster, "sdk")
    with tls_cluster.client() as client:
        sent = client.send("sdk", b"over tls")
        got = client.receive("sdk", max_messages=1, wait_ms=5000)
        assert [m.body for m in got] == [b"over tls"]
        # Read before the ack: an acked record may be compacted away at once.
        assert [m.body for m in client.read("sdk", 0, sent.offset).messages] == [b"over tls"]
        assert [r.ok for r in client.ack("sdk", got)] == [True]


def test_asyncio_client_over_tls(tls_cluster: LocalCluster) -> None:
    _queue(tls_cluster, "aio")

    async def run() -> list[bytes]:
        async with AsyncClient(
            tls_cluster.bootstrap, token=tls_cluster.token, **tls_cluster.client_options()
        ) as c:
            await c.send("aio", b"async tls")
            return [m.body for m in await c.receive("aio", max_messages=1, wait_ms=5000)]

    assert asyncio.run(run()) == [b"async tls"]


def test_a_non_leader_forwards_over_tls(tls_cluster: LocalCluster) -> None:
    leader, other = _queue(tls_cluster, "fwd")
    _forwarded_send(tls_cluster, other, "fwd", b"via a follower")
    opts = {"token": tls_cluster.token, **tls_cluster.client_options()}
    with Client(other, **opts) as client:  # receive forwarded too
        got = client.receive("fwd", max_messages=1, wait_ms=5000)
    assert [m.body for m in got] == [b"via a follower"]


def _cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raft_queue.cli.main", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_with_tls_env_sends_receives_and_reads(
    tls_cluster: LocalCluster,
) -> None:
    _, other = _queue(tls_cluster, "cli")
    env = {"RAFTQ_SERVER": other, "RAFTQ_TLS": "1", "RAFTQ_TOKEN": tls_cluster.token}
    env["RAFTQ_CA_FILE"] = tls_cluster.client_options()["ca_file"]
    sent = _cli(env, "send", "cli", "from-the-cli")
    assert sent.returncode == 0, sent.stderr
    read = _cli(env, "read", "cli", "--partition", "0", "--offset", "0", "--json")
    assert read.returncode == 0 and "from-the-cli" in read.stdout, read.stderr
    got = _cli(env, "receive", "cli", "--wait", "5", "--json")
    assert got.returncode == 0 and "from-the-cli" in got.stdout, got.stderr
    plain = _cli(
        {"RAFTQ_SERVER": other, "RAFTQ_TOKEN": tls_cluster.token},
        "--timeout",
        "3",
        "send",
        "cli",
        "plain",
    )
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert _latest(tls_cluster, "cli") == 1


def test_a_plaintext_client_is_refused_and_writes_nothing(tls_cluster: LocalCluster) -> None:
    leader, _ = _queue(tls_cluster, "plain")
    # With the token: TLS, not authentication, is what refuses it.
    token = tls_cluster.token
    with Client(leader, timeout_s=3, retries=0, token=token) as client, pytest.raises(QueueError):
        client.send("plain", b"in the clear")
    with grpc.insecure_channel(leader) as ch, pytest.raises(grpc.RpcError) as err:
        entry = queue_pb2.SendEntry(body=b"raw", partition=0)
        queue_pb2_grpc.QueueServiceStub(ch).Send(
            queue_pb2.SendRequest(queue="plain", entries=[entry]), timeout=3
        )
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _latest(tls_cluster, "plain") == 0


def test_a_client_trusting_another_ca_is_refused(tls_cluster: LocalCluster, tmp_path: Path) -> None:
    leader, _ = _queue(tls_cluster, "wrongca")
    other = write_dev_tls(tmp_path / "other", [])
    opts = {"tls": True, "ca_file": str(other.ca_file), "token": tls_cluster.token}
    with Client(leader, timeout_s=3, retries=0, **opts) as client, pytest.raises(QueueError):
        client.send("wrongca", b"unchecked")
    assert _latest(tls_cluster, "wrongca") == 0


def test_mtls_refuses_a_client_without_a_certificate(mtls_cluster: LocalCluster) -> None:
    leader, _ = _queue(mtls_cluster, "nocert")
    ca = mtls_cluster.client_options()["ca_file"]
    opts = {"tls": True, "ca_file": ca, "token": mtls_cluster.token}
    with Client(leader, timeout_s=3, retries=0, **opts) as client, pytest.raises(QueueError):
        client.send("nocert", b"anonymous")
    assert _latest(mtls_cluster, "nocert") == 0


def test_mtls_client_certificate_works_and_nodes_forward_with_theirs(
    mtls_cluster: LocalCluster, tmp_path: Path
) -> None:
    _, other = _queue(mtls_cluster, "withcert")
    _forwarded_send(mtls_cluster, other, "withcert", b"mutual")
    with mtls_cluster.client() as client:
        got = client.receive("withcert", max_messages=1, wait_ms=5000)
    assert [m.body for m in got] == [b"mutual"]
    # A certificate from another CA is no better than none.
    stranger = write_dev_tls(tmp_path / "stranger", [], ("admin",))
    opts = {**mtls_cluster.client_options(), "token": mtls_cluster.token,
            "cert_file": str(stranger.cert_file("admin")),
            "key_file": str(stranger.key_file("admin"))}  # fmt: skip
    with Client(other, timeout_s=3, retries=0, **opts) as client, pytest.raises(QueueError):
        client.send("withcert", b"forged")
    assert _latest(mtls_cluster, "withcert") == 1


def test_dev_up_tls_end_to_end(tmp_path: Path) -> None:
    base = free_block(400)
    proc = subprocess.Popen(
        [sys.executable, "-m", "raft_queue.cli.main", "dev", "up", "--tls", "--nodes", "3",
         "--data-dir", str(tmp_path / "dev"), "--base-port", str(base)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C stops the cluster" in line or len(lines) > 200:
                break
        out = "".join(lines)
        exports = dict(re.findall(r"export (RAFTQ_\w+)=(\S+)", out))
        assert set(exports) == {"RAFTQ_SERVER", "RAFTQ_TOKEN", "RAFTQ_TLS", "RAFTQ_CA_FILE"}, out
        assert exports["RAFTQ_CA_FILE"] == str(tmp_path / "dev" / "tls" / "ca.pem")
        status = _cli(exports, "cluster", "status")
        assert status.returncode == 0, status.stderr
        assert all(f"n{i}" in status.stdout for i in (1, 2, 3)), status.stdout
        create = _cli(exports, "queue", "create", "devq", "--partitions", "2")
        assert create.returncode == 0, create.stderr
        assert _cli(exports, "send", "devq", "hello-tls").returncode == 0
        got = _cli(exports, "receive", "devq", "--wait", "5", "--json")
        assert got.returncode == 0 and "hello-tls" in got.stdout, got.stderr
        no_tls = {**exports, "RAFTQ_TLS": "0"}
        refused = _cli(no_tls, "--timeout", "3", "cluster", "status")
        assert refused.returncode == 1, refused.stdout
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_peer_identity_names_the_verified_client_certificate(tmp_path: Path) -> None:
    """A real mTLS handshake: the server learns which principal or node is calling."""
    from concurrent import futures

    from raft_queue.server.tls import peer_identity
    from raft_queue.testing.cluster import free_port

    dev = write_dev_tls(tmp_path / "tls", ["n1", "n2"], ("alice",))
    read = lambda name, ext: (dev.dir / f"{name}.{ext}").read_bytes()  # noqa: E731

    def who(request: bytes, context: grpc.ServicerContext) -> bytes:
        ident = peer_identity(context)
        return f"{ident.kind}:{ident.name}".encode() if ident else b"nobody"

    server = grpc.server(futures.ThreadPoolExecutor(2))
    handler = grpc.unary_unary_rpc_method_handler(who)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.T", {"Who": handler})])
    port = free_port()
    creds = grpc.ssl_server_credentials(
        [(read("n1", "key"), read("n1", "pem"))], read("ca", "pem"), require_client_auth=True
    )
    server.add_secure_port(f"127.0.0.1:{port}", creds)
    server.start()
    try:
        for name, expect in (("alice", b"principal:alice"), ("n2", b"node:n2")):
            client = grpc.ssl_channel_credentials(
                read("ca", "pem"), read(name, "key"), read(name, "pem")
            )
            with grpc.secure_channel(f"127.0.0.1:{port}", client) as ch:
                assert ch.unary_unary("/t.T/Who")(b"", timeout=5) == expect
    finally:
        server.stop(0)


# ---- client certificates as credentials ([tls] client_cert_principals) ------------------


@pytest.fixture(scope="module")
def certp_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    options = {"require_client_cert": True, "client_cert_principals": True}
    yield from module_cluster(tmp_path_factory, "certp", tls=True, tls_options=options)


def _cert_client(c: LocalCluster, address: str, principal: str, token: str = "") -> Client:
    """A client presenting ``principal``'s certificate (same CA as the nodes'), and
    no token unless given."""
    dev = write_dev_tls(c.tls_dir, [], (principal,))  # the CA and node files are kept
    opts = {"tls": True, "ca_file": str(dev.ca_file), "cert_file": str(dev.cert_file(principal)),
            "key_file": str(dev.key_file(principal))}  # fmt: skip
    return Client(address, timeout_s=5, retries=0, token=token, **opts)


def _granted(c: LocalCluster, principal: str, queue: str, ops: list[str]) -> str:
    """A principal (its token) granted ``ops`` on ``queue``; (leader, other) as _queue."""
    with c.client() as admin:
        token = str(admin.create_principal(principal).token)
        admin.add_grant(principal, queue, ops)
    time.sleep(1.0)  # every node's view applies it within milliseconds; be generous
    return token


def test_a_client_certificate_alone_authenticates_its_principal(
    certp_cluster: LocalCluster,
) -> None:
    leader, other = _queue(certp_cluster, "bycert")
    _granted(certp_cluster, "carl", "bycert", ["send", "receive"])
    with _cert_client(certp_cluster, leader, "carl") as carl:
        assert carl.send("bycert", b"from-leader", partition=0).offset == 0
    with _cert_client(certp_cluster, other, "carl") as carl:  # forwarded: the node vouches
        carl.send("bycert", b"forwarded", partition=0)
        got = carl.receive("bycert", max_messages=2, wait_ms=5000)
    assert sorted(m.body for m in got) == [b"forwarded", b"from-leader"]
    # Its grants apply: nothing on a queue it holds no grant on.
    _queue(certp_cluster, "notcarls")
    with _cert_client(certp_cluster, leader, "carl") as carl, pytest.raises(PermissionDenied):
        carl.send("notcarls", b"no grant")
    assert _latest(certp_cluster, "notcarls") == 0


def test_a_certificate_for_an_unknown_principal_or_a_node_is_refused(
    certp_cluster: LocalCluster,
) -> None:
    leader, _ = _queue(certp_cluster, "strangers")
    with (
        _cert_client(certp_cluster, leader, "nobody") as nobody,
        pytest.raises(Unauthenticated) as info,
    ):
        nobody.send("strangers", b"who?")
    assert "principal 'nobody', which does not exist" in str(info.value)
    # The built-in admin is a token, never a certificate.
    with _cert_client(certp_cluster, leader, "admin") as admin, pytest.raises(Unauthenticated):
        admin.send("strangers", b"root?")
    with _cert_client(certp_cluster, leader, "n1") as node, pytest.raises(Unauthenticated):
        node.send("strangers", b"a node's cert")
    assert _latest(certp_cluster, "strangers") == 0


def test_a_token_still_wins_over_the_certificate(certp_cluster: LocalCluster) -> None:
    leader, _ = _queue(certp_cluster, "tokenwins")
    token = _granted(certp_cluster, "dora", "tokenwins", ["send"])
    _granted(certp_cluster, "eve", "other-queue", ["send"])
    # eve's certificate with dora's token: dora, who may send here.
    with _cert_client(certp_cluster, leader, "eve", token=token) as c:
        c.send("tokenwins", b"as dora")
    # dora's certificate with a bad token: the token decides, and it is bad.
    bad = "rqt_" + "D" * 43
    with (
        _cert_client(certp_cluster, leader, "dora", token=bad) as c,
        pytest.raises(Unauthenticated),
    ):
        c.send("tokenwins", b"bad token")
    assert _latest(certp_cluster, "tokenwins") == 1


def test_without_the_switch_a_certificate_alone_is_refused(mtls_cluster: LocalCluster) -> None:
    leader, _ = _queue(mtls_cluster, "switchoff")
    _granted(mtls_cluster, "fay", "switchoff", ["send"])
    with _cert_client(mtls_cluster, leader, "fay") as fay, pytest.raises(Unauthenticated):
        fay.send("switchoff", b"cert only")
    assert _latest(mtls_cluster, "switchoff") == 0


def test_a_client_cannot_claim_a_certified_principal_in_the_header(
    certp_cluster: LocalCluster,
) -> None:
    """``Certificate <name>`` is what a node forwards; from a client it is no credential."""
    leader, _ = _queue(certp_cluster, "claims")
    _granted(certp_cluster, "gus", "claims", ["send"])
    with _channel(certp_cluster, leader) as ch, pytest.raises(grpc.RpcError) as info:
        req = queue_pb2.SendRequest(queue="claims", entries=[queue_pb2.SendEntry(body=b"x")])
        auth = (("authorization", "Certificate gus"),)
        queue_pb2_grpc.QueueServiceStub(ch).Send(req, timeout=10, metadata=auth)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _latest(certp_cluster, "claims") == 0


def test_cli_sends_with_a_certificate_and_an_empty_token(certp_cluster: LocalCluster) -> None:
    """docs/security.md's example: ``raftq --tls --ca --cert --key --token '' send``."""
    from click.testing import CliRunner

    from raft_queue.cli.main import main

    leader, _ = _queue(certp_cluster, "clicert")
    _granted(certp_cluster, "hana", "clicert", ["send"])
    dev = write_dev_tls(certp_cluster.tls_dir, [], ("hana",))
    cert, key = str(dev.cert_file("hana")), str(dev.key_file("hana"))
    args = ["--server", leader, "--tls", "--ca", str(dev.ca_file), "--cert", cert,
            "--key", key, "--token", ""]  # fmt: skip
    result = CliRunner().invoke(main, [*args, "send", "clicert", "by-cli"])
    assert result.exit_code == 0, result.output
    assert _latest(certp_cluster, "clicert") == 1
