"""LocalFleet: several real clusters and an external manager on this machine,
under one admin token, as ``raftq dev up --clusters N`` runs them and the
manager's tests use them.

    fleet = LocalFleet(tmp_path / "fleet", clusters=2, nodes=3)
    fleet.start()                 # every cluster and manager ready, clusters registered
    with fleet.managed() as client:
        client.create_queue("q", 4, clusters=["c1", "c2"])
    fleet.stop()

Cluster k is named ``c<k>`` (``fleet.c1`` is ``fleet.cluster("c1")``); with
``base_port`` cluster k serves on ``base_port + 1000 * (k - 1)`` and the
manager on ``base_port + 1000 * N``. With ``tls`` one dev CA (``base_dir/tls``)
signs every node's and manager's certificate; ``mtls`` also makes them
require client certificates.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raft_queue.testing.cluster import LocalCluster, _private_write
from raft_queue.testing.managers import ManagerCluster


@dataclass
class LocalFleet:
    base_dir: Path
    clusters: int = 2
    nodes: int = 3
    manager_nodes: int = 3
    base_port: int | None = None
    tls: bool = False
    mtls: bool = False
    health: dict[str, Any] = field(default_factory=dict)  # the manager's [health]
    balance: dict[str, Any] = field(default_factory=dict)  # the manager's [balance]

    def __post_init__(self) -> None:
        from raft_queue.security.tls import write_dev_tls

        self.base_dir = Path(self.base_dir)
        self.tls = self.tls or self.mtls
        ca = write_dev_tls(self.base_dir / "tls", []) if self.tls else None
        mtls = {"require_client_cert": True} if self.mtls else {}
        port = self.base_port
        self.managers = ManagerCluster(
            self.base_dir / "manager", managers=self.manager_nodes, health=self.health,
            balance=self.balance, tls_dir=ca.dir if ca else None, tls_options=dict(mtls),
            base_port=None if port is None else port + 1000 * self.clusters,
        )  # fmt: skip
        token = self.managers.token  # one admin token for the whole fleet
        self.by_name: dict[str, LocalCluster] = {}
        for k in range(1, self.clusters + 1):
            c = LocalCluster(
                self.base_dir / f"c{k}", nodes=self.nodes, tls=self.tls, tls_options=dict(mtls),
                base_port=None if port is None else port + 1000 * (k - 1),
            )  # fmt: skip
            if ca is not None:  # the fleet's CA: LocalCluster keeps CA files it finds
                c.tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                for name in ("ca.pem", "ca.key"):
                    shutil.copy2(ca.dir / name, c.tls_dir / name)
            c.base_dir.mkdir(parents=True, exist_ok=True)
            if not (c.base_dir / "admin.token").exists():
                _private_write(c.base_dir / "admin.token", token + "\n")
            self.by_name[f"c{k}"] = c

    # ---- parts ----------------------------------------------------------------------------
    def cluster(self, name: str) -> LocalCluster:
        return self.by_name[name]

    @property
    def c1(self) -> LocalCluster:
        return self.by_name["c1"]

    @property
    def c2(self) -> LocalCluster:
        return self.by_name["c2"]

    @property
    def token(self) -> str:
        return self.managers.token

    def client_options(self) -> dict[str, Any]:
        """The SDK's TLS keyword arguments, valid for every port of the fleet."""
        return self.c1.client_options()

    # ---- life -----------------------------------------------------------------------------
    def start(self, register: Sequence[str] | None = None, timeout_s: float = 90.0) -> LocalFleet:
        """Start every part, wait until each is ready, then register ``register``
        (default: every cluster) with the manager under its name."""
        for c in self.by_name.values():
            c.start()
        self.managers.start()
        for c in self.by_name.values():
            c.wait_ready(timeout_s)
        self.managers.wait_ready(timeout_s)
        names = list(self.by_name) if register is None else list(register)
        with self.managers.admin() as admin:
            for name in names:
                c = self.by_name[name]
                admin.add_cluster(name, c.bootstrap.split(","), c.token)
        return self

    def stop(self, every_process: bool = False) -> None:
        """Stop the manager, then the clusters (``every_process``: also nodes
        another process started on these directories)."""
        self.managers.stop()
        for c in self.by_name.values():
            c.stop_all() if every_process else c.stop()

    def managed(self, **kwargs: Any) -> Any:
        """A ManagedClient of this fleet (its admin token and TLS arguments)."""
        from raft_queue.client.managed import ManagedClient

        options = {"token": self.token, **self.client_options(), **kwargs}
        return ManagedClient(self.managers.bootstrap, **options)

    def manager_log_tails(self, lines: int = 20) -> str:
        out = []
        for i in range(self.manager_nodes):
            tail = self.managers.log_path(i).read_text(errors="replace").splitlines()[-lines:]
            out += [f"--- m{i + 1} log tail ---", *tail]
        return "\n".join(out)
