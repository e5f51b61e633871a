"""A second key provider (the KMS hook's interface, ``security/keyring.py``)
for tests: one master key from the environment, wrapping with AES key wrap
(RFC 3394) instead of the file provider's AES-GCM. Its ``calls`` count shows
that nodes cache unwrapped keys instead of asking the "KMS" per batch.

    [security]
    key_provider = "raft_queue.testing.key_provider:EnvKeyProvider"
    # RAFTQ_TEST_MASTER_KEY=<64 hex digits> in the node's environment
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from cryptography.hazmat.primitives.keywrap import aes_key_unwrap, aes_key_wrap

from raft_queue.errors import ConfigError, FailedPrecondition

ENV = "RAFTQ_TEST_MASTER_KEY"


class EnvKeyProvider:
    def __init__(self, security: Any = None) -> None:
        try:
            self._master = bytes.fromhex(os.environ[ENV])
        except (KeyError, ValueError) as exc:
            raise ConfigError("security.key_provider", f"{ENV} must hold 64 hex digits") from exc
        if len(self._master) != 32:
            raise ConfigError("security.key_provider", f"{ENV} must hold 64 hex digits")
        self.calls = 0

    def current_master_id(self) -> str:
        return "env-1"

    def _kek(self, master_id: str, context: bytes) -> bytes:
        if master_id != "env-1":
            raise FailedPrecondition(f"unknown master key {master_id!r}")
        # AES-KW has no associated data: bind the context through the KEK.
        return hashlib.sha256(self._master + b"|" + context).digest()

    def wrap(self, master_id: str, data_key: bytes, context: bytes) -> bytes:
        self.calls += 1
        return aes_key_wrap(self._kek(master_id, context), data_key)

    def unwrap(self, master_id: str, wrapped: bytes, context: bytes) -> bytes:
        self.calls += 1
        return aes_key_unwrap(self._kek(master_id, context), wrapped)
