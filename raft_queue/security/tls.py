"""TLS material: generating a cluster CA and certificates, and loading them.

``raftq dev up --tls`` and ``LocalCluster(tls=True)`` make a private CA and
one certificate per node (``write_dev_tls``); a node reads its ``[tls]``
files once, at start (``load_node_material``), and the gRPC doors
(server/tls.py, client/tls.py) turn the PEM bytes into credentials. Nothing
here imports grpc.

Certificates use ECDSA P-256 keys: small, fast to make (a dev cluster's
certificates take milliseconds) and the cheapest handshake gRPC offers. Each
certificate names who holds it in a URI SAN, ``raftq://node/<id>`` for a node
and ``raftq://principal/<name>`` for a client, so a peer's certificate says
whether a node or a client is calling (``identity_of``); the subject CN
carries the same name for tools that show only the CN. Node certificates are
good for both ends of a connection (serverAuth + clientAuth): with mutual TLS
a node presents its own certificate when it dials another node.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raft_queue.config import TlsConfig
from raft_queue.errors import ConfigError

NODE_URI = "raftq://node/"
PRINCIPAL_URI = "raftq://principal/"
DEV_HOSTS = ("127.0.0.1", "localhost")
CA_DAYS = 3650
CERT_DAYS = 825  # the longest a browser-trusted server certificate may live
# Issued a little in the past, so a peer whose clock lags still accepts it.
BACKDATE = datetime.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Material:
    """PEM bytes of one party's certificate chain, its key and the CA it trusts."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes | None


@dataclass(frozen=True, slots=True)
class CertIdentity:
    """Who a certificate names: ``kind`` "node" or "principal", and the name."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class DevTls:
    """Where ``write_dev_tls`` put its files."""

    dir: Path
    ca_file: Path

    def cert_file(self, name: str) -> Path:
        return self.dir / f"{name}.pem"

    def key_file(self, name: str) -> Path:
        return self.dir / f"{name}.key"


# ---- generating -------------------------------------------------------------------


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raft_queue"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(
    subject: str, issuer: x509.Name, public_key: object, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def generate_ca(common_name: str = "raft_queue dev CA", days: int = CA_DAYS) -> tuple[bytes, bytes]:
    """A self-signed CA certificate and its key, as PEM (cert, key)."""
    key = _new_key()
    cert = (
        _builder(common_name, _name(common_name), key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _san(hosts: tuple[str, ...], uri: str) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    names.append(x509.UniformResourceIdentifier(uri))
    return x509.SubjectAlternativeName(names)


def issue(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    identity: CertIdentity,
    hosts: tuple[str, ...] = (),
    days: int = CERT_DAYS,
) -> tuple[bytes, bytes]:
    """A certificate for ``identity`` signed by the CA, as PEM (cert, key).

    ``hosts`` (IP addresses or DNS names) become SANs a client checks the
    server against; a node's certificate also names its node id as a DNS SAN.
    """
    if identity.kind not in ("node", "principal"):
        raise ValueError(f"unknown identity kind {identity.kind!r}")
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = _new_key()
    prefix = NODE_URI if identity.kind == "node" else PRINCIPAL_URI
    if identity.kind == "node":
        hosts = (*hosts, identity.name)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if identity.kind == "node":
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        _builder(identity.name, ca_cert.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(tuple(dict.fromkeys(hosts)), prefix + identity.name), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_dev_tls(
    directory: str | Path,
    node_ids: list[str],
    principals: tuple[str, ...] = (),
    hosts: tuple[str, ...] = DEV_HOSTS,
) -> DevTls:
    """A CA (``ca.pem``, ``ca.key``) and ``<name>.pem`` / ``<name>.key`` for
    every node id and principal in ``directory`` (0700; keys 0600).

    Files already there are kept, so a restarted dev cluster keeps its CA and
    a node added later is signed by the same CA.
    """
    out = DevTls(Path(directory), Path(directory) / "ca.pem")
    out.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_key_file = out.dir / "ca.key"
    if not out.ca_file.exists() or not ca_key_file.exists():
        # A name of its own, so two dev clusters' CAs are told apart in errors.
        cert, key = generate_ca(f"raft_queue dev CA {secrets.token_hex(4)}")
        _write(ca_key_file, key, 0o600)
        _write(out.ca_file, cert, 0o644)
    ca_cert, ca_key = out.ca_file.read_bytes(), ca_key_file.read_bytes()
    wanted = [CertIdentity("node", n) for n in node_ids]
    wanted += [CertIdentity("principal", p) for p in principals]
    for ident in wanted:
        if out.cert_file(ident.name).exists() and out.key_file(ident.name).exists():
            continue
        cert, key = issue(ca_cert, ca_key, ident, hosts if ident.kind == "node" else ())
        _write(out.key_file(ident.name), key, 0o600)
        _write(out.cert_file(ident.name), cert, 0o644)
    return out


# ---- loading ----------------------------------------------------------------------


def _read(field_name: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(field_name, f"cannot read {path}: {exc.strerror}") from exc


def load_material(
    cert_file: str, key_file: str, ca_file: str = "", prefix: str = "tls."
) -> Material:
    """Read and check PEM files: the certificate parses, the key is the
    certificate's, the CA parses. Errors are ConfigError naming
    ``prefix + key`` (``tls.cert_file``), so a bad file fails at start."""
    cert = _read(prefix + "cert_file", cert_file)
    key = _read(prefix + "key_file", key_file)
    ca = read_ca(prefix + "ca_file", ca_file) if ca_file else None
    try:
        parsed = x509.load_pem_x509_certificates(cert)[0]
    except ValueError as exc:
        raise ConfigError(prefix + "cert_file", f"{cert_file} holds no PEM certificate") from exc
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:
        msg = f"{key_file} holds no unencrypted PEM private key"
        raise ConfigError(prefix + "key_file", msg) from exc
    if _spki(private.public_key()) != _spki(parsed.public_key()):
        raise ConfigError(prefix + "key_file", f"{key_file} is not the key of {cert_file}")
    return Material(cert, key, ca)


def read_ca(field_name: str, ca_file: str) -> bytes:
    """The CA certificate(s) in ``ca_file``, checked to parse (ConfigError names ``field_name``)."""
    ca = _read(field_name, ca_file)
    try:
        x509.load_pem_x509_certificates(ca)
    except ValueError as exc:
        raise ConfigError(field_name, f"{ca_file} holds no PEM certificate") from exc
    return ca


def _spki(public_key: object) -> bytes:
    return public_key.public_bytes(  # type: ignore[attr-defined,no-any-return]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_node_material(tls: TlsConfig) -> Material | None:
    """A node's ``[tls]`` files, checked; None when TLS is off."""
    if not tls.enabled:
        return None
    return load_material(tls.cert_file, tls.key_file, tls.ca_file)


def identity_of(cert_pem: bytes) -> CertIdentity | None:
    """Who a (verified) peer certificate names: its ``raftq://node/`` or
    ``raftq://principal/`` URI SAN, else its subject CN as a principal; None
    when it names no one. Call it only on a certificate the TLS handshake
    verified against the cluster CA (gRPC's auth context ``x509_pem_cert``)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return None
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        uris = []
    for uri in uris:
        for prefix, kind in ((NODE_URI, "node"), (PRINCIPAL_URI, "principal")):
            if uri.startswith(prefix) and len(uri) > len(prefix):
                return CertIdentity(kind, uri[len(prefix) :])
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if cns and isinstance(cns[0].value, str) and cns[0].value:
        return CertIdentity("principal", cns[0].value)
    return None
