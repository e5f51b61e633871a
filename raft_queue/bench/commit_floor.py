"""The floor of a replicated, synced send in this stack (issue 17): W1 with
everything of raft_queue taken out but the shape of its commit path.

``grpc_floor`` measures the parts (a gRPC round trip, one fdatasync); this
measures them put together as a W1 send must: the SDK's sync client sends one
request on a bidi stream to a ``grpc.aio`` server (the leader process), which
appends it to a preallocated journal file and fdatasyncs it while it sends it
to two follower processes over plain TCP; each follower appends, fdatasyncs
and acks; the leader answers once two of the three copies are durable (a
majority), as a Raft leader commits. No Raft bookkeeping, no LMDB, no
authentication, no encryption, no codec beyond a 12-byte frame header: what is
left is processes, threads, sockets and disk, so no implementation on this
stack can be faster on this machine than the figure printed.

Two leader shapes, each in its own fresh processes:

- ``threads``: raft_queue's shape. The asyncio loop hands the request to a
  driver thread (a deque and a pipe write, as ``RaftHost.wake``), the driver
  sends the frames and hands the leader's own sync to an I/O thread (as
  ``SyncThreads``), which posts its end back through the pipe; the driver
  counts copies and resolves a ``concurrent.futures.Future`` the loop awaits
  (``asyncio.wrap_future``, as ``Cluster.submit_append``).
- ``loop``: no driver thread. The loop writes the frames itself, watches the
  follower sockets with ``add_reader``, and resolves an asyncio future; only
  the leader's fdatasync runs on an I/O thread (``call_soon_threadsafe``
  back). This is the commit path "without the driver/poller/event-loop
  hand-offs" the W1 notes asked about: the difference between the two is what
  such a redesign could gain at best.

- ``pysyncobj``: the Raft library itself behind the same stream. Three
  processes run pysyncobj 0.3.17 as it ships (replication/bare.py: its own
  tick thread, ``appendEntriesUseBatch=False``, a pickled counter command);
  the leader's stream handler appends through it and answers when the
  library applies. No journal sync (the library has none: hazard 3), so it
  is a lower bound for any W1 built on pysyncobj: with ``threads`` it shows
  how much of raft_queue's W1 is the library and how much is ours.

``echo`` (grpc_floor's stream echo, no disk, no followers) is measured in the
same rounds for reference. Modes are interleaved in ``--rounds`` rounds and the
medians of the rounds' percentiles are printed::

    python -m raft_queue.bench.commit_floor --rounds 3 --n 2000 --dir /tmp
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import queue
import selectors
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from typing import Any

import grpc

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.bench.grpc_floor import bench_stream, start_server
from raft_queue.bench.measure import print_round_medians, round_medians
from raft_queue.replication import bare

FRAME = struct.Struct("<QI")  # seq, payload length (leader -> follower)
ACK = struct.Struct("<Q")  # seq (follower -> leader)
JOURNAL_BYTES = 64 << 20  # preallocated as replication/diskfiles.py does: no size change to sync
MODES = ("echo", "threads", "loop", "pysyncobj")


class Journal:
    """Append-only file in preallocated blocks; ``sync`` is one fdatasync.
    Unlinked at once: the processes are killed, and the disk is freed then."""

    def __init__(self, directory: str) -> None:
        fd, path = tempfile.mkstemp(prefix="commit-floor-", dir=directory)
        os.unlink(path)
        os.posix_fallocate(fd, 0, JOURNAL_BYTES)
        self.fd, self.offset = fd, 0

    def append(self, data: bytes) -> None:
        os.pwrite(self.fd, data, self.offset)
        self.offset = (self.offset + len(data)) % (JOURNAL_BYTES - 65536)

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def _frames(buf: bytearray) -> list[bytes]:
    """The whole frames (header and payload) taken off the front of ``buf``."""
    out = []
    while len(buf) >= FRAME.size:
        _, n = FRAME.unpack_from(buf)
        if len(buf) < FRAME.size + n:
            break
        out.append(bytes(buf[: FRAME.size + n]))
        del buf[: FRAME.size + n]
    return out


def _acks(buf: bytearray) -> list[int]:
    whole = len(buf) - len(buf) % ACK.size
    seqs = [ACK.unpack_from(buf, i)[0] for i in range(0, whole, ACK.size)]
    del buf[:whole]
    return seqs


# ---- a follower: one thread, append, sync, ack ---------------------------------------------


def follow(port: int, directory: str) -> None:
    """Blocking and single-threaded: the fastest a follower can be."""
    journal = Journal(directory)
    server = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    conn, _ = server.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    try:
        while data := conn.recv(65536):
            buf += data
            frames = _frames(buf)
            if not frames:
                continue
            for frame in frames:
                journal.append(frame)
            journal.sync()
            conn.sendall(b"".join(ACK.pack(FRAME.unpack_from(f)[0]) for f in frames))
    finally:
        journal.close()


# ---- the leader's two shapes ---------------------------------------------------------------


class Copies:
    """Durable copies per seq; ``durable(seq)`` hands back the waiter once, at two of three."""

    def __init__(self) -> None:
        self.count: dict[int, int] = {}
        self.waiters: dict[int, Any] = {}

    def add(self, seq: int, waiter: Any) -> None:
        self.count[seq], self.waiters[seq] = 0, waiter

    def durable(self, seq: int) -> Any:
        """The waiter to resolve when this copy makes a majority, else None."""
        n = self.count[seq] = self.count[seq] + 1
        if n == 3:
            del self.count[seq]
        return self.waiters.pop(seq) if n == 2 else None


class Leader:
    """What both shapes share: the follower sockets, the leader's journal
    (synced on an I/O thread fed by ``io``), and the count of copies."""

    def __init__(self, socks: list[socket.socket], journal: Journal) -> None:
        self.socks, self.journal, self.copies, self.seq = socks, journal, Copies(), 0
        self.io: queue.Queue[tuple[list[int], bytes]] = queue.Queue()
        self.bufs = {s: bytearray() for s in socks}

    def _acked(self, sock: socket.socket) -> None:
        buf = self.bufs[sock]
        buf += sock.recv(65536)
        for seq in _acks(buf):
            self._durable(seq)

    def _durable(self, seq: int) -> None:
        waiter = self.copies.durable(seq)
        if waiter is not None and not waiter.done():
            waiter.set_result(seq)

    def _durable_all(self, seqs: list[int]) -> None:
        for seq in seqs:
            self._durable(seq)

    def _sync_forever(self) -> None:
        while True:
            seqs, data = self.io.get()
            self.journal.append(data)
            self.journal.sync()
            self._synced(seqs)

    def _synced(self, seqs: list[int]) -> None:  # the I/O thread
        raise NotImplementedError


class ThreadedCommit(Leader):
    """Loop -> driver thread -> (followers, I/O thread) -> driver -> loop."""

    def __init__(self, socks: list[socket.socket], journal: Journal) -> None:
        super().__init__(socks, journal)
        self.inbox: collections.deque[tuple[bytes, Future[int]]] = collections.deque()
        self.synced: collections.deque[list[int]] = collections.deque()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        threading.Thread(target=self._drive, daemon=True, name="driver").start()
        threading.Thread(target=self._sync_forever, daemon=True, name="io").start()

    def submit(self, payload: bytes) -> Future[int]:  # the loop thread
        fut: Future[int] = Future()
        self.inbox.append((payload, fut))
        os.write(self.wake_w, b"x")
        return fut

    def _drive(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.wake_r, selectors.EVENT_READ)
        for s in self.socks:
            sel.register(s, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fileobj == self.wake_r:
                    os.read(self.wake_r, 4096)
                else:
                    self._acked(key.fileobj)  # type: ignore[arg-type]
            while self.synced:
                self._durable_all(self.synced.popleft())
            self._send_new()

    def _send_new(self) -> None:
        seqs, frames = [], []
        while self.inbox:
            payload, fut = self.inbox.popleft()
            self.seq += 1
            self.copies.add(self.seq, fut)
            seqs.append(self.seq)
            frames.append(FRAME.pack(self.seq, len(payload)) + payload)
        if frames:
            data = b"".join(frames)
            self.io.put((seqs, data))  # the leader's sync begins before the sends, as ticks.py
            for s in self.socks:
                s.sendall(data)

    def _synced(self, seqs: list[int]) -> None:
        self.synced.append(seqs)
        os.write(self.wake_w, b"x")


class LoopCommit(Leader):
    """Everything on the asyncio loop but the leader's fdatasync."""

    def __init__(self, socks: list[socket.socket], journal: Journal) -> None:
        super().__init__(socks, journal)
        self.loop = asyncio.get_running_loop()
        for s in socks:
            s.setblocking(False)
            self.loop.add_reader(s, self._acked, s)
        threading.Thread(target=self._sync_forever, daemon=True, name="io").start()

    def submit(self, payload: bytes) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = self.loop.create_future()
        self.seq += 1
        self.copies.add(self.seq, fut)
        data = FRAME.pack(self.seq, len(payload)) + payload
        self.io.put(([self.seq], data))
        for s in self.socks:  # a few hundred bytes into an empty socket buffer
            if s.send(data) != len(data):
                raise RuntimeError("a short send to a follower (its socket buffer is full)")
        return fut

    def _synced(self, seqs: list[int]) -> None:
        self.loop.call_soon_threadsafe(self._durable_all, seqs)


