"""ChaosCluster: a LocalCluster whose every link runs through a Toxiproxy-compatible proxy.

Links (each one proxy, named after it):

- ``raft-n3-21104``: node n3 dialing Raft port 21104 (a metadata or partition replica
  of another node). pysyncobj keeps one TCP connection per pair of replicas, dialed by
  the replica with the greater address string, so only the dialer's side needs a proxy;
  because the dial map is read once at node start, a proxy exists for every Raft port
  of every other node that this node could ever dial (metadata port + the partition
  port block, kept small: ``port_block``).
- ``grpc-n1-n2``: node n1's gRPC channel to node n2 (forwarding, status, registration).
- ``client-n2``: clients to node n2. Each node advertises this address, so the leader
  addresses clients learn from the server lead through proxies as well.

Node i starts with ``RAFTQ_DIAL_MAP`` mapping each address it may dial to its own proxy
(server/main.py), so a cut between node sets is a ``timeout`` toxic (timeout 0: bytes
swallowed, connection left open, as a silent network partition) on both streams of
every proxy between them; ``heal()`` is ``POST /reset``. The proxy server runs as its
own process (``python -m chaos.toxiproxy_server``) so the workload's threads never
compete with it for a GIL; it is driven over HTTP with timeouts on every request
(``ProxyApi``), which toxiproxy-python lacks. Everything binds 127.0.0.1.
"""

from __future__ import annotations

import http.client
import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raft_queue.testing.cluster import LocalCluster, free_block, free_port

HOST = "127.0.0.1"
DEFAULT_PORT_BLOCK = 8  # partition replicas per node: plenty for one chaos queue


@dataclass(frozen=True)
class Link:
    """One proxied connection path. ``src`` dials ``dst``; ``src`` is None for clients.

    ``target`` is the address the dialer believes it connects to (the dial-map key);
    ``upstream`` is where the bytes really go. Toxic streams follow Toxiproxy:
    ``upstream`` = dialer -> target bytes, ``downstream`` = the replies.
    """

    name: str
    kind: str  # "raft" | "grpc" | "client"
    src: int | None
    dst: int
    target: str
    upstream: str
    listen: str = ""


