"""Raft link frames (replication/wire.py over security/link.py): the HELLO
handshake, sealed frames, key confirmation, and a drop after any bad frame
(wrong secret, tampering, replay, reorder, oversize, a pickle). Real
pysyncobj TcpConnections over a socketpair, no network."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection

from raft_queue.replication import wire
from raft_queue.security.link import HELLO_BYTES, LinkSession

KEY = os.urandom(32)
HEARTBEAT = {
    "type": "append_entries",
    "term": 3,
    "commit_index": 7,
    "entries": [],
    "prevLogIdx": 7,
    "prevLogTerm": 3,
}


class End:
    """One side of a link: its connection and the messages it received."""

    def __init__(self, poller: Any, sock: socket.socket, key: bytes | None, dialer: bool) -> None:
        self.got: list[Any] = []
        self.conn = TcpConnection(poller, onMessageReceived=self.got.append, socket=sock)
        wire.start_link(self.conn, key, dialer)

    @property
    def alive(self) -> bool:
        return self.conn.state == CONNECTION_STATE.CONNECTED


def link(key_d: bytes | None = KEY, key_a: bytes | None = KEY) -> tuple[Any, End, End]:
    """(poller, dialer, acceptor) over a socketpair."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    poller = createPoller("poll")
    return poller, End(poller, a, key_d, True), End(poller, b, key_a, False)


