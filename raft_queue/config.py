"""Configuration: a node's settings (configs/*.toml) and a queue's settings.

Frozen, slotted dataclasses with units in field names, validated in
``__post_init__``: a bad node setting raises ``ConfigError(field, ...)``, a
bad queue setting ``InvalidArgument(field, ...)``; both name the field
(dotted for nested tables, e.g. ``raft.heartbeat_period_s``). ``load()`` is
the only reader of configs/ and rejects unknown keys, so a typo is an error,
not a silently ignored setting.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from raft_queue.errors import ConfigError, InvalidArgument

D = TypeVar("D")

MIB = 1 << 20
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
# Delays are 64-bit milliseconds end to end (proto, commands, stored records
# and timers); these are the limits we promise. One message (a send's or a
# nack's own delay): ten years of 365.25 days. A queue's default delay (the
# minimum for each of its messages): 365 days.
MAX_MESSAGE_DELAY_MS = 3653 * DAY_MS
MAX_QUEUE_DELAY_MS = 365 * DAY_MS
MAX_PARTITIONS = 1024
MAX_QUEUE_MESSAGE_BYTES = 16 * MIB
REPLICATION_FACTORS = (1, 3, 5)
DURABILITIES = ("fsync", "quorum", "leader")
ORDERINGS = ("none", "fifo")
#: QueueSpec fields fixed at creation: they decide the Raft groups and keying.
IMMUTABLE_QUEUE_FIELDS = ("partitions", "replication_factor", "ordering")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
QUEUE_NAME_MAX = 80  # as SQS


def check_name(
    field_name: str, value: str, max_len: int = 64, error: type[InvalidArgument] = InvalidArgument
) -> None:
    """Queue and node names: 1..max_len of [A-Za-z0-9_.-], not starting with
    a separator (they appear in paths, receipts and metric labels).
    """
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > max_len:
        raise error(field_name, f"{value!r} must be 1..{max_len} of A-Z a-z 0-9 _ . - (not first)")


def check_queue_name(name: str, field_name: str = "name") -> None:
    """The one queue-name rule: 1..80 characters (as SQS) of [A-Za-z0-9_.-],
    not starting with a separator. The front end (server/api/convert.py) and the
    metadata machine both check it."""
    check_name(field_name, name, QUEUE_NAME_MAX)


def parse_host_port(field_name: str, value: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too); ConfigError names the field."""
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or any(c.isspace() for c in host) or not port.isdigit():
        raise ConfigError(field_name, f"{value!r} is not host:port")
    _check_port(field_name, int(port))
    return host, int(port)


