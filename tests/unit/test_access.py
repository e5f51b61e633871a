"""Grants, patterns and the metadata machine's principals (pure)."""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.core import access
from raft_queue.core import metadata as meta
from raft_queue.core.access import Grant

H1, H2 = "a" * 64, "b" * 64


@pytest.mark.parametrize(
    ("pattern", "queue", "expected"),
    [
        ("orders", "orders", True),
        ("orders", "orders.dlq", False),
        ("orders", "order", False),
        ("orders.*", "orders.dlq", True),
        ("orders.*", "orders", False),
        ("orders*", "orders", True),
        ("orders*", "ordersX", True),
        ("orders*", "order", False),
        ("*", "anything", True),
        ("*", "", True),
        ("orders*", "", False),
    ],
)
def test_pattern_is_exact_or_a_prefix_before_the_star(pattern, queue, expected):
    assert access.matches(pattern, queue) is expected


@pytest.mark.parametrize("bad", ["", "or*ders", "**", ".x", "a b", "x" * 81, "*x"])
def test_bad_pattern_is_invalid_argument_naming_pattern(bad):
    with pytest.raises(errors.InvalidArgument) as info:
        access.check_pattern(bad)
    assert info.value.field == "pattern"


def test_operations_are_checked_sorted_and_deduplicated():
    assert access.check_operations(["send", "read", "send"]) == ("read", "send")
    for bad in (["sned"], [], ["node"], ["describe"]):
        with pytest.raises(errors.InvalidArgument):
            access.check_operations(bad)


def test_grants_allow_only_their_operations_on_their_queues():
    grants = (Grant("orders.*", ("receive", "send")), Grant("audit", ("read",)))
    assert access.allows(grants, "send", "orders.eu")
    assert not access.allows(grants, "read", "orders.eu")
    assert not access.allows(grants, "send", "audit")
    assert access.allows(grants, "read", "audit")
    assert not access.allows(grants, "manage", "orders.eu")
    assert not access.allows(grants, "admin", "")


def test_describe_needs_any_grant_on_the_queue_and_admin_on_star_is_everything_but_node():
    grants = (Grant("orders", ("send",)),)
    assert access.allows(grants, access.DESCRIBE, "orders")
    assert not access.allows(grants, access.DESCRIBE, "other")
    root = (Grant("*", ("admin",)),)
    assert all(access.allows(root, op, "q") for op in access.OPERATIONS)
    assert not access.allows(root, access.NODE, "")
    assert not access.allows((Grant("q", ("admin",)),), "admin", "")  # admin has no queue


def test_every_rpc_has_an_operation_and_unknown_ones_need_admin():
    from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2

    for module, name in ((queue_pb2, "QueueService"), (admin_pb2, "AdminService")):
        service = module.DESCRIPTOR.services_by_name[name]
        for m in service.methods:
            op, field = access.rpc_operation(f"/{service.full_name}/{m.name}")
            assert op in (*access.OPERATIONS, access.NODE, access.DESCRIBE)
            if field:
                assert field in m.input_type.fields_by_name, (m.name, field)
    assert access.rpc_operation("/raft_queue.v1.QueueService/Send") == ("send", "queue")
    # Encryption at rest: a queue's data key is rotated by whoever manages the
    # queue; rewrapping every key under a new master key is admin.
    rotate = access.rpc_operation("/raft_queue.v1.AdminService/RotateQueueKey")
    assert rotate == ("manage", "queue")
    assert access.rpc_operation("/raft_queue.v1.AdminService/RotateMasterKey") == ("admin", "")
    # Node-to-node calls are NodeService's (the node-identity door), not a grant.
    assert access.rpc_operation("/raft_queue.v1.AdminService/Heartbeat") == ("admin", "")
    assert access.rpc_operation("/raft_queue.v1.AdminService/Whatever") == ("admin", "")


