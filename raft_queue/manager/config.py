"""The manager process's configuration (configs/manager-3node.toml documents
every key). Loaded as node configs are (config.py): a file may describe
several managers, shared keys at the top and ``[nodes.<id>]`` tables; unknown
keys are errors naming the key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from raft_queue.config import (
    RaftTuning,
    SecurityConfig,
    TlsConfig,
    _build,
    _merged,
    _read_toml,
    check_name,
    parse_host_port,
)
from raft_queue.errors import ConfigError
from raft_queue.manager.heat import Balance


@dataclass(frozen=True, slots=True)
class HealthPolling:
    """``[health]``: how the manager judges each cluster (manager/health.py)."""

    poll_period_s: float = 1.0  # each cluster's ClusterStatus is asked this often
    call_timeout_s: float = 1.0  # one status call gives up after this long
    down_after_s: float = 3.0  # no node answered for this long: down

    def __post_init__(self) -> None:
        for name in ("poll_period_s", "call_timeout_s", "down_after_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"health.{name}", "must be positive")


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    manager_id: str
    data_dir: str
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 7400
    raft_host: str = "127.0.0.1"
    raft_port: int = 7500
    # Every manager of the group, "id=raft_host:raft_port" and
    # "id=grpc_host:grpc_port"; empty = this manager alone.
    voters: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    raft: RaftTuning = field(default_factory=RaftTuning)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    health: HealthPolling = field(default_factory=HealthPolling)
    # [tls], as a node's: the manager's gRPC port serves TLS only, and the
    # manager dials its clusters over TLS, checking them against ca_file (one
    # CA for the fleet), presenting its certificate when require_client_cert.
    tls: TlsConfig = field(default_factory=TlsConfig)
    # [balance]: moving a queue off a cluster that stays overheated (manager/rebalance.py)
    balance: Balance = field(default_factory=Balance)

    def __post_init__(self) -> None:
        check_name("manager_id", self.manager_id, error=ConfigError)
        for key in ("voters", "addresses"):
            for entry in getattr(self, key):
                nid, sep, addr = entry.partition("=")
                if not sep:
                    raise ConfigError(key, f"{entry!r} is not id=host:port")
                check_name(key, nid.strip(), error=ConfigError)
                parse_host_port(key, addr.strip())

    @property
    def address(self) -> str:
        return f"{self.grpc_host}:{self.grpc_port}"

    def peer_table(self, key: str) -> dict[str, str]:
        """``voters`` or ``addresses`` as id -> host:port."""
        out: dict[str, str] = {}
        for entry in getattr(self, key):
            nid, _, addr = entry.partition("=")
            out[nid.strip()] = addr.strip()
        return out


def load(path: str | Path, manager_id: str = "") -> ManagerConfig:
    data = _read_toml(path)
    nodes = data.pop("nodes", None)
    if nodes is None:
        return _build(ManagerConfig, data, "", ConfigError)
    if not isinstance(nodes, dict) or manager_id not in nodes:
        raise ConfigError("manager_id", f"choose one of {sorted(nodes or {})} in {path}")
    merged = {**_merged(data, nodes[manager_id]), "manager_id": manager_id}
    return _build(ManagerConfig, merged, "", ConfigError)