async def lead(port: int, mode: str, peers: list[int], directory: str) -> None:
    socks = [socket.create_connection(("127.0.0.1", p)) for p in peers]
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    journal = Journal(directory)
    if mode == "threads":
        threaded = ThreadedCommit(socks, journal)

        async def commit(payload: bytes) -> int:
            return await asyncio.wrap_future(threaded.submit(payload))

    else:
        looped = LoopCommit(socks, journal)

        async def commit(payload: bytes) -> int:
            return await looped.submit(payload)

    await serve(port, commit, "ready")


async def bare_node(index: int, port: int) -> None:
    """Mode ``pysyncobj``: member ``index`` of a bare pysyncobj group on raft
    ports ``port + 3 ..``, serving the stream on ``port + index``; it prints
    whether it leads, for the client to pick the leader's port."""
    raft = [f"127.0.0.1:{port + 3 + i}" for i in range(3)]
    log = bare.start(raft[index], [a for i, a in enumerate(raft) if i != index])

    async def commit(payload: bytes) -> int:
        return await bare.commit(log, payload)

    await serve(port + index, commit, "ready leader" if bare.leads(log) else "ready follower")


async def serve(port: int, commit: Any, ready: str) -> None:
    """The stream every leader shape answers: one SendResponse per request, once committed."""

    async def stream(requests: Any, context: Any) -> Any:
        async for request in requests:
            offset = await commit(request.SerializeToString())
            yield queue_pb2.SendResponse(results=[queue_pb2.SendResult(offset=offset)])

    handler = grpc.stream_stream_rpc_method_handler(
        stream,
        request_deserializer=queue_pb2.SendRequest.FromString,
        response_serializer=queue_pb2.SendResponse.SerializeToString,
    )
    server = grpc.aio.server()
    generic = grpc.method_handlers_generic_handler("floor.Echo", {"Stream": handler})
    server.add_generic_rpc_handlers((generic,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(ready, flush=True)
    await server.wait_for_termination()


# ---- orchestration ---------------------------------------------------------------------------


def _launch(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "raft_queue.bench.commit_floor", *args],
        stdout=subprocess.PIPE,
        text=True,
    )


def _ready(proc: subprocess.Popen[str]) -> str:
    """What ``proc`` printed after "ready" ("" or its role); it is killed if it
    printed anything else (it failed to start)."""
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line.split(" ")[0] != "ready":
        proc.kill()
        raise RuntimeError(f"{proc.args!r} did not start")
    return line[len("ready") :].strip()


def _spawn(*args: str) -> subprocess.Popen[str]:
    proc = _launch(*args)
    _ready(proc)
    return proc


def _bare_processes(port: int) -> tuple[list[subprocess.Popen[str]], int]:
    """Three bare pysyncobj members (started together: none is ready before a
    leader is elected) and the stream port of the one that leads."""
    procs = [_launch("--bare", str(i), "--port", str(port)) for i in range(3)]
    try:
        roles = [_ready(proc) for proc in procs]
    except BaseException:
        _stop(procs)
        raise
    if roles.count("leader") != 1:
        _stop(procs)
        raise RuntimeError(f"pysyncobj: roles {roles}, not one leader")
    return procs, port + roles.index("leader")


def _processes(mode: str, port: int, directory: str) -> tuple[list[subprocess.Popen[str]], int]:
    """The processes of ``mode`` and the port its client sends to."""
    if mode == "echo":
        return [start_server(port)], port
    if mode == "pysyncobj":
        return _bare_processes(port)
    peers = [port + 1, port + 2]
    peer_list = ",".join(map(str, peers))
    lead = ("--lead", str(port), "--mode", mode, "--peers", peer_list, "--dir", directory)
    procs: list[subprocess.Popen[str]] = []
    try:
        for args in [("--follow", str(p), "--dir", directory) for p in peers] + [lead]:
            procs.append(_spawn(*args))
    except BaseException:
        _stop(procs)  # a leader that did not start leaves no follower behind
        raise
    return procs, port


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def measure(mode: str, n: int, directory: str, port: int) -> list[float]:
    """``n`` one-at-a-time sends' round trips (ms) on fresh processes of ``mode``."""
    procs, target = _processes(mode, port, directory)
    channel = grpc.insecure_channel(f"127.0.0.1:{target}")
    try:
        bench_stream(channel, 200)  # warm: connection, first-call paths, the journal's pages
        return bench_stream(channel, n)
    finally:
        channel.close()
        _stop(procs)


def run(rounds: int, n: int, directory: str, port: int) -> dict[str, dict[str, Any]]:
    per_mode: dict[str, list[list[float]]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            per_mode[mode].append(measure(mode, n, directory, port))
    return round_medians(per_mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raft_queue.bench.commit_floor")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=2000, help="sends per mode and round")
    parser.add_argument("--dir", default=".", help="where the journals go (the nodes' disk)")
    parser.add_argument(
        "--port", type=int, default=17580, help="the first of 6 ports (leader; followers +1, +2)"
    )
    parser.add_argument("--bare", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--follow", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--lead", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("threads", "loop"), help=argparse.SUPPRESS)
    parser.add_argument("--peers", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.follow:
        follow(args.follow, args.dir)
        return 0
    if args.bare >= 0:
        asyncio.run(bare_node(args.bare, args.port))
        return 0
    if args.lead:
        peers = [int(p) for p in args.peers.split(",")]
        asyncio.run(lead(args.lead, args.mode, peers, args.dir))
        return 0
    result = run(args.rounds, args.n, args.dir, args.port)
    print_round_medians(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
