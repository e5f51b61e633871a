"""The metadata group's Raft entries: command dataclasses and their JSON
codec (``encode_meta``/``decode_meta``). Metadata changes are rare, so
readability beats compactness: one entry is ``{"v": 1, "type": <class name>,
<fields>}`` as compact JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from raft_queue import errors
from raft_queue.config import QueueSpec
from raft_queue.core.metadata_records import DataKey, NodeInfo, PartitionAssignment, ReplicaRef

_CODEC_VERSION = 1


@dataclass(frozen=True, slots=True)
class RegisterNode:
    """Join or rejoin; idempotent. Updates the address and ranges; a dead,
    suspect or removed node becomes alive again (a draining one stays so).
    """

    node_id: str
    address: str
    raft_host: str
    raft_port_min: int
    raft_port_max: int
    rack: str = ""
    controller: bool = False
    now_ms: int = 0
    metadata_raft_port: int = 0


@dataclass(frozen=True, slots=True)
class SetNodeState:
    """Liveness or operator change; ``removed`` needs the node to host nothing."""

    node_id: str
    state: str
    now_ms: int = 0


@dataclass(frozen=True, slots=True)
class CreateQueue:
    """Create with pre-computed ``assignments`` (one per partition, in order).
    Same name and spec as an existing queue: returns it (idempotent retry).
    """

    name: str
    config: QueueSpec
    assignments: tuple[PartitionAssignment, ...]
    now_ms: int = 0
    data_key: DataKey | None = None  # the first key of an encrypted queue (id 1)


@dataclass(frozen=True, slots=True)
class UpdateQueue:
    """Replace the spec; IMMUTABLE_QUEUE_FIELDS must stay as they are."""

    name: str
    config: QueueSpec


@dataclass(frozen=True, slots=True)
class SplitPartitions:
    """Grow a queue: each of ``parents`` (in order) is split in two and is
    ``splitting`` until sealed (core/placement_keys.py); ``assignments``
    place the children, numbered from the queue's partition count on.
    ``uid`` fences a re-created queue."""

    name: str
    uid: int
    parents: tuple[int, ...]
    assignments: tuple[PartitionAssignment, ...]


@dataclass(frozen=True, slots=True)
class SetPartitionState:
    """A split partition's life: ``sealed`` once its children have leaders
    (sends go to them from then on), ``drained`` once it holds no message
    left to deliver (its children stop being gated)."""

    name: str
    uid: int
    partition: int
    state: str


@dataclass(frozen=True, slots=True)
class FenceQueue:
    """Fence (or unfence) every partition of a queue for a move to another
    cluster (manager/moves.py): its leaders apply a Configure with ``fenced``,
    after which no Append applies and Lease leases nothing. ``uid`` fences a
    re-created queue. ``partitions``: only these (a partial move); () = all."""

    name: str
    uid: int
    fenced: bool
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteQueue:
    name: str


@dataclass(frozen=True, slots=True)
class AddDataKey:
    """Rotate: ``data_key`` (id = the last id + 1) becomes the queue's current
    key; older ones stay for reading. ``uid`` fences a re-created queue."""

    queue: str
    uid: int
    data_key: DataKey


@dataclass(frozen=True, slots=True)
class RewrapDataKeys:
    """Master-key rotation: the same key ids, wrapped anew (every one of them)."""

    queue: str
    uid: int
    data_keys: tuple[DataKey, ...]


@dataclass(frozen=True, slots=True)
class ShredKeys:
    """After a DeleteQueue: drop ``queue``'s data keys if it is still gone
    (they went with DeleteQueue; this is for the journal). Its own entry lets
    every voter compact its journal past the entries that held the wrapped
    keys (``replication/metadata.py``): crypto-shredding reaches the disk."""

    queue: str


@dataclass(frozen=True, slots=True)
class SetAssignment:
    """Move a partition's replicas (reassignment, repair, leader preference).
    ``epoch`` must exceed the current one; ``uid`` (if not 0) must be the
    queue's, so a change meant for a deleted queue cannot hit its successor.
    """

    queue: str
    partition: int
    replicas: tuple[ReplicaRef, ...]
    epoch: int
    uid: int = 0


@dataclass(frozen=True, slots=True)
class StartMove:
    """Record a move (checked like ``planner.validate_move``); one per partition."""

    queue: str
    partition: int
    from_node: str
    to_node: str
    to_port: int
    now_ms: int = 0
    throttle_bytes_per_s: int = 0


@dataclass(frozen=True, slots=True)
class SetMovePhase:
    """``adding`` -> ``removing`` or ``cancelling``; repeating a phase is a no-op."""

    queue: str
    partition: int
    phase: str


@dataclass(frozen=True, slots=True)
class FinishMove:
    """A ``removing`` move is done: ``to`` replaces ``from_node`` in place, epoch + 1."""

    queue: str
    partition: int


@dataclass(frozen=True, slots=True)
class DropMove:
    """Forget a move that is not ``removing`` (cancelled): the assignment is as before."""

    queue: str
    partition: int


@dataclass(frozen=True, slots=True)
class StartControllerChange:
    """Record that ``node_id`` joins (``add``) or leaves (``remove``) the
    metadata group's voters; the metadata leader then changes the Raft
    membership and commits ``FinishControllerChange``. ``voters`` is the
    group's voter set as the leader knows it (node id, Raft address): it
    seeds the recorded set when none was recorded yet (the config's
    ``controllers`` bootstrapped the group)."""

    action: str
    node_id: str
    raft_address: str = ""
    voters: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class FinishControllerChange:
    """The membership change of ``node_id`` is committed: record the new voters."""

    node_id: str


@dataclass(frozen=True, slots=True)
class DropControllerChange:
    """Forget an ``add`` that was not made (e.g. the node never caught up)."""

    node_id: str


@dataclass(frozen=True, slots=True)
class CreatePrincipal:
    """A new principal holding the token whose SHA-256 is ``token_hash`` (hex).
    The same name and hash again returns it (idempotent retry)."""

    name: str
    token_hash: str
    now_ms: int = 0


@dataclass(frozen=True, slots=True)
class DeletePrincipal:
    """Forget the principal and its grants: its token opens nothing from then on."""

    name: str


@dataclass(frozen=True, slots=True)
class RotatePrincipal:
    """Replace the principal's token hash; the old token opens nothing from then on."""

    name: str
    token_hash: str
    now_ms: int = 0


