"""Master keys: the key-provider hook and its file provider (the keyring).

Every queue's data keys are stored *wrapped* (encrypted) by a master key;
only a key provider can wrap and unwrap them. The interface (``KeyProvider``)
is what a KMS hook implements: ``current_master_id`` names the master key new
wraps use, ``wrap``/``unwrap`` turn a 32-byte data key into an opaque blob
and back, bound to ``context`` (the queue name and key id; an unwrap under
another context fails). A node loads its provider from ``[security]``:

- ``keyring_file = "path"``: ``FileKeyProvider`` (this module), a JSON file
  of mode 0600, ``{"current": "m2", "keys": {"m1": "<64 hex>", "m2": ...}}``,
  wrapping with AES-256-GCM (nonce || ciphertext+tag);
- ``key_provider = "package.module:Class"``: any class with that interface,
  built as ``Class(security_config)`` (a KMS client: its calls may block, they
  run off the event loop and are cached per data key).

``raftq keys add-master`` adds a master key to a keyring file (and makes it
current); ``raftq keys rotate-master`` then rewraps every data key under it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import secrets
import stat
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raft_queue.config import SecurityConfig
from raft_queue.errors import ConfigError, FailedPrecondition

log = logging.getLogger(__name__)
FIELD = "security.keyring_file"
MASTER_BYTES = 32
_NONCE = 12


@runtime_checkable
class KeyProvider(Protocol):
    """The key-provider hook (a KMS): wraps and unwraps data keys."""

    def current_master_id(self) -> str: ...

    def wrap(self, master_id: str, data_key: bytes, context: bytes) -> bytes: ...

    def unwrap(self, master_id: str, wrapped: bytes, context: bytes) -> bytes: ...


def generate_keyring_file(path: str | Path) -> Path:
    """A new keyring with one random master key (mode 0600); an existing one is kept."""
    path = Path(path)
    if path.exists():
        return path
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write(path, {"current": "m1", "keys": {"m1": secrets.token_hex(MASTER_BYTES)}}, new=True)
    return path


def add_master_key(path: str | Path) -> str:
    """Add a random master key to the keyring at ``path`` and make it current;
    its id. Older keys stay (data keys wrapped by them must still open until
    ``rotate-master`` rewraps them)."""
    path = Path(path)
    ring = _read(path)
    n = len(ring["keys"]) + 1
    while f"m{n}" in ring["keys"]:
        n += 1
    new_id = f"m{n}"
    ring["keys"][new_id] = secrets.token_hex(MASTER_BYTES)
    ring["current"] = new_id
    _write(path, ring)
    return new_id


def _write(path: Path, ring: dict[str, Any], new: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(ring, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    if new and path.exists():
        tmp.unlink()
        return
    os.replace(tmp, path)


def _read(path: Path) -> dict[str, Any]:
    try:
        st = path.stat()
        ring = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(FIELD, f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(FIELD, f"{path} is not a JSON keyring") from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(FIELD, f"{path} is readable by others: chmod 600 it")
    if not isinstance(ring, dict) or not isinstance(ring.get("keys"), dict):
        raise ConfigError(FIELD, f"{path}: needs a 'keys' object")
    if ring.get("current") not in ring["keys"]:
        raise ConfigError(FIELD, f"{path}: 'current' must name one of its keys")
    for key_id, value in ring["keys"].items():
        try:
            if len(bytes.fromhex(value)) != MASTER_BYTES:
                raise ValueError
        except (ValueError, TypeError) as exc:
            raise ConfigError(FIELD, f"{path}: key {key_id!r} is not 64 hex digits") from exc
    return ring


class FileKeyProvider:
    """Master keys from a keyring file, re-read when a wrap names a key this
    process has not seen (a key added while it runs)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        ring = _read(self.path)
        with self._lock:
            self._current = str(ring["current"])
            self._keys = {k: AESGCM(bytes.fromhex(v)) for k, v in ring["keys"].items()}

    def _key(self, master_id: str) -> AESGCM:
        if master_id not in self._keys:
            self._load()
        try:
            return self._keys[master_id]
        except KeyError:
            raise FailedPrecondition(
                f"master key {master_id!r} is not in the keyring {self.path}"
            ) from None

    def current_master_id(self) -> str:
        self._load()  # rare (create, rotate): see a key added since the start
        return self._current

    def wrap(self, master_id: str, data_key: bytes, context: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        return nonce + self._key(master_id).encrypt(nonce, data_key, context)

    def unwrap(self, master_id: str, wrapped: bytes, context: bytes) -> bytes:
        return self._key(master_id).decrypt(wrapped[:_NONCE], wrapped[_NONCE:], context)


def load_key_provider(security: SecurityConfig) -> KeyProvider | None:
    """The node's key provider from ``[security]``. Encryption at rest is on
    by default: naming neither a keyring nor a provider is a ConfigError,
    unless ``encryption_at_rest = false`` or ``insecure = true`` opts out
    (None, with a warning at each start)."""
    if security.key_provider:
        return _provider_class(security.key_provider)(security)  # type: ignore[no-any-return]
    if security.keyring_file:
        return FileKeyProvider(security.keyring_file)
    if security.encryption_at_rest and not security.insecure:
        raise ConfigError(
            FIELD,
            "encryption at rest needs a keyring (`raftq keys init data/keyring.json`) "
            "or key_provider; set encryption_at_rest = false to run without it",
        )
    log.warning(
        "no [security] keyring_file or key_provider: this node seals nothing at rest "
        "(queue messages reach its disk in plain form) and cannot read sealed messages"
    )
    return None


def _provider_class(spec: str) -> Any:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError("security.key_provider", f"{spec!r}: write it as 'package.module:Class'")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("security.key_provider", f"cannot load {spec!r}: {exc}") from exc
    return cls
