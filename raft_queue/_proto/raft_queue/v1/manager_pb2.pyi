from raft_queue._proto.raft_queue.v1 import queue_pb2 as _queue_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ClusterInfo(_message.Message):
    __slots__ = ("name", "bootstrap", "health", "load", "draining", "health_since_ms", "reason", "queues", "heat_msgs_per_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    HEALTH_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    HEAT_MSGS_PER_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    bootstrap: _containers.RepeatedScalarFieldContainer[str]
    health: str
    load: int
    draining: bool
    health_since_ms: int
    reason: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    heat_msgs_per_s: float
    def __init__(self, name: _Optional[str] = ..., bootstrap: _Optional[_Iterable[str]] = ..., health: _Optional[str] = ..., load: _Optional[int] = ..., draining: _Optional[bool] = ..., health_since_ms: _Optional[int] = ..., reason: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., heat_msgs_per_s: _Optional[float] = ...) -> None: ...

class AddClusterRequest(_message.Message):
    __slots__ = ("name", "bootstrap", "token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    bootstrap: _containers.RepeatedScalarFieldContainer[str]
    token: str
    def __init__(self, name: _Optional[str] = ..., bootstrap: _Optional[_Iterable[str]] = ..., token: _Optional[str] = ...) -> None: ...

class RemoveClusterRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DrainClusterRequest(_message.Message):
    __slots__ = ("name", "undrain")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UNDRAIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    undrain: bool
    def __init__(self, name: _Optional[str] = ..., undrain: _Optional[bool] = ...) -> None: ...

class ListClustersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListClustersResponse(_message.Message):
    __slots__ = ("clusters", "version", "leader")
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterInfo]
    version: int
    leader: str
    def __init__(self, clusters: _Optional[_Iterable[_Union[ClusterInfo, _Mapping]]] = ..., version: _Optional[int] = ..., leader: _Optional[str] = ...) -> None: ...

class PartitionHome(_message.Message):
    __slots__ = ("cluster", "local_partition")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    LOCAL_PARTITION_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    local_partition: int
    def __init__(self, cluster: _Optional[str] = ..., local_partition: _Optional[int] = ...) -> None: ...

class QueueMapping(_message.Message):
    __slots__ = ("name", "partitions", "config", "pinned")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionHome]
    config: _queue_pb2.QueueConfig
    pinned: bool
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionHome, _Mapping]]] = ..., config: _Optional[_Union[_queue_pb2.QueueConfig, _Mapping]] = ..., pinned: _Optional[bool] = ...) -> None: ...

class ManagedCreateQueueRequest(_message.Message):
    __slots__ = ("name", "config", "clusters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: _queue_pb2.QueueConfig
    clusters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[_queue_pb2.QueueConfig, _Mapping]] = ..., clusters: _Optional[_Iterable[str]] = ...) -> None: ...

class PlaceQueueRequest(_message.Message):
    __slots__ = ("name", "cluster", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    cluster: str
    config: _queue_pb2.QueueConfig
    def __init__(self, name: _Optional[str] = ..., cluster: _Optional[str] = ..., config: _Optional[_Union[_queue_pb2.QueueConfig, _Mapping]] = ...) -> None: ...

class ForgetQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ManagedUpdateQueueRequest(_message.Message):
    __slots__ = ("name", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: _queue_pb2.QueueConfig
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[_queue_pb2.QueueConfig, _Mapping]] = ...) -> None: ...

class GetMappingRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: int
    def __init__(self, known_version: _Optional[int] = ...) -> None: ...

class GetMappingResponse(_message.Message):
    __slots__ = ("version", "unchanged", "clusters", "queues")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    version: int
    unchanged: bool
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterInfo]
    queues: _containers.RepeatedCompositeFieldContainer[QueueMapping]
    def __init__(self, version: _Optional[int] = ..., unchanged: _Optional[bool] = ..., clusters: _Optional[_Iterable[_Union[ClusterInfo, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[QueueMapping, _Mapping]]] = ...) -> None: ...

class MoveQueueRequest(_message.Message):
    __slots__ = ("name", "to", "dry_run", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    to: str
    dry_run: bool
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., to: _Optional[str] = ..., dry_run: _Optional[bool] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class QueueMoveInfo(_message.Message):
    __slots__ = ("queue", "source", "target", "phase", "started_ms", "phase_ms", "finished_ms", "copied", "partitions", "messages", "error", "moved_partitions", "leases_left")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    PHASE_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    COPIED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MOVED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LEASES_LEFT_FIELD_NUMBER: _ClassVar[int]
    queue: str
    source: str
    target: str
    phase: str
    started_ms: int
    phase_ms: int
    finished_ms: int
    copied: int
    partitions: int
    messages: int
    error: str
    moved_partitions: _containers.RepeatedScalarFieldContainer[int]
    leases_left: int
    def __init__(self, queue: _Optional[str] = ..., source: _Optional[str] = ..., target: _Optional[str] = ..., phase: _Optional[str] = ..., started_ms: _Optional[int] = ..., phase_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., copied: _Optional[int] = ..., partitions: _Optional[int] = ..., messages: _Optional[int] = ..., error: _Optional[str] = ..., moved_partitions: _Optional[_Iterable[int]] = ..., leases_left: _Optional[int] = ...) -> None: ...

class MoveStatusRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class MoveStatusResponse(_message.Message):
    __slots__ = ("moves",)
    MOVES_FIELD_NUMBER: _ClassVar[int]
    moves: _containers.RepeatedCompositeFieldContainer[QueueMoveInfo]
    def __init__(self, moves: _Optional[_Iterable[_Union[QueueMoveInfo, _Mapping]]] = ...) -> None: ...

class CancelQueueMoveRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...