@dataclass(frozen=True, slots=True)
class GrantAccess:
    """Add ``operations`` on the queues ``pattern`` matches (core/access.py)."""

    principal: str
    pattern: str
    operations: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RevokeAccess:
    """Remove ``operations`` (every one when empty) on ``pattern``."""

    principal: str
    pattern: str
    operations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SetQuota:
    """Set (or replace) the quota of ``principal`` (on ``queue``; "" = all
    its queues together): core/quotas.py."""

    principal: str
    queue: str
    messages_per_s: int
    bytes_per_s: int
    burst_s: float = 1.0


@dataclass(frozen=True, slots=True)
class RemoveQuota:
    principal: str
    queue: str = ""


@dataclass(frozen=True, slots=True)
class RecordUsage:
    """One node's usage batch (core/usage.py); applied once per ``(node_id, seq)``."""

    node_id: str
    seq: int
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, slots=True)
class SetManagedBy:
    """The external manager at ``managers`` (gRPC addresses) manages this
    cluster under the name ``cluster_name`` (core/metadata_manager.py); both
    empty: unmanaged. Setting what is already set changes nothing."""

    cluster_name: str
    managers: tuple[str, ...] = ()


MetaCommand = (
    RegisterNode | SetNodeState | CreateQueue | UpdateQueue | DeleteQueue | SetAssignment
    | StartMove | SetMovePhase | FinishMove | DropMove
    | StartControllerChange | FinishControllerChange | DropControllerChange
    | AddDataKey | RewrapDataKeys | ShredKeys
    | CreatePrincipal | DeletePrincipal | RotatePrincipal | GrantAccess | RevokeAccess
    | SetQuota | RemoveQuota | RecordUsage | SplitPartitions | SetPartitionState
    | SetManagedBy | FenceQueue
)  # fmt: skip
_COMMANDS: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (RegisterNode, SetNodeState, CreateQueue, UpdateQueue, DeleteQueue, SetAssignment,
                StartMove, SetMovePhase, FinishMove, DropMove, StartControllerChange,
                FinishControllerChange, DropControllerChange, AddDataKey, RewrapDataKeys,
                ShredKeys, CreatePrincipal, DeletePrincipal, RotatePrincipal, GrantAccess,
                RevokeAccess, SetQuota, RemoveQuota, RecordUsage, SplitPartitions,
                SetPartitionState, SetManagedBy,
                FenceQueue)
}  # fmt: skip


