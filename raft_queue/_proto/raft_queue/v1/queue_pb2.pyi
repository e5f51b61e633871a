from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Durability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DURABILITY_UNSPECIFIED: _ClassVar[Durability]
    DURABILITY_FSYNC: _ClassVar[Durability]
    DURABILITY_QUORUM: _ClassVar[Durability]
    DURABILITY_LEADER: _ClassVar[Durability]

class Ordering(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORDERING_UNSPECIFIED: _ClassVar[Ordering]
    ORDERING_NONE: _ClassVar[Ordering]
    ORDERING_FIFO: _ClassVar[Ordering]
DURABILITY_UNSPECIFIED: Durability
DURABILITY_FSYNC: Durability
DURABILITY_QUORUM: Durability
DURABILITY_LEADER: Durability
ORDERING_UNSPECIFIED: Ordering
ORDERING_NONE: Ordering
ORDERING_FIFO: Ordering

class QueueConfig(_message.Message):
    __slots__ = ("partitions", "replication_factor", "durability", "ordering", "visibility_timeout_ms", "max_receives", "dead_letter_queue", "retention_ms", "retention_bytes", "max_message_bytes", "dedup_window_ms", "delay_ms", "encryption")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    ORDERING_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_RECEIVES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTION_FIELD_NUMBER: _ClassVar[int]
    partitions: int
    replication_factor: int
    durability: Durability
    ordering: Ordering
    visibility_timeout_ms: int
    max_receives: int
    dead_letter_queue: str
    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    dedup_window_ms: int
    delay_ms: int
    encryption: bool
    def __init__(self, partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., durability: _Optional[_Union[Durability, str]] = ..., ordering: _Optional[_Union[Ordering, str]] = ..., visibility_timeout_ms: _Optional[int] = ..., max_receives: _Optional[int] = ..., dead_letter_queue: _Optional[str] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., dedup_window_ms: _Optional[int] = ..., delay_ms: _Optional[int] = ..., encryption: _Optional[bool] = ...) -> None: ...

class QueueInfo(_message.Message):
    __slots__ = ("name", "config", "created_ms", "messages", "in_flight", "delayed", "dead", "oldest_message_age_ms", "bytes", "writable_partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    OLDEST_MESSAGE_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: QueueConfig
    created_ms: int
    messages: int
    in_flight: int
    delayed: int
    dead: int
    oldest_message_age_ms: int
    bytes: int
    writable_partitions: int
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ..., created_ms: _Optional[int] = ..., messages: _Optional[int] = ..., in_flight: _Optional[int] = ..., delayed: _Optional[int] = ..., dead: _Optional[int] = ..., oldest_message_age_ms: _Optional[int] = ..., bytes: _Optional[int] = ..., writable_partitions: _Optional[int] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("queue", "partition", "offset", "body", "key", "headers", "timestamp_ms", "receipt", "receive_count", "dedup_id")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    offset: int
    body: bytes
    key: str
    headers: _containers.ScalarMap[str, bytes]
    timestamp_ms: int
    receipt: str
    receive_count: int
    dedup_id: str
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., body: _Optional[bytes] = ..., key: _Optional[str] = ..., headers: _Optional[_Mapping[str, bytes]] = ..., timestamp_ms: _Optional[int] = ..., receipt: _Optional[str] = ..., receive_count: _Optional[int] = ..., dedup_id: _Optional[str] = ...) -> None: ...

class SendEntry(_message.Message):
    __slots__ = ("body", "key", "headers", "dedup_id", "delay_ms", "partition")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    key: str
    headers: _containers.ScalarMap[str, bytes]
    dedup_id: str
    delay_ms: int
    partition: int
    def __init__(self, body: _Optional[bytes] = ..., key: _Optional[str] = ..., headers: _Optional[_Mapping[str, bytes]] = ..., dedup_id: _Optional[str] = ..., delay_ms: _Optional[int] = ..., partition: _Optional[int] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("partition", "offset", "duplicate", "durability")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    duplicate: bool
    durability: Durability
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., duplicate: _Optional[bool] = ..., durability: _Optional[_Union[Durability, str]] = ...) -> None: ...

class CreateQueueRequest(_message.Message):
    __slots__ = ("name", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: QueueConfig
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ...) -> None: ...

class GetQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueInfo]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueInfo, _Mapping]]] = ...) -> None: ...

class DeleteQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteQueueResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateQueueRequest(_message.Message):
    __slots__ = ("name", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: QueueConfig
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[QueueConfig, _Mapping]] = ...) -> None: ...

class PurgeQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PurgeQueueResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: int
    def __init__(self, removed: _Optional[int] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("queue", "entries", "request_id", "results_as_runs", "create", "packed")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_AS_RUNS_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    queue: str
    entries: _containers.RepeatedCompositeFieldContainer[SendEntry]
    request_id: bytes
    results_as_runs: bool
    create: bool
    packed: PackedBodies
    def __init__(self, queue: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[SendEntry, _Mapping]]] = ..., request_id: _Optional[bytes] = ..., results_as_runs: _Optional[bool] = ..., create: _Optional[bool] = ..., packed: _Optional[_Union[PackedBodies, _Mapping]] = ...) -> None: ...

class PackedBodies(_message.Message):
    __slots__ = ("partition", "lengths", "bodies")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LENGTHS_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    lengths: _containers.RepeatedScalarFieldContainer[int]
    bodies: bytes
    def __init__(self, partition: _Optional[int] = ..., lengths: _Optional[_Iterable[int]] = ..., bodies: _Optional[bytes] = ...) -> None: ...

class SendRun(_message.Message):
    __slots__ = ("partition", "offset", "count", "duplicate", "durability")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    count: int
    duplicate: bool
    durability: Durability
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., count: _Optional[int] = ..., duplicate: _Optional[bool] = ..., durability: _Optional[_Union[Durability, str]] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("results", "runs")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    runs: _containers.RepeatedCompositeFieldContainer[SendRun]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ..., runs: _Optional[_Iterable[_Union[SendRun, _Mapping]]] = ...) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ("queue", "max_messages", "visibility_ms", "wait_ms", "consumer", "ack", "ack_background", "runs")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    ACK_BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max_messages: int
    visibility_ms: int
    wait_ms: int
    consumer: str
    ack: _containers.RepeatedScalarFieldContainer[str]
    ack_background: bool
    runs: bool
    def __init__(self, queue: _Optional[str] = ..., max_messages: _Optional[int] = ..., visibility_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ..., consumer: _Optional[str] = ..., ack: _Optional[_Iterable[str]] = ..., ack_background: _Optional[bool] = ..., runs: _Optional[bool] = ...) -> None: ...

class ReceiveResponse(_message.Message):
    __slots__ = ("messages", "acks", "runs")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    acks: ReceiptsResponse
    runs: _containers.RepeatedCompositeFieldContainer[MessageRun]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., acks: _Optional[_Union[ReceiptsResponse, _Mapping]] = ..., runs: _Optional[_Iterable[_Union[MessageRun, _Mapping]]] = ...) -> None: ...

class MessageRun(_message.Message):
    __slots__ = ("partition", "offset", "bodies", "timestamp_ms", "receive_count", "receipt_head", "receipt_tail", "at")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_COUNT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HEAD_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_TAIL_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    timestamp_ms: int
    receive_count: int
    receipt_head: str
    receipt_tail: str
    at: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., bodies: _Optional[_Iterable[bytes]] = ..., timestamp_ms: _Optional[int] = ..., receive_count: _Optional[int] = ..., receipt_head: _Optional[str] = ..., receipt_tail: _Optional[str] = ..., at: _Optional[int] = ...) -> None: ...

