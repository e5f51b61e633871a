"""pysyncobj's transport, as raft_queue uses it: node identity, links and frames.

``ProxiedNode`` keeps a peer's identity (its address) apart from where we
dial it (a fault-injection proxy). ``LinkTransport`` is the transport of
every ``SafeSyncObj``: it starts a link handshake on each connection
(security/link.py: proof of the cluster secret, sealed frames), accepts as
first message only the greeting of a member it does not dial itself,
refuses ``readonly`` peers and registers none of pysyncobj's utility
commands (status, add, remove, set_version, transfer). Importing this module
replaces ``TcpConnection.send``, its frame parser and its read (a bytearray
buffer) with the frames below, and its connection timeout with one that
spares links quiet by design (``_silence_timeout``); ``raft.py`` imports it, so every connection
uses them.

Frame: ``>I`` length, then the frame (at most ``max_frame_bytes()``, and
``HANDSHAKE_FRAME_BYTES`` until the peer's CONFIRM opened; a longer or
empty one drops the connection). The first frame each way is the
link HELLO; after it every frame is sealed (AES-GCM, link.py) or, with no
cluster secret, plain. Inside: one byte (0: raw, 1: zlib) and the message's
codec bytes (codec.py): never a pickle. Any bad frame (too long, failed
authentication, unknown type, malformed, a message before the greeting, a
second greeting) drops the connection; the dialer reconnects.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import socket
import struct
import zlib
from typing import Any

from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.node import TCPNode
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from raft_queue.replication import codec
from raft_queue.security.link import LinkError, LinkSession

log = logging.getLogger(__name__)


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


# ---- frame size ---------------------------------------------------------------------
# The largest legitimate frame is an AppendEntries: entries up to
# APPEND_ENTRIES_BATCH_BYTES (raft.py) plus the one that crosses it, which
# is at most group.MAX_ENTRY_BYTES or one command of up to
# Limits.max_request_bytes (a Send) plus its encoding. Snapshot chunks are
# 64 KiB. So: max_request_bytes + FRAME_SLACK_BYTES; the node sets it from
# its config at start (``set_max_request_bytes``), the default matches the
# default limits (64 MiB).
FRAME_SLACK_BYTES = 16 << 20
_max_frame = (64 << 20) + FRAME_SLACK_BYTES


def set_max_request_bytes(max_request_bytes: int) -> None:
    """Size the frame cap for ``limits.max_request_bytes`` (process-wide)."""
    global _max_frame
    _max_frame = max_request_bytes + FRAME_SLACK_BYTES


def max_frame_bytes() -> int:
    return _max_frame


# Until the peer proved the secret (its CONFIRM opened) only handshake frames
# are read: a stranger cannot make a node buffer a large frame.
HANDSHAKE_FRAME_BYTES = 256
_LEN = struct.Struct(">I")
_RAW, _ZLIB = b"\x00", b"\x01"
_NOTHING = object()  # a frame that carried no message (HELLO, CONFIRM)


class _Link:
    """A connection's link state: the handshake, messages waiting for it, and
    whether the greeting is still expected (acceptor side)."""

    __slots__ = ("closed", "expect_greeting", "pending", "session")

    def __init__(self, key: bytes | None, dialer: bool) -> None:
        self.session = LinkSession(key, dialer)
        self.pending: list[bytes] = []
        self.expect_greeting = not dialer
        # The connection dropped: nothing of this session is written any
        # more. pysyncobj reconnects an outgoing connection on the same
        # TcpConnection, sometimes from inside the drop (a timeout found
        # while writing); frames of the old session must not reach the new
        # socket ahead of its HELLO.
        self.closed = False


def start_link(conn: TcpConnection, key: bytes | None, dialer: bool) -> None:
    """Begin the handshake on a fresh connection: state, then our HELLO."""
    link = _Link(key, dialer)
    conn.raftq_link = link
    _write(conn, link.session.hello(), link)


def _write(conn: TcpConnection, frame: bytes, link: _Link | None = None) -> None:
    """Frame ``frame`` out on ``conn``, unless ``link`` (the session it
    belongs to) is no longer the connection's live one."""
    if link is not None and (link.closed or conn.raftq_link is not link):
        return
    conn._TcpConnection__writeBuffer += _LEN.pack(len(frame)) + frame
    conn._TcpConnection__trySendBuffer()


