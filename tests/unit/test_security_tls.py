"""TLS material: the dev CA and certificates, loading them, [tls] config, client options."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID

from raft_queue import config as config_mod
from raft_queue.cli.tls import tls_arguments
from raft_queue.client.tls import ClientTls
from raft_queue.config import TlsConfig
from raft_queue.errors import ConfigError, InvalidArgument
from raft_queue.security.tls import (
    CertIdentity,
    generate_ca,
    identity_of,
    issue,
    load_material,
    load_node_material,
    write_dev_tls,
)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(cert: x509.Certificate) -> x509.SubjectAlternativeName:
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value


def test_node_certificate_is_signed_by_the_ca_and_names_hosts_and_node(tmp_path: Path) -> None:
    dev = write_dev_tls(tmp_path / "tls", ["n1", "n2"])
    ca = _cert(dev.ca_file)
    cert = _cert(dev.cert_file("n1"))
    cert.verify_directly_issued_by(ca)
    san = _sans(cert)
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "n1"}
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == ["raftq://node/n1"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_another_ca_does_not_verify_the_certificate(tmp_path: Path) -> None:
    dev = write_dev_tls(tmp_path / "a", ["n1"])
    other = write_dev_tls(tmp_path / "b", [])
    with pytest.raises((ValueError, InvalidSignature)):
        _cert(dev.cert_file("n1")).verify_directly_issued_by(_cert(other.ca_file))


def test_keys_are_private_and_the_directory_closed(tmp_path: Path) -> None:
    dev = write_dev_tls(tmp_path / "tls", ["n1"], ("alice",))
    assert stat.S_IMODE(dev.dir.stat().st_mode) == 0o700
    for name in ("ca", "n1", "alice"):
        assert stat.S_IMODE((dev.dir / f"{name}.key").stat().st_mode) == 0o600


def test_rerun_keeps_the_ca_and_signs_new_nodes_with_it(tmp_path: Path) -> None:
    first = write_dev_tls(tmp_path / "tls", ["n1"])
    ca_before = first.ca_file.read_bytes()
    n1_before = first.cert_file("n1").read_bytes()
    again = write_dev_tls(tmp_path / "tls", ["n1", "n2"])
    assert again.ca_file.read_bytes() == ca_before
    assert again.cert_file("n1").read_bytes() == n1_before
    _cert(again.cert_file("n2")).verify_directly_issued_by(_cert(again.ca_file))


def test_client_certificate_names_its_principal_and_is_client_only(tmp_path: Path) -> None:
    dev = write_dev_tls(tmp_path / "tls", [], ("alice",))
    cert = _cert(dev.cert_file("alice"))
    assert _sans(cert).get_values_for_type(x509.UniformResourceIdentifier) == [
        "raftq://principal/alice"
    ]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert identity_of(dev.cert_file("alice").read_bytes()) == CertIdentity("principal", "alice")


def test_identity_of_nodes_and_of_a_foreign_certificate_by_cn(tmp_path: Path) -> None:
    dev = write_dev_tls(tmp_path / "tls", ["n3"])
    assert identity_of(dev.cert_file("n3").read_bytes()) == CertIdentity("node", "n3")
    ca_pem, _ = generate_ca("some-ca")
    assert identity_of(ca_pem) == CertIdentity("principal", "some-ca")  # CN fallback
    assert identity_of(b"not a certificate") is None


def test_issue_refuses_an_unknown_kind() -> None:
    ca, key = generate_ca()
    with pytest.raises(ValueError):
        issue(ca, key, CertIdentity("robot", "r2"))


def test_load_material_checks_each_file_and_names_the_key(tmp_path: Path) -> None:
    dev = write_dev_tls(tmp_path / "tls", ["n1", "n2"])
    cert, key, ca = str(dev.cert_file("n1")), str(dev.key_file("n1")), str(dev.ca_file)
    m = load_material(cert, key, ca)
    assert m.cert_pem.startswith(b"-----BEGIN CERTIFICATE")
    assert m.ca_pem == dev.ca_file.read_bytes()
    with pytest.raises(ConfigError, match=r"tls\.cert_file: cannot read"):
        load_material(str(tmp_path / "missing.pem"), key, ca)
    with pytest.raises(ConfigError, match=r"tls\.key_file: .* is not the key of"):
        load_material(cert, str(dev.key_file("n2")), ca)
    with pytest.raises(ConfigError, match=r"tls\.ca_file: .* holds no PEM certificate"):
        load_material(cert, key, key)
    with pytest.raises(ConfigError, match=r"tls\.cert_file: .* holds no PEM"):
        load_material(key, key, ca)


def test_node_material_is_none_when_tls_is_off() -> None:
    assert load_node_material(TlsConfig()) is None


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"cert_file": "c.pem"}, "tls.key_file"),
        ({"key_file": "k.pem"}, "tls.cert_file"),
        ({"ca_file": "ca.pem"}, "tls.cert_file"),
        ({"cert_file": "c", "key_file": "k", "require_client_cert": True}, "tls.ca_file"),
        ({"require_client_cert": "yes"}, "tls.require_client_cert"),
    ],
)
def test_tls_config_is_validated_and_names_the_key(keys: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        TlsConfig(**keys)  # type: ignore[arg-type]
    assert err.value.field == field


def test_node_config_loads_the_tls_table(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    base = 'node_id = "n1"\ndata_dir = "d"\n[security]\ninsecure = true\n'
    path.write_text(base + '[tls]\ncert_file = "c"\nkey_file = "k"\nca_file = "a"\n')
    cfg = config_mod.load(path)
    assert cfg.tls.enabled and cfg.tls.ca_file == "a" and not cfg.tls.require_client_cert
    path.write_text(base + '[tls]\ncert = "c"\n')
    with pytest.raises(ConfigError, match=r"tls\.cert: unknown key"):
        config_mod.load(path)


def test_the_shipped_config_documents_every_tls_key() -> None:
    text = (Path(__file__).parents[2] / "configs" / "local-1node.toml").read_text()
    section = text.split("[tls]", 1)[1]
    for key in ("cert_file", "key_file", "ca_file", "require_client_cert"):
        assert key in section, key
    assert not config_mod.load(
        Path(__file__).parents[2] / "configs" / "local-1node.toml"
    ).tls.enabled


def test_client_tls_options_are_checked(tmp_path: Path) -> None:
    dev = write_dev_tls(tmp_path / "tls", [], ("alice",))
    assert ClientTls.of(False) is None
    with pytest.raises(InvalidArgument, match="ca_file: is set but tls is off"):
        ClientTls.of(False, ca_file=str(dev.ca_file))
    with pytest.raises(InvalidArgument, match="key_file"):
        ClientTls.of(True, cert_file=str(dev.cert_file("alice")))
    with pytest.raises(InvalidArgument, match="ca_file: cannot read"):
        ClientTls.of(True, ca_file=str(tmp_path / "nope.pem"))
    plain = ClientTls.of(True)
    assert plain is not None and plain.ca_pem is None  # system roots
    mutual = ClientTls.of(
        True, str(dev.ca_file), str(dev.cert_file("alice")), str(dev.key_file("alice"))
    )
    assert mutual is not None and mutual.ca_pem == dev.ca_file.read_bytes()
    assert mutual.key_pem == dev.key_file("alice").read_bytes()


def test_cli_tls_arguments_files_imply_tls_and_no_tls_wins() -> None:
    assert tls_arguments(None, None, None, None) == {}
    assert tls_arguments(None, "ca.pem", None, None)["tls"] is True
    assert tls_arguments(True, None, None, None) == {
        "tls": True, "ca_file": None, "cert_file": None, "key_file": None
    }  # fmt: skip
    assert tls_arguments(False, "ca.pem", None, None) == {}


def test_dev_up_exports_name_the_cluster_tls_files(tmp_path: Path) -> None:
    from raft_queue.cli.dev import tls_exports
    from raft_queue.testing.cluster import LocalCluster

    assert tls_exports(LocalCluster(tmp_path / "plain", nodes=1, base_port=20000)) == []
    tls = LocalCluster(tmp_path / "tls", nodes=1, base_port=20000, tls=True)
    assert tls_exports(tls) == [
        "RAFTQ_TLS=1",
        f"RAFTQ_CA_FILE={tmp_path / 'tls' / 'tls' / 'ca.pem'}",
    ]
    mtls = LocalCluster(
        tmp_path / "m",
        nodes=1,
        base_port=20000,
        tls=True,
        tls_options={"require_client_cert": True},
    )
    names = [line.split("=")[0] for line in tls_exports(mtls)]
    assert names == ["RAFTQ_TLS", "RAFTQ_CA_FILE", "RAFTQ_CERT_FILE", "RAFTQ_KEY_FILE"]
    mtls.write_configs()  # the node config names the files the exports point at
    text = (tmp_path / "m" / "n1" / "node.toml").read_text()
    assert "[tls]" in text and "require_client_cert = true" in text
    assert (tmp_path / "m" / "tls" / "admin.pem").exists()