class ReceiptResult(_message.Message):
    __slots__ = ("receipt", "ok", "error")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    ok: bool
    error: str
    def __init__(self, receipt: _Optional[str] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("queue", "receipts", "failures_only")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_ONLY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    failures_only: bool
    def __init__(self, queue: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ..., failures_only: _Optional[bool] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("queue", "receipts", "delay_ms", "release", "failures_only")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    FAILURES_ONLY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    delay_ms: int
    release: bool
    failures_only: bool
    def __init__(self, queue: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ..., delay_ms: _Optional[int] = ..., release: _Optional[bool] = ..., failures_only: _Optional[bool] = ...) -> None: ...

class ChangeVisibilityRequest(_message.Message):
    __slots__ = ("queue", "receipts", "visibility_ms", "failures_only")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_MS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_ONLY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    receipts: _containers.RepeatedScalarFieldContainer[str]
    visibility_ms: int
    failures_only: bool
    def __init__(self, queue: _Optional[str] = ..., receipts: _Optional[_Iterable[str]] = ..., visibility_ms: _Optional[int] = ..., failures_only: _Optional[bool] = ...) -> None: ...

class ReceiptsResponse(_message.Message):
    __slots__ = ("results", "failed", "failures_only")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FAILURES_ONLY_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ReceiptResult]
    failed: _containers.RepeatedScalarFieldContainer[int]
    failures_only: bool
    def __init__(self, results: _Optional[_Iterable[_Union[ReceiptResult, _Mapping]]] = ..., failed: _Optional[_Iterable[int]] = ..., failures_only: _Optional[bool] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("queue", "partition", "offset", "max_messages", "wait_ms", "timestamp_ms")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    offset: int
    max_messages: int
    wait_ms: int
    timestamp_ms: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., wait_ms: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("messages", "next_offset", "earliest_offset", "latest_offset")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LATEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    next_offset: int
    earliest_offset: int
    latest_offset: int
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., next_offset: _Optional[int] = ..., earliest_offset: _Optional[int] = ..., latest_offset: _Optional[int] = ...) -> None: ...

class GetPartitionsRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("partition", "earliest_offset", "latest_offset", "leader", "leader_address", "replicas", "epoch", "commit_index", "messages", "in_flight", "hash_modulus", "hash_residue", "parent", "state", "gated")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LATEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    HASH_MODULUS_FIELD_NUMBER: _ClassVar[int]
    HASH_RESIDUE_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GATED_FIELD_NUMBER: _ClassVar[int]
    partition: int
    earliest_offset: int
    latest_offset: int
    leader: str
    leader_address: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    epoch: int
    commit_index: int
    messages: int
    in_flight: int
    hash_modulus: int
    hash_residue: int
    parent: int
    state: str
    gated: bool
    def __init__(self, partition: _Optional[int] = ..., earliest_offset: _Optional[int] = ..., latest_offset: _Optional[int] = ..., leader: _Optional[str] = ..., leader_address: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., epoch: _Optional[int] = ..., commit_index: _Optional[int] = ..., messages: _Optional[int] = ..., in_flight: _Optional[int] = ..., hash_modulus: _Optional[int] = ..., hash_residue: _Optional[int] = ..., parent: _Optional[int] = ..., state: _Optional[str] = ..., gated: _Optional[bool] = ...) -> None: ...

class GetPartitionsResponse(_message.Message):
    __slots__ = ("partitions", "layout_version")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    layout_version: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ..., layout_version: _Optional[int] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("queue", "group", "offsets", "reset")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    queue: str
    group: str
    offsets: _containers.ScalarMap[int, int]
    reset: bool
    def __init__(self, queue: _Optional[str] = ..., group: _Optional[str] = ..., offsets: _Optional[_Mapping[int, int]] = ..., reset: _Optional[bool] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class GetOffsetsRequest(_message.Message):
    __slots__ = ("queue", "group")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    queue: str
    group: str
    def __init__(self, queue: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class GetOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("time_ms", "consumer", "deadline_ms")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    consumer: str
    deadline_ms: int
    def __init__(self, time_ms: _Optional[int] = ..., consumer: _Optional[str] = ..., deadline_ms: _Optional[int] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ("queue", "partition", "offset")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    offset: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ("state", "receive_count", "deliveries")
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    state: str
    receive_count: int
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, state: _Optional[str] = ..., receive_count: _Optional[int] = ..., deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("queue", "visibility_ms", "consumer", "credit")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_MS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    queue: str
    visibility_ms: int
    consumer: str
    credit: int
    def __init__(self, queue: _Optional[str] = ..., visibility_ms: _Optional[int] = ..., consumer: _Optional[str] = ..., credit: _Optional[int] = ...) -> None: ...

class SendStreamError(_message.Message):
    __slots__ = ("code", "details", "trailers")
    class TrailersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    TRAILERS_FIELD_NUMBER: _ClassVar[int]
    code: int
    details: str
    trailers: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., details: _Optional[str] = ..., trailers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SendStreamResponse(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: SendResponse
    error: SendStreamError
    def __init__(self, response: _Optional[_Union[SendResponse, _Mapping]] = ..., error: _Optional[_Union[SendStreamError, _Mapping]] = ...) -> None: ...

class ExportPartitionRequest(_message.Message):
    __slots__ = ("queue", "partition", "offset", "max_messages")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    offset: int
    max_messages: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class ExportedMessage(_message.Message):
    __slots__ = ("message", "state", "receive_count", "epoch", "at_ms")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_COUNT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    message: Message
    state: str
    receive_count: int
    epoch: int
    at_ms: int
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., state: _Optional[str] = ..., receive_count: _Optional[int] = ..., epoch: _Optional[int] = ..., at_ms: _Optional[int] = ...) -> None: ...

class ExportPartitionResponse(_message.Message):
    __slots__ = ("messages", "next_offset", "latest_offset", "fenced", "group_offsets")
    class GroupOffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LATEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    GROUP_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ExportedMessage]
    next_offset: int
    latest_offset: int
    fenced: bool
    group_offsets: _containers.ScalarMap[str, int]
    def __init__(self, messages: _Optional[_Iterable[_Union[ExportedMessage, _Mapping]]] = ..., next_offset: _Optional[int] = ..., latest_offset: _Optional[int] = ..., fenced: _Optional[bool] = ..., group_offsets: _Optional[_Mapping[str, int]] = ...) -> None: ...

class DedupEntry(_message.Message):
    __slots__ = ("dedup_id", "request_id", "timestamp_ms", "offsets")
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    dedup_id: bytes
    request_id: bytes
    timestamp_ms: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dedup_id: _Optional[bytes] = ..., request_id: _Optional[bytes] = ..., timestamp_ms: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class ExportDedupRequest(_message.Message):
    __slots__ = ("queue", "partition", "after", "max_entries")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    after: bytes
    max_entries: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., after: _Optional[bytes] = ..., max_entries: _Optional[int] = ...) -> None: ...

class ExportDedupResponse(_message.Message):
    __slots__ = ("entries", "next_key", "done", "fenced")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_KEY_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DedupEntry]
    next_key: bytes
    done: bool
    fenced: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[DedupEntry, _Mapping]]] = ..., next_key: _Optional[bytes] = ..., done: _Optional[bool] = ..., fenced: _Optional[bool] = ...) -> None: ...

