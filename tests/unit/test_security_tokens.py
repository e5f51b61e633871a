"""Tokens, the admin tokens file, node tokens, the authenticator's cache,
the SDK's token lookup and the audit log (no network)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time

import pytest

from raft_queue import errors
from raft_queue.client import credentials
from raft_queue.core import metadata as meta
from raft_queue.security import tokens
from raft_queue.security.audit import AuditLog
from raft_queue.security.identity import Authenticator

SECRET = bytes(range(32))


def test_tokens_are_prefixed_random_and_stored_as_sha256():
    a, b = tokens.new_token(), tokens.new_token()
    assert a.startswith("rqt_") and a != b and len(a) >= 4 + 43
    assert tokens.token_hash(a) == __import__("hashlib").sha256(a.encode()).hexdigest()


def test_admin_token_files_are_private_and_made_once(tmp_path):
    tok, hashes = tmp_path / "d" / "admin.token", tmp_path / "d" / "admin.tokens"
    first = tokens.write_admin_token(tok, hashes)
    assert tokens.write_admin_token(tok, hashes) == first
    for p in (tok, hashes):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert tokens.load_admin_hashes(hashes) == {tokens.token_hash(first)}


def test_admin_hashes_file_readable_by_others_or_malformed_is_refused(tmp_path):
    path = tmp_path / "admin.tokens"
    path.write_text("# admins\n" + "c" * 64 + "\n\n")
    path.chmod(0o644)
    with pytest.raises(errors.ConfigError, match="chmod 600"):
        tokens.load_admin_hashes(path)
    path.chmod(0o600)
    assert tokens.load_admin_hashes(path) == {"c" * 64}
    path.write_text("rqt_plaintext-token\n")
    with pytest.raises(errors.ConfigError, match="SHA-256"):
        tokens.load_admin_hashes(path)


class View:
    """A metadata view that a test can change, as the node's view is replaced."""

    def __init__(self) -> None:
        self.m = meta.MetadataMachine()

    def __call__(self) -> meta.MetadataMachine:
        return self.m


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_authenticator_maps_tokens_to_identities_and_forgets_rotated_ones():
    view, admin = View(), tokens.new_token()
    auth = Authenticator(view, frozenset({tokens.token_hash(admin)}), SECRET)
    alice = tokens.new_token()
    view.m.apply(meta.CreatePrincipal("alice", tokens.token_hash(alice)))
    view.m.apply(meta.GrantAccess("alice", "orders", ("send",)))
    assert auth.authenticate(bearer(admin)).superuser
    ident = auth.authenticate(bearer(alice))
    assert ident.name == "alice" and ident.allows("send", "orders")
    assert auth.authenticate(bearer(alice)) is ident  # cached
    node = auth.authenticate(None, node_id="n1")  # a signed call, no token
    assert node.name == "node:n1" and node.allows("node", "")
    assert auth.authenticate(bearer(alice), node_id="n1") is ident  # a token wins
    assert not ident.allows("node", "") and not auth.authenticate(bearer(admin)).allows("node", "")
    view.m.apply(meta.RotatePrincipal("alice", tokens.token_hash(tokens.new_token())))
    with pytest.raises(errors.Unauthenticated):
        auth.authenticate(bearer(alice))


@pytest.mark.parametrize("value", [None, "", "Bearer ", "Basic abc", "Bearer rqt_nobody", "rqt_x"])
def test_missing_or_bad_credentials_are_unauthenticated(value):
    with pytest.raises(errors.Unauthenticated):
        Authenticator(View(), frozenset(), SECRET).authenticate(value)


def test_insecure_serves_callers_without_a_token_but_still_checks_given_ones():
    auth = Authenticator(View(), frozenset(), None, insecure=True)
    assert auth.authenticate(None).name == "anonymous"
    assert auth.authenticate(None).allows("node", "")  # nodes without a secret call each other
    with pytest.raises(errors.Unauthenticated):
        auth.authenticate(bearer("rqt_wrong"))