def test_grant_add_merges_and_remove_takes_back_some_or_all():
    g = access.add_grant((), "b", ("send",))
    g = access.add_grant(g, "a", ("read",))
    g = access.add_grant(g, "b", ("receive",))
    assert g == (Grant("a", ("read",)), Grant("b", ("receive", "send")))
    fewer = (Grant("a", ("read",)), Grant("b", ("receive",)))
    assert access.remove_grant(g, "b", ("send",)) == fewer
    assert access.remove_grant(g, "b", ()) == (Grant("a", ("read",)),)
    with pytest.raises(errors.NotFound):
        access.remove_grant(g, "zzz", ())


# ---- the metadata machine ------------------------------------------------------------


def machine_with_alice() -> meta.MetadataMachine:
    m = meta.MetadataMachine()
    m.apply(meta.CreatePrincipal("alice", H1, now_ms=5))
    return m


def test_principal_lifecycle_bumps_the_version_and_keeps_only_the_hash():
    m = machine_with_alice()
    v = m.version
    assert m.principal("alice") == meta.Principal("alice", H1, 5, 5, ())
    m.apply(meta.GrantAccess("alice", "orders.*", ("send",)))
    m.apply(meta.RotatePrincipal("alice", H2, now_ms=9))
    p = m.principal("alice")
    assert (p.token_hash, p.rotated_ms, p.grants) == (H2, 9, (Grant("orders.*", ("send",)),))
    assert m.version == v + 2
    m.apply(meta.DeletePrincipal("alice"))
    assert m.principal("alice") is None and m.principals() == []


def test_create_is_idempotent_with_the_same_hash_and_refused_otherwise():
    m = machine_with_alice()
    v = m.version
    m.apply(meta.CreatePrincipal("alice", H1, now_ms=7))
    assert m.version == v
    with pytest.raises(errors.AlreadyExists):
        m.apply(meta.CreatePrincipal("alice", H2))
    with pytest.raises(errors.AlreadyExists):  # two principals never share a token
        m.apply(meta.CreatePrincipal("bob", H1))


@pytest.mark.parametrize(
    ("cmd", "error"),
    [
        (meta.CreatePrincipal("admin", H2), errors.InvalidArgument),
        (meta.CreatePrincipal("anonymous", H2), errors.InvalidArgument),
        (meta.CreatePrincipal("node:n1", H2), errors.InvalidArgument),
        (meta.CreatePrincipal("carol", "not-a-hash"), errors.InvalidArgument),
        (meta.RotatePrincipal("ghost", H2), errors.NotFound),
        (meta.DeletePrincipal("ghost"), errors.NotFound),
        (meta.GrantAccess("ghost", "q", ("send",)), errors.NotFound),
        (meta.GrantAccess("alice", "q", ("fly",)), errors.InvalidArgument),
        (meta.GrantAccess("alice", "bad pattern", ("send",)), errors.InvalidArgument),
        (meta.RevokeAccess("alice", "q", ()), errors.NotFound),
    ],
)
def test_rejected_commands_change_nothing(cmd, error):
    m = machine_with_alice()
    before = m.to_bytes()
    with pytest.raises(error):
        m.apply(cmd)
    assert m.to_bytes() == before


def test_principals_survive_the_log_codec_and_the_snapshot():
    m = machine_with_alice()
    cmd = meta.GrantAccess("alice", "orders.*", ("send", "read"))
    assert meta.decode_meta(meta.encode_meta(cmd)) == cmd
    m.apply(cmd)
    copy = meta.MetadataMachine.from_bytes(m.to_bytes())
    assert copy.principals() == m.principals() and copy.to_bytes() == m.to_bytes()
    assert b"rqt_" not in m.to_bytes()


def test_a_snapshot_from_before_principals_loads_with_none():
    m = meta.MetadataMachine()
    image = m.to_bytes().replace(b',"principals":[]', b"")
    assert b"principals" not in image
    assert meta.MetadataMachine.from_bytes(image).principals() == []