class SeedDedupRequest(_message.Message):
    __slots__ = ("queue", "partition", "entries")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    entries: _containers.RepeatedCompositeFieldContainer[DedupEntry]
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[DedupEntry, _Mapping]]] = ...) -> None: ...

class SeedDedupResponse(_message.Message):
    __slots__ = ("seeded",)
    SEEDED_FIELD_NUMBER: _ClassVar[int]
    seeded: int
    def __init__(self, seeded: _Optional[int] = ...) -> None: ...

class CarriedLease(_message.Message):
    __slots__ = ("offset", "deadline_ms", "receive_count")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_COUNT_FIELD_NUMBER: _ClassVar[int]
    offset: int
    deadline_ms: int
    receive_count: int
    def __init__(self, offset: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., receive_count: _Optional[int] = ...) -> None: ...

class CarryLeasesRequest(_message.Message):
    __slots__ = ("queue", "partition", "leases")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    leases: _containers.RepeatedCompositeFieldContainer[CarriedLease]
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., leases: _Optional[_Iterable[_Union[CarriedLease, _Mapping]]] = ...) -> None: ...

class CarryLeasesResponse(_message.Message):
    __slots__ = ("carried",)
    CARRIED_FIELD_NUMBER: _ClassVar[int]
    carried: int
    def __init__(self, carried: _Optional[int] = ...) -> None: ...

class SettleCarriedRequest(_message.Message):
    __slots__ = ("queue", "partition", "offsets", "action", "until_ms")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    partition: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    action: str
    until_ms: int
    def __init__(self, queue: _Optional[str] = ..., partition: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ..., action: _Optional[str] = ..., until_ms: _Optional[int] = ...) -> None: ...

class SettleCarriedResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, outcomes: _Optional[_Iterable[str]] = ...) -> None: ...
