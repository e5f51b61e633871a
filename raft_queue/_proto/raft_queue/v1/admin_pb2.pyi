from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeInfo(_message.Message):
    __slots__ = ("id", "address", "state", "controller", "metadata_leader", "rack", "last_heartbeat_age_ms", "disk_low", "failure")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    METADATA_LEADER_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    DISK_LOW_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    state: str
    controller: bool
    metadata_leader: bool
    rack: str
    last_heartbeat_age_ms: int
    disk_low: str
    failure: str
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., state: _Optional[str] = ..., controller: _Optional[bool] = ..., metadata_leader: _Optional[bool] = ..., rack: _Optional[str] = ..., last_heartbeat_age_ms: _Optional[int] = ..., disk_low: _Optional[str] = ..., failure: _Optional[str] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("queue", "partition", "node", "role", "leader", "term", "commit_index", "last_applied", "log_len", "next_offset", "digest", "has_quorum", "earliest_offset", "messages", "in_flight", "epoch", "delayed", "dead", "bytes", "oldest_timestamp_ms", "failure", "snapshot_failures", "sealed")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLIED_FIELD_NUMBER: _ClassVar[int]
    LOG_LEN_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    HAS_QUORUM_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FAILURES_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    node: str
    role: str
    leader: str
    term: int
    commit_index: int
    last_applied: int
    log_len: int
    next_offset: int
    digest: str
    has_quorum: bool
    earliest_offset: int
    messages: int
    in_flight: int
    epoch: int
    delayed: int
    dead: int
    bytes: int
    oldest_timestamp_ms: int
    failure: str
    snapshot_failures: int
    sealed: bool
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., node: _Optional[str] = ..., role: _Optional[str] = ..., leader: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., last_applied: _Optional[int] = ..., log_len: _Optional[int] = ..., next_offset: _Optional[int] = ..., digest: _Optional[str] = ..., has_quorum: _Optional[bool] = ..., earliest_offset: _Optional[int] = ..., messages: _Optional[int] = ..., in_flight: _Optional[int] = ..., epoch: _Optional[int] = ..., delayed: _Optional[int] = ..., dead: _Optional[int] = ..., bytes: _Optional[int] = ..., oldest_timestamp_ms: _Optional[int] = ..., failure: _Optional[str] = ..., snapshot_failures: _Optional[int] = ..., sealed: _Optional[bool] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ("include_digests", "include_counters")
    INCLUDE_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_COUNTERS_FIELD_NUMBER: _ClassVar[int]
    include_digests: bool
    include_counters: bool
    def __init__(self, include_digests: _Optional[bool] = ..., include_counters: _Optional[bool] = ...) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("nodes", "metadata_leader", "metadata_version", "replicas", "unreachable", "controllers", "controller_change", "cluster_name", "managers", "counters")
    NODES_FIELD_NUMBER: _ClassVar[int]
    METADATA_LEADER_FIELD_NUMBER: _ClassVar[int]
    METADATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_CHANGE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    MANAGERS_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    metadata_leader: str
    metadata_version: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    unreachable: _containers.RepeatedScalarFieldContainer[str]
    controllers: _containers.RepeatedCompositeFieldContainer[ControllerInfo]
    controller_change: str
    cluster_name: str
    managers: _containers.RepeatedScalarFieldContainer[str]
    counters: _containers.RepeatedCompositeFieldContainer[NodeCounters]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ..., metadata_leader: _Optional[str] = ..., metadata_version: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., unreachable: _Optional[_Iterable[str]] = ..., controllers: _Optional[_Iterable[_Union[ControllerInfo, _Mapping]]] = ..., controller_change: _Optional[str] = ..., cluster_name: _Optional[str] = ..., managers: _Optional[_Iterable[str]] = ..., counters: _Optional[_Iterable[_Union[NodeCounters, _Mapping]]] = ...) -> None: ...

