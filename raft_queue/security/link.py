"""Authenticated, encrypted Raft links: a pre-shared-key handshake per TCP
connection and AEAD-sealed frames (the crypto only; replication/wire.py
drives it from pysyncobj's connections).

Handshake (both sides at once, no round trip waits on the other's):

1. each side sends HELLO = ``MAGIC`` + mode byte (1: sealed, 0: plaintext,
   ``security.insecure``) + 32 random bytes (its nonce);
2. on the peer's HELLO (same magic and mode, or the connection is dropped),
   each derives two session keys, HKDF-SHA256 over the link key
   (``derive_key(secret, RAFT_LINK)``) with salt = dialer nonce + acceptor
   nonce: one per direction (dialer -> acceptor, acceptor -> dialer), so a
   frame can never be reflected back to its sender, and a recorded session
   replays into no other (fresh nonces, fresh keys);
3. each side's first sealed frame is ``CONFIRM``; a peer's frame is handed on
   only after its CONFIRM opened (key confirmation: the peer holds the
   cluster secret).

Frames are AES-256-GCM with a 96-bit nonce that is a per-direction frame
counter (never sent; both sides count), so a replayed, reordered, dropped
or altered frame fails to open. No header is authenticated besides the body:
the length prefix only delimits, and a wrong one makes the body fail.
Plaintext mode (no secret) still sends HELLO (a node with a secret refuses a
plaintext peer and vice versa) but no CONFIRM; frames are bare bodies.
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["HELLO_BYTES", "LinkError", "LinkSession"]

MAGIC = b"RQL\x01"
NONCE_BYTES = 32
HELLO_BYTES = len(MAGIC) + 1 + NONCE_BYTES
CONFIRM = b"raftq link confirm v1"
TAG_BYTES = 16
_COUNTER = struct.Struct(">4xQ")  # 12-byte GCM nonce: 4 zero bytes, 64-bit counter
_INFO = b"raftq/raft-link/session/v1"


class LinkError(ValueError):
    """The peer failed the handshake or sent a frame that does not open."""


class LinkSession:
    """One TCP connection's link state. ``key``: the Raft link key (None:
    plaintext). ``dialer``: this side opened the connection."""

    __slots__ = ("_recv_n", "_rx", "_send_n", "_tx", "confirmed", "dialer", "key", "nonce", "peer")

    def __init__(self, key: bytes | None, dialer: bool) -> None:
        self.key = key
        self.dialer = dialer
        self.nonce = os.urandom(NONCE_BYTES)
        self.peer: bytes | None = None  # the peer's HELLO nonce, once received
        self.confirmed = False  # the peer's CONFIRM opened (always True in plaintext)
        self._tx: AESGCM | None = None
        self._rx: AESGCM | None = None
        self._send_n = 0
        self._recv_n = 0

    @property
    def sealed(self) -> bool:
        return self.key is not None

    def hello(self) -> bytes:
        return MAGIC + (b"\x01" if self.sealed else b"\x00") + self.nonce

    def on_hello(self, frame: bytes) -> bytes | None:
        """Take the peer's HELLO; returns our CONFIRM frame to send (sealed
        mode) or None (plaintext mode, ready at once)."""
        if self.peer is not None:
            raise LinkError("second HELLO")
        if len(frame) != HELLO_BYTES or frame[: len(MAGIC)] != MAGIC:
            raise LinkError("not a raft_queue link HELLO")
        mode = frame[len(MAGIC)]
        if mode != (1 if self.sealed else 0):
            raise LinkError("peer link mode differs (one side has no cluster secret)")
        self.peer = frame[len(MAGIC) + 1 :]
        if not self.sealed:
            self.confirmed = True
            return None
        assert self.key is not None
        dialer, acceptor = (self.nonce, self.peer) if self.dialer else (self.peer, self.nonce)
        hkdf = HKDF(algorithm=hashes.SHA256(), length=64, salt=dialer + acceptor, info=_INFO)
        keys = hkdf.derive(self.key)
        d2a, a2d = AESGCM(keys[:32]), AESGCM(keys[32:])
        self._tx, self._rx = (d2a, a2d) if self.dialer else (a2d, d2a)
        return self.seal(CONFIRM)

    @property
    def ready(self) -> bool:
        """Messages may be sent (keys derived, or plaintext with HELLO received)."""
        return self.peer is not None

    def seal(self, body: bytes) -> bytes:
        if self._tx is None:
            return body
        nonce = _COUNTER.pack(self._send_n)
        self._send_n += 1
        return self._tx.encrypt(nonce, body, None)

    def open(self, frame: bytes) -> bytes | None:
        """The body of the peer's next frame; None for its CONFIRM (nothing to
        hand on). LinkError if it does not open or comes before CONFIRM."""
        if self.peer is None:
            raise LinkError("frame before HELLO")
        if self._rx is None:
            return frame
        nonce = _COUNTER.pack(self._recv_n)
        try:
            body = self._rx.decrypt(nonce, frame, None)
        except InvalidTag as exc:
            raise LinkError(
                "frame failed authentication (wrong secret, tampered or replayed)"
            ) from exc
        self._recv_n += 1
        if not self.confirmed:
            if body != CONFIRM:
                raise LinkError("first sealed frame is not CONFIRM")
            self.confirmed = True
            return None
        return body
