"""MetadataMachine: the replicated state of the metadata group (pure).

State: nodes, queues (name -> spec, uid, created_ms), partition assignments
and a ``version`` bumped by every change. Small, so it lives in memory and a
snapshot is its deterministic JSON (``to_bytes``). Commands are frozen
dataclasses, JSON-encoded on the Raft log (``encode_meta``/``decode_meta``):
metadata changes are rare, so readability beats compactness here.

``apply`` is deterministic: no clock, no random. The leader stamps ``now_ms``
and computes placement (``core/placement.py``) before proposing, so a command
carries its result; ``apply`` re-checks it against the current state, because
two commands placed from the same state may conflict (then ``Unavailable``:
retry, re-placing from the newer state). A rejected command changes nothing
and raises the same error on every replica.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from raft_queue import errors
from raft_queue.config import IMMUTABLE_QUEUE_FIELDS, QueueSpec, check_name, check_queue_name
from raft_queue.core import metadata_controllers as controllers
from raft_queue.core import metadata_keys as keys
from raft_queue.core import metadata_manager as managed
from raft_queue.core import metadata_principals as principals
from raft_queue.core import metadata_quotas as quotas
from raft_queue.core import metadata_splits as splits
from raft_queue.core.metadata_commands import (
    AddDataKey,
    CreatePrincipal,
    CreateQueue,
    DeletePrincipal,
    DeleteQueue,
    DropControllerChange,
    DropMove,
    FenceQueue,
    FinishControllerChange,
    FinishMove,
    GrantAccess,
    MetaCommand,
    RecordUsage,
    RegisterNode,
    RemoveQuota,
    RevokeAccess,
    RewrapDataKeys,
    RotatePrincipal,
    SetAssignment,
    SetManagedBy,
    SetMovePhase,
    SetNodeState,
    SetPartitionState,
    SetQuota,
    ShredKeys,
    SplitPartitions,
    StartControllerChange,
    StartMove,
    UpdateQueue,
    _dump,
    _plain,
    _typed,
    decode_meta,
    encode_meta,
)
from raft_queue.core.metadata_records import (
    MOVE_PHASES,
    NODE_STATES,
    ControllerChange,
    DataKey,
    LocalReplica,
    Move,
    NodeInfo,
    PartitionAssignment,
    Principal,
    QueueRecord,
    ReplicaRef,
)

# The names callers use as ``meta.X`` (records, commands, codec, machine).
__all__ = [
    "AddDataKey", "DataKey", "RewrapDataKeys", "ShredKeys",
    "MOVE_PHASES", "NODE_STATES", "ControllerChange", "CreateQueue", "DeleteQueue",
    "DropControllerChange", "DropMove", "FinishControllerChange", "FinishMove",
    "LocalReplica", "MetaCommand", "MetadataMachine", "Move", "NodeInfo", "PartitionAssignment",
    "QueueRecord", "RegisterNode", "ReplicaRef", "SetAssignment", "SetMovePhase", "SetNodeState",
    "StartControllerChange", "StartMove", "UpdateQueue", "decode_meta", "encode_meta",
    "CreatePrincipal", "DeletePrincipal", "RotatePrincipal", "GrantAccess", "RevokeAccess",
    "Principal", "SetQuota", "RemoveQuota", "RecordUsage", "SplitPartitions", "SetPartitionState",
    "SetManagedBy",
    "FenceQueue",
]  # fmt: skip


class MetadataMachine(quotas.QuotasAndUsage):
    """The metadata state; only ``apply`` changes it (on the Raft apply thread).
    Query results are immutable values, safe to hand to other threads.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._queues: dict[str, QueueRecord] = {}
        self._assignments: dict[str, tuple[PartitionAssignment, ...]] = {}
        self._moves: dict[tuple[str, int], Move] = {}
        self._controllers: dict[str, str] = {}  # node id -> metadata Raft address
        self._controller_change: ControllerChange | None = None
        self._principals: dict[str, Principal] = {}
        self._init_quotas()
        self._next_uid = 1
        self._keys: keys.Keys = {}  # queue -> its data keys, wrapped (metadata_keys)
        self._managed_by: managed.ManagedBy | None = None  # the external manager's claim
        self.version = 0

    # -- queries --
    def queue(self, name: str) -> QueueRecord | None:
        return self._queues.get(name)

    def data_keys(self, name: str) -> tuple[DataKey, ...]:
        """The queue's data keys, oldest first (the last seals); () if none."""
        return self._keys.get(name, ())

    def queues(self) -> list[QueueRecord]:
        """Every queue, by name."""
        return [self._queues[name] for name in sorted(self._queues)]

    def nodes(self) -> dict[str, NodeInfo]:
        """node_id -> NodeInfo, in node id order (a copy)."""
        return {node_id: self._nodes[node_id] for node_id in sorted(self._nodes)}

    def assignments(self, queue: str) -> list[PartitionAssignment]:
        """The queue's partitions in order; [] for an unknown queue."""
        return list(self._assignments.get(queue, ()))

    def all_assignments(self) -> list[PartitionAssignment]:
        """Every partition of every queue (placement's view of node load)."""
        return [a for name in sorted(self._assignments) for a in self._assignments[name]]

    def moves(self) -> list[Move]:
        """Moves in flight, by queue then partition."""
        return [self._moves[k] for k in sorted(self._moves)]

    def move(self, queue: str, partition: int) -> Move | None:
        return self._moves.get((queue, partition))

    def controllers(self) -> dict[str, str]:
        """The metadata group's voters (node id -> Raft address), by node id;
        empty until the first controller change (the config's list holds)."""
        return {n: self._controllers[n] for n in sorted(self._controllers)}

    def controller_change(self) -> ControllerChange | None:
        return self._controller_change

    def managed_by(self) -> managed.ManagedBy | None:
        """The external manager managing this cluster, and this cluster's name
        there; None when unmanaged (core/metadata_manager.py)."""
        return self._managed_by

    def principal(self, name: str) -> Principal | None:
        return self._principals.get(name)

    def principals(self) -> list[Principal]:
        """Every principal (token hashes and grants), by name."""
        return [self._principals[n] for n in sorted(self._principals)]

    def replicas_on(self, node_id: str) -> list[LocalReplica]:
        """The replicas ``node_id`` must host, by queue then partition."""
        return [
            LocalReplica(q.name, q.uid, a.partition, a)
            for q in self.queues()
            for a in self._assignments[q.name]
            if node_id in a.node_ids
        ]

    # -- apply --
    def apply(self, cmd: MetaCommand) -> Any:
        """Apply one command; returns its result or raises a QueueError (then
        nothing changed). Results: NodeInfo, QueueRecord or PartitionAssignment.
        """
        handler = getattr(self, "_apply_" + type(cmd).__name__, None)
        if handler is None:
            raise errors.Internal(f"not a metadata command: {cmd!r}")
        return handler(cmd)

    def _changed(self) -> None:
        self.version += 1

    def _apply_RegisterNode(self, cmd: RegisterNode) -> NodeInfo:
        check_name("node_id", cmd.node_id)
        if not 0 < cmd.raft_port_min <= cmd.raft_port_max <= 65535:
            raise errors.InvalidArgument("raft_port_min", "bad raft port range")
        old = self._nodes.get(cmd.node_id)
        for held in self.replicas_on(cmd.node_id):
            port = _port_of(held.assignment, cmd.node_id)
            if not cmd.raft_port_min <= port <= cmd.raft_port_max:
                raise errors.FailedPrecondition(
                    f"node {cmd.node_id} hosts a replica on port {port}, outside the new range"
                )
        state = "draining" if old is not None and old.state == "draining" else "alive"
        # Once recorded, the voter set says who is a controller, not the node's config.
        voter = cmd.node_id in self._controllers if self._controllers else cmd.controller
        node = NodeInfo(
            cmd.node_id, cmd.address, cmd.raft_host, cmd.raft_port_min, cmd.raft_port_max,
            cmd.rack, voter, state,
            registered_ms=old.registered_ms if old else cmd.now_ms,
            state_ms=old.state_ms if old and old.state == state else cmd.now_ms,
            metadata_raft_port=cmd.metadata_raft_port,
        )  # fmt: skip
        if node != old:
            self._nodes[cmd.node_id] = node
            self._changed()
        return node

    def _apply_SetNodeState(self, cmd: SetNodeState) -> NodeInfo:
        old = self._node(cmd.node_id)
        if cmd.state not in NODE_STATES:
            raise errors.InvalidArgument("state", f"{cmd.state!r} not one of {NODE_STATES}")
        targets = [m for m in self._moves.values() if m.to.node_id == cmd.node_id]
        if cmd.state == "removed" and (self.replicas_on(cmd.node_id) or targets):
            raise errors.FailedPrecondition(f"node {cmd.node_id} still hosts replicas")
        if old.state == cmd.state:
            return old
        node = replace(old, state=cmd.state, state_ms=cmd.now_ms)
        self._nodes[cmd.node_id] = node
        self._changed()
        return node

    def _apply_CreateQueue(self, cmd: CreateQueue) -> QueueRecord:
        check_queue_name(cmd.name)
        existing = self._queues.get(cmd.name)
        if existing is not None:
            if splits.same_definition(existing, cmd.config):
                return existing
            raise errors.AlreadyExists(f"queue {cmd.name!r} exists with a different config")
        self._check_dead_letter(cmd.name, cmd.config)
        if [a.partition for a in cmd.assignments] != list(range(cmd.config.partitions)):
            raise errors.Internal("assignments must cover partitions 0..n-1 in order")
        ports = self._used_ports()
        for a in cmd.assignments:
            if len(a.replicas) != cmd.config.replication_factor:
                raise errors.Internal(f"partition {a.partition}: wrong replica count")
            self._check_replicas(a.replicas, ports)
            ports.update((r.node_id, r.raft_port) for r in a.replicas)
        record = QueueRecord(cmd.name, cmd.config, self._next_uid, cmd.now_ms)
        if cmd.data_key is not None:  # checked before anything changes
            keys.add(self._keys, record, record.uid, cmd.data_key)
        self._next_uid += 1
        self._queues[cmd.name] = record
        self._assignments[cmd.name] = tuple(cmd.assignments)
        self._changed()
        return record

    def _apply_UpdateQueue(self, cmd: UpdateQueue) -> QueueRecord:
        old = self._queue(cmd.name)
        for name in IMMUTABLE_QUEUE_FIELDS:
            if getattr(cmd.config, name) != getattr(old.spec, name):
                raise errors.InvalidArgument(name, "cannot be changed after creation")
        self._check_dead_letter(cmd.name, cmd.config)
        if cmd.config == old.spec:
            return old
        record = replace(old, spec=cmd.config)
        self._queues[cmd.name] = record
        self._changed()
        return record

    def _apply_SplitPartitions(self, cmd: SplitPartitions) -> QueueRecord:
        record, assignments = splits.split(self._queue(cmd.name), self._assignments[cmd.name], cmd)
        ports = self._used_ports()
        for a in cmd.assignments:
            self._check_replicas(a.replicas, ports)
            ports.update((r.node_id, r.raft_port) for r in a.replicas)
        self._queues[cmd.name] = record
        self._assignments[cmd.name] = assignments
        self._changed()
        return record

    def _apply_SetPartitionState(self, cmd: SetPartitionState) -> QueueRecord:
        old = self._queue(cmd.name)
        record = splits.set_state(old, cmd)
        if record != old:
            self._queues[cmd.name] = record
            self._changed()
        return record

    def _apply_FenceQueue(self, cmd: FenceQueue) -> QueueRecord:
        old = self._queue(cmd.name)
        if cmd.uid and cmd.uid != old.uid:
            raise errors.FailedPrecondition(f"queue {cmd.name!r} was re-created (uid)")
        if not cmd.partitions:
            record = replace(old, fenced=cmd.fenced, fenced_partitions=())
        else:
            for p in cmd.partitions:
                if not 0 <= p < old.spec.partitions:
                    raise errors.InvalidArgument(
                        "partitions", f"{p} is out of range 0..{old.spec.partitions - 1}"
                    )
            parts = set(old.fenced_partitions)
            parts = parts | set(cmd.partitions) if cmd.fenced else parts - set(cmd.partitions)
            record = replace(old, fenced_partitions=tuple(sorted(parts)))
        if record != old:
            self._queues[cmd.name] = record
            self._changed()
        return record

    def _apply_DeleteQueue(self, cmd: DeleteQueue) -> QueueRecord:
        record = self._queue(cmd.name)
        del self._queues[cmd.name]
        del self._assignments[cmd.name]
        self._keys.pop(cmd.name, None)  # crypto-shredding: its data keys end with it
        self._moves = {k: m for k, m in self._moves.items() if m.queue != cmd.name}
        self._changed()
        return record

    def _apply_AddDataKey(self, cmd: AddDataKey) -> tuple[DataKey, ...]:
        result = keys.add(self._keys, self._queue(cmd.queue), cmd.uid, cmd.data_key)
        self._changed()
        return result

    def _apply_RewrapDataKeys(self, cmd: RewrapDataKeys) -> tuple[DataKey, ...]:
        result = keys.rewrap(self._keys, self._queue(cmd.queue), cmd.uid, cmd.data_keys)
        self._changed()
        return result

    def _apply_ShredKeys(self, cmd: ShredKeys) -> None:
        if cmd.queue not in self._queues:
            self._keys.pop(cmd.queue, None)

    def _apply_SetAssignment(self, cmd: SetAssignment) -> PartitionAssignment:
        record = self._queue(cmd.queue)
        if cmd.uid and cmd.uid != record.uid:
            raise errors.FailedPrecondition(f"queue {cmd.queue!r} was re-created (uid)")
        current = self._assignments[cmd.queue]
        if not 0 <= cmd.partition < len(current):
            raise errors.InvalidArgument("partition", f"{cmd.partition} out of range")
        old = current[cmd.partition]
        if (cmd.queue, cmd.partition) in self._moves:
            raise errors.FailedPrecondition(
                f"partition: {cmd.queue}/{cmd.partition} has a move in flight; wait or cancel it"
            )
        if cmd.epoch <= old.epoch:
            raise errors.FailedPrecondition(f"stale epoch {cmd.epoch} <= {old.epoch}")
        others = self._used_ports() - {(r.node_id, r.raft_port) for r in old.replicas}
        self._check_replicas(cmd.replicas, others)
        new = PartitionAssignment(cmd.partition, cmd.replicas, cmd.epoch)
        self._assignments[cmd.queue] = (*current[: cmd.partition], new,
                                        *current[cmd.partition + 1 :])  # fmt: skip
        self._changed()
        return new

    def _apply_StartMove(self, cmd: StartMove) -> Move:
        record = self._queue(cmd.queue)
        old = self._partition(cmd.queue, cmd.partition)
        if (cmd.queue, cmd.partition) in self._moves:
            raise errors.FailedPrecondition(
                f"partition: {cmd.queue}/{cmd.partition} has a move in flight; wait or cancel it"
            )
        if cmd.from_node not in old.node_ids:
            raise errors.InvalidArgument("from_node", f"{cmd.from_node} holds no replica")
        if cmd.to_node in old.node_ids:
            raise errors.InvalidArgument("to_node", f"{cmd.to_node} already holds a replica")
        target = self._node(cmd.to_node)
        if target.state != "alive":
            raise errors.FailedPrecondition(f"to_node: {cmd.to_node} is {target.state}, not alive")
        to = ReplicaRef(cmd.to_node, cmd.to_port)
        self._check_replicas((to,), self._used_ports())
        move = Move(cmd.queue, record.uid, cmd.partition, cmd.from_node, to, "adding", cmd.now_ms,
                    max(0, cmd.throttle_bytes_per_s))  # fmt: skip
        self._moves[move.key] = move
        self._changed()
        return move

    def _apply_SetMovePhase(self, cmd: SetMovePhase) -> Move:
        move = self._move(cmd.queue, cmd.partition)
        if cmd.phase not in MOVE_PHASES:
            raise errors.InvalidArgument("phase", f"{cmd.phase!r} not one of {MOVE_PHASES}")
        if move.phase == cmd.phase:
            return move
        if move.phase != "adding":
            raise errors.FailedPrecondition(
                f"move of {cmd.queue}/{cmd.partition} is {move.phase}; it cannot become {cmd.phase}"
            )
        new = replace(move, phase=cmd.phase)
        self._moves[move.key] = new
        self._changed()
        return new

    def _apply_FinishMove(self, cmd: FinishMove) -> PartitionAssignment:
        move = self._move(cmd.queue, cmd.partition)
        if move.phase != "removing":
            raise errors.FailedPrecondition(f"move of {cmd.queue}/{cmd.partition} is {move.phase}")
        old = self._partition(cmd.queue, cmd.partition)
        replicas = tuple(move.to if r.node_id == move.from_node else r for r in old.replicas)
        new = PartitionAssignment(cmd.partition, replicas, old.epoch + 1)
        current = self._assignments[cmd.queue]
        self._assignments[cmd.queue] = (*current[: cmd.partition], new,
                                        *current[cmd.partition + 1 :])  # fmt: skip
        del self._moves[move.key]
        self._changed()
        return new

    def _apply_DropMove(self, cmd: DropMove) -> Move:
        move = self._move(cmd.queue, cmd.partition)
        if move.phase == "removing":
            raise errors.FailedPrecondition(f"move of {cmd.queue}/{cmd.partition} is removing")
        del self._moves[move.key]
        self._changed()
        return move

    def _apply_StartControllerChange(self, cmd: StartControllerChange) -> ControllerChange:
        voters, change = controllers.start_change(
            self._controllers, self._controller_change, self._nodes, cmd
        )
        if change != self._controller_change or voters != self._controllers:
            self._set_controllers(voters)
            self._controller_change = change
            self._changed()
        return change

    def _apply_FinishControllerChange(self, cmd: FinishControllerChange) -> dict[str, str]:
        voters = controllers.finish_change(self._controllers, self._controller_change, cmd.node_id)
        self._set_controllers(voters)
        self._controller_change = None
        self._changed()
        return self.controllers()

    def _apply_DropControllerChange(self, cmd: DropControllerChange) -> dict[str, str]:
        controllers.check_drop(self._controller_change, cmd.node_id)
        self._controller_change = None
        self._changed()
        return self.controllers()

    def _apply_SetManagedBy(self, cmd: SetManagedBy) -> managed.ManagedBy | None:
        value = managed.check(cmd.cluster_name, tuple(cmd.managers))
        if value != self._managed_by:
            self._managed_by = value
            self._changed()
        return value

    def _apply_CreatePrincipal(self, cmd: CreatePrincipal) -> Principal:
        return self._set_principal(principals.create(self._principals, cmd))

    def _apply_RotatePrincipal(self, cmd: RotatePrincipal) -> Principal:
        return self._set_principal(principals.rotate(self._principals, cmd))

    def _apply_GrantAccess(self, cmd: GrantAccess) -> Principal:
        return self._set_principal(principals.grant(self._principals, cmd))

    def _apply_RevokeAccess(self, cmd: RevokeAccess) -> Principal:
        return self._set_principal(principals.revoke(self._principals, cmd))

    def _apply_DeletePrincipal(self, cmd: DeletePrincipal) -> Principal:
        gone = principals.delete(self._principals, cmd)
        del self._principals[gone.name]
        self._changed()
        return gone

    def _set_principal(self, new: Principal) -> Principal:
        if self._principals.get(new.name) != new:
            self._principals[new.name] = new
            self._changed()
        return new

    def _set_controllers(self, voters: dict[str, str]) -> None:
        self._controllers = dict(voters)
        for node_id, node in list(self._nodes.items()):
            if node.controller != (node_id in voters):
                self._nodes[node_id] = replace(node, controller=node_id in voters)

    # -- checks --
    def _move(self, queue: str, partition: int) -> Move:
        move = self._moves.get((queue, partition))
        if move is None:
            raise errors.NotFound(f"no move in flight for {queue}/{partition}")
        return move

    def _partition(self, queue: str, partition: int) -> PartitionAssignment:
        current = self._assignments.get(queue, ())
        if not 0 <= partition < len(current):
            raise errors.InvalidArgument("partition", f"{partition} out of range")
        return current[partition]

    def _node(self, node_id: str) -> NodeInfo:
        node = self._nodes.get(node_id)
        if node is None:
            raise errors.NotFound(f"node {node_id!r} is not registered")
        return node

    def _queue(self, name: str) -> QueueRecord:
        record = self._queues.get(name)
        if record is None:
            raise errors.NotFound(f"queue {name!r} does not exist")
        return record

    def _check_dead_letter(self, name: str, spec: QueueSpec) -> None:
        dlq = spec.dead_letter_queue
        if dlq == name:
            raise errors.InvalidArgument("dead_letter_queue", "a queue cannot be its own DLQ")
        if dlq and dlq not in self._queues:
            raise errors.InvalidArgument("dead_letter_queue", f"queue {dlq!r} does not exist")

    def _used_ports(self) -> set[tuple[str, int]]:
        used = {(r.node_id, r.raft_port) for a in self.all_assignments() for r in a.replicas}
        return used | {(m.to.node_id, m.to.raft_port) for m in self._moves.values()}

    def _check_replicas(self, replicas: tuple[ReplicaRef, ...], used: set[tuple[str, int]]) -> None:
        """Known nodes, one replica per node, ports in range and free, else the
        placement was computed from an older state: Unavailable (re-place).
        """
        if not replicas or len({r.node_id for r in replicas}) != len(replicas):
            raise errors.InvalidArgument("replicas", "need one or more distinct nodes")
        for r in replicas:
            node = self._nodes.get(r.node_id)
            if node is None or node.state == "removed":
                raise errors.Unavailable(f"placement names unknown node {r.node_id!r}; retry")
            if not node.raft_port_min <= r.raft_port <= node.raft_port_max:
                raise errors.Unavailable(f"port {r.raft_port} outside {r.node_id}'s range; retry")
            if (r.node_id, r.raft_port) in used:
                raise errors.Unavailable(f"port {r.raft_port} on {r.node_id} is taken; retry")

    # -- snapshots --
    def to_bytes(self) -> bytes:
        """Deterministic JSON: equal states give equal bytes on every replica."""
        return _dump({
            "version": self.version,
            "next_uid": self._next_uid,
            "nodes": [_plain(n) for n in self.nodes().values()],
            "queues": [
                {"name": q.name, "uid": q.uid, "created_ms": q.created_ms,
                 "spec": q.spec.to_dict(), "assignments": _plain(self._assignments[q.name]),
                 **({"ranges": splits.ranges_to_plain(q.ranges)} if q.ranges else {}),
                 **({"fenced": True} if q.fenced else {}),
                 **({"fenced_partitions": list(q.fenced_partitions)}
                    if q.fenced_partitions else {})}
                for q in self.queues()
            ],
            "moves": [_plain_move(m) for m in self.moves()],
            "controllers": [[n, a] for n, a in self.controllers().items()],
            "controller_change": _plain_change(self._controller_change),
            "data_keys": keys.to_plain(self._keys),
            "principals": [principals.to_plain(p) for p in self.principals()],
            **self._quotas_to_plain(),
            **managed.to_plain(self._managed_by),
        })  # fmt: skip

    @classmethod
    def from_bytes(cls, data: bytes) -> MetadataMachine:
        """Inverse of to_bytes; a malformed image is Internal."""
        machine = cls()
        try:
            obj = json.loads(data)
            machine.version, machine._next_uid = obj["version"], obj["next_uid"]
            for n in obj["nodes"]:
                machine._nodes[n["node_id"]] = NodeInfo(**n)
            for q in obj["queues"]:
                spec = QueueSpec.from_dict(q["spec"])
                ranges = splits.ranges_from_plain(q.get("ranges", []))
                machine._queues[q["name"]] = QueueRecord(
                    q["name"],
                    spec,
                    q["uid"],
                    q["created_ms"],
                    ranges,
                    bool(q.get("fenced")),
                    tuple(int(p) for p in q.get("fenced_partitions", ())),
                )
                machine._assignments[q["name"]] = _typed("assignments", q["assignments"])
            for m in obj.get("moves", ()):
                move = Move(**{**m, "to": ReplicaRef(*m["to"])})
                machine._moves[move.key] = move
            machine._controllers = {str(n): str(a) for n, a in obj.get("controllers", ())}
            change = obj.get("controller_change")
            machine._controller_change = ControllerChange(*change) if change else None
            machine._keys = keys.from_plain(obj.get("data_keys", {}))
            for p in obj.get("principals", ()):
                machine._principals[p["name"]] = principals.from_plain(p)
            machine._quotas_from_plain(obj)
            machine._managed_by = managed.from_plain(obj)
        except (ValueError, KeyError, TypeError, errors.InvalidArgument) as exc:
            raise errors.Internal(f"bad metadata snapshot: {exc!r}") from exc
        return machine


def _plain_change(change: ControllerChange | None) -> list[str] | None:
    return [change.action, change.node_id, change.raft_address] if change else None


def _plain_move(move: Move) -> dict[str, Any]:
    return {name: _plain(getattr(move, name)) for name in move.__dataclass_fields__}


def _port_of(assignment: PartitionAssignment, node_id: str) -> int:
    return next(r.raft_port for r in assignment.replicas if r.node_id == node_id)
