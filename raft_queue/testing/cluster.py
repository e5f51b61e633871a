"""LocalCluster: a real N-node cluster on this machine, one process per node.

Used by the integration tests, the chaos suite, benchmarks and ``raftq dev
up``. Each node gets its own directory (config, data, log) under
``base_dir``; starting again on the same directory resumes the same cluster.
Nodes are real OS processes so they can be killed (SIGKILL), paused
(SIGSTOP) and restarted.

    with LocalCluster(tmp_path, nodes=3) as cluster:
        cluster.start(); cluster.wait_ready()
        client = cluster.client()
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PORT_BLOCK = 100  # raft ports per node for partition replicas
CLIENT_PRINCIPAL = "admin"  # whom the client certificate of a TLS cluster names


# Ports for test clusters come from [PORT_LO, PORT_HI), below the kernel's
# ephemeral range (32768+ here), so no outgoing connection of any process can
# take one as its source port between our check and the node's bind. Processes
# running LocalClusters on one machine reserve them in chunks of CHUNK with an
# flock on <tmp>/raftq-ports/<first port>.lock: held while the reservation
# lives, dropped by the kernel when the process dies (even by SIGKILL), so two
# processes never hand out the same port. Ports are spot-checked free as well
# (a process that does not take part may hold one).
PORT_LO, PORT_HI, CHUNK = 12000, 32000, 128
_pool: list[int] = []  # free_port(): ports of this process's current chunk
_pool_fds: list[int] = []
# Chunks free_port() has handed out in this process: never drawn again until
# every chunk has been, so one process sees a port repeat only after ~20,000
# (a fresh random draw repeated a released chunk: 872 distinct of 1,000).
_pool_chunks: set[int] = set()
_held: dict[int, list[int]] = {}  # free_block(): start -> lock descriptors (oldest first)
# free_block() callers never give their block back, and one test process (the
# whole suite) asks for hundreds: beyond this many, the oldest reservation is
# released (its cluster is long gone; a port still bound fails the free check).
# Without it the suite ran out of 400-port runs ("no free block ...").
HELD_BLOCKS_MAX = 8


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "raftq-ports"
    path.mkdir(mode=0o777, exist_ok=True)
    return path


def _release(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)  # closing drops the flock
    fds.clear()


def reserve_ports(size: int, avoid: frozenset[int] = frozenset()) -> tuple[int, list[int]]:
    """A run of ``size`` ports no other LocalCluster process will use while the
    returned descriptors stay open (close them to release): (first port, fds).
    Chunks whose first port is in ``avoid`` are not drawn."""
    chunks = -(-size // CHUNK)
    lock_dir = _lock_dir()
    candidates = [
        first
        for first in range(PORT_LO // CHUNK, PORT_HI // CHUNK - chunks + 1)
        if not any(c * CHUNK in avoid for c in range(first, first + chunks))
    ]
    for _ in range(400 if candidates else 0):
        first = random.choice(candidates)
        fds: list[int] = []
        for c in range(first, first + chunks):
            fd = os.open(lock_dir / f"{c * CHUNK}.lock", os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                break
            fds.append(fd)
        if len(fds) == chunks and _block_free(first * CHUNK, size, step=1):
            return first * CHUNK, fds
        _release(fds)
    raise RuntimeError(f"no free block of {size} ports in {PORT_LO}-{PORT_HI}")


def free_port() -> int:
    """A port of a chunk this process reserved (see PORT_LO), checked free."""
    while True:
        if not _pool:
            _release(_pool_fds)
            try:
                start, fds = reserve_ports(CHUNK, frozenset(_pool_chunks))
            except RuntimeError:
                _pool_chunks.clear()  # every chunk drawn once: start over
                start, fds = reserve_ports(CHUNK)
            _pool_chunks.add(start)
            _pool_fds.extend(fds)
            _pool.extend(range(start + CHUNK - 1, start - 1, -1))
        port = _pool.pop()
        if _block_free(port, 1, step=1):
            return port


def _block_free(start: int, size: int, step: int = 7) -> bool:
    for port in range(start, start + size, step):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_block(size: int = PORT_BLOCK) -> int:
    """A run of ``size`` free ports, reserved for the rest of this process."""
    start, fds = reserve_ports(size)
    _held[start] = fds
    while len(_held) > HELD_BLOCKS_MAX:
        _release(_held.pop(next(iter(_held))))
    return start


def _toml(value: Any) -> str:
    """A TOML literal for a str, bool or number (repr() would write True, 'x')."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _private_dir(path: Path) -> None:
    """``path``, mode 0700 also if it existed (node data, configs and logs are
    the cluster's own: docs/security.md)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def _private_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600, also if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


@dataclass
class NodeSpec:
    node_id: str
    dir: Path
    grpc_port: int
    metadata_port: int
    raft_port_min: int
    raft_port_max: int
    controller: bool = True  # a metadata voter (add_node makes non-voters)
    metrics_port: int = 0  # HTTP: /metrics, /healthz, /readyz, the status page

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def config_path(self) -> Path:
        return self.dir / "node.toml"


@dataclass
class LocalCluster:
    base_dir: Path
    nodes: int = 3
    base_port: int | None = None
    raft: dict[str, Any] = field(default_factory=dict)
    # [cluster] section (ClusterTuning): e.g. small suspect/dead/repair times in tests
    cluster_tuning: dict[str, Any] = field(default_factory=dict)
    # [limits] section (Limits): e.g. a long receive_linger_ms to watch lingering leases
    limits: dict[str, Any] = field(default_factory=dict)
    # [security] section beyond the cluster secret, which every LocalCluster
    # generates once (base_dir/cluster.secret) and hands to its nodes.
    security: dict[str, Any] = field(default_factory=dict)
    # [api] section (ApiConfig): e.g. reflection = True
    api: dict[str, Any] = field(default_factory=dict)
    # tls=True: a CA and one certificate per node (and one for the client,
    # principal "admin") in base_dir/tls, nodes serve gRPC over TLS only and
    # client() connects over TLS. tls_options: more [tls] keys, e.g.
    # {"require_client_cert": True} (then client() presents its certificate).
    tls: bool = False
    tls_options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # [storage] section (StorageConfig): e.g. a free-space watermark in disk tests
    storage: dict[str, Any] = field(default_factory=dict)
    quiet: bool = True
    port_block: int = PORT_BLOCK  # raft ports per node for partition replicas
    # advertise[i]: the address node i gives clients and peers (e.g. a fault proxy);
    # empty or missing = its own gRPC address.
    advertise: list[str] = field(default_factory=list)
    # [queue_defaults] section (QueueSpec): what a Send that creates a queue gives it
    queue_defaults: dict[str, Any] = field(default_factory=dict)
    # [metrics] section beyond the address each node gets (e.g. enabled = false)
    metrics: dict[str, Any] = field(default_factory=dict)
    # [health] section (HealthConfig): e.g. a short quorum_timeout_s in tests
    health: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir)
        self._port_fds: list[int] = []  # port reservations, released with this object
        weakref.finalize(self, _release, self._port_fds)
        self.specs = [self._spec(i) for i in range(self.nodes)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    # ---- configuration ---------------------------------------------------------------
    def _spec(self, i: int) -> NodeSpec:
        node_dir = self.base_dir / f"n{i + 1}"
        existing = node_dir / "ports"
        ports: list[int] = []
        if existing.exists():  # resume: same ports as the first run
            ports = [int(x) for x in existing.read_text().split()]
        if len(ports) < 3:
            if self.base_port is not None:
                ports = [
                    self.base_port + 1 + i,
                    self.base_port + 51 + i,
                    self.base_port + 100 * (i + 1),
                ]
            else:  # one reserved run: gRPC, metadata Raft, metrics, then the partitions
                start, fds = reserve_ports(self.port_block + 3)
                self._port_fds.extend(fds)
                ports = [start, start + 1, start + 3, start + 2]
        if len(ports) < 4:  # the metrics port (absent from older "ports" files)
            ports.append(self.base_port + 81 + i if self.base_port is not None else free_port())
        g, m, lo, http = ports[:4]
        return NodeSpec(
            f"n{i + 1}", node_dir, g, m, lo, lo + self.port_block - 1, metrics_port=http
        )

    def add_node(self) -> int:
        """Configure one more node that is not a metadata voter (it follows a
        voter's metadata copy and registers by heartbeat); returns its index,
        for ``start(i)``. The voters stay those of the first ``start()``."""
        spec = self._spec(len(self.specs))
        spec.controller = False
        self.specs.append(spec)
        self.nodes += 1
        self.write_configs()
        return len(self.specs) - 1

    @property
    def secret_path(self) -> Path:
        return self.base_dir / "cluster.secret"

    @property
    def keyring_path(self) -> Path:
        return self.base_dir / "keyring.json"

    @property
    def token(self) -> str:
        """The cluster's admin token (base_dir/admin.token, 0600; its SHA-256
        in base_dir/admin.tokens, the nodes' ``admin_tokens_file``). Made on
        first use, kept for the directory's life."""
        from raft_queue.security.tokens import write_admin_token

        return write_admin_token(self.base_dir / "admin.token", self.base_dir / "admin.tokens")

    @property
    def tls_dir(self) -> Path:
        return self.base_dir / "tls"

    def client_options(self) -> dict[str, Any]:
        """The TLS keyword arguments of Client / AsyncClient for this cluster ({} if off)."""
        if not self.tls:
            return {}
        opts: dict[str, Any] = {"tls": True, "ca_file": str(self.tls_dir / "ca.pem")}
        if self.tls_options.get("require_client_cert"):
            opts["cert_file"] = str(self.tls_dir / f"{CLIENT_PRINCIPAL}.pem")
            opts["key_file"] = str(self.tls_dir / f"{CLIENT_PRINCIPAL}.key")
        return opts

    def _tls_section(self, node_id: str) -> list[str]:
        if not self.tls:
            return []
        d = self.tls_dir
        keys = {"cert_file": str(d / f"{node_id}.pem"), "key_file": str(d / f"{node_id}.key"),
                "ca_file": str(d / "ca.pem"), **self.tls_options}  # fmt: skip
        return ["", "[tls]", *(f"{k} = {_toml(v)}" for k, v in keys.items())]

    def write_configs(self) -> None:
        from raft_queue.security.keyring import generate_keyring_file
        from raft_queue.security.secret import generate_secret_file

        generate_secret_file(self.secret_path)
        generate_keyring_file(self.keyring_path)  # encryption at rest: one master key
        self.token  # noqa: B018 (makes admin.token and admin.tokens once)
        if self.tls:
            from raft_queue.security.tls import write_dev_tls

            write_dev_tls(self.tls_dir, [s.node_id for s in self.specs], (CLIENT_PRINCIPAL,))
        security = {
            "cluster_secret_file": str(self.secret_path),
            "keyring_file": str(self.keyring_path),
            "admin_tokens_file": str(self.base_dir / "admin.tokens"),
            **self.security,
        }
        voters = [s for s in self.specs if s.controller]
        controllers = [f'"{s.node_id}=127.0.0.1:{s.metadata_port}"' for s in voters]
        seeds = [f'"{s.address}"' for s in voters]
        raft = {"election_timeout_min_s": 0.8, "election_timeout_max_s": 1.6, **self.raft}
        for i, s in enumerate(self.specs):
            _private_dir(s.dir)
            metrics = {"address": f"127.0.0.1:{s.metrics_port}", **self.metrics}
            advertise = self.advertise[i] if i < len(self.advertise) else ""
            ports = (s.grpc_port, s.metadata_port, s.raft_port_min, s.metrics_port)
            _private_write(s.dir / "ports", " ".join(str(p) for p in ports))
            lines = [
                f'node_id = "{s.node_id}"',
                f'data_dir = "{s.dir / "data"}"',
                'grpc_host = "127.0.0.1"',
                f"grpc_port = {s.grpc_port}",
                *([f'advertise_address = "{advertise}"'] if advertise else []),
                'raft_host = "127.0.0.1"',
                f"raft_port_min = {s.raft_port_min}",
                f"raft_port_max = {s.raft_port_max}",
                f"metadata_raft_port = {s.metadata_port}",
                f"controller = {'true' if s.controller else 'false'}",
                f"seeds = [{', '.join(seeds)}]",
                f"controllers = [{', '.join(controllers)}]",
                "",
                "[raft]",
                *(f"{k} = {_toml(v)}" for k, v in raft.items()),
                *(["", "[cluster]"] if self.cluster_tuning else []),
                *(f"{k} = {_toml(v)}" for k, v in self.cluster_tuning.items()),
                *(["", "[limits]"] if self.limits else []),
                *(f"{k} = {v!r}" for k, v in self.limits.items()),
                *(["", "[queue_defaults]"] if self.queue_defaults else []),
                *(f"{k} = {_toml(v)}" for k, v in self.queue_defaults.items()),
                *(["", "[storage]"] if self.storage else []),
                *(f"{k} = {_toml(v)}" for k, v in self.storage.items()),
                "",
                "[security]",
                *(f"{k} = {_toml(v)}" for k, v in security.items()),
                *(["", "[api]"] if self.api else []),
                *(f"{k} = {_toml(v)}" for k, v in self.api.items()),
                "",
                "[metrics]",
                *(f"{k} = {_toml(v)}" for k, v in metrics.items()),
                *(["", "[health]"] if self.health else []),
                *(f"{k} = {_toml(v)}" for k, v in self.health.items()),
                *self._tls_section(s.node_id),
            ]
            _private_write(s.config_path, "\n".join(lines) + "\n")

    @property
    def metrics_urls(self) -> list[str]:
        """Each node's HTTP base URL (/metrics, /readyz, the status page at /)."""
        return [s.metrics_url for s in self.specs]

    @property
    def bootstrap(self) -> str:
        return ",".join(s.address for s in self.specs)

    # ---- processes --------------------------------------------------------------------
    def start(self, i: int | None = None) -> None:
        if i is None:
            self.write_configs()
            for k in range(self.nodes):
                self.start(k)
            return
        if i in self.procs and self.procs[i].poll() is None:
            return
        s = self.specs[i]
        fd = os.open(s.dir / "node.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        log = os.fdopen(fd, "ab")  # owned by the child
        env = {**os.environ, **self.env}
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "raft_queue.server.main", "--config", str(s.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        _private_write(s.dir / "pid", str(self.procs[i].pid))

    def running_pid(self, i: int) -> int | None:
        """The pid of node ``i`` if a node process (from any LocalCluster on this
        directory, e.g. another `raftq dev up`) is alive, else None."""
        try:
            pid = int((self.specs[i].dir / "pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if str(self.specs[i].config_path).encode() in cmdline else None

    def stop_all(self, timeout_s: float = 15.0) -> None:
        """Stop every node of this directory, including ones another process started."""
        self.stop(timeout_s=timeout_s)
        for pid in [p for p in (self.running_pid(i) for i in range(self.nodes)) if p]:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(self.running_pid(i) for i in range(self.nodes)):
            time.sleep(0.1)

    def kill(self, i: int) -> None:
        """SIGKILL: no flush, no goodbye (power loss minus the page cache)."""
        self._signal(i, signal.SIGKILL)
        self.procs.pop(i).wait(10)

    def stop(self, i: int | None = None, timeout_s: float = 15.0) -> None:
        targets = list(self.procs) if i is None else [i]
        for k in targets:
            self._signal(k, signal.SIGTERM)
        for k in targets:
            proc = self.procs.pop(k, None)
            if proc is None:
                continue
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def pause(self, i: int) -> None:
        self._signal(i, signal.SIGSTOP)

    def resume(self, i: int) -> None:
        self._signal(i, signal.SIGCONT)

    def restart(self, i: int) -> None:
        if i in self.procs:
            self.kill(i)
        self.start(i)

    def _signal(self, i: int, sig: int) -> None:
        proc = self.procs.get(i)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)

    def pid(self, i: int) -> int:
        return self.procs[i].pid

    def alive(self, i: int) -> bool:
        return i in self.procs and self.procs[i].poll() is None

    # ---- readiness ------------------------------------------------------------------------
    def client(self, **kwargs: Any) -> Any:
        from raft_queue.client import Client

        return Client(
            bootstrap=self.bootstrap, **{"token": self.token, **self.client_options(), **kwargs}
        )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every running node is registered and answers ClusterStatus, and
        says its AdminService is SERVING: it reaches the metadata quorum and,
        since it started, its metadata view caught up with the leader's
        (observability/health.py; after a restart: all it had applied before)."""
        deadline = time.monotonic() + timeout_s
        want = {self.specs[i].node_id for i in self.procs}
        last: Exception | None = None
        with self.client(timeout_s=3.0, retries=0) as client:
            while time.monotonic() < deadline:
                for i, proc in self.procs.items():
                    if proc.poll() is not None:
                        raise RuntimeError(f"node n{i + 1} exited: see {self.log_path(i)}")
                try:
                    status = client.cluster_status()
                    seen = {n.id for n in status.nodes}
                    if want <= seen and not status.unreachable and self._admin_serving(client):
                        return
                except Exception as exc:  # not up yet
                    last = exc
                time.sleep(0.2)
        raise TimeoutError(f"cluster not ready after {timeout_s}s (last error: {last})")

    def _admin_serving(self, client: Any) -> bool:
        """Every running node's gRPC health of AdminService is SERVING (not the
        disk: tests fill disks on purpose)."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from raft_queue._proto.raft_queue.v1 import admin_pb2

        name = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
        for i in self.procs:
            channel = client._router._entry(self.specs[i].address)[0]
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=name), timeout=3.0
            )
            if answer.status != health_pb2.HealthCheckResponse.SERVING:
                return False
        return True

    def log_path(self, i: int) -> Path:
        return self.specs[i].dir / "node.log"

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        for k in list(self.procs):
            self._signal(k, signal.SIGCONT)
        self.stop()
