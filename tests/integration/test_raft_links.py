"""Raft links of real node processes (issue 12, part 1): every Raft port is
bound to ``raft_host``, nothing sent to one is unpickled, ``readonly`` peers
and pysyncobj's utility commands are refused, and a peer without the
cluster secret is dropped before it can send or read anything.

Each attack is what worked against the code before links: a pickled frame
ran its ``__reduce__`` in the node, a ``readonly`` greeting was sent the
leader's entries, ``['status']`` was answered. The raft_queue modules are
imported inside the tests so the attacks also run against older code.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pickle
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("links") / "cluster", nodes=3)
    c.start()
    try:
        c.wait_ready(60)
        client = c.client()
        client.create_queue("links", partitions=2, replication_factor=3)
        client.send_batch("links", [b"secret body %d" % i for i in range(5)])
        yield c
    finally:
        c.stop()


# ---- listening sockets --------------------------------------------------------------
def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` listens on,
    from /proc/net/tcp{,6} (state 0A) joined with the process's socket inodes."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] != "0A" or f[9] not in inodes:
                continue
            hexaddr, hexport = f[1].split(":")
            raw = bytes.fromhex(hexaddr)
            # (socket.inet_ntop is shadowed by pysyncobj's win_inet_pton)
            if len(raw) == 4:
                addr = str(ipaddress.IPv4Address(raw[::-1]))
            else:  # four little-endian 32-bit words
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                addr = str(ipaddress.IPv6Address(words))
            out.append((addr, int(hexport, 16)))
    return out


def test_no_node_port_listens_on_a_wildcard_address(nodes: LocalCluster) -> None:
    for i, spec in enumerate(nodes.specs):
        sockets = _listening(nodes.pid(i))
        ports = {p for _, p in sockets}
        raft = [p for p in ports if spec.raft_port_min <= p <= spec.raft_port_max]
        assert spec.metadata_port in ports and len(raft) >= 2, (spec.node_id, sockets)
        wild = [(a, p) for a, p in sockets if a in ("0.0.0.0", "::")]
        assert not wild, f"{spec.node_id} listens on {wild}"


def _raft_ports(nodes: LocalCluster, i: int) -> list[int]:
    """Node ``i``'s metadata port and one partition replica port."""
    spec = nodes.specs[i]
    ports = sorted(p for _, p in _listening(nodes.pid(i)))
    part = next(p for p in ports if spec.raft_port_min <= p <= spec.raft_port_max)
    return [spec.metadata_port, part]


# ---- a raw peer ---------------------------------------------------------------------
def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(0.2)
    return s


def _read_until_closed(s: socket.socket, within_s: float = 5.0) -> tuple[bytes, bool]:
    """Everything the node sent, and whether it closed the connection."""
    got = b""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return got, True
        if not chunk:
            return got, True
        got += chunk
    return got, False


def _frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


class _Touch:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


@pytest.mark.parametrize("which", [0, 1], ids=["metadata", "partition"])
def test_a_pickle_frame_runs_nothing_and_is_dropped(
    nodes: LocalCluster, tmp_path: Path, which: int
) -> None:
    port = _raft_ports(nodes, 0)[which]
    for framing in ("<i", ">I"):  # pysyncobj's length prefix, and ours
        target = tmp_path / f"pwned-{framing[0] == '<'}"
        for payload in (
            pickle.dumps(_Touch(str(target))),
            zlib.compress(pickle.dumps(_Touch(str(target)))),  # pysyncobj's framing
        ):
            with _connect(port) as s:
                s.sendall(struct.pack(framing, len(payload)) + payload)
                _, closed = _read_until_closed(s)
            time.sleep(0.2)
            assert not target.exists(), f"port {port}: the pickle ran"
            assert closed, f"port {port}: connection kept after a pickle frame"