def test_a_certified_principal_is_vouched_for_only_by_a_signed_call():
    """[tls] client_cert_principals: a node forwards a caller its door admitted
    by certificate as ``Certificate <name>``; only a node-signed call may."""
    view = View()
    view.m.apply(meta.CreatePrincipal("carl", tokens.token_hash(tokens.new_token())))
    view.m.apply(meta.GrantAccess("carl", "orders", ("send",)))
    auth = Authenticator(view, frozenset(), SECRET)
    ident = auth.authenticate("Certificate carl", node_id="n2")
    assert ident.name == "carl" and ident.allows("send", "orders") and not ident.superuser
    assert not ident.allows("node", "")
    assert auth.authenticate_certificate("principal", "carl").name == "carl"
    with pytest.raises(errors.Unauthenticated):  # from a client: no credential at all
        auth.authenticate("Certificate carl")
    with pytest.raises(errors.Unauthenticated, match="'nobody', which does not exist"):
        auth.authenticate("Certificate nobody", node_id="n2")
    with pytest.raises(errors.Unauthenticated, match="names node 'n1'"):
        auth.authenticate_certificate("node", "n1")
    with pytest.raises(errors.Unauthenticated):  # the built-in admin is never a certificate
        auth.authenticate_certificate("principal", "admin")


def test_client_cert_principals_needs_require_client_cert():
    from raft_queue.config import TlsConfig

    with pytest.raises(errors.ConfigError, match="client_cert_principals"):
        TlsConfig("c.pem", "k.pem", "ca.pem", client_cert_principals=True)
    assert TlsConfig("c.pem", "k.pem", "ca.pem", True, True).client_cert_principals
    assert not TlsConfig().client_cert_principals


def test_permission_denied_names_operation_and_queue():
    view, alice = View(), tokens.new_token()
    view.m.apply(meta.CreatePrincipal("alice", tokens.token_hash(alice)))
    ident = Authenticator(view).authenticate(bearer(alice))
    with pytest.raises(errors.PermissionDenied, match="may not send on queue 'orders'"):
        ident.check("send", "orders")


# ---- the SDK's token lookup ----------------------------------------------------------


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    for name in (credentials.ENV_TOKEN, credentials.ENV_PROFILE):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(credentials.ENV_FILE, str(tmp_path / "credentials"))
    return tmp_path / "credentials"


def test_token_argument_then_environment_then_profile_file(no_env, monkeypatch):
    assert credentials.resolve_token() is None
    no_env.write_text('[default]\ntoken = "rqt_file"\n[ci]\ntoken = "rqt_ci"\n')
    assert credentials.resolve_token() == "rqt_file"
    monkeypatch.setenv(credentials.ENV_PROFILE, "ci")
    assert credentials.resolve_token() == "rqt_ci"
    monkeypatch.setenv(credentials.ENV_TOKEN, "rqt_env")
    assert credentials.resolve_token() == "rqt_env"
    assert credentials.resolve_token("rqt_arg") == "rqt_arg"
    assert credentials.resolve_token("") is None  # explicitly none
    monkeypatch.delenv(credentials.ENV_TOKEN)
    monkeypatch.setenv(credentials.ENV_PROFILE, "nope")
    with pytest.raises(errors.InvalidArgument, match=r"\[nope\]"):
        credentials.resolve_token()


def test_call_metadata_is_a_bearer_header():
    assert credentials.call_metadata("rqt_x") == (("authorization", "Bearer rqt_x"),)
    assert credentials.call_metadata(None) == ()


# ---- the audit log ------------------------------------------------------------------


def test_audit_log_writes_json_lines_to_a_private_file(tmp_path):
    log = AuditLog(tmp_path / "data" / "audit.log")
    log.record("alice", "manage", "/raft_queue.v1.QueueService/DeleteQueue", "q", "ok", "ipv4:x")
    log.record("", "send", "/raft_queue.v1.QueueService/Send", "q", "unauthenticated", "ipv4:y")
    log.close()
    path = tmp_path / "data" / "audit.log"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    got = [(x["principal"], x["result"]) for x in lines]
    assert got == [("alice", "ok"), ("", "unauthenticated")]
    fields = {"time", "principal", "operation", "method", "queue", "result", "peer", "target"}
    assert set(lines[0]) == fields
    assert lines[0]["time"].startswith(time.strftime("%Y-", time.gmtime()))
    assert os.access(path, os.R_OK)


