"""Cluster admin tokens at rest in the manager's log and snapshots.

The manager calls each cluster with that cluster's admin token, given once by
``raftq clusters add --token-file``. It is replicated (every manager replica
may lead), so it is sealed with AES-GCM under a key derived from the
manager's own secret (``CLUSTER_TOKENS``): a copied journal or snapshot does
not hand out the clusters. The leader seals before proposing (a random nonce
has no place in ``apply``). Without a secret (``insecure``) tokens are kept as
given, prefixed ``plain:``.
"""

from __future__ import annotations

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raft_queue import errors
from raft_queue.security.secret import CLUSTER_TOKENS, derive_key

_PLAIN = "plain:"
_SEALED = "v1:"


class TokenSeal:
    def __init__(self, secret: bytes | None) -> None:
        self._aead = AESGCM(derive_key(secret, CLUSTER_TOKENS)) if secret is not None else None

    def seal(self, token: str, cluster: str) -> str:
        if not token:
            return ""
        if self._aead is None:
            return _PLAIN + token
        nonce = os.urandom(12)
        box = self._aead.encrypt(nonce, token.encode(), cluster.encode())
        return _SEALED + base64.urlsafe_b64encode(nonce + box).decode()

    def open(self, sealed: str, cluster: str) -> str:
        if not sealed:
            return ""
        if sealed.startswith(_PLAIN):
            return sealed[len(_PLAIN) :]
        if self._aead is None or not sealed.startswith(_SEALED):
            raise errors.FailedPrecondition(f"cannot open cluster {cluster!r}'s token here")
        raw = base64.urlsafe_b64decode(sealed[len(_SEALED) :])
        try:
            return self._aead.decrypt(raw[:12], raw[12:], cluster.encode()).decode()
        except InvalidTag as exc:
            raise errors.FailedPrecondition(
                f"cluster {cluster!r}'s token was sealed under another manager secret"
            ) from exc