def _old_frame(obj: Any) -> bytes:
    """A frame as pysyncobj 0.3.17 sends it (what a stock pysyncobj peer or
    its utility client would send)."""
    data = zlib.compress(pickle.dumps(obj, protocol=2), 3)
    return struct.pack("i", len(data)) + data


@pytest.mark.parametrize(
    "first", ["readonly", ["status"], ["add", "127.0.0.1:1"], ["remove", "127.0.0.1:2"]]
)
def test_readonly_peers_and_utility_commands_are_refused(nodes: LocalCluster, first: Any) -> None:
    # Before links, "readonly" was kept and sent the leader's entries, and
    # every utility command was answered (add/remove: proposed to the group).
    for i in range(nodes.nodes):
        for port in _raft_ports(nodes, i):
            with _connect(port) as s:
                s.sendall(_old_frame(first))
                data, closed = _read_until_closed(s, within_s=3.0)
            assert len(data) <= 4 + 37, f"{first!r} on port {port}: answered {data[:80]!r}"
            assert closed, f"{first!r} on port {port}: connection kept"


def _secret(nodes: LocalCluster) -> bytes:
    from raft_queue.security.secret import load_secret

    return load_secret(nodes.secret_path)


class Peer:
    """A peer that speaks the link protocol with ``secret`` (a member's, or not)."""

    def __init__(self, port: int, secret: bytes) -> None:
        from raft_queue.security.link import LinkSession
        from raft_queue.security.secret import RAFT_LINK, derive_key

        self.sock = _connect(port)
        self.session = LinkSession(derive_key(secret, RAFT_LINK), dialer=True)
        self.buf = b""
        self.send_raw(self.session.hello())
        hello = self.frame()
        assert hello is not None, "no HELLO from the node"
        self.send_raw(self.session.on_hello(hello))

    def send_raw(self, frame: bytes | None) -> None:
        assert frame is not None
        with contextlib.suppress(OSError):  # the node may have dropped us already
            self.sock.sendall(struct.pack(">I", len(frame)) + frame)

    def send(self, message: Any) -> None:
        from raft_queue.replication import wire

        self.send_raw(self.session.seal(wire._body(message)))

    def frame(self, within_s: float = 3.0) -> bytes | None:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">I", self.buf)
                if len(self.buf) >= 4 + n:
                    out, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    return out
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buf += chunk
        return None

    def messages(self, within_s: float = 3.0) -> list[Any]:
        """Messages received (opened and decoded) until the node closes or
        ``within_s`` passes; LinkError if one does not open."""
        from raft_queue.replication import wire

        out = []
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            frame = self.frame(deadline - time.monotonic())
            if frame is None:
                break
            body = self.session.open(frame)
            if body is not None:
                out.append(wire._decode(body))
        return out

    def closed(self, within_s: float = 3.0) -> bool:
        _, closed = _read_until_closed(self.sock, within_s)
        return closed


def _dialed_metadata_port(nodes: LocalCluster) -> tuple[int, str, list[Any]]:
    """A node's metadata port, the Raft address of a member that dials it (the
    greater address dials), and what the node sent that member's impostor
    holding the secret (the leader sends entries; any node keeps the link).

    The control stays well inside ``connectionTimeout`` (election_timeout_max_s,
    1.6 s): a node drops a link that leaves a message needing an answer
    unanswered that long (replication/wire.py, since pre-vote), and this
    impostor answers nothing. Reading for 1.5 s and then watching 0.5 s more
    crossed it whenever the node sent a heartbeat early (it failed CI)."""
    members = sorted(f"127.0.0.1:{s.metadata_port}" for s in nodes.specs)
    spec = next(s for s in nodes.specs if f"127.0.0.1:{s.metadata_port}" != members[-1])
    member = members[-1]
    peer = Peer(spec.metadata_port, _secret(nodes))
    peer.send(member)
    got = peer.messages(within_s=0.5)
    assert not peer.closed(within_s=0.3), "a member holding the secret was dropped"
    peer.sock.close()
    return spec.metadata_port, member, got


