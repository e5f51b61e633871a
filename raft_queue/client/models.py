"""The values the SDK hands to users, and their translation from and to the wire.

Frozen dataclasses: users may keep, hash and compare them; they own no
connection. Field names follow queue.proto / admin.proto so documentation of
the API reads the same in Python. Enums become short lower-case strings
(``"fsync"``, ``"fifo"``); ``""`` means unspecified.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, TypeVar

from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.core.placement_keys import KeyRange, Layout
from raft_queue.errors import InvalidArgument

P = TypeVar("P")  # a protobuf message class

DURABILITIES = ("fsync", "quorum", "leader")
ORDERINGS = ("none", "fifo")


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A queue's configuration (effective values when returned by the server)."""

    partitions: int | None = None
    replication_factor: int | None = None
    durability: str | None = None
    ordering: str | None = None
    visibility_timeout_ms: int | None = None
    max_receives: int | None = None
    dead_letter_queue: str | None = None
    retention_ms: int | None = None
    retention_bytes: int | None = None
    max_message_bytes: int | None = None
    dedup_window_ms: int | None = None
    delay_ms: int | None = None
    encryption: bool | None = None  # sealed at rest (default on; docs/security.md)


CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(QueueConfig))


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue: its config and depth counters (summed over partition leaders, best effort).

    ``messages`` counts every stored, unacked message (in flight, delayed and
    dead ones included); ``dead`` are over ``max_receives`` and on their way
    to the dead-letter queue; ``oldest_message_age_ms`` is the age of the
    oldest unacked message (0 when there is none).
    """

    name: str
    config: QueueConfig
    created_ms: int = 0
    messages: int = 0
    in_flight: int = 0
    delayed: int = 0
    dead: int = 0
    oldest_message_age_ms: int = 0
    bytes: int = 0
    writable_partitions: int = 0  # open to sends; partitions counts sealed ones too

    @property
    def partitions(self) -> int:
        return self.config.partitions or 0


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message to send. ``dedup_id``: your idempotency key for this
    message (kept for the queue's dedup window, across calls); None: none,
    and the SDK's retries of the RPC are still stored once (request id)."""

    body: bytes | str
    key: str = ""
    headers: Mapping[str, bytes | str] | None = None
    dedup_id: str | None = None
    delay_ms: int = 0
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a message was stored. ``duplicate``: its dedup id was seen; offset is the original."""

    partition: int
    offset: int
    duplicate: bool
    durability: str


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message. ``receipt`` is set by receive (pass it to ack/nack)."""

    queue: str
    partition: int
    offset: int
    body: bytes
    key: str = ""
    headers: dict[str, bytes] = field(default_factory=dict, hash=False)
    timestamp_ms: int = 0
    receipt: str = ""
    receive_count: int = 0
    dedup_id: str = ""