def pump(poller: Any, until: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        poller.poll(0.02)


def capture(conn: TcpConnection) -> list[bytes]:
    """Every frame ``conn`` writes from now on (without its length prefix)."""
    frames: list[bytes] = []
    real = wire._write

    def spy(c: TcpConnection, frame: bytes, link: Any = None) -> None:
        if c is conn and (link is None or (not link.closed and c.raftq_link is link)):
            frames.append(frame)
        real(c, frame, link)

    wire._write = spy  # restored by the fixture below
    return frames


@pytest.fixture(autouse=True)
def _restore_write() -> Any:
    real = wire._write
    yield
    wire._write = real


def raw(conn: TcpConnection, frame: bytes) -> None:
    """Write ``frame`` on ``conn`` bypassing the link (what an attacker can do)."""
    conn._TcpConnection__writeBuffer += struct.pack(">I", len(frame)) + frame
    conn._TcpConnection__trySendBuffer()


def test_members_exchange_greeting_and_messages_sealed() -> None:
    poller, d, a = link()
    frames = capture(d.conn)
    d.conn.send("127.0.0.1:7001")
    d.conn.send(HEARTBEAT)
    a.conn.send({"type": "response_vote", "term": 4})
    pump(poller, lambda: len(a.got) == 2 and len(d.got) == 1)
    assert a.got == ["127.0.0.1:7001", HEARTBEAT]
    assert d.got == [{"type": "response_vote", "term": 4}]
    assert all(b"127.0.0.1:7001" not in f for f in frames), "the greeting went in clear"
    assert d.alive and a.alive


def test_a_peer_with_another_secret_is_dropped_before_any_message() -> None:
    poller, d, a = link(key_d=os.urandom(32))
    d.conn.send("127.0.0.1:7001")
    d.conn.send(HEARTBEAT)
    pump(poller, lambda: not a.alive)
    assert not a.alive and a.got == []
    assert d.got == []


@pytest.mark.parametrize(("key_d", "key_a"), [(None, KEY), (KEY, None)])
def test_plaintext_and_sealed_ends_refuse_each_other(key_d: Any, key_a: Any) -> None:
    poller, d, a = link(key_d, key_a)
    d.conn.send("127.0.0.1:7001")
    pump(poller, lambda: not a.alive and not d.alive)
    assert not a.alive and not d.alive and a.got == []


def test_plaintext_links_carry_the_codec_not_pickle() -> None:
    poller, d, a = link(None, None)
    d.conn.send("127.0.0.1:7001")
    d.conn.send(HEARTBEAT)
    pump(poller, lambda: len(a.got) == 2)
    assert a.got == ["127.0.0.1:7001", HEARTBEAT]


def test_tampered_frame_drops_the_connection() -> None:
    poller, d, a = link()
    d.conn.send("127.0.0.1:7001")
    pump(poller, lambda: len(a.got) == 1)
    bad = bytearray(d.conn.raftq_link.session.seal(wire._body(HEARTBEAT)))
    bad[5] ^= 1  # one bit of the ciphertext
    raw(d.conn, bytes(bad))
    pump(poller, lambda: not a.alive)
    assert not a.alive and a.got == ["127.0.0.1:7001"]


@pytest.mark.parametrize("mode", ["replay", "reorder"])
def test_replayed_and_reordered_frames_drop_the_connection(mode: str) -> None:
    poller, d, a = link()
    frames = capture(d.conn)
    d.conn.send("127.0.0.1:7001")
    pump(poller, lambda: len(a.got) == 1)
    if mode == "replay":
        d.conn.send(HEARTBEAT)
        pump(poller, lambda: len(a.got) == 2)
        raw(d.conn, frames[-1])  # the same sealed frame again
        want = 2
    else:
        session = d.conn.raftq_link.session
        first = session.seal(wire._body(HEARTBEAT))
        second = session.seal(wire._body({"type": "response_vote", "term": 9}))
        raw(d.conn, second)
        raw(d.conn, first)
        want = 1
    pump(poller, lambda: not a.alive)
    assert not a.alive, mode
    assert len(a.got) == want, mode


def test_a_frame_before_key_confirmation_is_refused() -> None:
    # Even a frame sealed with the right session keys must come after CONFIRM.
    a2, b2 = socket.socketpair()
    b2.setblocking(False)
    poller = createPoller("poll")
    acc = End(poller, b2, KEY, dialer=False)
    session = LinkSession(KEY, dialer=True)
    a2.sendall(struct.pack(">I", HELLO_BYTES) + session.hello())
    pump(poller, lambda: acc.conn.raftq_link.session.peer is not None)
    hello = a2.recv(4 + HELLO_BYTES)[4:]
    session.on_hello(hello)  # keys derived; CONFIRM not sent
    frame = session.seal(wire._body("127.0.0.1:7001"))
    a2.sendall(struct.pack(">I", len(frame)) + frame)
    pump(poller, lambda: not acc.alive)
    assert not acc.alive and acc.got == []


class _Touch:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


@pytest.mark.parametrize("key", [KEY, None])
@pytest.mark.parametrize("stage", ["first frame", "after handshake"])
def test_a_pickle_frame_runs_nothing_and_drops(tmp_path: Path, key: Any, stage: str) -> None:
    target = tmp_path / "pwned"
    poller, d, a = link(key, key)
    if stage == "after handshake":
        d.conn.send("127.0.0.1:7001")
        pump(poller, lambda: len(a.got) == 1)
    payload = pickle.dumps(_Touch(str(target)))
    raw(d.conn, payload)
    pump(poller, lambda: not a.alive)
    assert not a.alive, stage
    assert not target.exists(), stage


def test_oversized_frame_drops_before_it_is_read() -> None:
    poller, d, a = link()
    d.conn.send("127.0.0.1:7001")
    pump(poller, lambda: len(a.got) == 1)
    d.conn._TcpConnection__writeBuffer += struct.pack(">I", wire.max_frame_bytes() + 1) + b"x"
    d.conn._TcpConnection__trySendBuffer()
    pump(poller, lambda: not a.alive)
    assert not a.alive


def test_a_second_greeting_or_a_message_before_it_drops() -> None:
    poller, d, a = link()
    d.conn.send(HEARTBEAT)  # before the greeting
    pump(poller, lambda: not a.alive)
    assert not a.alive and a.got == []
    poller, d, a = link()
    d.conn.send("127.0.0.1:7001")
    d.conn.send("127.0.0.1:7002")
    pump(poller, lambda: not a.alive)
    assert not a.alive and a.got == ["127.0.0.1:7001"]


def test_snapshot_chunks_are_compressed_and_other_messages_not() -> None:
    # A chunk must cross the link within the sender's connection timeout (the
    # follower answers none): an LMDB image is mostly free pages.
    poller, d, a = link()
    frames = capture(d.conn)
    chunk = {"type": "append_entries", "term": 3, "commit_index": 1}
    chunk["serialized"] = (b"\0" * 65536, True, False)
    big = dict(HEARTBEAT, entries=[(b"\x00\xa2" + b"x" * 65536, 8, 3)])
    d.conn.send("127.0.0.1:7001")
    d.conn.send(chunk)
    d.conn.send(big)
    pump(poller, lambda: len(a.got) == 3)
    assert a.got[1:] == [chunk, big]
    assert len(frames[-2]) < 4096, "a snapshot chunk was not compressed"
    assert len(frames[-1]) > 65536, "an AppendEntries was compressed"


def test_before_key_confirmation_only_small_frames_are_read() -> None:
    # A stranger cannot make the node buffer a large frame before proving the secret.
    poller, d, a = link()
    d.conn._TcpConnection__writeBuffer += struct.pack(">I", wire.HANDSHAKE_FRAME_BYTES + 1)
    d.conn._TcpConnection__trySendBuffer()
    pump(poller, lambda: not a.alive)
    assert not a.alive


def test_frames_of_a_dropped_session_are_never_written() -> None:
    # pysyncobj reconnects an outgoing connection on the same TcpConnection,
    # sometimes from inside a write (a timeout found there): the rest of the
    # old session (CONFIRM, queued messages) must not go out on the new
    # socket ahead of its HELLO (seen once as "frame of 114111 bytes (cap 256)").
    poller, d, a = link()
    d.conn.send("127.0.0.1:7001")
    pump(poller, lambda: len(a.got) == 1)
    old = d.conn.raftq_link
    old.closed = True  # what LinkTransport._onDisconnected does on a drop
    before = len(a.got)
    d.conn.send(HEARTBEAT)  # a send on the dropped session
    wire._write(d.conn, old.session.seal(wire._body(HEARTBEAT)), old)  # a late flush
    for _ in range(5):
        poller.poll(0.02)
    assert len(a.got) == before and a.alive
    fresh = wire._Link(KEY, dialer=True)  # what the reconnect's start_link makes
    old.closed = False
    d.conn.raftq_link = fresh
    wire._write(d.conn, old.session.seal(wire._body(HEARTBEAT)), old)  # stale session
    for _ in range(5):
        poller.poll(0.02)
    assert len(a.got) == before and a.alive


def _age(conn: TcpConnection, seconds: float) -> None:
    """As if ``conn`` had read nothing (and written nothing) for ``seconds``."""
    conn._TcpConnection__lastReadTime -= seconds
    conn.raftq_unanswered -= seconds


def test_a_link_quiet_past_the_timeout_still_carries_a_vote_both_ways() -> None:
    # The two followers of a group never talk until their leader dies; the
    # vote request of that election must cross their quiet link (pysyncobj
    # dropped it on the write, or on the read before reading it).
    poller, d, a = link()
    d.conn.send("127.0.0.1:7001")  # the greeting: no answer comes to it
    pump(poller, lambda: len(a.got) == 1)
    for end in (d, a):
        _age(end.conn, 100.0)  # far past the 10 s connection timeout
    vote = {"type": "request_vote", "term": 5, "last_log_index": 9, "last_log_term": 4}
    d.conn.send(vote)
    pump(poller, lambda: len(a.got) == 2)
    assert a.got[-1] == vote
    _age(a.conn, 100.0)
    a.conn.send({"type": "response_vote", "term": 5})
    pump(poller, lambda: len(d.got) == 1)
    assert d.got == [{"type": "response_vote", "term": 5}]
    assert d.alive and a.alive


def test_a_peer_leaving_a_heartbeat_unanswered_past_the_timeout_is_dropped() -> None:
    poller, d, a = link()
    d.conn.send("127.0.0.1:7001")
    a.conn.send({"type": "response_vote", "term": 4})  # both handshakes done
    pump(poller, lambda: len(a.got) == 1 and len(d.got) == 1)
    d.conn.send(HEARTBEAT)  # a live follower acks it
    pump(poller, lambda: len(a.got) == 2)
    assert d.conn.raftq_unanswered > d.conn._TcpConnection__lastReadTime, "no clock started"
    _age(d.conn, 100.0)  # ...this one never did
    d.conn.send(HEARTBEAT)
    assert not d.alive