class SetManagedByRequest(_message.Message):
    __slots__ = ("cluster_name", "managers")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    MANAGERS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    managers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_name: _Optional[str] = ..., managers: _Optional[_Iterable[str]] = ...) -> None: ...

class SetManagedByResponse(_message.Message):
    __slots__ = ("cluster_name", "managers", "metadata_version")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    MANAGERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    managers: _containers.RepeatedScalarFieldContainer[str]
    metadata_version: int
    def __init__(self, cluster_name: _Optional[str] = ..., managers: _Optional[_Iterable[str]] = ..., metadata_version: _Optional[int] = ...) -> None: ...

class NodeCounters(_message.Message):
    __slots__ = ("node", "queues")
    NODE_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    node: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueCounters]
    def __init__(self, node: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueCounters, _Mapping]]] = ...) -> None: ...

class NodeStatusRequest(_message.Message):
    __slots__ = ("include_digests", "include_counters")
    INCLUDE_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_COUNTERS_FIELD_NUMBER: _ClassVar[int]
    include_digests: bool
    include_counters: bool
    def __init__(self, include_digests: _Optional[bool] = ..., include_counters: _Optional[bool] = ...) -> None: ...

class NodeStatusResponse(_message.Message):
    __slots__ = ("node", "replicas", "metadata_version", "counters", "ready", "metrics_address")
    NODE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    METADATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node: str
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    metadata_version: int
    counters: _containers.RepeatedCompositeFieldContainer[QueueCounters]
    ready: bool
    metrics_address: str
    def __init__(self, node: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., metadata_version: _Optional[int] = ..., counters: _Optional[_Iterable[_Union[QueueCounters, _Mapping]]] = ..., ready: _Optional[bool] = ..., metrics_address: _Optional[str] = ...) -> None: ...

class QueueCounters(_message.Message):
    __slots__ = ("queue", "partition", "sent", "received", "acked")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SENT_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    sent: int
    received: int
    acked: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., sent: _Optional[int] = ..., received: _Optional[int] = ..., acked: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("node", "address", "raft_host", "rack", "metadata_version", "raft_port_min", "raft_port_max", "controller", "metadata_raft_port", "disk_low", "failure")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_HOST_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    METADATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    RAFT_PORT_MIN_FIELD_NUMBER: _ClassVar[int]
    RAFT_PORT_MAX_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    METADATA_RAFT_PORT_FIELD_NUMBER: _ClassVar[int]
    DISK_LOW_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    raft_host: str
    rack: str
    metadata_version: int
    raft_port_min: int
    raft_port_max: int
    controller: bool
    metadata_raft_port: int
    disk_low: str
    failure: str
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., raft_host: _Optional[str] = ..., rack: _Optional[str] = ..., metadata_version: _Optional[int] = ..., raft_port_min: _Optional[int] = ..., raft_port_max: _Optional[int] = ..., controller: _Optional[bool] = ..., metadata_raft_port: _Optional[int] = ..., disk_low: _Optional[str] = ..., failure: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("metadata_version", "disk_low")
    class DiskLowEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    DISK_LOW_FIELD_NUMBER: _ClassVar[int]
    metadata_version: int
    disk_low: _containers.ScalarMap[str, str]
    def __init__(self, metadata_version: _Optional[int] = ..., disk_low: _Optional[_Mapping[str, str]] = ...) -> None: ...

class MoveInfo(_message.Message):
    __slots__ = ("queue", "partition", "from_node", "to_node", "to_port", "phase", "started_ms", "match_index", "leader_index", "throttle_bytes_per_s", "bytes_sent", "snapshot_bytes")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_PORT_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_INDEX_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    from_node: str
    to_node: str
    to_port: int
    phase: str
    started_ms: int
    match_index: int
    leader_index: int
    throttle_bytes_per_s: int
    bytes_sent: int
    snapshot_bytes: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., from_node: _Optional[str] = ..., to_node: _Optional[str] = ..., to_port: _Optional[int] = ..., phase: _Optional[str] = ..., started_ms: _Optional[int] = ..., match_index: _Optional[int] = ..., leader_index: _Optional[int] = ..., throttle_bytes_per_s: _Optional[int] = ..., bytes_sent: _Optional[int] = ..., snapshot_bytes: _Optional[int] = ...) -> None: ...