# Messages a live peer always answers soon (an ack, a batch ack, a command
# result): only these start the silence clock (_silence_timeout). Votes are
# not among them (a refused vote gets no answer), nor greetings or replies.
_ANSWERED = frozenset(("append_entries", "hb_batch", "apply_command"))


def _silence_timeout(conn: TcpConnection) -> None:
    """pysyncobj's connection timeout, counted from the first message we sent
    that a live peer answers (``_ANSWERED``) and it has not, not from the last
    read. pysyncobj dropped a connection silent for ``connectionTimeout``
    at its next event, a write or a read: a link quiet by design (the two
    followers of a group never talk until an election) was dropped by the
    very vote request meant to cross it (on the sender's write, or on the
    receiver's read, before reading it), and an election after a leader
    died lost its first round: measured, a split vote and 2.0-2.9 s from
    kill -9 to a new leader with a 0.8-1.6 s election timeout
    (docs/benchmarks.md, failover). A peer that stops answering what it
    must is still dropped one timeout after the first unanswered message."""
    since = conn.raftq_unanswered
    if since > conn._TcpConnection__lastReadTime and (
        monotonic_time() - since > conn._TcpConnection__timeout
    ):
        conn.disconnect()


def _body(message: Any) -> bytes:
    """Codec bytes behind the compression byte. Snapshot chunks are always
    compressed: an LMDB image is mostly free pages, and a 64 KiB chunk must
    cross the link within the sender's connection timeout (the follower
    answers no chunk). Nothing else is (entries can hold what clients sent:
    no compression side channel inside sealed frames, and zlib costs more
    than a small message)."""
    data = codec.encode(message)
    if type(message) is dict and message.get("serialized"):
        return _ZLIB + zlib.compress(data, 1)
    return _RAW + data


def _wire_send(conn: TcpConnection, message: Any) -> None:
    try:
        body = _body(message)
    except codec.CodecError:
        log.exception("not sent: a message with no wire encoding")
        return
    if (
        type(message) is dict
        and message.get("type") in _ANSWERED
        and conn.raftq_unanswered <= conn._TcpConnection__lastReadTime
    ):
        conn.raftq_unanswered = monotonic_time()  # the first such since the last read
    link: _Link | None = conn.raftq_link
    if link is None:  # a plain pysyncobj transport (tests): unsealed codec frames
        _write(conn, body)
    elif link.closed:
        return  # dropped; pysyncobj's transport reports the send failed
    elif not link.session.ready:
        link.pending.append(body)  # sealed (in order) once the HELLO arrives
    else:
        _write(conn, link.session.seal(body), link)


def _decode(payload: bytes) -> Any:
    flag = payload[:1]
    if flag == _RAW:
        return codec.decode(payload, 1)
    if flag == _ZLIB:
        inflater = zlib.decompressobj()
        data = inflater.decompress(payload[1:], _max_frame)
        if inflater.unconsumed_tail or not inflater.eof:
            raise codec.CodecError("compressed message too large or truncated")
        return codec.decode(data)
    raise codec.CodecError("unknown compression byte")


def _receive(conn: TcpConnection, frame: bytes) -> Any:
    link: _Link | None = conn.raftq_link
    if link is None:
        return _decode(frame)
    session = link.session
    if session.peer is None:
        confirm = session.on_hello(frame)
        if confirm is not None:
            _write(conn, confirm, link)
        pending, link.pending = link.pending, []
        for waiting in pending:
            _write(conn, session.seal(waiting), link)
        return _NOTHING
    body = session.open(frame)
    if body is None:
        return _NOTHING
    message = _decode(body)
    if type(message) is str:
        if not link.expect_greeting:
            raise LinkError("unexpected greeting")
        link.expect_greeting = False
    elif link.expect_greeting:
        raise LinkError("a message before the greeting")
    return message


def _drop(conn: TcpConnection, reason: object) -> None:
    link: _Link | None = conn.raftq_link
    where = ""
    if link is not None:
        s = link.session
        where = f" ({'dialer' if s.dialer else 'acceptor'}, hello={s.peer is not None})"
    sock = conn._TcpConnection__socket
    with contextlib.suppress(OSError, AttributeError, IndexError, TypeError):
        where += f" local {sock.getsockname()[1]} peer {sock.getpeername()[1]}"
    log.warning("dropping a Raft connection%s: %s", where, reason)
    conn.disconnect()