def _check_port(field_name: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise ConfigError(field_name, f"port {port} outside 1..65535")


def _check_int(
    error: type[InvalidArgument], name: str, value: int, lo: int, hi: int, hi_is: str = ""
) -> None:
    """``hi_is``: the upper bound in words for the error text ("365 days")."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        say = f" ({hi_is})" if hi_is else ""
        raise error(name, f"{value!r} must be an integer in {lo}..{hi}{say}")


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(name, f"{value!r} must be a number > 0")


@dataclass(frozen=True, slots=True)
class RaftTuning:
    """Raft timing shared by every group on the node (pysyncobj's SyncObjConf).

    Elections start after a random timeout in [min, max]; the leader sends
    heartbeats every ``heartbeat_period_s`` and steps down after
    ``leader_fallback_timeout_s`` without hearing from a quorum (so a
    partitioned leader stops accepting writes; pysyncobj's fallback is one
    maximum election timeout). ``coalesce_heartbeats``:
    heartbeats of idle groups travel as one message per node pair per period
    (replication/heartbeats.py) instead of one per group and follower.
    """

    election_timeout_min_s: float = 0.8
    election_timeout_max_s: float = 1.6
    heartbeat_period_s: float = 0.2
    tick_period_s: float = 0.05
    log_compaction_min_entries: int = 5000
    log_compaction_min_time_s: float = 300.0
    # Commands submitted to one group and not yet proposed; one more is
    # refused with ResourceExhausted naming raft.commands_queue_size
    # (replication/group.py): backpressure, not unbounded memory.
    commands_queue_size: int = 100_000
    # Bytes of commands packed into one Raft entry (one AppendEntries
    # payload), unless a single command is larger (bounded by
    # limits.max_request_bytes).
    append_entries_batch_bytes: int = 4 * MIB
    coalesce_heartbeats: bool = True
    # Pre-vote and prompt elections (replication/prevote.py): a node asks
    # before it campaigns, and a follower whose leader's link drops campaigns
    # within a quarter of election_timeout_min_s; acks name their term.
    # Off only while upgrading from a version without them (its nodes
    # cannot decode these messages: codec tags 12-14).
    pre_vote: bool = True

    def __post_init__(self) -> None:
        for flag in ("coalesce_heartbeats", "pre_vote"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"raft.{flag}", "must be true or false")
        for f in dataclasses.fields(self):
            if f.name.endswith("_s"):
                _check_positive(f"raft.{f.name}", getattr(self, f.name))
        for name in ("log_compaction_min_entries", "commands_queue_size"):
            _check_int(ConfigError, f"raft.{name}", getattr(self, name), 1, 10**9)
        _check_int(ConfigError, "raft.append_entries_batch_bytes", self.append_entries_batch_bytes,
                   4096, 256 * MIB)  # fmt: skip
        if self.election_timeout_max_s <= self.election_timeout_min_s:
            raise ConfigError("raft.election_timeout_max_s", "must exceed election_timeout_min_s")
        if self.heartbeat_period_s * 2 > self.election_timeout_min_s:
            raise ConfigError("raft.heartbeat_period_s", "must be <= election_timeout_min_s / 2")
        if self.tick_period_s > self.heartbeat_period_s:
            raise ConfigError("raft.tick_period_s", "must be <= heartbeat_period_s")


@dataclass(frozen=True, slots=True)
class ClusterTuning:
    """Node liveness as the metadata leader judges it from heartbeats:
    alive -> suspect after ``suspect_after_s`` of silence -> dead after
    ``dead_after_s``; a dead node's replicas are re-placed after
    ``repair_after_s`` (long, so a restart does not trigger a full copy).
    """

    heartbeat_period_s: float = 1.0
    suspect_after_s: float = 5.0
    dead_after_s: float = 30.0
    repair_after_s: float = 300.0
    # Automatic leader balance: when the preferred-leader counts of alive
    # nodes differ by more than this, the metadata leader runs plan_leaders
    # (one transfer at a time). 0 = off (use ``raftq leaders balance``).
    leader_imbalance_max: int = 0
    # Catch-up of a moved replica (repair, drain, rebalance, move) is limited
    # to this many bytes/s unless the move names its own limit. 0 = no limit.
    move_throttle_bytes_per_s: int = 0
    # A Send to a queue that does not exist creates it from [queue_defaults]
    # (Kafka's auto.create.topics.enable). Off by default, as Kafka advises
    # for production: a typo then makes a queue. Set it alike on every node.
    auto_create_queues: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.auto_create_queues, bool):
            raise ConfigError("cluster.auto_create_queues", "must be true or false")
        counts = ("leader_imbalance_max", "move_throttle_bytes_per_s")
        for f in dataclasses.fields(self):
            if f.name not in (*counts, "auto_create_queues"):
                _check_positive(f"cluster.{f.name}", getattr(self, f.name))
        for name in counts:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"cluster.{name}", "must be an integer >= 0")
        if not self.heartbeat_period_s < self.suspect_after_s <= self.dead_after_s:
            raise ConfigError(
                "cluster.suspect_after_s",
                "need heartbeat_period_s < suspect_after_s <= dead_after_s",
            )
        if self.repair_after_s < self.dead_after_s:
            raise ConfigError("cluster.repair_after_s", "must be >= dead_after_s")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-request limits the front end enforces, and the bounds on what
    clients can make a node hold (ResourceExhausted/InvalidArgument naming
    ``limits.<key>``; docs/operations.md "Limits")."""

    # Body + header names + header values of one message; caps every queue's.
    max_message_bytes: int = 1 * MIB
    max_batch_messages: int = 10_000
    max_receive_messages: int = 1000
    max_wait_ms: int = 20_000
    # The largest gRPC message the node takes or sends.
    max_request_bytes: int = 64 * MIB
    # How long a lingering lease waits for its consumer's next Receive
    # (server/dataplane/lingering.py); 0 = never linger.
    receive_linger_ms: int = 50
    # Headers per message and bytes of one header name (UTF-8).
    max_headers: int = 64
    max_header_name_bytes: int = 256
    # Calls of QueueService / AdminService in progress on this node (long
    # polls and Subscribe streams included); NodeService and health exempt.
    max_concurrent_rpcs: int = 4096
    # Long polls standing on one partition replica, and per consumer id there.
    max_standing_polls_per_partition: int = 4096
    max_standing_polls_per_consumer: int = 64
    # Credit a Subscribe stream may hold (granted, not yet used).
    max_subscribe_credit: int = 10_000
    # Bytes of messages in one Receive / Read answer (partial batch beyond).
    max_receive_bytes: int = 16 * MIB
    # Long polls (Receive with wait_ms) of one principal in progress on this
    # node, over every queue and partition (server/dataplane/polls.py).
    max_long_polls_per_principal: int = 1024

    def __post_init__(self) -> None:
        _check_int(ConfigError, "limits.max_message_bytes", self.max_message_bytes, 1,
                   MAX_QUEUE_MESSAGE_BYTES)  # fmt: skip
        _check_int(ConfigError, "limits.max_batch_messages", self.max_batch_messages, 1, 10**6)
        _check_int(ConfigError, "limits.max_receive_messages", self.max_receive_messages, 1, 10**5)
        _check_int(ConfigError, "limits.max_wait_ms", self.max_wait_ms, 0, HOUR_MS)
        _check_int(ConfigError, "limits.receive_linger_ms", self.receive_linger_ms, 0, 60_000)
        _check_int(ConfigError, "limits.max_request_bytes", self.max_request_bytes,
                   self.max_message_bytes, 2**31 - 1)  # fmt: skip
        for name, hi in _LIMIT_BOUNDS:
            _check_int(ConfigError, f"limits.{name}", getattr(self, name), 1, hi)


_LIMIT_BOUNDS = (
    ("max_headers", 0xFFFF),
    ("max_header_name_bytes", 0xFFFF),
    ("max_concurrent_rpcs", 10**6),
    ("max_standing_polls_per_partition", 10**6),
    ("max_standing_polls_per_consumer", 10**6),
    ("max_subscribe_credit", 10**7),
    ("max_receive_bytes", 2**31 - 1),
    ("max_long_polls_per_principal", 10**6),
)


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """``[security]``: the cluster secret every node shares (Raft links,
    node-to-node RPCs, receipt MACs; see raft_queue/security/). A node without
    one refuses to start unless ``insecure = true``, which it logs as a
    warning at every start (docs/security.md).
    """

    cluster_secret_file: str = ""
    insecure: bool = False
    # Encryption at rest (docs/security.md "Encryption at rest"): the master
    # keys wrapping every queue's data keys come from ``keyring_file`` (mode
    # 0600) or from ``key_provider`` ("module:Class", a KMS hook). With
    # neither, the node refuses to start, unless ``insecure = true`` or
    # ``encryption_at_rest = false`` (then it seals nothing, says so at each
    # start, and cannot read sealed messages).
    keyring_file: str = ""
    key_provider: str = ""
    # SHA-256s of the superuser tokens, one a line, mode 0600 (security/tokens.py)
    admin_tokens_file: str = ""
    # false: the explicit opt-out of encryption at rest (see keyring_file)
    encryption_at_rest: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.insecure, bool):
            raise ConfigError("security.insecure", "must be true or false")
        if not isinstance(self.encryption_at_rest, bool):
            raise ConfigError("security.encryption_at_rest", "must be true or false")


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """``[api]``: the gRPC door. ``reflection = true`` serves gRPC server
    reflection (grpcurl can then list and describe QueueService and
    AdminService); off by default: it hands a stranger the map of every
    method (docs/security.md). Health checks are always served.
    """

    reflection: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.reflection, bool):
            raise ConfigError("api.reflection", "must be true or false")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """``[metrics]``: the node's HTTP listener (raft_queue/observability/):
    Prometheus text at ``/metrics``, ``/healthz``, ``/readyz`` and the status
    page at ``/`` (``/api/status``). ``address = ""`` serves no HTTP.
    ``enabled = false`` also turns the instrumentation of the request and
    Raft paths off (the switch behind the cost figure in docs/benchmarks.md).
    ``open_probes``: /metrics, /healthz and /readyz answer without a token
    (Prometheus and load balancers scrape them); the page and its API
    require the admin token unless ``security.insecure``.
    """

    address: str = ""
    enabled: bool = True
    open_probes: bool = True

    def __post_init__(self) -> None:
        for name in ("enabled", "open_probes"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"metrics.{name}", "must be true or false")
        if self.address:
            parse_host_port("metrics.address", self.address)


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """``[health]``: when the node says NOT_SERVING (gRPC health, /readyz).
    It is ready while it reaches the metadata quorum (a voter: its metadata
    replica knows a leader, and a leader hears from a quorum within
    ``quorum_timeout_s``; a non-voter: its last metadata poll reached a voter
    that knows a leader), its data directory's file system is above the
    ``[storage]`` watermark (the one rule that also refuses sends), and it
    is not shutting down. Checked every ``check_period_s``.
    """

    check_period_s: float = 0.5
    quorum_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        _check_positive("health.check_period_s", self.check_period_s)
        _check_positive("health.quorum_timeout_s", self.quorum_timeout_s)


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """``[storage]``: the free-space watermark of the disk holding ``data_dir``
    (server/control/disk.py). Below either threshold the node is "low on disk":
    sends to every partition with a replica on it are refused
    (RESOURCE_EXHAUSTED naming the node and the disk; acks, receives and
    reads go on, and acks free space), and its replicas hand leadership
    away, until space returns. Checked with every heartbeat
    (``cluster.heartbeat_period_s``). 0 disables a threshold.
    """

    min_free_bytes: int = 256 * MIB
    min_free_percent: float = 0.0

    def __post_init__(self) -> None:
        _check_int(ConfigError, "storage.min_free_bytes", self.min_free_bytes, 0, 2**62)
        if not 0.0 <= float(self.min_free_percent) < 100.0:
            raise ConfigError("storage.min_free_percent", "must be in [0, 100)")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """``[tls]``: serve gRPC only over TLS, and dial other nodes over TLS.

    All empty = plaintext gRPC. ``cert_file`` + ``key_file`` (PEM) turn TLS
    on; ``ca_file`` (PEM) is the CA that other nodes' certificates are
    checked against when this node dials them (empty: the system roots), and
    that client certificates are checked against. ``require_client_cert``
    makes it mutual TLS: a client without a certificate signed by ``ca_file``
    is refused, and this node presents its own certificate when it dials
    another node. The files are read once, at start (docs/security.md).
    ``client_cert_principals`` (needs ``require_client_cert``): a client call
    with no token is the principal its verified certificate names.
    """

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    require_client_cert: bool = False
    client_cert_principals: bool = False

    def __post_init__(self) -> None:
        for name in ("require_client_cert", "client_cert_principals"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"tls.{name}", "must be true or false")
        if self.client_cert_principals and not self.require_client_cert:
            raise ConfigError(
                "tls.client_cert_principals",
                "needs require_client_cert (only then are client certificates asked for)",
            )
        if bool(self.cert_file) != bool(self.key_file):
            missing = "key_file" if self.cert_file else "cert_file"
            raise ConfigError(f"tls.{missing}", "cert_file and key_file go together")
        if self.ca_file and not self.cert_file:
            raise ConfigError("tls.cert_file", "ca_file is set but TLS is off (no cert_file)")
        if self.require_client_cert and not self.ca_file:
            raise ConfigError("tls.ca_file", "require_client_cert needs the CA to check them")

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """One node process. See configs/local-3node.toml for each field's meaning."""

    node_id: str
    data_dir: str
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 7001
    advertise_address: str = ""
    raft_host: str = "127.0.0.1"
    raft_port_min: int = 7200
    raft_port_max: int = 7299
    metadata_raft_port: int = 7100
    controller: bool = True
    seeds: tuple[str, ...] = ()
    controllers: tuple[str, ...] = ()
    rack: str = ""
    raft: RaftTuning = field(default_factory=RaftTuning)
    cluster: ClusterTuning = field(default_factory=ClusterTuning)
    limits: Limits = field(default_factory=Limits)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    # The settings of a queue a Send creates (cluster.auto_create_queues, or
    # a Send asking for it): QueueSpec's fields, checked as CreateQueue
    # checks them (an error is a ConfigError naming queue_defaults.<field>).
    queue_defaults: QueueSpec = field(default_factory=lambda: QueueSpec())
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    # "text" (human) or "json" (one object a line: node, request id, queue,
    # partition where known; raft_queue/observability/logs.py).
    log_format: str = "text"
    storage: StorageConfig = field(default_factory=StorageConfig)
    tls: TlsConfig = field(default_factory=TlsConfig)

    def __post_init__(self) -> None:
        check_name("node_id", self.node_id, error=ConfigError)
        if not isinstance(self.data_dir, str) or not self.data_dir:
            raise ConfigError("data_dir", "must be a non-empty path")
        for name in ("grpc_host", "raft_host"):
            if not getattr(self, name) or any(c.isspace() for c in getattr(self, name)):
                raise ConfigError(name, "must be a host name or address")
        if self.rack:
            check_name("rack", self.rack, error=ConfigError)
        if self.advertise_address:
            parse_host_port("advertise_address", self.advertise_address)
        for seed in self.seeds:
            parse_host_port("seeds", seed)
        if self.log_format not in ("text", "json"):
            raise ConfigError("log_format", f"{self.log_format!r} not one of text, json")
        if self.raft.append_entries_batch_bytes > self.limits.max_request_bytes:
            # An entry must fit the Raft link's frame, sized from max_request_bytes.
            raise ConfigError(
                "raft.append_entries_batch_bytes", "must be <= limits.max_request_bytes"
            )
        if self.queue_defaults.max_message_bytes > self.limits.max_message_bytes:
            raise ConfigError(
                "queue_defaults.max_message_bytes", "must be <= limits.max_message_bytes"
            )
        self._check_ports()
        self._check_controllers()

    def _check_ports(self) -> None:
        for name in ("grpc_port", "raft_port_min", "raft_port_max", "metadata_raft_port"):
            _check_int(ConfigError, name, getattr(self, name), 1, 65535)
        if self.raft_port_max < self.raft_port_min:
            raise ConfigError("raft_port_max", "must be >= raft_port_min")
        if self.raft_port_min <= self.metadata_raft_port <= self.raft_port_max:
            raise ConfigError("metadata_raft_port", "must be outside raft_port_min..raft_port_max")
        if self.grpc_host == self.raft_host and (
            self.grpc_port == self.metadata_raft_port
            or self.raft_port_min <= self.grpc_port <= self.raft_port_max
        ):
            raise ConfigError("grpc_port", "collides with a Raft port")

    def _check_controllers(self) -> None:
        peers = self.controller_peers  # validates the syntax
        if not peers:
            raise ConfigError("controllers", "list the metadata voters (node_id=host:port)")
        mine = f"{self.raft_host}:{self.metadata_raft_port}"
        if self.controller and peers.get(self.node_id) != mine:
            raise ConfigError(
                "controllers", f"a controller must list itself as {self.node_id}={mine}"
            )
        if not self.controller and self.node_id in peers:
            raise ConfigError("controllers", "lists this node but controller = false")

    @property
    def grpc_address(self) -> str:
        """The gRPC address other nodes and clients use to reach this node."""
        return self.advertise_address or f"{self.grpc_host}:{self.grpc_port}"

    @property
    def controller_peers(self) -> dict[str, str]:
        """``controllers`` as {node_id: "raft_host:metadata_raft_port"}. Empty
        ``controllers`` on a controller means this node alone (single-node dev).
        """
        if not self.controllers and self.controller:
            return {self.node_id: f"{self.raft_host}:{self.metadata_raft_port}"}
        peers: dict[str, str] = {}
        for entry in self.controllers:
            node_id, sep, address = entry.partition("=")
            if not sep:
                raise ConfigError("controllers", f"{entry!r} is not node_id=host:port")
            check_name("controllers", node_id, error=ConfigError)
            parse_host_port("controllers", address)
            if node_id in peers:
                raise ConfigError("controllers", f"{node_id} listed twice")
            peers[node_id] = address
        return peers


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue's settings (DESIGN.md section 3); the fields of proto QueueConfig.

    ``replication_factor`` and ``ordering`` are fixed at creation;
    ``partitions`` only grows, by splits (server/control/splits.py), and
    counts sealed partitions too; the rest can be updated. Whether ``replication_factor`` fits
    the live nodes and ``max_message_bytes`` the node limit is the caller's
    check (it knows the cluster).
    """

    partitions: int = 1
    replication_factor: int = 3
    durability: str = "fsync"
    ordering: str = "none"
    visibility_timeout_ms: int = 30_000
    max_receives: int = 0
    dead_letter_queue: str = ""
    retention_ms: int = 0
    retention_bytes: int = 0
    max_message_bytes: int = 1 * MIB
    dedup_window_ms: int = 300_000
    delay_ms: int = 0
    encryption: bool = True  # bodies and headers sealed at rest (docs/security.md)

    def __post_init__(self) -> None:
        bad = InvalidArgument
        if not isinstance(self.encryption, bool):
            raise bad("encryption", "must be true or false")
        _check_int(bad, "partitions", self.partitions, 1, MAX_PARTITIONS)
        if self.replication_factor not in REPLICATION_FACTORS or isinstance(
            self.replication_factor, bool
        ):
            raise bad("replication_factor", f"{self.replication_factor!r} not one of 1, 3, 5")
        if self.durability not in DURABILITIES:
            raise bad("durability", f"{self.durability!r} not one of {', '.join(DURABILITIES)}")
        if self.ordering not in ORDERINGS:
            raise bad("ordering", f"{self.ordering!r} not one of {', '.join(ORDERINGS)}")
        _check_int(bad, "visibility_timeout_ms", self.visibility_timeout_ms, 0, 12 * HOUR_MS)
        _check_int(bad, "max_receives", self.max_receives, 0, 10**6)
        _check_int(bad, "retention_ms", self.retention_ms, 0, 2**63 - 1)
        _check_int(bad, "retention_bytes", self.retention_bytes, 0, 2**63 - 1)
        _check_int(bad, "max_message_bytes", self.max_message_bytes, 1, MAX_QUEUE_MESSAGE_BYTES)
        _check_int(bad, "dedup_window_ms", self.dedup_window_ms, 0, 30 * DAY_MS)
        _check_int(bad, "delay_ms", self.delay_ms, 0, MAX_QUEUE_DELAY_MS, "365 days")
        if self.dead_letter_queue:
            check_name("dead_letter_queue", self.dead_letter_queue, QUEUE_NAME_MAX)
            if self.max_receives == 0:
                raise bad("max_receives", "must be > 0 when dead_letter_queue is set")

    def with_updates(self, **changes: Any) -> QueueSpec:
        """A validated copy with ``changes``; an unknown field is InvalidArgument."""
        return _build(QueueSpec, {**self.to_dict(), **changes}, "", InvalidArgument)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> QueueSpec:
        """Inverse of to_dict; missing fields take defaults, unknown ones are rejected."""
        return _build(QueueSpec, data, "", InvalidArgument)


def load(path: str | Path, node_id: str = "") -> NodeConfig:
    """Read and validate a node config file (TOML). Every error is a
    ConfigError naming the key (``raft.heartbeat_period_s``).

    A file may describe several nodes of one cluster (configs/local-3node.toml):
    its top-level keys are shared and ``[nodes.<id>]`` tables hold each node's
    own keys (merged over the shared ones, nested tables key by key); then
    ``node_id`` picks the node. Relative ``data_dir``s are relative to the
    process's working directory.
    """
    data = _read_toml(path)
    nodes = data.pop("nodes", None)
    if nodes is None:
        if node_id and data.get("node_id", node_id) != node_id:
            raise ConfigError(
                "node_id", f"{path} describes {data.get('node_id')!r}, not {node_id!r}"
            )
        return _build(NodeConfig, data, "", ConfigError)
    if not isinstance(nodes, dict) or not all(isinstance(v, dict) for v in nodes.values()):
        raise ConfigError("nodes", "must be tables [nodes.<node_id>]")
    if node_id not in nodes:
        raise ConfigError("node_id", f"choose one of {sorted(nodes)} in {path}")
    return _build(
        NodeConfig, {**_merged(data, nodes[node_id]), "node_id": node_id}, "", ConfigError
    )


def load_all(path: str | Path) -> list[NodeConfig]:
    """Every node of a multi-node file (or the one node of a plain file)."""
    nodes = _read_toml(path).get("nodes")
    if isinstance(nodes, dict):
        return [load(path, node_id) for node_id in nodes]
    return [load(path)]


def _read_toml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError("path", f"cannot read {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("path", f"{path} is not valid TOML: {exc}") from exc


def _merged(shared: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """``own`` over ``shared``; tables present in both are merged recursively."""
    out = dict(shared)
    for key, value in own.items():
        base = out.get(key)
        both_tables = isinstance(base, dict) and isinstance(value, dict)
        out[key] = _merged(base, value) if both_tables else value  # type: ignore[arg-type]
    return out


def _build(cls: type[D], data: dict[str, Any], prefix: str, error: type[InvalidArgument]) -> D:
    """Construct dataclass ``cls`` from a TOML/JSON table, type-checking each
    value and recursing into nested dataclass tables.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in names:
            raise error(prefix + key, "unknown key")
    kwargs = {key: _value(hints[key], value, prefix + key, error) for key, value in data.items()}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if no_default and f.name not in data:
            raise error(prefix + f.name, "required")
    return cls(**kwargs)


def _value(hint: Any, value: Any, name: str, error: type[InvalidArgument]) -> Any:
    """Check one value against its annotation (TOML ints pass for floats)."""
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise error(name, "must be a table")
        try:
            return _build(hint, value, name + ".", error)  # type: ignore[arg-type]
        except InvalidArgument as exc:
            if isinstance(exc, error):
                raise
            # A table of request-side settings (QueueSpec raises InvalidArgument
            # with its own field name): report it as this file's key.
            reason = str(exc).removeprefix(f"{exc.field}: ")
            raise error(f"{name}.{exc.field}", reason) from exc
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise error(name, "must be a list of strings")
        return tuple(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise error(name, f"must be {hint.__name__}, got {type(value).__name__}")
    return value
