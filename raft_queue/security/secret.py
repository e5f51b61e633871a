"""The cluster secret: one random value every node of a cluster shares, and the
keys derived from it.

Peers prove membership with it (Raft links, node-to-node RPCs) and the
cluster signs receipts with a key derived from it. Each use gets its own key
(HKDF-SHA256, RFC 5869, with the purpose as ``info``), so a key that leaks
from one use (a receipt MAC key in a core dump, say) opens no other door.

The file holds 64 hex characters (32 random bytes) and must not be readable
by group or others, as ssh insists of private keys.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from raft_queue.config import SecurityConfig
from raft_queue.errors import ConfigError

SECRET_BYTES = 32
FIELD = "security.cluster_secret_file"

#: The purposes keys are derived for; a new use adds its own name here.
RAFT_LINK = "raft-link"
NODE_RPC = "node-rpc"
RECEIPT_MAC = "receipt-mac"
# The external manager seals the admin tokens of the clusters it calls (manager/sealing.py).
CLUSTER_TOKENS = "cluster-tokens"
PURPOSES = (RAFT_LINK, NODE_RPC, RECEIPT_MAC, CLUSTER_TOKENS)


def generate_secret_file(path: str | Path) -> Path:
    """Write a new random secret to ``path`` (mode 0600, parent made 0700 if
    new). An existing file is kept as is: a cluster's secret never changes by
    accident."""
    path = Path(path)
    if path.exists():
        return path
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(SECRET_BYTES) + "\n")
    return path


def load_secret(path: str | Path) -> bytes:
    """The secret in ``path``; ConfigError naming the config key when the file
    is missing, malformed, too short or readable by others."""
    path = Path(path)
    try:
        st = path.stat()
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(FIELD, f"cannot read {path}: {exc.strerror}") from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(FIELD, f"{path} is readable by others: chmod 600 it")
    try:
        secret = bytes.fromhex(text)
    except ValueError as exc:
        raise ConfigError(FIELD, f"{path} must hold hex digits only") from exc
    if len(secret) < SECRET_BYTES:
        raise ConfigError(FIELD, f"{path} holds {len(secret)} bytes; need >= {SECRET_BYTES}")
    return secret


def derive_key(secret: bytes, purpose: str, length: int = 32) -> bytes:
    """A key for one ``purpose`` (one of PURPOSES), derived from the cluster secret."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown key purpose {purpose!r}")
    hkdf = HKDF(
        algorithm=hashes.SHA256(), length=length, salt=None, info=b"raftq/" + purpose.encode()
    )
    return hkdf.derive(secret)


def node_secret(security: SecurityConfig) -> bytes | None:
    """The secret a node runs with: loaded from ``cluster_secret_file``, or None
    when the config says ``insecure = true`` and names no file. A config that
    does neither is refused (ConfigError naming the key): a node never starts
    open by omission."""
    if security.cluster_secret_file:
        return load_secret(security.cluster_secret_file)
    if security.insecure:
        return None
    raise ConfigError(FIELD, "required (or set security.insecure = true, for a trusted network)")