def test_only_a_holder_of_the_secret_reads_entries(nodes: LocalCluster) -> None:
    from raft_queue.security.link import LinkError

    port, member, got = _dialed_metadata_port(nodes)  # the control: the secret works
    assert all(isinstance(m, dict) for m in got)
    peer = Peer(port, os.urandom(32))  # the HELLOs are public; the keys differ
    peer.send(member)
    with pytest.raises(LinkError):
        peer.messages(within_s=2.0)  # the node's CONFIRM does not open
    assert peer.closed(), "a peer without the secret was kept"


def test_a_peer_without_the_secret_cannot_vote_or_join(nodes: LocalCluster) -> None:
    other = os.urandom(32)
    for i in range(nodes.nodes):
        for port in _raft_ports(nodes, i):
            peer = Peer(port, other)
            peer.send("127.0.0.1:65535")
            peer.send(
                {
                    "type": "request_vote",
                    "term": 10**9,
                    "last_log_index": 10**9,
                    "last_log_term": 10**9,
                }
            )
            assert peer.closed(), f"port {port} kept a peer without the secret"
    # Nothing it sent was taken: the cluster still serves.
    client = nodes.client()
    assert len(client.send_batch("links", [b"after"])) == 1


def test_members_greeting_as_readonly_or_strangers_are_refused(nodes: LocalCluster) -> None:
    for port in _raft_ports(nodes, 1):
        for greeting in ("readonly", "127.0.0.1:1", f"127.0.0.1:{port}"):
            peer = Peer(port, _secret(nodes))
            peer.send(greeting)
            assert peer.closed(), f"greeting {greeting!r} on {port} was accepted"


# ---- security.insecure: plaintext links, every other rule kept ------------------------
@pytest.fixture(scope="module")
def insecure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(
        tmp_path_factory.mktemp("plain") / "cluster",
        nodes=3,
        security={"cluster_secret_file": "", "insecure": True},
    )
    c.start()
    try:
        c.wait_ready(60)
        c.client().create_queue("plain", partitions=1, replication_factor=3)
        yield c
    finally:
        c.stop()


def _plain_hello(s: socket.socket) -> None:
    from raft_queue.security.link import LinkSession

    hello = LinkSession(None, dialer=True).hello()
    s.sendall(struct.pack(">I", len(hello)) + hello)


def test_insecure_nodes_bind_to_raft_host_and_unpickle_nothing(
    insecure: LocalCluster, tmp_path: Path
) -> None:
    for i in range(insecure.nodes):
        wild = [(a, p) for a, p in _listening(insecure.pid(i)) if a in ("0.0.0.0", "::")]
        assert not wild, f"n{i + 1} listens on {wild}"
    for port in _raft_ports(insecure, 0):
        target = tmp_path / f"pwned-{port}"
        payload = pickle.dumps(_Touch(str(target)))
        with _connect(port) as s:
            _plain_hello(s)  # a valid plaintext HELLO, then the pickle
            s.sendall(struct.pack(">I", len(payload)) + payload)
            _, closed = _read_until_closed(s)
        time.sleep(0.2)
        assert not target.exists() and closed, port


def test_insecure_nodes_refuse_readonly_and_sealed_peers(insecure: LocalCluster) -> None:
    from raft_queue.replication import codec
    from raft_queue.security.link import LinkSession

    for port in _raft_ports(insecure, 1):
        with _connect(port) as s:
            _plain_hello(s)
            body = b"\x00" + codec.encode("readonly")
            s.sendall(struct.pack(">I", len(body)) + body)
            _, closed = _read_until_closed(s)
        assert closed, f"readonly kept on {port}"
        with _connect(port) as s:  # a sealed HELLO to a plaintext node
            hello = LinkSession(os.urandom(32), dialer=True).hello()
            s.sendall(struct.pack(">I", len(hello)) + hello)
            _, closed = _read_until_closed(s)
        assert closed, f"a sealed peer was kept on {port}"