def encode_meta(cmd: MetaCommand) -> bytes:
    """One Raft entry: ``{"v": 1, "type": <class name>, <fields>}`` as compact JSON."""
    body = {name: _plain(getattr(cmd, name)) for name in cmd.__dataclass_fields__}
    return _dump({"v": _CODEC_VERSION, "type": type(cmd).__name__, **body})


def decode_meta(data: bytes) -> MetaCommand:
    """Inverse of encode_meta; a malformed entry is Internal (log corruption)."""
    try:
        obj = json.loads(data)
        if obj.pop("v") != _CODEC_VERSION:
            raise ValueError("unknown codec version")
        cls = _COMMANDS[obj.pop("type")]
        fields = {name: _typed(name, value) for name, value in obj.items()}
        cmd: MetaCommand = cls(**fields)
    except (ValueError, KeyError, TypeError, errors.InvalidArgument) as exc:
        raise errors.Internal(f"undecodable metadata entry: {exc!r}") from exc
    return cmd


def _plain(value: Any) -> Any:
    """Dataclass values -> JSON values (tuples become lists)."""
    if isinstance(value, QueueSpec):
        return value.to_dict()
    if isinstance(value, ReplicaRef):
        return [value.node_id, value.raft_port]
    if isinstance(value, PartitionAssignment):
        return {"partition": value.partition, "epoch": value.epoch,
                "replicas": _plain(value.replicas)}  # fmt: skip
    if isinstance(value, DataKey):
        return [value.key_id, value.master_id, value.wrapped]
    if isinstance(value, NodeInfo):
        return {name: getattr(value, name) for name in value.__dataclass_fields__}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _typed(name: str, value: Any) -> Any:
    """JSON values -> dataclass values, by field name (the names are unique)."""
    if name == "config":
        return QueueSpec.from_dict(value)
    if name == "replicas":
        return tuple(ReplicaRef(str(node), int(port)) for node, port in value)
    if name == "assignments":
        return tuple(_assignment(a) for a in value)
    if name == "data_key":
        return None if value is None else DataKey(int(value[0]), str(value[1]), str(value[2]))
    if name == "data_keys":
        return tuple(DataKey(int(k), str(m), str(w)) for k, m, w in value)
    if name == "voters":
        return tuple((str(node), str(address)) for node, address in value)
    if name in ("parents", "partitions"):  # partitions: FenceQueue's list
        return tuple(int(p) for p in value)
    if name == "operations":
        return tuple(str(op) for op in value)
    if name == "rows":
        return tuple(tuple(row) for row in value)
    if name == "managers":
        return tuple(str(a) for a in value)
    return value


def _assignment(obj: dict[str, Any]) -> PartitionAssignment:
    return PartitionAssignment(obj["partition"], _typed("replicas", obj["replicas"]), obj["epoch"])


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
