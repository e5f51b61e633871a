"""raft_queue behind the peer harness's adapter interface (QueueAdapter in loadgen.py).

So the shared harness can run its own W1-W4 code against us, exactly as it ran
NATS and RabbitMQ::

    .venv/bin/raftq dev up --data-dir /tmp/raftq-peer --base-port 17100 &
    .venv/bin/python ../shared/bench/peers/loadgen.py run \\
        --peer raft_queue.bench.peer_adapter:RaftQueueAdapter \\
        --opt target=127.0.0.1:17101,127.0.0.1:17102,127.0.0.1:17103

``loadgen.py`` imports only the standard library, so our venv's python can run
it; W4's consumer is a spawned process that imports this module by name, so
raft_queue must be importable there (our venv, or ``pip install -e .``
into the harness venv). The class duck-types QueueAdapter (the harness never
checks the base class), so this module does not depend on loadgen.py's path.

Options (``--opt key=value``): ``target`` bootstrap addresses (default
$RAFTQ_SERVER or 127.0.0.1:7101); ``partitions`` (1, as the peers' single
stream/queue); ``durability`` (fsync); ``threads`` concurrent Send RPCs per
publish_batch (4); ``pids`` comma-separated node pids for the server CPU
column, else every ``raft_queue.server.main`` process whose command line
contains ``cluster_dir`` (default: all of them); ``token`` (default
$RAFTQ_TOKEN, else ``cluster_dir``/admin.token, which ``raftq dev up`` writes);
``ack``: ``background`` (default: ``client.ack(wait=False)``, the contract
of the NATS and RabbitMQ adapters' ``msg.ack()`` / ``basic_ack``: the acks
ride the next receive, or leave within 10 ms, or at close) or ``sync``
(each consume waits for its ack's Raft commit, as before) or ``none``
(a diagnostic, not a mode to publish: nothing is acked, so the run shows
what the acks cost; W4's 15 s end before the visibility timeout); ``prefetch``:
how many Receives are kept in flight ahead of the harness (0: none; ``auto``
by default: 2 when the harness made this adapter with ``max_inflight`` > 1,
its throughput workloads (W2, W3's drain), 0 when ``max_inflight`` is 1, its
latency workloads (W1, W4's consumer, where receiving ahead tripled W4's
p99)); ``recv``: messages per Receive ahead (``auto``: the harness's
``consumer_window`` / ``prefetch``, at most 1,000: 512 in W3). This is the
NATS adapter's push consumer (``max_ack_pending`` = the window, messages
pushed into a client buffer as acks free it) and RabbitMQ's prefetch: the
adapter holds what it received in a buffer, each consume returns up to ``n``
of it and acks those in the background (they ride the next Receive: one
Raft entry with its lease), and a new Receive leaves whenever the held and
in-flight messages leave room for one in the window. The harness's
``consume(256)`` thus costs a Raft round per 512 messages, not per 256
(docs/benchmarks.md, "W3: Receives of half the window"). At close, the
messages held or received ahead and never returned are given back
(``nack(release=True)``: visible again, receive count restored).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from raft_queue.client import MAX_BATCH, Client
from raft_queue.client.models import Message, Received
from raft_queue.errors import NotFound, QueueError
from raft_queue.observability.stagetrace import mark as _stage

SERVER_MODULE = b"raft_queue.server.main"
AUTO_DEPTH = 2  # Receives ahead with prefetch=auto when max_inflight > 1, each half the window


def _depth(value: str) -> int:
    """``prefetch``: how many Receives are kept in flight ahead (0: none)."""
    if value in ("false", "no", "off"):
        return 0
    return max(0, int({"true": "1", "yes": "1", "on": "1"}.get(value, value)))


class RaftQueueAdapter:
    """One Client, one queue ``dest`` (replication 3). publish_batch returns when the
    Send RPCs returned, i.e. every message is committed by a majority of its
    partition's Raft group (journal fsynced under durability fsync); consume
    returns leased payloads and acks them as ``ack`` says (module docstring)."""

    name = "raft_queue"

    def __init__(
        self, dest: str, max_inflight: int = 1, consumer_window: int = 1024, **opts: Any
    ) -> None:
        self.dest = dest  # "pb_w1".. are valid queue names
        self.max_inflight = max(1, int(max_inflight))
        self.consumer_window = max(1, int(consumer_window))
        self.target = str(opts.get("target") or os.environ.get("RAFTQ_SERVER", "127.0.0.1:7101"))
        self.partitions = int(opts.get("partitions", 1))
        self.durability = str(opts.get("durability", "fsync"))
        self.threads = max(1, int(opts.get("threads", 4)))
        self.pids = [int(x) for x in str(opts.get("pids", "")).split(",") if x.strip()]
        self.cluster_dir = str(opts.get("cluster_dir", ""))
        self.opts_token = str(opts.get("token", ""))
        # auto: 2 Receives ahead, each half the window, for the harness's
        # pipelined workloads (W3's drain: docs/benchmarks.md, "W3: Receives
        # of half the window"), none for its one-at-a-time ones (W4's
        # consumer: receiving ahead tripled its p99).
        depth = str(opts.get("prefetch", "auto"))
        auto = AUTO_DEPTH if self.max_inflight > 1 else 0
        self.prefetch = auto if depth == "auto" else _depth(depth)
        size = str(opts.get("recv", "auto"))
        if size != "auto" and not (size.isascii() and size.isdigit() and int(size) >= 1):
            raise ValueError(f"recv must be a count of messages (>= 1) or auto, got {size!r}")
        whole = self.consumer_window // max(1, self.prefetch)
        self.recv = max(1, min(MAX_BATCH, whole if size == "auto" else int(size)))
        # named in the results; W4's are described by its producer's adapter
        self.prefetch_mode = (
            f"auto ({AUTO_DEPTH} Receives of {self.recv} ahead when max_inflight > 1, "
            "as W3's drain; else 0, as W1 and W4's consumer)"
            if depth == "auto"
            else f"{self.prefetch} Receives of {self.recv}"
        )
        self._ahead: deque[Future[Received]] = deque()  # the Receives sent ahead, oldest first
        self._held: deque[Message] = deque()  # received, not yet returned to the harness
        self._receiver: ThreadPoolExecutor | None = None
        self.ack_mode = str(opts.get("ack", "background"))
        if self.ack_mode not in ("background", "sync", "none"):
            raise ValueError(f"ack must be background or sync, got {self.ack_mode!r}")
        # stream=0: unary Sends only (Client(send_stream=False)), to compare
        # against SendStream on one cluster in the same minutes.
        self.send_stream = str(opts.get("stream", "1")) not in ("0", "false", "no")
        self.client: Client | None = None
        self._pool: ThreadPoolExecutor | None = None

    def connect(self) -> None:
        # token option, else $RAFTQ_TOKEN, else the admin token of cluster_dir (dev up's)
        self.client = Client(
            self.target, timeout_s=60, token=self._token(), send_stream=self.send_stream
        )
        self._pool = ThreadPoolExecutor(self.threads)
        self._receiver = ThreadPoolExecutor(self.prefetch) if self.prefetch else None

    def _token(self) -> str | None:
        if self.opts_token or os.environ.get("RAFTQ_TOKEN"):
            return self.opts_token or None
        path = os.path.join(self.cluster_dir, "admin.token") if self.cluster_dir else ""
        if path and os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
        return None

    def _c(self) -> Client:
        if self.client is None:
            raise RuntimeError("connect() first")
        return self.client

    def reset(self) -> None:
        """Delete and re-create ``dest``: a new queue uid, so it is empty."""
        with contextlib.suppress(NotFound):
            self._c().delete_queue(self.dest)
        self._c().create_queue(
            self.dest,
            partitions=self.partitions,
            replication_factor=3,
            durability=self.durability,
        )
        self.prepare_consumer()

    def prepare_consumer(self) -> None:
        """Learn the partitions' leaders before the clock starts (W4 calls this)."""
        self._c().partitions(self.dest)

    def publish_batch(self, msgs: list[bytes]) -> None:
        """One Send RPC per MAX_BATCH chunk, up to ``threads`` chunks at a time."""
        client = self._c()
        if len(msgs) <= MAX_BATCH or self._pool is None:
            _stage(f"p.send/{len(msgs)}")  # bench/w4_messages.py counts messages
            client.send_batch(self.dest, msgs)
            _stage("p.sent")
            return
        chunks = [msgs[i : i + MAX_BATCH] for i in range(0, len(msgs), MAX_BATCH)]
        for future in [self._pool.submit(client.send_batch, self.dest, c) for c in chunks]:
            future.result()  # raises the chunk's QueueError

    def consume(self, n: int, timeout: float = 1.0) -> list[bytes]:
        """Lease up to ``n`` (at most the server's 1000), ack them, return the
        bodies. Background acks (the default) ride the next consume's receive."""
        client = self._c()
        wait_ms = max(0, int(timeout * 1000))
        max_n = min(n, MAX_BATCH)
        if self._receiver is not None:
            return self._consume_ahead(max_n, wait_ms)
        _stage("k.recv")
        batch = client.receive(self.dest, max_messages=max_n, wait_ms=wait_ms)
        _stage(f"k.got/{len(batch)}" if batch else "k.none")
        if batch and self.ack_mode != "none":
            client.ack(self.dest, batch, wait=self.ack_mode == "sync")
        _stage("k.ret")
        return [m.body for m in batch]

    def _consume_ahead(self, max_n: int, wait_ms: int) -> list[bytes]:
        """Up to ``max_n`` of the messages received ahead (waiting for the
        first Receive in flight to answer if none is held), acked as the mode
        says (background: they ride the next Receive); then Receives of
        ``recv`` leave while the window has room for one, up to
        ``prefetch`` in flight.

        Whichever Receive answers first is taken, as a push consumer takes
        messages as they come: waiting for the oldest instead stalled a
        drain's end for a whole ``wait_ms`` when a younger Receive reached
        the leader first and leased the last messages, leaving the oldest
        to long-poll an empty queue (W3, once in 6-8 runs)."""
        client, receiver = self._c(), self._receiver
        assert receiver is not None
        held, ahead = self._held, self._ahead
        if not held:
            if not ahead:
                ahead.append(receiver.submit(client.receive, self.dest, self.recv, None, wait_ms))
            done, _ = wait(ahead, return_when=FIRST_COMPLETED)
            for fut in [f for f in ahead if f in done]:  # in the order they left
                ahead.remove(fut)
                held.extend(fut.result())
        out = [held.popleft() for _ in range(min(max_n, len(held)))]
        if out and self.ack_mode != "none":
            client.ack(self.dest, out, wait=self.ack_mode == "sync")
        room = self.consumer_window - len(held) - self.recv * len(ahead)
        while room >= self.recv and len(ahead) < self.prefetch:
            ahead.append(receiver.submit(client.receive, self.dest, self.recv, None, wait_ms))
            room -= self.recv
        return [m.body for m in out]

    def _give_back_ahead(self) -> None:
        """Close: what was held or received ahead and never returned was
        leased for nobody: its leases are undone (visible again)."""
        ahead, self._ahead = self._ahead, deque()
        held, self._held = list(self._held), deque()
        if self.client is None:
            return
        for fut in ahead:
            with contextlib.suppress(QueueError):
                held += fut.result()
        if held:
            with contextlib.suppress(QueueError):
                self.client.nack(self.dest, held, release=True)

    def close(self) -> None:
        self._give_back_ahead()
        if self._receiver is not None:
            self._receiver.shutdown(wait=True)
            self._receiver = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.client is not None:
            self.client.close()
            self.client = None

    def describe(self) -> dict[str, Any]:
        from importlib.metadata import version

        return {
            "server_version": version("raft-queue"),
            "target": self.target,
            "partitions": self.partitions,
            "replicas": 3,
            "durability": self.durability,
            "publish_threads": self.threads,
            "ack_mode": self.ack_mode,
            "prefetch": self.prefetch_mode,
            "client": "raft_queue SDK (grpcio " + version("grpcio") + ")",
        }

    def server_pids(self) -> list[int]:
        """The node processes, for the harness's server CPU column."""
        if self.pids:
            return [p for p in self.pids if os.path.exists(f"/proc/{p}")]
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if SERVER_MODULE in cmdline and self.cluster_dir.encode() in cmdline:
                found.append(int(entry))
        return sorted(found)