@dataclass(frozen=True, slots=True)
class ReceiptResult:
    """Outcome of ack/nack/change_visibility for one receipt; ``error`` says why not ok."""

    receipt: str
    ok: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One lease of a message: when (leader clock, ms), by which consumer, until when."""

    time_ms: int
    consumer: str
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class History:
    """A message's delivery history. ``state``: queued, in_flight, delayed,
    blocked (FIFO: an earlier message of its key is unacked), dead, or done."""

    state: str
    receive_count: int
    deliveries: tuple[Delivery, ...] = ()


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Messages of one partition from an offset; the partition holds [earliest, latest)."""

    messages: list[Message]
    next_offset: int
    earliest_offset: int
    latest_offset: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition: offsets, leader (node id and address), replicas (first = preferred)."""

    partition: int
    earliest_offset: int = 0
    latest_offset: int = 0
    leader: str = ""
    leader_address: str = ""
    replicas: tuple[str, ...] = ()
    epoch: int = 0
    commit_index: int = 0
    messages: int = 0
    in_flight: int = 0
    # Its key range (core/placement_keys.py) and life: key_hash % hash_modulus
    # == hash_residue; parent -1 for an original partition; state open |
    # sealed (split: no sends) | drained; gated: a FIFO child not received yet.
    hash_modulus: int = 0
    hash_residue: int = 0
    parent: int = -1
    state: str = "open"
    gated: bool = False


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A cluster member as the metadata leader sees it."""

    id: str
    address: str = ""
    state: str = ""
    controller: bool = False
    metadata_leader: bool = False
    rack: str = ""
    last_heartbeat_age_ms: int = 0
    disk_low: str = ""  # below its free-space watermark: why (sends refused)
    failure: str = ""  # a replica stopped on a storage error (fail-stop)


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One replica of one partition, as its node sees it."""

    queue: str
    partition: int
    node: str
    role: str = ""
    leader: str = ""
    term: int = 0
    commit_index: int = 0
    last_applied: int = 0
    log_len: int = 0
    next_offset: int = 0
    digest: str = ""
    has_quorum: bool = False
    failure: str = ""  # role "failed": why the replica stopped
    snapshot_failures: int = 0


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """Nodes and replicas; ``unreachable`` lists nodes that did not answer.
    ``counters`` (asked with ``include_counters``): per answering node, its
    message totals per queue partition since that node process started."""

    nodes: list[NodeInfo]
    replicas: list[ReplicaStatus]
    metadata_leader: str = ""
    metadata_version: int = 0
    unreachable: list[str] = field(default_factory=list)
    # The external manager managing this cluster: its name there, the
    # manager group's addresses ("" and [] when unmanaged).
    cluster_name: str = ""
    managers: list[str] = field(default_factory=list)
    counters: dict[str, list[QueueCounters]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueCounters:
    """One node's totals for one partition: appended and acked as its leader,
    delivered to this node's clients (raftq_messages_*_total)."""

    queue: str
    partition: int
    sent: int = 0
    received: int = 0
    acked: int = 0


# ---- wire translation -------------------------------------------------------