def _wire_read(conn: TcpConnection) -> bool:
    """pysyncobj's ``__processRead`` with a bytearray read buffer: its bytes
    buffer was copied whole on every recv (a 1 MiB frame in 64 KiB reads
    copied ~8 MiB, and several frames in one read far more)."""
    try:
        incoming = conn._TcpConnection__socket.recv(conn._TcpConnection__recvBufferSize)
    except OSError as e:
        if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
            conn.disconnect()
        return False
    if not incoming or conn._TcpConnection__socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
        conn.disconnect()
        return False
    buf = conn._TcpConnection__readBuffer
    if type(buf) is not bytearray:  # pysyncobj resets it to bytes() on (dis)connect
        buf = conn._TcpConnection__readBuffer = bytearray(buf)
    buf += incoming
    return True


def _wire_parse(conn: TcpConnection) -> Any:
    """pysyncobj's ``__processParseMessage`` with the frames above: the next
    message, or None when more bytes are needed or the connection was dropped."""
    while conn.state == CONNECTION_STATE.CONNECTED:
        link = conn.raftq_link
        if link is not None and link.closed:
            return None
        buf = conn._TcpConnection__readBuffer
        if type(buf) is not bytearray:
            buf = conn._TcpConnection__readBuffer = bytearray(buf)
        if len(buf) < 4:
            return None
        (size,) = _LEN.unpack_from(buf)
        cap = _max_frame if link is None or link.session.confirmed else HANDSHAKE_FRAME_BYTES
        if size == 0 or size > cap:
            _drop(conn, f"frame of {size} bytes (cap {cap})")
            return None
        if len(buf) - 4 < size:
            return None
        frame = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        try:
            message = _receive(conn, frame)
        except (LinkError, codec.CodecError, zlib.error) as exc:
            _drop(conn, exc)
            return None
        if message is not _NOTHING:
            return message
    return None


TcpConnection.raftq_link = None
TcpConnection.raftq_unanswered = 0.0  # pysyncobj's clock; see _silence_timeout
TcpConnection._TcpConnection__processConnectionTimeout = _silence_timeout
TcpConnection.send = _wire_send
TcpConnection._TcpConnection__processParseMessage = _wire_parse
TcpConnection._TcpConnection__processRead = _wire_read


class LinkTransport(TCPTransport):
    """pysyncobj's TCP transport with links (module doc). The link key is the
    SyncObj's ``link_key`` attribute, set before its transport is made."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:  # noqa: N803
        self._link_key: bytes | None = getattr(syncObj, "link_key", None)
        super().__init__(syncObj, selfNode, otherNodes)

    def setOnUtilityMessageCallback(self, message: str, callback: Any) -> None:  # noqa: N802
        """pysyncobj registers status/add/remove/set_version/transfer here:
        none is registered (they changed membership for anyone)."""

    def _onUtilityMessage(self, conn: Any, message: Any) -> bool:  # noqa: N802
        return False

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:  # noqa: N802
        super()._onNewIncomingConnection(conn)
        conn.encryptor = None  # the link seals frames, not pysyncobj's Fernet
        start_link(conn, self._link_key, dialer=False)

    def _onOutgoingConnected(self, conn: TcpConnection) -> None:  # noqa: N802
        conn.encryptor = None
        start_link(conn, self._link_key, dialer=True)
        self._sendSelfAddress(conn)  # the greeting: sealed after the HELLOs
        self._onNodeConnected(self._connToNode(conn))

    def _onDisconnected(self, conn: TcpConnection) -> None:  # noqa: N802
        link: _Link | None = conn.raftq_link
        if link is not None:
            link.closed = True  # before pysyncobj may reconnect this conn
        super()._onDisconnected(conn)

    def _onIncomingMessageReceived(self, conn: TcpConnection, message: Any) -> None:  # noqa: N802
        """The greeting (the wire allows no other first message): the address
        of a member that dials us. Anything else (``readonly``, an unknown
        address, a member we dial ourselves) drops the connection."""
        node = self._nodeAddrToNode.get(message) if type(message) is str else None
        if node is None or self._shouldConnect(node):
            log.warning("refused a Raft peer greeting as %r", message)
            self._unknownConnections.discard(conn)
            conn.disconnect()
            return
        self._unknownConnections.discard(conn)
        self._connections[node] = conn
        conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
        self._onNodeConnected(node)
