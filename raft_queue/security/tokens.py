"""Bearer tokens for clients: how they are made, hashed and kept on disk.

A token is 32 random bytes (``secrets.token_urlsafe(32)``, 256 bits) behind
the prefix ``rqt_``, so a leaked one is easy to recognise (as GitHub's
``ghp_``). It is shown once, when made; the cluster keeps only its SHA-256.
A fast hash is right for a random 256-bit secret (nothing to brute-force);
a slow one (argon2) is for human passwords, which we do not have.

The *admin tokens file* (``[security] admin_tokens_file``) bootstraps a
cluster, as Kafka's ``super.users``: one SHA-256 (hex) per line, mode 0600;
each token whose hash is listed is the superuser ``admin``. ``raftq secret
generate`` and ``raftq dev up`` write one, next to ``admin.token`` (the token
itself, mode 0600).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
from pathlib import Path

from raft_queue.errors import ConfigError

PREFIX = "rqt_"
TOKEN_BYTES = 32
FIELD = "security.admin_tokens_file"
_HASH = re.compile(r"[0-9a-f]{64}")


def new_token() -> str:
    """A fresh client token (shown once; store only ``token_hash`` of it)."""
    return PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """SHA-256 of the token, lowercase hex: what the cluster stores."""
    return hashlib.sha256(token.encode()).hexdigest()


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` with mode 0600 (never readable by others, even for a moment)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def write_admin_token(token_path: Path, hashes_path: Path) -> str:
    """The admin token of ``token_path``, made (with its hash appended to
    ``hashes_path``) when the file does not exist yet. Both files 0600."""
    if token_path.exists():
        token = token_path.read_text().strip()
    else:
        token = new_token()
        _write_private(token_path, token + "\n")
    digest = token_hash(token)
    known = hashes_path.read_text().split() if hashes_path.exists() else []
    if digest not in known:
        _write_private(hashes_path, "".join(h + "\n" for h in [*known, digest]))
    return token


def load_admin_hashes(path: str | Path) -> frozenset[str]:
    """The hashes in an admin tokens file ('#' comments and blank lines
    ignored); ConfigError naming the key when unreadable, malformed or
    readable by others."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(FIELD, f"cannot read {path}: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(FIELD, f"{path} is readable by others: chmod 600 it")
    hashes = [line.split("#", 1)[0].strip() for line in lines]
    bad = [h for h in hashes if h and not _HASH.fullmatch(h)]
    if bad:
        raise ConfigError(FIELD, f"{path}: each line must be a SHA-256 in lowercase hex")
    return frozenset(h for h in hashes if h)