def _maker(cls: type[P]) -> Any:
    """A constructor of the frozen, slotted dataclass ``cls`` taking every
    field positionally, that sets the slots through their descriptors: the
    same object as ``cls(...)`` (which has no ``__post_init__``), without the
    frozen ``__init__``'s ``object.__setattr__`` per field. Receive, send and
    ack build up to 1000 per call; generated once, as dataclasses does."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or not all(n in cls.__dict__ for n in names):
        raise TypeError(f"{cls.__name__} needs its own __init__")
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    scope.update({f"_set_{n}": cls.__dict__[n].__set__ for n in names})
    body = "".join(f"    _set_{n}(o, {n})\n" for n in names)
    exec(f"def make({', '.join(names)}):\n    o = _new(_cls)\n{body}    return o\n", scope)
    return scope["make"]


def _enum_name(value: int, enum: Any, prefix: str) -> str:
    """DURABILITY_FSYNC -> "fsync"; unspecified or unknown -> ""."""
    names = _ENUM_NAMES.get(prefix)
    if names is None:  # built once per enum: EnumTypeWrapper.values() builds a list per call
        names = {
            number: ("" if name == prefix + "UNSPECIFIED" else name.removeprefix(prefix).lower())
            for name, number in enum.items()
        }
        _ENUM_NAMES[prefix] = names
    return names.get(value, "")


_ENUM_NAMES: dict[str, dict[int, str]] = {}


def _enum_value(
    field_name: str, value: Any, allowed: tuple[str, ...], prefix: str, enum: Any
) -> int:
    """ "fsync" -> DURABILITY_FSYNC; anything not in ``allowed`` is InvalidArgument."""
    if value not in allowed:
        raise InvalidArgument(field_name, f"must be one of {', '.join(allowed)}, got {value!r}")
    return int(enum.Value(prefix + value.upper()))


def _plain(pb: Any, cls: type) -> dict[str, Any]:
    """The fields of ``cls`` copied from same-named fields of ``pb``."""
    names = _FIELD_NAMES.get(cls)
    if names is None:  # dataclasses.fields() per call was a hot spot in receive
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return {name: getattr(pb, name) for name in names}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def config_from_pb(pb: queue_pb2.QueueConfig) -> QueueConfig:
    values = {name: getattr(pb, name) if pb.HasField(name) else None for name in CONFIG_FIELDS}
    if values["durability"] is not None:
        values["durability"] = _enum_name(values["durability"], queue_pb2.Durability, "DURABILITY_")
    if values["ordering"] is not None:
        values["ordering"] = _enum_name(values["ordering"], queue_pb2.Ordering, "ORDERING_")
    return QueueConfig(**values)


def config_to_pb(config: Mapping[str, Any]) -> queue_pb2.QueueConfig:
    """Build a QueueConfig message from field names; None means "server default".

    Raises InvalidArgument naming the field for an unknown name, a bad enum
    value or a value protobuf rejects (negative, wrong type, too large).
    """
    values: dict[str, Any] = {}
    for name, value in config.items():
        if name not in CONFIG_FIELDS:
            known = ", ".join(CONFIG_FIELDS)
            raise InvalidArgument(name, f"unknown queue config field (known: {known})")
        if value is None:
            continue
        if name == "durability":
            value = _enum_value(name, value, DURABILITIES, "DURABILITY_", queue_pb2.Durability)
        elif name == "ordering":
            value = _enum_value(name, value, ORDERINGS, "ORDERING_", queue_pb2.Ordering)
        values[name] = value
    return build_request(queue_pb2.QueueConfig, **values)


def queue_info_from_pb(pb: queue_pb2.QueueInfo) -> QueueInfo:
    values = _plain(pb, QueueInfo)
    values["config"] = config_from_pb(pb.config)
    return QueueInfo(**values)


_new_message = _maker(Message)
_new_send_result = _maker(SendResult)
_new_receipt_result = _maker(ReceiptResult)


def message_from_pb(pb: queue_pb2.Message) -> Message:
    # Positional, in Message's field order: receive builds up to 1000 per call.
    message: Message = _new_message(
        pb.queue,
        pb.partition,
        pb.offset,
        pb.body,
        pb.key,
        dict(pb.headers) if pb.headers else {},
        pb.timestamp_ms,
        pb.receipt,
        pb.receive_count,
        pb.dedup_id,
    )
    return message


def received_from_pb(queue: str, pb: queue_pb2.ReceiveResponse) -> list[Message]:
    """The messages of a ReceiveResponse, in answer order: ``messages`` with
    each MessageRun's messages inserted at its ``at`` (queue.proto)."""
    if not pb.runs:
        return [message_from_pb(m) for m in pb.messages]
    out: list[Message] = []
    rest = iter(pb.messages)
    new = _new_message
    for run in pb.runs:
        while len(out) < run.at:
            pb_message = next(rest, None)
            if pb_message is None:
                raise ValueError(f"a MessageRun at {run.at} past the answer's messages")
            out.append(message_from_pb(pb_message))
        head, tail, part = run.receipt_head, run.receipt_tail, run.partition
        ts, count = run.timestamp_ms, run.receive_count
        out += [
            new(queue, part, o, body, "", {}, ts, f"{head}{o}{tail}", count, "")
            for o, body in enumerate(run.bodies, run.offset)
        ]
    out += map(message_from_pb, rest)
    return out


def send_result_from_pb(pb: queue_pb2.SendResult) -> SendResult:
    durability = _enum_name(pb.durability, queue_pb2.Durability, "DURABILITY_")
    result: SendResult = _new_send_result(pb.partition, pb.offset, pb.duplicate, durability)
    return result


def send_results_from_pb(pb: queue_pb2.SendResponse) -> list[SendResult]:
    """One SendResult per entry: from ``runs`` (a server honouring
    ``results_as_runs``) or from ``results`` (older servers, and responses
    that had no entries)."""
    if not pb.runs:
        return [send_result_from_pb(r) for r in pb.results]
    new, out = _new_send_result, list[SendResult]()
    for run in pb.runs:
        durability = _enum_name(run.durability, queue_pb2.Durability, "DURABILITY_")
        partition, duplicate, offset = run.partition, run.duplicate, run.offset
        end = offset + run.count
        out.extend(
            map(new, repeat(partition), range(offset, end), repeat(duplicate), repeat(durability))
        )
    return out


def receipt_result_from_pb(pb: queue_pb2.ReceiptResult) -> ReceiptResult:
    return ReceiptResult(pb.receipt, pb.ok, pb.error)


def receipt_results_from_pb(
    receipts: list[str], pb: queue_pb2.ReceiptsResponse
) -> list[ReceiptResult]:
    """One result per receipt sent: the response lists them all, or (a server
    honouring ``failures_only``) only the failed ones, by index."""
    if not pb.failures_only:
        return [receipt_result_from_pb(r) for r in pb.results]
    new = _new_receipt_result
    out = [new(r, True, "") for r in receipts]
    for i, failed in zip(pb.failed, pb.results, strict=True):
        out[i] = receipt_result_from_pb(failed)
    return out


