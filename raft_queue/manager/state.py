"""ManagerMachine: the replicated state of the external cluster manager (pure).

The second level of management (docs/operations.md "Two levels of manager"):
each cluster's own metadata group still places replicas on that cluster's
nodes; the manager only knows clusters as wholes and which cluster holds each
partition of each queue it manages.

State:

- clusters: name -> ``ClusterRecord`` (bootstrap addresses, the sealed admin
  token the manager calls it with, health, load, draining);
- queues: name -> ``ManagedQueue``: its global configuration (a QueueSpec
  as a dict, ``partitions`` = the global count) and, per global partition,
  its ``PartitionHome`` (cluster, partition index in that cluster's queue of
  the same name), so one queue can span clusters;
- ``version``: bumped by every change; ``mapping_version``: bumped only by
  changes a router cares about (clusters added/removed/re-addressed, queues
  placed or forgotten). Clients cache the mapping under it.

As ``core/metadata.py``: commands are frozen dataclasses JSON-encoded on the
Raft log, ``apply`` is deterministic (the leader stamps ``now_ms`` and seals
tokens before proposing), and a rejected command changes nothing and raises
the same error on every replica.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from raft_queue import errors
from raft_queue.config import check_name, check_queue_name, parse_host_port
from raft_queue.manager import move_state, queue_update

HEALTHS = ("unknown", "healthy", "degraded", "down")


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    name: str
    bootstrap: tuple[str, ...]
    token: str = ""  # the cluster's admin token, sealed by the leader (manager/sealing.py)
    health: str = "unknown"  # one of HEALTHS, as the manager's poller last judged it
    load: int = 0  # partitions the cluster hosts (its replicas / its nodes' count)
    draining: bool = False  # no new queues placed on it
    health_since_ms: int = 0  # when ``health`` last changed (leader clock)
    reason: str = ""  # why degraded or down


@dataclass(frozen=True, slots=True)
class PartitionHome:
    """Where one global partition lives: ``cluster``'s queue of the same name,
    its partition ``local``."""

    cluster: str
    local: int


@dataclass(frozen=True, slots=True)
class ManagedQueue:
    name: str
    partitions: tuple[PartitionHome, ...]
    config: dict[str, Any] = field(hash=False)  # QueueSpec.to_dict(), partitions = global
    created_ms: int = 0
    # Some cluster's queue holds partitions the mapping does not name (a
    # partial move's fenced leftovers): clients pin every send to its local
    # partition (client/managed.py), never leaving it to a cluster's round robin.
    pinned: bool = False

    def clusters(self) -> list[str]:
        """The clusters holding a partition of this queue, in partition order."""
        return list(dict.fromkeys(h.cluster for h in self.partitions))

    def local_count(self, cluster: str) -> int:
        """How many partitions the queue has on ``cluster``."""
        return sum(1 for h in self.partitions if h.cluster == cluster)


# ---- commands -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddCluster:
    name: str
    bootstrap: tuple[str, ...]
    token: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class RemoveCluster:
    name: str


@dataclass(frozen=True, slots=True)
class SetDraining:
    name: str
    draining: bool


@dataclass(frozen=True, slots=True)
class ReportHealth:
    name: str
    health: str
    load: int
    reason: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class PlaceQueue:
    name: str
    partitions: tuple[PartitionHome, ...]
    config: dict[str, Any] = field(hash=False)
    now_ms: int = 0


@dataclass(frozen=True, slots=True)
class ForgetQueue:
    name: str


ManagerCommand = (
    AddCluster | RemoveCluster | SetDraining | ReportHealth | PlaceQueue | ForgetQueue
    | move_state.StartMove | move_state.SetMovePhase | move_state.FinishMove
    | move_state.SettleLeases | queue_update.UpdateQueue
)  # fmt: skip
_COMMANDS: dict[str, type[Any]] = {
    c.__name__: c
    for c in (AddCluster, RemoveCluster, SetDraining, ReportHealth, PlaceQueue, ForgetQueue,
              move_state.StartMove, move_state.SetMovePhase, move_state.FinishMove,
              move_state.SettleLeases, queue_update.UpdateQueue)
}  # fmt: skip


def encode_command(cmd: ManagerCommand) -> bytes:
    return json.dumps({"t": type(cmd).__name__, **asdict(cmd)}, sort_keys=True).encode()


def decode_command(raw: bytes) -> ManagerCommand:
    data = json.loads(raw)
    cls = _COMMANDS[data.pop("t")]
    if "bootstrap" in data:
        data["bootstrap"] = tuple(data["bootstrap"])
    if cls is move_state.StartMove:
        data["partitions"] = tuple(int(p) for p in data.get("partitions", ()))
    elif "partitions" in data:
        data["partitions"] = _homes(data["partitions"])
    for name in ("leases", "settled", "changed"):  # carried leases (move_state.Carried)
        if name in data:
            data[name] = move_state.carried_tuples(data[name])
    return cls(**data)  # type: ignore[no-any-return]


def _homes(raw: list[Any]) -> tuple[PartitionHome, ...]:
    return tuple(
        PartitionHome(str(h["cluster"]), int(h["local"]))
        if isinstance(h, dict)
        else PartitionHome(str(h[0]), int(h[1]))
        for h in raw
    )


# ---- checks shared by the service and apply -------------------------------------------------


def check_cluster(name: str, bootstrap: tuple[str, ...]) -> None:
    """INVALID_ARGUMENT naming the field: a cluster name and its addresses."""
    check_name("name", name)
    if not bootstrap:
        raise errors.InvalidArgument("bootstrap", "needs at least one host:port address")
    for i, address in enumerate(bootstrap):
        try:
            parse_host_port(f"bootstrap[{i}]", address)
        except errors.ConfigError as exc:
            raise errors.InvalidArgument(exc.field, str(exc).split(": ", 1)[-1]) from exc


# ---- the machine ------------------------------------------------------------------------------


class ManagerMachine:
    def __init__(self) -> None:
        self._clusters: dict[str, ClusterRecord] = {}
        self._queues: dict[str, ManagedQueue] = {}
        self._moves: dict[str, move_state.QueueMove] = {}  # the last move of each queue
        self.version = 0
        self.mapping_version = 0

    # ---- reads ----------------------------------------------------------------------------
    def clusters(self) -> dict[str, ClusterRecord]:
        return dict(self._clusters)

    def cluster(self, name: str) -> ClusterRecord | None:
        return self._clusters.get(name)

    def queues(self) -> list[ManagedQueue]:
        return [self._queues[n] for n in sorted(self._queues)]

    def queue(self, name: str) -> ManagedQueue | None:
        return self._queues.get(name)

    def queues_on(self, cluster: str) -> list[str]:
        return [q.name for q in self.queues() if cluster in q.clusters()]

    def moves(self) -> list[move_state.QueueMove]:
        return [self._moves[n] for n in sorted(self._moves)]

    def move(self, queue: str) -> move_state.QueueMove | None:
        return self._moves.get(queue)

    def active_moves(self) -> list[move_state.QueueMove]:
        return [m for m in self.moves() if m.active]

    # ---- apply ----------------------------------------------------------------------------
    def apply(self, cmd: ManagerCommand) -> Any:
        handler = getattr(self, "_" + type(cmd).__name__)
        result = handler(cmd)
        return result

    def _bump(self, mapping: bool) -> None:
        self.version += 1
        if mapping:
            self.mapping_version += 1

    def _AddCluster(self, cmd: AddCluster) -> ClusterRecord:  # noqa: N802
        check_cluster(cmd.name, cmd.bootstrap)
        old = self._clusters.get(cmd.name)
        if old is not None:
            record = replace(old, bootstrap=cmd.bootstrap, token=cmd.token or old.token)
        else:
            record = ClusterRecord(cmd.name, cmd.bootstrap, cmd.token, health_since_ms=cmd.now_ms)
        self._clusters[cmd.name] = record
        self._bump(mapping=old is None or old.bootstrap != cmd.bootstrap)
        return record

    def _RemoveCluster(self, cmd: RemoveCluster) -> ClusterRecord:  # noqa: N802
        record = self._need_cluster(cmd.name)
        queues = self.queues_on(cmd.name)
        if queues:
            raise errors.FailedPrecondition(
                f"cluster {cmd.name!r} still holds queues {queues[:5]}: move or forget them first"
            )
        del self._clusters[cmd.name]
        self._bump(mapping=True)
        return record

    def _SetDraining(self, cmd: SetDraining) -> ClusterRecord:  # noqa: N802
        record = replace(self._need_cluster(cmd.name), draining=cmd.draining)
        self._clusters[cmd.name] = record
        self._bump(mapping=False)
        return record

    def _ReportHealth(self, cmd: ReportHealth) -> ClusterRecord:  # noqa: N802
        if cmd.health not in HEALTHS:
            raise errors.InvalidArgument("health", f"must be one of {HEALTHS}")
        old = self._need_cluster(cmd.name)
        since = old.health_since_ms if old.health == cmd.health else cmd.now_ms
        record = replace(
            old, health=cmd.health, load=cmd.load, reason=cmd.reason, health_since_ms=since
        )
        self._clusters[cmd.name] = record
        self._bump(mapping=False)
        return record

    def _PlaceQueue(self, cmd: PlaceQueue) -> ManagedQueue:  # noqa: N802
        check_queue_name(cmd.name)
        if not cmd.partitions:
            raise errors.InvalidArgument("partitions", "must be at least 1")
        for home in cmd.partitions:
            self._need_cluster(home.cluster)
        queue = ManagedQueue(cmd.name, cmd.partitions, dict(cmd.config), cmd.now_ms)
        old = self._queues.get(cmd.name)
        if old is not None:
            if old.partitions == queue.partitions and old.config == queue.config:
                return old  # the same placement again: idempotent (a retried create)
            raise errors.AlreadyExists(f"queue {cmd.name!r} is already placed differently")
        self._queues[cmd.name] = queue
        self._bump(mapping=True)
        return queue

    def _ForgetQueue(self, cmd: ForgetQueue) -> ManagedQueue:  # noqa: N802
        queue = self._queues.get(cmd.name)
        if queue is None:
            raise errors.NotFound(f"queue {cmd.name!r} is not managed")
        moving = self._moves.get(cmd.name)
        if moving is not None and moving.active:
            raise errors.FailedPrecondition(f"queue {cmd.name!r} is moving: cancel the move first")
        del self._queues[cmd.name]
        self._bump(mapping=True)
        return queue

    def _UpdateQueue(self, cmd: queue_update.UpdateQueue) -> ManagedQueue:  # noqa: N802
        """A forwarded config update, or growth by splits (manager/queue_update.py)."""
        queue = self._queues.get(cmd.name)
        if queue is None:
            raise errors.NotFound(f"queue {cmd.name!r} is not managed")
        for home in cmd.partitions:
            self._need_cluster(home.cluster)
        updated: ManagedQueue = queue_update.apply_update(queue, cmd)
        if updated != queue:
            self._queues[cmd.name] = updated
            self._bump(mapping=True)
        return updated

    # ---- moves between clusters (manager/move_state.py) ---------------------------------
    def _StartMove(self, cmd: move_state.StartMove) -> move_state.QueueMove:  # noqa: N802
        source, parts, locals_ = move_state.check_move(self, cmd.queue, cmd.target, cmd.partitions)
        move = move_state.QueueMove(
            cmd.queue, source, cmd.target, "starting", cmd.now_ms, cmd.now_ms,
            partitions=parts, source_locals=locals_,
        )  # fmt: skip
        self._moves[cmd.queue] = move
        queue = self._queues[cmd.queue]
        if move.partitions and not queue.pinned:  # clients pin sends from the fence on
            self._queues[cmd.queue] = replace(queue, pinned=True)
        self._bump(mapping=bool(move.partitions) and not queue.pinned)
        return move

    def _SetMovePhase(self, cmd: move_state.SetMovePhase) -> move_state.QueueMove:  # noqa: N802
        move = move_state.next_phase(self._moves.get(cmd.queue), cmd)
        self._moves[cmd.queue] = move
        self._bump(mapping=False)
        return move

    def _FinishMove(self, cmd: move_state.FinishMove) -> move_state.QueueMove:  # noqa: N802
        """The cut-over: the queue's (moved) partitions are the target's from now on."""
        phase = "leases" if cmd.leases else "done"
        move = move_state.next_phase(
            self._moves.get(cmd.queue),
            move_state.SetMovePhase(cmd.queue, "fenced", phase, cmd.now_ms),
        )
        move = replace(move, copied=cmd.copied, finished_ms=cmd.now_ms, leases=cmd.leases)
        queue = self._queues[cmd.queue]
        homes = move_state.homes_after(move, queue.partitions)
        self._queues[cmd.queue] = replace(queue, partitions=homes)
        self._moves[cmd.queue] = move
        self._bump(mapping=True)
        return move

    def _SettleLeases(self, cmd: move_state.SettleLeases) -> move_state.QueueMove:  # noqa: N802
        move = move_state.settle_leases(self._moves.get(cmd.queue), cmd)
        self._moves[cmd.queue] = move
        self._bump(mapping=False)
        return move

    def _need_cluster(self, name: str) -> ClusterRecord:
        record = self._clusters.get(name)
        if record is None:
            raise errors.NotFound(f"cluster {name!r} is not registered")
        return record

    # ---- snapshots --------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        data = {
            "version": self.version,
            "mapping_version": self.mapping_version,
            "clusters": [asdict(c) for c in self._clusters.values()],
            "queues": [asdict(q) for q in self._queues.values()],
            "moves": [asdict(m) for m in self._moves.values()],
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> ManagerMachine:
        data = json.loads(raw)
        machine = cls()
        machine.version = int(data["version"])
        machine.mapping_version = int(data["mapping_version"])
        for c in data["clusters"]:
            c["bootstrap"] = tuple(c["bootstrap"])
            machine._clusters[c["name"]] = ClusterRecord(**c)
        for q in data["queues"]:
            q["partitions"] = _homes(q["partitions"])
            machine._queues[q["name"]] = ManagedQueue(**q)
        for m in data.get("moves", ()):
            for name in ("partitions", "source_locals"):
                m[name] = tuple(int(p) for p in m.get(name, ()))
            m["leases"] = move_state.carried_tuples(m.get("leases"))
            machine._moves[m["queue"]] = move_state.QueueMove(**m)
        return machine
