"""Encryption at rest: data keys and the AES-256-GCM seal of one batch.

A queue's data keys are random 256-bit AES keys, stored only wrapped by a
master key (``keyring.KeyProvider``) in the metadata group. A node unwraps a
key the first time it needs it and keeps the plain key in memory only
(``DataKeys``), keyed by the wrapped form, so a key that leaves the metadata
(queue deleted, master key rotated) is dropped from the cache with it.

One seal per batch (``core/sealing.py`` frames it): a random 96-bit nonce per
seal from the OS CSPRNG. NIST SP 800-38D bounds random nonces to 2**32 seals
per key; at 10,000 batches/s that is ~5 days of one key on one partition,
so a queue should be rotated (``raftq queue rotate-key``) well within that,
e.g. weekly, under sustained load (docs/security.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raft_queue import errors
from raft_queue.core.metadata_records import DataKey
from raft_queue.core.sealing import Encrypt
from raft_queue.security.keyring import KeyProvider

DATA_KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16


def wrap_context(queue: str, key_id: int) -> bytes:
    """What a wrapped data key is bound to: its queue and id."""
    return b"raftq/data-key/v1|" + queue.encode() + b"|" + str(key_id).encode()


def encrypter(aes: AESGCM) -> Encrypt:
    """``sealing.Encrypt`` with ``aes``: a fresh random nonce per seal."""

    def encrypt(plaintext: bytes, aad: bytes) -> tuple[bytes, memoryview, bytes]:
        nonce = os.urandom(NONCE_BYTES)
        out = memoryview(aes.encrypt(nonce, plaintext, aad))  # no copy of the ciphertext
        return nonce, out[:-TAG_BYTES], bytes(out[-TAG_BYTES:])

    return encrypt


def decrypt(aes: AESGCM, nonce: bytes, sealed: bytes, aad: bytes) -> bytes:
    """The plaintext of ``sealed`` (ciphertext || tag); Internal on a bad tag."""
    try:
        return aes.decrypt(nonce, sealed, aad)
    except InvalidTag:
        raise errors.Internal(
            "a sealed batch fails authentication (corrupt, or not this queue's)"
        ) from None


class DataKeys:
    """Data keys of the queues, unwrapped on first use and cached in memory."""

    def __init__(self, provider: KeyProvider) -> None:
        self.provider = provider
        self._lock = threading.Lock()
        self._ciphers: dict[str, AESGCM] = {}  # wrapped (hex) -> its key's cipher

    def new_key(self, queue: str, key_id: int) -> DataKey:
        """A random data key for ``queue``, wrapped by the current master key."""
        master = self.provider.current_master_id()
        raw = os.urandom(DATA_KEY_BYTES)
        wrapped = self.provider.wrap(master, raw, wrap_context(queue, key_id))
        key = DataKey(key_id, master, wrapped.hex())
        with self._lock:
            self._ciphers[key.wrapped] = AESGCM(raw)
        return key

    def rewrap(self, queue: str, key: DataKey, master: str) -> DataKey:
        """``key`` wrapped by master key ``master`` (the same data key)."""
        if key.master_id == master:
            return key
        raw = self._unwrap(queue, key)
        wrapped = self.provider.wrap(master, raw, wrap_context(queue, key.key_id))
        return DataKey(key.key_id, master, wrapped.hex())

    def cipher(self, queue: str, key: DataKey) -> AESGCM:
        aes = self._ciphers.get(key.wrapped)
        if aes is None:
            aes = AESGCM(self._unwrap(queue, key))
            with self._lock:
                self._ciphers[key.wrapped] = aes
        return aes

    def _unwrap(self, queue: str, key: DataKey) -> bytes:
        try:
            raw = self.provider.unwrap(
                key.master_id, bytes.fromhex(key.wrapped), wrap_context(queue, key.key_id)
            )
        except InvalidTag:
            raise errors.Internal(
                f"data key {key.key_id} of queue {queue!r} does not unwrap with master key "
                f"{key.master_id!r}"
            ) from None
        if len(raw) != DATA_KEY_BYTES:
            raise errors.Internal(f"data key {key.key_id} of queue {queue!r} is not 32 bytes")
        return raw

    def keep_only(self, live: Iterable[DataKey]) -> None:
        """Drop the plain keys of every wrapped key not in ``live`` (deleted
        queues, rewrapped keys): they exist nowhere else once gone here."""
        wanted = {k.wrapped for k in live}
        with self._lock:
            for wrapped in [w for w in self._ciphers if w not in wanted]:
                del self._ciphers[wrapped]

    def __len__(self) -> int:
        return len(self._ciphers)
