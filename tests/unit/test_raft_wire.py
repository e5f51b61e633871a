"""The Raft wire frames (replication/wire.py patches pysyncobj's TcpConnection):
small messages go as bare pickles (no zlib), large ones compressed, and frames
from unpatched pysyncobj peers (zlib of a protocol-2 pickle) still decode.
A socketpair, no network."""

from __future__ import annotations

import socket
import struct
import time
import zlib
from typing import Any

from pysyncobj import pickle as raft_pickle
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import TcpConnection

from raft_queue.replication import wire


def pair() -> tuple[Any, TcpConnection, list[Any], socket.socket]:
    """(poller, sending connection, messages received, receiving socket)."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    poller = createPoller("poll")
    got: list[Any] = []
    TcpConnection(poller, onMessageReceived=got.append, socket=b)
    tx = TcpConnection(poller, socket=a)
    return poller, tx, got, b


def pump(poller: Any, got: list[Any], want: int) -> None:
    deadline = time.monotonic() + 10
    while len(got) < want and time.monotonic() < deadline:
        poller.poll(0.05)


def frames_of(tx: TcpConnection) -> list[bytes]:
    """Every write buffer ``tx`` flushes (length prefix + frame), in order."""
    sent: list[bytes] = []
    flush = tx._TcpConnection__trySendBuffer

    def capture() -> None:
        sent.append(bytes(tx._TcpConnection__writeBuffer))
        flush()

    tx._TcpConnection__trySendBuffer = capture
    return sent


def test_small_messages_travel_uncompressed_and_large_ones_compressed() -> None:
    poller, tx, got, _ = pair()
    sent = frames_of(tx)
    heartbeat = {"type": "append_entries", "term": 3, "entries": [], "prevLogIdx": 7}
    big = {"type": "append_entries", "entries": [(b"x" * wire.COMPRESS_MIN_BYTES, 8, 3)]}
    tx.send(heartbeat)
    tx.send(big)
    pump(poller, got, 2)
    assert got == [heartbeat, big]
    assert sent[0][4:5] == b"\x80", "a small message was compressed"
    assert sent[1][4:5] == b"\x78", "a large message was not compressed"
    assert len(sent[1]) < wire.COMPRESS_MIN_BYTES // 10


def test_frames_from_unpatched_pysyncobj_still_decode() -> None:
    poller, tx, got, _ = pair()
    old = {"type": "next_node_idx", "next_node_idx": 5, "reset": False, "success": True}
    frame = zlib.compress(raft_pickle.dumps(old), 3)  # what 0.3.17 sends
    tx._TcpConnection__writeBuffer += struct.pack("i", len(frame)) + frame
    tx._TcpConnection__trySendBuffer()
    tx.send(old)  # and ours after it on the same connection
    pump(poller, got, 2)
    assert got == [old, old]


def test_snapshot_chunks_are_compressed_whatever_their_size() -> None:
    # A chunk must cross the link within the sender's connection timeout (the
    # follower answers none): an LMDB image is mostly free pages.
    poller, tx, got, _ = pair()
    sent = frames_of(tx)
    chunk = {"type": "append_entries", "term": 3, "serialized": (b"\0" * 65536, True, False)}
    tx.send(chunk)
    pump(poller, got, 1)
    assert got == [chunk]
    assert sent[0][4:5] == b"\x78", "a snapshot chunk was not compressed"
    assert len(sent[0]) < 4096
