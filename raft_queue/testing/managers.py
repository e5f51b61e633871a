"""ManagerCluster: a real N-process external cluster manager on this machine
(beside ``LocalCluster``, which starts the clusters it manages).

    with ManagerCluster(tmp_path / "mgr") as managers:
        managers.start(); managers.wait_ready()
        admin = managers.admin()
        admin.add_cluster("c1", cluster.bootstrap.split(","), cluster.token)

Each manager gets its own directory (config, data, log) under ``base_dir``;
the group's secret (``manager.secret``) and admin token (``admin.token``,
its hash in ``admin.tokens``) are made once per directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raft_queue.testing.cluster import (
    CLIENT_PRINCIPAL,
    _private_dir,
    _private_write,
    _toml,
    reserve_ports,
)


@dataclass
class ManagerCluster:
    base_dir: Path
    managers: int = 3
    raft: dict[str, Any] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)  # [health] (manager/config.py)
    balance: dict[str, Any] = field(default_factory=dict)  # [balance] (manager/heat.py)
    base_port: int | None = None  # gRPC on base, base+2, ..; Raft on base+1, base+3, ..
    # A directory with the fleet's dev CA (``write_dev_tls``, e.g. a TLS
    # LocalCluster's ``tls_dir``): each manager gets a certificate signed by it
    # and serves TLS only; admin() dials over TLS. tls_options: more [tls] keys.
    tls_dir: Path | None = None
    tls_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir)
        _private_dir(self.base_dir)
        ports_file = self.base_dir / "ports"
        if ports_file.exists():  # resume: the same ports as the first run
            self.ports = [int(p) for p in ports_file.read_text().split()]
            self._port_fds: list[int] = []
        elif self.base_port is not None:
            self._port_fds = []
            self.ports = list(range(self.base_port, self.base_port + 2 * self.managers))
        else:
            start, self._port_fds = reserve_ports(2 * self.managers)
            self.ports = list(range(start, start + 2 * self.managers))
        if not ports_file.exists():
            _private_write(ports_file, " ".join(map(str, self.ports)))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def ids(self) -> list[str]:
        return [f"m{i + 1}" for i in range(self.managers)]

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.ports[2 * i]}" for i in range(self.managers)]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses)

    @property
    def token(self) -> str:
        from raft_queue.security.tokens import write_admin_token

        return write_admin_token(self.base_dir / "admin.token", self.base_dir / "admin.tokens")

    def config_path(self, i: int) -> Path:
        return self.base_dir / self.ids[i] / "manager.toml"

    def log_path(self, i: int) -> Path:
        return self.base_dir / self.ids[i] / "manager.log"

    def write_configs(self) -> None:
        from raft_queue.security.secret import generate_secret_file

        secret = self.base_dir / "manager.secret"
        generate_secret_file(secret)
        self.token  # noqa: B018 (makes admin.token and admin.tokens once)
        voters = [f'"{m}=127.0.0.1:{self.ports[2 * i + 1]}"' for i, m in enumerate(self.ids)]
        grpcs = [f'"{m}={a}"' for m, a in zip(self.ids, self.addresses, strict=True)]
        raft = {"election_timeout_min_s": 0.8, "election_timeout_max_s": 1.6, **self.raft}
        for i, m in enumerate(self.ids):
            _private_dir(self.base_dir / m)
            lines = [
                f'manager_id = "{m}"',
                f'data_dir = "{self.base_dir / m / "data"}"',
                f"grpc_port = {self.ports[2 * i]}",
                f"raft_port = {self.ports[2 * i + 1]}",
                f"voters = [{', '.join(voters)}]",
                f"addresses = [{', '.join(grpcs)}]",
                "",
                "[raft]",
                *(f"{k} = {_toml(v)}" for k, v in raft.items()),
                "",
                "[health]",
                *(f"{k} = {_toml(v)}" for k, v in self.health.items()),
                "",
                "[balance]",
                *(f"{k} = {_toml(v)}" for k, v in self.balance.items()),
                "",
                "[security]",
                f"cluster_secret_file = {_toml(str(secret))}",
                f"admin_tokens_file = {_toml(str(self.base_dir / 'admin.tokens'))}",
                *self._tls_section(m),
            ]
            _private_write(self.config_path(i), "\n".join(lines) + "\n")

    def _tls_section(self, manager_id: str) -> list[str]:
        if self.tls_dir is None:
            return []
        from raft_queue.security.tls import write_dev_tls

        d = write_dev_tls(self.tls_dir, [manager_id])  # keeps the CA and other files
        keys = {"cert_file": str(d.cert_file(manager_id)),
                "key_file": str(d.key_file(manager_id)),
                "ca_file": str(d.ca_file), **self.tls_options}  # fmt: skip
        return ["", "[tls]", *(f"{k} = {_toml(v)}" for k, v in keys.items())]

    @property
    def client_tls(self) -> dict[str, Any]:
        """Client's / ManagerAdmin's TLS keyword arguments for this manager group."""
        if self.tls_dir is None:
            return {}
        from raft_queue.security.tls import write_dev_tls

        d = write_dev_tls(self.tls_dir, [], (CLIENT_PRINCIPAL,))
        out: dict[str, Any] = {"tls": True, "ca_file": str(d.ca_file)}
        if self.tls_options.get("require_client_cert"):
            out.update(cert_file=str(d.cert_file(CLIENT_PRINCIPAL)),
                       key_file=str(d.key_file(CLIENT_PRINCIPAL)))  # fmt: skip
        return out

    def start(self, i: int | None = None) -> None:
        if i is None:
            self.write_configs()
            for k in range(self.managers):
                self.start(k)
            return
        if i in self.procs and self.procs[i].poll() is None:
            return
        fd = os.open(self.log_path(i), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as log:
            self.procs[i] = subprocess.Popen(
                [sys.executable, "-m", "raft_queue.manager.main", "--config",
                 str(self.config_path(i))],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        _private_write(self.base_dir / self.ids[i] / "pid", str(self.procs[i].pid))

    def kill(self, i: int) -> None:
        proc = self.procs.pop(i)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self, timeout_s: float = 15.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()

    def admin(self, **kwargs: Any) -> Any:
        from raft_queue.client.manager_admin import ManagerAdmin

        return ManagerAdmin(self.bootstrap, **{"token": self.token, **self.client_tls, **kwargs})

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until a manager answers ListClusters naming a leader."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        with self.admin(timeout_s=2.0, attempts=2) as admin:
            while time.monotonic() < deadline:
                for i, proc in self.procs.items():
                    if proc.poll() is not None:
                        raise RuntimeError(f"manager m{i + 1} exited: see {self.log_path(i)}")
                try:
                    if admin.list_clusters().leader:
                        return
                except Exception as exc:  # not up yet
                    last = exc
                time.sleep(0.2)
        raise TimeoutError(f"manager not ready after {timeout_s}s (last error: {last})")

    def __enter__(self) -> ManagerCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
