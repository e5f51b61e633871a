"""The manager's config file and its sealing of cluster tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from raft_queue import errors
from raft_queue.manager import config
from raft_queue.manager.sealing import TokenSeal

EXAMPLE = Path(__file__).parents[2] / "configs" / "manager-3node.toml"


def test_the_example_file_describes_three_managers_of_one_group() -> None:
    loaded = [config.load(EXAMPLE, m) for m in ("m1", "m2", "m3")]
    assert [c.address for c in loaded] == ["127.0.0.1:7500", "127.0.0.1:7502", "127.0.0.1:7504"]
    assert all(len(c.peer_table("voters")) == 3 for c in loaded)
    assert loaded[0].health.down_after_s == 3.0


def test_unknown_keys_and_bad_voters_are_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text('manager_id = "m1"\ndata_dir = "d"\nvoter = []\n')
    with pytest.raises(errors.ConfigError) as exc:
        config.load(bad)
    assert exc.value.field == "voter"
    bad.write_text('manager_id = "m1"\ndata_dir = "d"\nvoters = ["m1:7500"]\n')
    with pytest.raises(errors.ConfigError) as exc:
        config.load(bad)
    assert exc.value.field == "voters"


def test_cluster_tokens_are_sealed_to_the_secret_and_the_cluster() -> None:
    seal = TokenSeal(b"s" * 32)
    sealed = seal.seal("rqt_secret", "c1")
    assert "rqt_secret" not in sealed
    assert seal.open(sealed, "c1") == "rqt_secret"
    with pytest.raises(errors.FailedPrecondition):
        seal.open(sealed, "c2")  # bound to its cluster's name
    with pytest.raises(errors.FailedPrecondition):
        TokenSeal(b"t" * 32).open(sealed, "c1")
    assert TokenSeal(None).open(TokenSeal(None).seal("tok", "c1"), "c1") == "tok"


def test_tls_is_off_by_default_and_its_keys_are_checked_by_name(tmp_path: Path) -> None:
    from raft_queue.manager.health import _CLUSTER_TLS, dial_clusters_with

    assert not config.load(EXAMPLE, "m1").tls.enabled
    bad = tmp_path / "m.toml"
    bad.write_text('manager_id = "m1"\ndata_dir = "d"\n[tls]\ncert_file = "m1.pem"\n')
    with pytest.raises(errors.ConfigError) as exc:
        config.load(bad)
    assert exc.value.field == "tls.key_file"
    on = (
        'manager_id = "m1"\ndata_dir = "d"\n[tls]\ncert_file = "a"\nkey_file = "b"\nca_file = "c"\n'
    )
    bad.write_text(on)
    dial_clusters_with(config.load(bad).tls)  # clusters dialled over TLS, checked by the CA
    assert _CLUSTER_TLS == {"tls": True, "ca_file": "c"}
    bad.write_text(on + "require_client_cert = true\n")
    dial_clusters_with(config.load(bad).tls)  # and the manager presents its certificate
    assert _CLUSTER_TLS["cert_file"] == "a" and _CLUSTER_TLS["key_file"] == "b"
    dial_clusters_with(config.load(EXAMPLE, "m1").tls)
    assert _CLUSTER_TLS == {}


def test_a_clusters_principal_reads_the_manager_with_its_grants_and_is_never_its_admin() -> None:
    from types import SimpleNamespace

    from raft_queue.manager.callers import _identity

    grant = SimpleNamespace(pattern="orders.*", operations=["send"])
    alice = _identity("c1", SimpleNamespace(principal="alice", superuser=False, grants=[grant]))
    assert alice.name == "alice@c1" and not alice.superuser
    assert alice.sees("orders.eu") and not alice.sees("payments")
    root = _identity("c2", SimpleNamespace(principal="admin", superuser=True, grants=[]))
    assert not root.superuser and root.sees("anything")  # the cluster's admin: every queue, read
