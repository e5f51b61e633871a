"""Values of the metadata state (pure, immutable): nodes, queues, partition
assignments and moves in flight. ``core/metadata.py`` holds the machine that
changes them; ``core/metadata_commands.py`` the commands and their codec.
"""

from __future__ import annotations

from dataclasses import dataclass

from raft_queue.config import QueueSpec
from raft_queue.core.access import Grant
from raft_queue.core.placement_keys import KeyRange, Layout

NODE_STATES = ("alive", "suspect", "dead", "draining", "removed")


@dataclass(frozen=True, slots=True)
class ReplicaRef:
    """One replica of a partition: the node and the Raft port it listens on."""

    node_id: str
    raft_port: int


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """A partition's replicas; the first is the preferred leader. ``epoch``
    grows with every change of the replica list (fences stale changes).
    """

    partition: int
    replicas: tuple[ReplicaRef, ...]
    epoch: int = 1

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(r.node_id for r in self.replicas)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A registered node. ``address`` is its gRPC host:port; replicas listen
    on ``raft_host`` at ports from ``[raft_port_min, raft_port_max]``.
    """

    node_id: str
    address: str
    raft_host: str
    raft_port_min: int
    raft_port_max: int
    rack: str = ""
    controller: bool = False
    state: str = "alive"
    registered_ms: int = 0
    state_ms: int = 0
    metadata_raft_port: int = 0  # where its metadata replica listens (0: not reported)


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A queue. ``uid`` is unique forever, so a re-created queue of the same
    name never reuses the old one's replica data.

    ``ranges``: the key range of each partition once the queue was split
    (core/placement_keys.py); () for a queue never split, whose partition i
    of ``spec.partitions`` owns ``key_hash % partitions == i``.
    ``spec.partitions`` always counts every partition, sealed ones included.
    """

    name: str
    spec: QueueSpec
    uid: int
    created_ms: int
    ranges: tuple[KeyRange, ...] = ()
    fenced: bool = False  # moving to another cluster: no sends, no leases (FenceQueue)
    fenced_partitions: tuple[int, ...] = ()  # only these are fenced (a partial move)

    def is_fenced(self, partition: int) -> bool:
        """True if ``partition`` refuses sends and leases nothing (a move's fence)."""
        return self.fenced or partition in self.fenced_partitions

    @property
    def layout(self) -> Layout:
        return Layout(self.ranges) if self.ranges else Layout.initial(self.spec.partitions)

    def sealed(self, partition: int) -> bool:
        """True if ``partition`` was split (no Layout built: the hot path asks)."""
        ranges = self.ranges
        return 0 <= partition < len(ranges) and ranges[partition].state in ("sealed", "drained")


@dataclass(frozen=True, slots=True)
class DataKey:
    """One data key of a queue (encryption at rest, security/encryption.py):
    ``wrapped`` (hex) is the AES-256 key encrypted by master key
    ``master_id`` of the key provider. Never the plain key."""

    key_id: int
    master_id: str
    wrapped: str


@dataclass(frozen=True, slots=True)
class LocalReplica:
    """A replica hosted by one node (what its reconciler must run)."""

    queue: str
    uid: int
    partition: int
    assignment: PartitionAssignment


@dataclass(frozen=True, slots=True)
class Move:
    """A replica move in flight (a Kafka "reassignment in progress"): the
    replica on ``from_node`` is being replaced by ``to``. Phases: ``adding``
    (``to`` starts and joins the group), ``removing`` (past the point of no
    return: ``from_node`` leaves), ``cancelling`` (``to`` leaves again).
    Recorded in the log so a new metadata leader resumes or cancels it.
    """

    queue: str
    uid: int
    partition: int
    from_node: str
    to: ReplicaRef
    phase: str = "adding"
    started_ms: int = 0
    throttle_bytes_per_s: int = 0  # catch-up limit (0: the cluster default)

    @property
    def key(self) -> tuple[str, int]:
        return (self.queue, self.partition)


MOVE_PHASES = ("adding", "removing", "cancelling")


CONTROLLER_ACTIONS = ("add", "remove")


@dataclass(frozen=True, slots=True)
class ControllerChange:
    """A change of the metadata group's voters in flight: ``node_id`` (whose
    metadata replica listens on ``raft_address``) joins or leaves. One at a
    time, as Raft membership changes go."""

    action: str
    node_id: str
    raft_address: str

    def __str__(self) -> str:
        return f"{self.action} {self.node_id}"


@dataclass(frozen=True, slots=True)
class Principal:
    """A client identity: the SHA-256 (hex) of its bearer token, never the
    token itself, and its grants (core/access.py). ``rotated_ms`` is when the
    current token was set (``created_ms`` at first)."""

    name: str
    token_hash: str
    created_ms: int = 0
    rotated_ms: int = 0
    grants: tuple[Grant, ...] = ()