class ProxyApi:
    """The Toxiproxy HTTP API over one keep-alive connection; every call bounded by
    ``timeout_s`` and retried once on a broken connection. Raises RuntimeError on an
    HTTP error status (with the server's message)."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
                continue
            if response.status >= 400:
                raise RuntimeError(f"{method} {path}: {response.status} {raw[:200]!r}")
            return json.loads(raw) if raw else None
        raise AssertionError("unreachable")

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def wait_up(self, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.call("GET", "/version")
                return
            except (OSError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


@dataclass
class _ProxiedCluster(LocalCluster):
    """LocalCluster whose node i starts with its own dial map, and whose clients
    bootstrap through the client proxies."""

    dial_maps: dict[int, str] = field(default_factory=dict)

    def start(self, i: int | None = None) -> None:
        if i is not None:
            self.env = {**self.env, "RAFTQ_DIAL_MAP": self.dial_maps.get(i, "")}
        super().start(i)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.advertise) if self.advertise else super().bootstrap


def plan_links(specs: list[Any]) -> list[Link]:
    """Every link a cluster of ``specs`` (LocalCluster NodeSpecs) can use, unproxied yet.

    A Raft proxy i -> port p of node j exists only if i can be the dialer: some
    address of i's in the same kind of group (metadata port, or its partition block)
    compares greater than p's address.
    """
    links: list[Link] = []

    def addr(port: int) -> str:
        return f"{HOST}:{port}"

    for i, si in enumerate(specs):
        own_block = [addr(p) for p in range(si.raft_port_min, si.raft_port_max + 1)]
        for j, sj in enumerate(specs):
            if i == j:
                continue
            targets = [(sj.metadata_port, [addr(si.metadata_port)])]
            targets += [(p, own_block) for p in range(sj.raft_port_min, sj.raft_port_max + 1)]
            for port, mine in targets:
                if max(mine) > addr(port):
                    links.append(
                        Link(f"raft-n{i + 1}-{port}", "raft", i, j, addr(port), addr(port))
                    )
            links.append(Link(f"grpc-n{i + 1}-n{j + 1}", "grpc", i, j, "", sj.address))
        links.append(Link(f"client-n{i + 1}", "client", None, i, si.address, si.address))
    return links


class ChaosCluster:
    """A LocalCluster + a fault proxy process + a proxy for every link.

    ``raft`` overrides node Raft tuning (e.g. a small ``log_compaction_min_entries``
    so lagging replicas catch up by snapshot). Fault methods take node indexes
    (0-based); every fault is undone by ``heal()`` (network) or ``recover()`` (network
    and processes).
    """

    def __init__(
        self,
        base_dir: str | Path,
        nodes: int = 3,
        *,
        seed: int | None = None,
        raft: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        port_block: int = DEFAULT_PORT_BLOCK,
        disks: dict[str, int] | None = None,
        storage: dict[str, Any] | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.seed = seed
        # Disk faults (chaos/disks.py): {"tmpfs": node, "eio": node}, mounted under
        # those nodes' data directories by start(), unmounted by stop().
        self.disks = dict(disks or {})
        self.tmpfs: Any = None
        self.eio: Any = None
        base = free_block(100 * (nodes + 1))  # ports: see LocalCluster._spec
        self.local = _ProxiedCluster(
            self.base_dir,
            nodes,
            base_port=base,
            raft=dict(raft or {}),
            env=dict(env or {}),
            port_block=port_block,
            storage=dict(storage or {}),
        )
        self.nodes = nodes
        self.links: list[Link] = []
        self.api: ProxyApi | None = None
        self._proxy_proc: subprocess.Popen[bytes] | None = None
        self._toxic_ids = itertools.count()
        self.paused: set[int] = set()

    # ---- lifecycle -----------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> ChaosCluster:
        """Start the proxy process, create every proxy, then the nodes; wait until ready."""
        self._start_proxy_server()
        self._create_proxies()
        self._mount_disks()
        self.local.start()
        self.local.wait_ready(timeout_s)
        return self

    def _start_proxy_server(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        cmd = [sys.executable, "-m", "chaos.toxiproxy_server", "--listen", f"{HOST}:{port}"]
        if self.seed is not None:
            cmd += ["--seed", str(self.seed)]
        with open(self.base_dir / "toxiproxy.log", "ab") as log:
            self._proxy_proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.api = ProxyApi(HOST, port)
        self.api.wait_up()

    def _create_proxies(self) -> None:
        planned = plan_links(self.local.specs)
        specs = [
            {"name": link.name, "upstream": link.upstream, "listen": f"{HOST}:0"}
            for link in planned
        ]
        created = {
            p["name"]: p["listen"] for p in self._api.call("POST", "/populate", specs)["proxies"]
        }
        self.links = [_with_listen(link, created[link.name]) for link in planned]
        clients = {link.dst: link.listen for link in self.links if link.kind == "client"}
        self.local.advertise = [clients[i] for i in range(self.nodes)]
        for i in range(self.nodes):
            pairs = []
            for link in self.links:
                if link.src != i:
                    continue
                target = link.target or clients[link.dst]  # gRPC: peers dial advertised addresses
                pairs.append(f"{target}={link.listen}")
            self.local.dial_maps[i] = ",".join(pairs)

    def stop(self) -> None:
        """Stop the nodes (resuming paused ones first), then the proxy process."""
        for i in list(self.paused):
            self.resume(i)
        try:
            self.local.stop()
        finally:
            self._unmount_disks()
        if self.api is not None:
            self.api.close()
        if self._proxy_proc is not None and self._proxy_proc.poll() is None:
            self._proxy_proc.send_signal(signal.SIGTERM)
            try:
                self._proxy_proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proxy_proc.kill()
                self._proxy_proc.wait(5)

    def __enter__(self) -> ChaosCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _mount_disks(self) -> None:
        from chaos.disk_nemesis import TMPFS_BYTES
        from chaos.disks import EioMount, Tmpfs

        if "tmpfs" in self.disks:
            self.tmpfs = Tmpfs(self.data_dir(self.disks["tmpfs"]), TMPFS_BYTES).mount()
        if "eio" in self.disks:
            self.eio = EioMount(self.data_dir(self.disks["eio"])).mount()

    def _unmount_disks(self) -> None:
        for fs in (self.tmpfs, self.eio):
            if fs is not None:
                fs.close()
        self.tmpfs = self.eio = None

    def disk_node(self, kind: str) -> int:
        return self.disks[kind]

    @property
    def _api(self) -> ProxyApi:
        if self.api is None:
            raise RuntimeError("ChaosCluster.start() first")
        return self.api

    @property
    def bootstrap(self) -> str:
        return self.local.bootstrap

    @property
    def token(self) -> str:
        """The admin token (LocalCluster.token): chaos runs with auth on."""
        return self.local.token

    def client(self, **kwargs: Any) -> Any:
        """An SDK Client that reaches the nodes through their client proxies."""
        from raft_queue.client import Client

        return Client(bootstrap=self.bootstrap, **{"token": self.token, **kwargs})

    def node_id(self, i: int) -> str:
        return self.local.specs[i].node_id

    def index_of(self, node_id: str) -> int:
        return [s.node_id for s in self.local.specs].index(node_id)

    def data_dir(self, i: int) -> Path:
        return self.local.specs[i].dir / "data"

    # ---- network faults ------------------------------------------------------------------
    def partition(self, *sides: Iterable[int]) -> int:
        """Cut every node-to-node link between different ``sides`` both ways (nodes in
        no side keep every link: a bridge). Returns the number of toxics added."""
        groups = [set(s) for s in sides]
        side_of = {n: k for k, g in enumerate(groups) for n in g}
        added = 0
        for link in self._node_links():
            a, b = side_of.get(link.src), side_of.get(link.dst)
            if a is not None and b is not None and a != b:
                added += self._drop(link, "upstream") + self._drop(link, "downstream")
        return added

    def isolate(self, i: int) -> int:
        return self.partition({i}, set(range(self.nodes)) - {i})

    def cut_one_way(self, src: Iterable[int], dst: Iterable[int]) -> int:
        """Drop every byte from nodes ``src`` to nodes ``dst``; the reverse flows."""
        src_set, dst_set = set(src), set(dst)
        added = 0
        for link in self._node_links():
            if link.src in src_set and link.dst in dst_set:
                added += self._drop(link, "upstream")
            elif link.src in dst_set and link.dst in src_set:
                added += self._drop(link, "downstream")
        return added

    def cut_clients(self, nodes: Iterable[int]) -> int:
        """Clients can no longer reach ``nodes`` (their requests hang, then time out)."""
        wanted = set(nodes)
        links = [x for x in self.links if x.kind == "client" and x.dst in wanted]
        return sum(self._drop(x, "upstream") + self._drop(x, "downstream") for x in links)

    def slow(
        self, nodes: Iterable[int] | None = None, latency_ms: int = 50, jitter_ms: int = 50
    ) -> int:
        """Latency (+ uniform jitter) both ways on node-to-node links touching ``nodes``."""
        attrs = {"latency": latency_ms, "jitter": jitter_ms}
        return sum(
            self._toxic(x, "latency", s, attrs)
            for x in self._touching(nodes)
            for s in ("upstream", "downstream")
        )

    def throttle(self, nodes: Iterable[int] | None = None, rate_kbps: int = 64) -> int:
        """Bandwidth limit (KB/s per connection and direction) on links touching ``nodes``."""
        attrs = {"rate": rate_kbps}
        return sum(
            self._toxic(x, "bandwidth", s, attrs)
            for x in self._touching(nodes)
            for s in ("upstream", "downstream")
        )

    def heal(self) -> None:
        """Remove every toxic (Toxiproxy's POST /reset); connections cut by a timeout
        toxic are closed and re-dialed by the nodes."""
        self._api.call("POST", "/reset")

    def _node_links(self) -> list[Link]:
        return [x for x in self.links if x.kind != "client"]

    def _touching(self, nodes: Iterable[int] | None) -> list[Link]:
        wanted = set(range(self.nodes)) if nodes is None else set(nodes)
        return [x for x in self._node_links() if x.src in wanted or x.dst in wanted]

    def _drop(self, link: Link, stream: str) -> int:
        return self._toxic(link, "timeout", stream, {"timeout": 0})

    def _toxic(self, link: Link, kind: str, stream: str, attributes: dict[str, int]) -> int:
        name = f"{kind}_{stream}_{next(self._toxic_ids)}"
        body = {"name": name, "type": kind, "stream": stream, "attributes": attributes}
        self._api.call("POST", f"/proxies/{link.name}/toxics", body)
        return 1

    # ---- process faults (by PID) --------------------------------------------------------------
    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (continued first if paused, so it dies at once)."""
        if self.local.alive(i):
            self.resume(i)
            self.local.kill(i)

    def pause(self, i: int) -> None:
        """SIGSTOP: the process is frozen mid-flight; its sockets stay open."""
        if self.local.alive(i):
            self.local.pause(i)
            self.paused.add(i)

    def resume(self, i: int) -> None:
        self.local.resume(i)
        self.paused.discard(i)

    def start_node(self, i: int) -> None:
        """(Re)start node ``i`` if it is not running (same data dir, same ports)."""
        if not self.local.alive(i):
            self.local.start(i)

    def pid(self, i: int) -> int | None:
        return self.local.pid(i) if self.local.alive(i) else None

    def alive(self, i: int) -> bool:
        return self.local.alive(i)

    def recover(self) -> None:
        """Undo every fault: heal the network, continue paused and restart dead nodes."""
        self.heal()
        for i in range(self.nodes):
            self.resume(i)
            self.start_node(i)


def _with_listen(link: Link, listen: str) -> Link:
    return Link(link.name, link.kind, link.src, link.dst, link.target, link.upstream, listen)