class Received(list[Message]):
    """What ``receive`` returns: the leased messages (a list), and in
    ``acks`` one result per receipt the call carried (``ack=``), in order."""

    acks: list[ReceiptResult]

    def __init__(self, messages: list[Message], acks: list[ReceiptResult] | None = None) -> None:
        super().__init__(messages)
        self.acks = acks or []


def read_result_from_pb(pb: queue_pb2.ReadResponse) -> ReadResult:
    values = _plain(pb, ReadResult)
    values["messages"] = [message_from_pb(m) for m in pb.messages]
    return ReadResult(**values)


def history_from_pb(pb: queue_pb2.GetHistoryResponse) -> History:
    deliveries = tuple(Delivery(d.time_ms, d.consumer, d.deadline_ms) for d in pb.deliveries)
    return History(pb.state, pb.receive_count, deliveries)


def partition_from_pb(pb: queue_pb2.PartitionInfo) -> PartitionInfo:
    values = _plain(pb, PartitionInfo)
    values["replicas"] = tuple(pb.replicas)
    values["state"] = pb.state or "open"
    if not pb.hash_modulus:  # a server from before splits: no range sent
        values["parent"] = -1
    return PartitionInfo(**values)


def layout_from_infos(infos: Sequence[PartitionInfo]) -> Layout:
    """The key ranges of a GetPartitions answer (a server from before splits
    sends none: the queue is then unsplit)."""
    if not infos or any(i.hash_modulus == 0 for i in infos):
        return Layout.initial(max(1, len(infos)))
    ranges = [KeyRange(i.partition, i.hash_modulus, i.hash_residue, i.parent, i.state)
              for i in sorted(infos, key=lambda i: i.partition)]  # fmt: skip
    return Layout(ranges)


def cluster_status_from_pb(pb: admin_pb2.ClusterStatusResponse) -> ClusterStatus:
    return ClusterStatus(
        nodes=[NodeInfo(**_plain(n, NodeInfo)) for n in pb.nodes],
        replicas=[ReplicaStatus(**_plain(r, ReplicaStatus)) for r in pb.replicas],
        metadata_leader=pb.metadata_leader,
        metadata_version=pb.metadata_version,
        unreachable=list(pb.unreachable),
        cluster_name=pb.cluster_name,
        managers=list(pb.managers),
        counters={
            n.node: [QueueCounters(**_plain(q, QueueCounters)) for q in n.queues]
            for n in pb.counters
        },
    )


def to_body(value: bytes | str) -> bytes:
    """A message body as bytes (str as UTF-8); InvalidArgument("body") otherwise."""
    return _to_bytes("body", value)


def _to_bytes(field_name: str, value: bytes | str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidArgument(field_name, f"must be bytes or str, got {type(value).__name__}")


def entry_to_pb(msg: OutgoingMessage, partition: int) -> queue_pb2.SendEntry:
    """The wire entry for ``msg``, placed on ``partition``."""
    fields: dict[str, Any] = {"body": _to_bytes("body", msg.body), "partition": partition}
    if msg.dedup_id:
        fields["dedup_id"] = msg.dedup_id
    if msg.key:
        fields["key"] = msg.key
    if msg.headers:
        fields["headers"] = {str(k): _to_bytes(f"headers.{k}", v) for k, v in msg.headers.items()}
    if msg.delay_ms:
        fields["delay_ms"] = msg.delay_ms
    return build_request(queue_pb2.SendEntry, **fields)


def build_request(cls: type[P], **fields: Any) -> P:
    """``cls(**fields)``, with protobuf's type and range errors named by field.

    protobuf says "Value out of range: -1" without the field; the user needs
    to know which argument was wrong, so each field is retried alone to find it.
    """
    try:
        return cls(**fields)
    except (TypeError, ValueError) as exc:
        for name, value in fields.items():
            try:
                cls(**{name: value})
            except (TypeError, ValueError) as field_exc:
                raise InvalidArgument(name, f"invalid value {value!r}: {field_exc}") from exc
        raise InvalidArgument("request", str(exc)) from exc
