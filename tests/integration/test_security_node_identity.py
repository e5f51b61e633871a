"""Node identity, unforgeable receipts and the hardened door, on real node
processes (docs/security.md): a stranger who reaches a node's gRPC port can
neither pose as a node nor forge a receipt, learns no method list and no
exception text, and cannot read a node's files."""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.security.node_identity import NodeSigner
from raft_queue.security.secret import load_secret
from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration

C = grpc.StatusCode
HEARTBEAT = "/raft_queue.v1.NodeService/Heartbeat"
OLD_HEARTBEAT = "/raft_queue.v1.AdminService/Heartbeat"  # where it was before NodeService
FORWARDED = ("raftq-forwarded", "1")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("security") / "cluster", nodes=3)
    c.start()
    try:
        c.wait_ready(60)
        yield c
    finally:
        c.stop()


def raw_call(address: str, path: str, data: bytes, metadata: Any = ()) -> tuple[Any, bytes]:
    """(status code, response bytes) of one unary call, bytes in, bytes out."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
        try:
            return C.OK, call(data, metadata=tuple(metadata), timeout=10)
        except grpc.RpcError as err:
            return err.code(), b""


def signed(secret: bytes, node_id: str, path: str, data: bytes, age_s: float = 0.0) -> Any:
    return NodeSigner(secret, node_id).metadata(path, data, time.time() - age_s)


def node_list(cluster: LocalCluster) -> list[tuple[str, str]]:
    with cluster.client() as client:
        return sorted((n.id, n.address) for n in client.cluster_status().nodes)


def metadata_leader_address(cluster: LocalCluster) -> str:
    with cluster.client() as client:
        status = client.cluster_status()
    return next(n.address for n in status.nodes if n.id == status.metadata_leader)


def heartbeat(cluster: LocalCluster, i: int, **changes: Any) -> bytes:
    """Node ``i``'s own heartbeat (as it registered), with ``changes``."""
    s = cluster.specs[i]
    fields = {
        "node": s.node_id,
        "address": s.address,
        "raft_host": "127.0.0.1",
        "raft_port_min": s.raft_port_min,
        "raft_port_max": s.raft_port_max,
        "controller": True,
        "metadata_raft_port": s.metadata_port,
        **changes,
    }
    return admin_pb2.HeartbeatRequest(**fields).SerializeToString()


def test_rogue_heartbeats_are_refused_and_the_node_list_is_unchanged(
    secured: LocalCluster,
) -> None:
    before = node_list(secured)
    leader = metadata_leader_address(secured)
    secret = load_secret(secured.secret_path)
    rogue = heartbeat(secured, 0, node="n9", address="127.0.0.1:1")
    repoint = heartbeat(secured, 2, address="127.0.0.1:2")  # n3 at another address
    honest = heartbeat(secured, 2)
    attempts = {
        "unsigned": (rogue, ()),
        "a client token only": (rogue, (("authorization", "Bearer not-a-node"),)),
        "another cluster's key": (rogue, signed(b"\x07" * 32, "n9", HEARTBEAT, rogue)),
        "stale": (repoint, signed(secret, "n3", HEARTBEAT, repoint, age_s=120)),
        "n2 as n3": (repoint, signed(secret, "n2", HEARTBEAT, repoint)),
        "signature of other bytes": (repoint, signed(secret, "n3", HEARTBEAT, honest)),
        "signed for another method": (
            repoint,
            signed(secret, "n3", "/raft_queue.v1.NodeService/NodeStatus", repoint),
        ),
    }
    for name, (data, metadata) in attempts.items():
        code, _ = raw_call(leader, HEARTBEAT, data, metadata)
        assert code == C.UNAUTHENTICATED, name
        code, _ = raw_call(leader, OLD_HEARTBEAT, data, metadata)
        assert code == C.UNIMPLEMENTED, f"{name}: AdminService still takes heartbeats"
    time.sleep(1.5)  # a registration would have been applied by now
    assert node_list(secured) == before
    # The same door opens for the real node: n2's own heartbeat, signed by n2.
    own = heartbeat(secured, 1)
    code, _ = raw_call(leader, HEARTBEAT, own, signed(secret, "n2", HEARTBEAT, own))
    assert code == C.OK
    assert node_list(secured) == before


def _leader_and_follower(cluster: LocalCluster, queue: str) -> tuple[str, str]:
    """gRPC addresses of the node leading ``queue``/0 and of another node."""
    with cluster.client() as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = client.cluster_status()
            leaders = [
                r.node
                for r in status.replicas
                if r.queue == queue and r.partition == 0 and r.role == "leader"
            ]
            if leaders:
                address = {n.id: n.address for n in status.nodes}
                other = next(a for nid, a in address.items() if nid != leaders[0])
                return address[leaders[0]], other
            time.sleep(0.2)
    raise AssertionError(f"{queue}/0 has no leader")


