"""pysyncobj's transport, as raft_queue uses it: node identity and message frames.

``ProxiedNode`` keeps a peer's identity (its address) apart from where we
dial it (a fault-injection proxy). Importing this module replaces
``TcpConnection.send`` and its frame parser with the frames below (see the
comment on the wire format); ``raft.py`` imports it, so every group uses them.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from typing import Any

from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.node import TCPNode
from pysyncobj.tcp_connection import TcpConnection


class ProxiedNode(TCPNode):
    """A peer whose identity is its address but whose TCP dial target may differ
    (a fault-injection proxy). ``dial`` maps the address to ``host:port``."""

    def __init__(self, address: str, dial: str | None = None) -> None:
        super().__init__(address)
        host, port = (dial or address).rsplit(":", 1)
        object.__setattr__(self, "_dial_host", host)
        object.__setattr__(self, "_dial_port", int(port))

    @property
    def ip(self) -> str:  # used by TcpTransport to connect
        return self._dial_host  # type: ignore[no-any-return]

    @property
    def port(self) -> int:
        return self._dial_port  # type: ignore[no-any-return]


# ---- wire format (TcpConnection) ------------------------------------------------------
# pysyncobj 0.3.17 frames every message as zlib.compress(pickle protocol 2, level 3).
# For the small messages that are most of the traffic (heartbeats, acks: ~100 B)
# zlib costs far more than the message: deflate allocates and clears ~256 KiB of
# state per call (measured 160-400 us per compress on this 2-core machine, against
# 3-7 us for the pickle), and the 256-replica idle node sends thousands a second.
# Protocol 2 also pickles bytes as latin-1 text (entries grow and cost a text
# codec pass). So: pickle protocol 5 (any Python 3.8+ unpickler reads it), zlib
# (level 1) only from COMPRESS_MIN_BYTES. A frame whose first byte is 0x80 (the
# pickle PROTO opcode; zlib streams start with 0x78) is read as a bare pickle,
# so frames from unpatched peers still decode; unpatched peers cannot read ours
# (upgrade every node of a cluster together). Snapshot chunks are always
# compressed: an LMDB image is mostly free pages, and a 64 KiB chunk must
# cross the link within the sender's connection timeout (the follower answers
# no chunk; over a slow link, uncompressed chunks never arrived).
COMPRESS_MIN_BYTES = 1 << 20
_PICKLE_PROTO = b"\x80"


def _wire_send(conn: TcpConnection, message: Any) -> None:
    compress = type(message) is dict and message.get("serialized") is not None
    if conn.sendRandKey:
        message = (conn.sendRandKey, message)
    data = pickle.dumps(message, protocol=5)
    if compress or len(data) >= COMPRESS_MIN_BYTES:
        data = zlib.compress(data, 1)
    if conn.encryptor:
        data = conn.encryptor.encrypt_at_time(data, int(monotonic_time()))
    conn._TcpConnection__writeBuffer += struct.pack("i", len(data)) + data
    conn._TcpConnection__trySendBuffer()


def _wire_parse(conn: TcpConnection) -> Any:
    """pysyncobj's ``__processParseMessage`` with the frame decoding above."""
    buf = conn._TcpConnection__readBuffer
    if len(buf) < 4:
        return None
    size = struct.unpack("i", buf[:4])[0]
    if len(buf) - 4 < size:
        return None
    data = buf[4 : 4 + size]
    try:
        if conn.encryptor:
            stamp = conn.encryptor.extract_timestamp(data)
            if stamp < conn.recvLastTimestamp:
                raise ValueError("replayed frame")
            conn.recvLastTimestamp = stamp
            data = conn.encryptor.decrypt(data)
        if data[:1] != _PICKLE_PROTO:
            data = zlib.decompress(data)
        message = pickle.loads(data)  # noqa: S301 (hazard 6: only nodes may reach Raft ports; docs/security.md)
        if conn.recvRandKey:
            rand_key, message = message
            if rand_key != conn.recvRandKey:
                raise ValueError("wrong session key")
    except Exception:
        conn.disconnect()
        return None
    conn._TcpConnection__readBuffer = buf[4 + size :]
    return message


TcpConnection.send = _wire_send
TcpConnection._TcpConnection__processParseMessage = _wire_parse