def test_the_status_page_admits_only_superuser_tokens_and_is_open_only_when_insecure():
    from raft_queue.server.api.auth import AuthInterceptor

    view, admin = View(), tokens.new_token()
    alice = tokens.new_token()
    view.m.apply(meta.CreatePrincipal("alice", tokens.token_hash(alice)))
    view.m.apply(meta.GrantAccess("alice", "*", ("send", "read")))
    page = AuthInterceptor(Authenticator(view, frozenset({tokens.token_hash(admin)}), SECRET))
    authorize = page.page_authorizer()
    assert authorize is not None
    assert authorize(admin)
    assert not authorize(alice)  # a principal without admin sees no cluster page
    assert not authorize("rqt_made_up") and not authorize("")
    open_door = AuthInterceptor(Authenticator(View(), frozenset(), None, insecure=True))
    assert open_door.page_authorizer() is None


def test_audit_events_also_go_through_the_node_log(tmp_path, caplog):
    import logging

    from raft_queue.observability.logs import AUDIT
    from raft_queue.security.audit import AuditLog

    audit = AuditLog(tmp_path / "audit.log")
    with caplog.at_level(logging.INFO, logger=AUDIT):
        audit.record("mallory", "manage", "/x/DeleteQueue", "orders", "denied", "ipv4:1.2.3.4")
    audit.close()
    events = [r.audit for r in caplog.records if r.name == AUDIT]
    assert events and events[0]["principal"] == "mallory" and events[0]["result"] == "denied"
    assert '"principal": "mallory"' in (tmp_path / "audit.log").read_text()


class Context:
    """A grpc.aio context with a bearer token; ``abort`` raises as grpc does."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.aborted: tuple[object, str] | None = None

    def invocation_metadata(self):
        return (("authorization", bearer(self.token)),)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code, details, trailers=()):
        self.aborted = (code, details)
        raise RuntimeError("aborted")


class Barrier:
    """MetadataBarrier.vouch: applies ``then`` to the view (caught up), or raises."""

    def __init__(self, then=None, error: BaseException | None = None) -> None:
        self.then, self.error, self.calls = then, error, 0

    async def vouch(self) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error
        if self.then is not None:
            self.then()


def test_the_token_door_refuses_only_a_view_it_vouched_for():
    """A token the view lacks (written on the leader, or known before a
    restart the view has not replayed yet): admitted once the barrier caught
    up; UNAVAILABLE (retried) when it cannot vouch, never UNAUTHENTICATED."""
    import asyncio

    import grpc

    from raft_queue.server.api.auth import AuthInterceptor

    view, alice = View(), tokens.new_token()
    door = AuthInterceptor(Authenticator(view, frozenset(), SECRET))

    def admit(barrier: Barrier) -> Context:
        door.barrier = barrier  # type: ignore[assignment]
        ctx = Context(alice)
        with contextlib.suppress(RuntimeError):
            asyncio.run(door._admit("/raft_queue.v1.QueueService/Send", "send", "q", ctx))
        return ctx

    behind = admit(Barrier(error=errors.Unavailable("no metadata leader is known yet")))
    assert behind.aborted is not None and behind.aborted[0] == grpc.StatusCode.UNAVAILABLE
    caught_up = Barrier(then=lambda: (
        view.m.apply(meta.CreatePrincipal("alice", tokens.token_hash(alice))),
        view.m.apply(meta.GrantAccess("alice", "q", ("send",))),
    ))  # fmt: skip
    assert admit(caught_up).aborted is None and caught_up.calls == 1
    stranger = Context(tokens.new_token())
    door.barrier = Barrier()  # type: ignore[assignment]
    with pytest.raises(RuntimeError):
        asyncio.run(door._admit("/raft_queue.v1.QueueService/Send", "send", "q", stranger))
    assert stranger.aborted is not None
    assert stranger.aborted[0] == grpc.StatusCode.UNAUTHENTICATED  # vouched for: refused