def test_an_unsigned_forwarded_marker_gets_no_special_treatment(secured: LocalCluster) -> None:
    with secured.client() as client:
        client.create_queue("fwd", partitions=1, replication_factor=1)
    _, elsewhere = _leader_and_follower(secured, "fwd")
    send = "/raft_queue.v1.QueueService/Send"
    data = queue_pb2.SendRequest(
        queue="fwd", entries=[queue_pb2.SendEntry(body=b"x", partition=0)]
    ).SerializeToString()
    # A client's request (with its token) to a node not leading the partition
    # is forwarded.
    token = (("authorization", f"Bearer {secured.token}"),)
    code, _ = raw_call(elsewhere, send, data, token)
    assert code == C.OK
    # The marker alone ("do not forward: I am a node") is refused ...
    code, _ = raw_call(elsewhere, send, data, (FORWARDED,))
    assert code == C.UNAUTHENTICATED
    code, _ = raw_call(elsewhere, send, data, (FORWARDED, *signed(b"\x07" * 32, "n1", send, data)))
    assert code == C.UNAUTHENTICATED
    # ... and honoured only when a node signs it (one hop: NotLeader, not forwarded).
    secret = load_secret(secured.secret_path)
    code, _ = raw_call(elsewhere, send, data, (FORWARDED, *signed(secret, "n1", send, data)))
    assert code == C.FAILED_PRECONDITION


def _forged(receipt: str, field: int, value: str) -> str:
    parts = receipt.split(":")
    parts[field] = value
    return ":".join(parts)


def test_forged_receipts_are_refused_and_change_nothing(secured: LocalCluster) -> None:
    with secured.client() as client:
        # Retention by time: acked records stay for the history reads after the acks.
        client.create_queue("rcpt", partitions=2, retention_ms=3_600_000)
        for i in range(5):  # all on partition 0: a forged partition must differ
            client.send("rcpt", b"m%d" % i, partition=0)
        mine = client.receive("rcpt", 2, visibility_ms=120_000, consumer="a")
        theirs = client.receive("rcpt", 3, visibility_ms=120_000, consumer="b")
        assert len(mine) == 2 and len(theirs) == 3
        victim = theirs[0]
        good = mine[0].receipt
        assert good.split(":")[1:4] == ["0", str(mine[0].offset), "1"]
        forged = {
            "offset": _forged(good, 2, str(victim.offset)),  # ack another consumer's lease
            "epoch": _forged(good, 3, "2"),
            "partition": _forged(good, 1, "1"),
            "uid": _forged(good, 0, str(int(good.split(":")[0]) + 1)),
            "made up": ":".join(good.split(":")[:4]) + ":" + "0" * 32,
            "no mac (as before signing)": ":".join(victim.receipt.split(":")[:4]),
        }
        every = [*mine, *theirs]
        for name, receipt in forged.items():
            for call in (
                lambda r: client.ack("rcpt", [mine[1].receipt, r]),
                lambda r: client.nack("rcpt", [r]),
                lambda r: client.change_visibility("rcpt", [r], 0),
            ):
                with pytest.raises(errors.InvalidArgument) as info:
                    call(receipt)
                assert info.value.field.startswith("receipts["), (name, receipt)
        # Nothing changed: every lease is held, by its consumer, once.
        for m in every:
            h = client.get_history("rcpt", m.partition, m.offset)
            assert (h.state, h.receive_count) == ("in_flight", 1), m.offset
        assert client.receive("rcpt", 10) == []
        # The genuine receipts still act.
        assert [r.ok for r in client.ack("rcpt", [m.receipt for m in every])] == [True] * 5
        for m in every:
            assert client.get_history("rcpt", m.partition, m.offset).state == "done"


def test_reflection_is_off_by_default(secured: LocalCluster) -> None:
    assert _reflected_services(secured.specs[0].address) is None


def test_reflection_is_served_when_configured_without_node_service(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=1, api={"reflection": True}) as c:
        c.start()
        c.wait_ready(60)
        services = _reflected_services(c.specs[0].address)
    assert services is not None
    assert "raft_queue.v1.QueueService" in services
    assert "raft_queue.v1.AdminService" in services
    assert "raft_queue.v1.NodeService" not in services


def _reflected_services(address: str) -> list[str] | None:
    """The services the node's reflection lists; None when it has none (UNIMPLEMENTED)."""
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        try:
            (answer,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        except grpc.RpcError as err:
            assert err.code() == C.UNIMPLEMENTED
            return None
    return [s.name for s in answer.list_services_response.service]


def test_health_stays_open(secured: LocalCluster) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(secured.specs[0].address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_a_nodes_files_are_its_users_only(secured: LocalCluster) -> None:
    with secured.client() as client:  # data on every node: LMDB, journals, metadata
        client.create_queue("files", partitions=3)
        client.send_batch("files", [b"x"] * 30)
    checked = 0
    for spec in secured.specs:
        for path in [spec.dir, *spec.dir.rglob("*")]:
            if path.is_symlink():
                continue
            mode = stat.S_IMODE(path.lstat().st_mode)
            if path.is_dir():
                assert mode == 0o700, f"{path}: {oct(mode)}"
            else:
                assert mode & 0o077 == 0, f"{path}: {oct(mode)}"  # 0600 (or tighter)
            checked += 1
        data = spec.dir / "data"
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert any(p.name == "data.mdb" for p in data.rglob("*"))
    assert stat.S_IMODE(secured.secret_path.stat().st_mode) == 0o600
    assert checked > 30