class MovePartitionRequest(_message.Message):
    __slots__ = ("queue", "partition", "from_node", "to_node", "to_port", "throttle_bytes_per_s")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_PORT_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    from_node: str
    to_node: str
    to_port: int
    throttle_bytes_per_s: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., from_node: _Optional[str] = ..., to_node: _Optional[str] = ..., to_port: _Optional[int] = ..., throttle_bytes_per_s: _Optional[int] = ...) -> None: ...

class CancelMoveRequest(_message.Message):
    __slots__ = ("queue", "partition")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class ListMovesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListMovesResponse(_message.Message):
    __slots__ = ("moves",)
    MOVES_FIELD_NUMBER: _ClassVar[int]
    moves: _containers.RepeatedCompositeFieldContainer[MoveInfo]
    def __init__(self, moves: _Optional[_Iterable[_Union[MoveInfo, _Mapping]]] = ...) -> None: ...

class TransferLeaderRequest(_message.Message):
    __slots__ = ("queue", "partition", "to_node")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    to_node: str
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., to_node: _Optional[str] = ...) -> None: ...

class TransferLeaderResponse(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class SetNodeStateRequest(_message.Message):
    __slots__ = ("node", "state")
    NODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    node: str
    state: str
    def __init__(self, node: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class PlanRequest(_message.Message):
    __slots__ = ("kind", "node", "max_moves")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    MAX_MOVES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    node: str
    max_moves: int
    def __init__(self, kind: _Optional[str] = ..., node: _Optional[str] = ..., max_moves: _Optional[int] = ...) -> None: ...

class PlanStep(_message.Message):
    __slots__ = ("kind", "queue", "partition", "from_node", "to_node", "to_port")
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_PORT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    queue: str
    partition: int
    from_node: str
    to_node: str
    to_port: int
    def __init__(self, kind: _Optional[str] = ..., queue: _Optional[str] = ..., partition: _Optional[int] = ..., from_node: _Optional[str] = ..., to_node: _Optional[str] = ..., to_port: _Optional[int] = ...) -> None: ...

class PlanResponse(_message.Message):
    __slots__ = ("steps", "unplaced", "more")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    UNPLACED_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[PlanStep]
    unplaced: _containers.RepeatedScalarFieldContainer[str]
    more: bool
    def __init__(self, steps: _Optional[_Iterable[_Union[PlanStep, _Mapping]]] = ..., unplaced: _Optional[_Iterable[str]] = ..., more: _Optional[bool] = ...) -> None: ...

class MemberChangeRequest(_message.Message):
    __slots__ = ("queue", "partition", "action", "address", "throttle_bytes_per_s")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    action: str
    address: str
    throttle_bytes_per_s: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., action: _Optional[str] = ..., address: _Optional[str] = ..., throttle_bytes_per_s: _Optional[int] = ...) -> None: ...

class MemberChangeResponse(_message.Message):
    __slots__ = ("is_leader", "members", "match_index", "leader_index", "connected", "caught_up", "leader", "bytes_sent", "snapshot_bytes")
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    is_leader: bool
    members: _containers.RepeatedScalarFieldContainer[str]
    match_index: int
    leader_index: int
    connected: bool
    caught_up: bool
    leader: str
    bytes_sent: int
    snapshot_bytes: int
    def __init__(self, is_leader: _Optional[bool] = ..., members: _Optional[_Iterable[str]] = ..., match_index: _Optional[int] = ..., leader_index: _Optional[int] = ..., connected: _Optional[bool] = ..., caught_up: _Optional[bool] = ..., leader: _Optional[str] = ..., bytes_sent: _Optional[int] = ..., snapshot_bytes: _Optional[int] = ...) -> None: ...

class ControllerInfo(_message.Message):
    __slots__ = ("node", "raft_address", "leader")
    NODE_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    node: str
    raft_address: str
    leader: bool
    def __init__(self, node: _Optional[str] = ..., raft_address: _Optional[str] = ..., leader: _Optional[bool] = ...) -> None: ...

class ChangeControllerRequest(_message.Message):
    __slots__ = ("action", "node")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    action: str
    node: str
    def __init__(self, action: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class ListControllersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ControllersResponse(_message.Message):
    __slots__ = ("controllers", "change")
    CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    controllers: _containers.RepeatedCompositeFieldContainer[ControllerInfo]
    change: str
    def __init__(self, controllers: _Optional[_Iterable[_Union[ControllerInfo, _Mapping]]] = ..., change: _Optional[str] = ...) -> None: ...

class GetMetadataRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: int
    def __init__(self, known_version: _Optional[int] = ...) -> None: ...

class GetMetadataResponse(_message.Message):
    __slots__ = ("version", "image", "leader_address", "leader_ready")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADER_READY_FIELD_NUMBER: _ClassVar[int]
    version: int
    image: bytes
    leader_address: str
    leader_ready: bool
    def __init__(self, version: _Optional[int] = ..., image: _Optional[bytes] = ..., leader_address: _Optional[str] = ..., leader_ready: _Optional[bool] = ...) -> None: ...

class GrantInfo(_message.Message):
    __slots__ = ("pattern", "operations")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    operations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pattern: _Optional[str] = ..., operations: _Optional[_Iterable[str]] = ...) -> None: ...

class PrincipalInfo(_message.Message):
    __slots__ = ("name", "grants", "created_ms", "rotated_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    ROTATED_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    grants: _containers.RepeatedCompositeFieldContainer[GrantInfo]
    created_ms: int
    rotated_ms: int
    def __init__(self, name: _Optional[str] = ..., grants: _Optional[_Iterable[_Union[GrantInfo, _Mapping]]] = ..., created_ms: _Optional[int] = ..., rotated_ms: _Optional[int] = ...) -> None: ...

class CreatePrincipalRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class IntrospectRequest(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class IntrospectResponse(_message.Message):
    __slots__ = ("active", "principal", "superuser", "grants")
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SUPERUSER_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    active: bool
    principal: str
    superuser: bool
    grants: _containers.RepeatedCompositeFieldContainer[GrantInfo]
    def __init__(self, active: _Optional[bool] = ..., principal: _Optional[str] = ..., superuser: _Optional[bool] = ..., grants: _Optional[_Iterable[_Union[GrantInfo, _Mapping]]] = ...) -> None: ...

class RotatePrincipalRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PrincipalTokenResponse(_message.Message):
    __slots__ = ("principal", "token")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    principal: PrincipalInfo
    token: str
    def __init__(self, principal: _Optional[_Union[PrincipalInfo, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class DeletePrincipalRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeletePrincipalResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPrincipalsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListPrincipalsResponse(_message.Message):
    __slots__ = ("principals",)
    PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    principals: _containers.RepeatedCompositeFieldContainer[PrincipalInfo]
    def __init__(self, principals: _Optional[_Iterable[_Union[PrincipalInfo, _Mapping]]] = ...) -> None: ...

class GrantRequest(_message.Message):
    __slots__ = ("principal", "pattern", "operations")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    principal: str
    pattern: str
    operations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, principal: _Optional[str] = ..., pattern: _Optional[str] = ..., operations: _Optional[_Iterable[str]] = ...) -> None: ...

class QuotaInfo(_message.Message):
    __slots__ = ("principal", "queue", "messages_per_s", "bytes_per_s", "burst_s")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_PER_S_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    BURST_S_FIELD_NUMBER: _ClassVar[int]
    principal: str
    queue: str
    messages_per_s: int
    bytes_per_s: int
    burst_s: float
    def __init__(self, principal: _Optional[str] = ..., queue: _Optional[str] = ..., messages_per_s: _Optional[int] = ..., bytes_per_s: _Optional[int] = ..., burst_s: _Optional[float] = ...) -> None: ...

class ListQuotasRequest(_message.Message):
    __slots__ = ("principal",)
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    principal: str
    def __init__(self, principal: _Optional[str] = ...) -> None: ...

class ListQuotasResponse(_message.Message):
    __slots__ = ("quotas",)
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    quotas: _containers.RepeatedCompositeFieldContainer[QuotaInfo]
    def __init__(self, quotas: _Optional[_Iterable[_Union[QuotaInfo, _Mapping]]] = ...) -> None: ...

class RemoveQuotaRequest(_message.Message):
    __slots__ = ("principal", "queue")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    principal: str
    queue: str
    def __init__(self, principal: _Optional[str] = ..., queue: _Optional[str] = ...) -> None: ...

class UsageRow(_message.Message):
    __slots__ = ("principal", "queue", "hour_ms", "operation", "requests", "messages", "bytes")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    HOUR_MS_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    principal: str
    queue: str
    hour_ms: int
    operation: str
    requests: int
    messages: int
    bytes: int
    def __init__(self, principal: _Optional[str] = ..., queue: _Optional[str] = ..., hour_ms: _Optional[int] = ..., operation: _Optional[str] = ..., requests: _Optional[int] = ..., messages: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("principal", "queue", "since_ms")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    principal: str
    queue: str
    since_ms: int
    def __init__(self, principal: _Optional[str] = ..., queue: _Optional[str] = ..., since_ms: _Optional[int] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[UsageRow]
    def __init__(self, rows: _Optional[_Iterable[_Union[UsageRow, _Mapping]]] = ...) -> None: ...

class FlushUsageRequest(_message.Message):
    __slots__ = ("node", "seq", "rows")
    NODE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    node: str
    seq: int
    rows: _containers.RepeatedCompositeFieldContainer[UsageRow]
    def __init__(self, node: _Optional[str] = ..., seq: _Optional[int] = ..., rows: _Optional[_Iterable[_Union[UsageRow, _Mapping]]] = ...) -> None: ...

class FlushUsageResponse(_message.Message):
    __slots__ = ("applied_seq",)
    APPLIED_SEQ_FIELD_NUMBER: _ClassVar[int]
    applied_seq: int
    def __init__(self, applied_seq: _Optional[int] = ...) -> None: ...

class WithdrawPollRequest(_message.Message):
    __slots__ = ("poll_id",)
    POLL_ID_FIELD_NUMBER: _ClassVar[int]
    poll_id: str
    def __init__(self, poll_id: _Optional[str] = ...) -> None: ...

class WithdrawPollResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class FenceQueueRequest(_message.Message):
    __slots__ = ("queue", "fenced", "partitions")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    fenced: bool
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, queue: _Optional[str] = ..., fenced: _Optional[bool] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class FenceQueueResponse(_message.Message):
    __slots__ = ("fenced", "partitions", "fenced_partitions")
    FENCED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FENCED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    fenced: bool
    partitions: int
    fenced_partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, fenced: _Optional[bool] = ..., partitions: _Optional[int] = ..., fenced_partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class RotateQueueKeyRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class RotateQueueKeyResponse(_message.Message):
    __slots__ = ("key_id", "master_id")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    key_id: int
    master_id: str
    def __init__(self, key_id: _Optional[int] = ..., master_id: _Optional[str] = ...) -> None: ...

class RotateMasterKeyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RotateMasterKeyResponse(_message.Message):
    __slots__ = ("rewrapped", "master_id")
    REWRAPPED_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    rewrapped: int
    master_id: str
    def __init__(self, rewrapped: _Optional[int] = ..., master_id: _Optional[str] = ...) -> None: ...
