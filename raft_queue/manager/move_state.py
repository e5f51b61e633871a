"""A queue's move between clusters, as the manager's replicated state keeps
it (pure; ``manager/moves.py`` drives it, docs/operations.md "Moving a queue
between clusters").

Phases, each entered by one committed command, so a new manager leader
picks the move up where the log says it is:

- ``starting`` (StartMove): the target's queue is to be created and the
  source's fenced;
- ``fenced``: the source refuses sends and leases nothing; its unfinished
  records are being copied to the target;
- ``leases`` (FinishMove, the cut-over, when leases were carried): the
  mapping names the target; the records leased at the source when it was
  fenced are leased on the target too (``leases``), and the mover follows
  each source lease (acked, nacked, its deadline changed) until none is
  left (SettleLeases), then ``done``;
- ``done`` (FinishMove, the cut-over, or the last SettleLeases): the mapping
  names the target;
- ``cancelling`` (before the cut-over only): the source is to be unfenced and
  the target's copy dropped; then ``cancelled``.

One move runs at a time (manager-wide): a move is heavy on both clusters, and
one at a time keeps the fence windows apart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from raft_queue import errors

if TYPE_CHECKING:
    from raft_queue.manager.state import ManagerMachine

PHASES = ("starting", "fenced", "leases", "done", "cancelling", "cancelled")
ACTIVE = ("starting", "fenced", "leases", "cancelling")
#: Active phases before the cut-over: one such move at a time, manager-wide.
FENCING = ("starting", "fenced", "cancelling")
#: phase -> the phases it may go to
NEXT = {
    "starting": ("fenced", "cancelling"),
    "fenced": ("done", "leases", "cancelling"),
    "leases": ("done",),
    "cancelling": ("cancelled",),
}
#: A carried lease: (source local partition, source offset, target partition,
#: target offset, deadline_ms of the source lease as last seen).
Carried = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class QueueMove:
    queue: str
    source: str
    target: str
    phase: str
    started_ms: int
    phase_ms: int  # when ``phase`` was entered (leader clock)
    copied: int = 0  # messages copied to the target (set at the cut-over)
    finished_ms: int = 0
    # A partial move: the GLOBAL partitions moved (sorted) and their local
    # indexes on the source; the target's queue has len(partitions)
    # partitions, global partitions[i] becoming its partition i. () and ():
    # the whole queue (the queue is fenced as a whole, local indexes kept).
    partitions: tuple[int, ...] = ()
    source_locals: tuple[int, ...] = ()
    # ``leases`` phase: the carried leases still followed (sorted).
    leases: tuple[Carried, ...] = ()

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE


@dataclass(frozen=True, slots=True)
class StartMove:
    queue: str
    target: str
    now_ms: int
    partitions: tuple[int, ...] = ()  # GLOBAL partitions; (): the whole queue


@dataclass(frozen=True, slots=True)
class SetMovePhase:
    """``queue``'s move from phase ``expect`` to ``phase`` (refused otherwise:
    a step of a deposed leader, or a cancel after the cut-over)."""

    queue: str
    expect: str
    phase: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class FinishMove:
    queue: str
    copied: int
    now_ms: int
    leases: tuple[Carried, ...] = ()  # carried to the target: the ``leases`` phase follows them


@dataclass(frozen=True, slots=True)
class SettleLeases:
    """Carried leases the mover has settled on the target (``settled``:
    (source partition, source offset) keys, dropped) or whose source
    deadline changed (``changed``: (partition, offset, new deadline)); the
    last one gone, the move is ``done``."""

    queue: str
    settled: tuple[tuple[int, int], ...]
    changed: tuple[tuple[int, int, int], ...]
    now_ms: int


def settle_leases(move: QueueMove | None, cmd: SettleLeases) -> QueueMove:
    if move is None:
        raise errors.NotFound(f"queue: {cmd.queue!r} has no move")
    if move.phase != "leases":
        raise errors.FailedPrecondition(f"queue: {cmd.queue!r}'s move is {move.phase}, not leases")
    gone = set(cmd.settled)
    deadlines = {(p, o): d for p, o, d in cmd.changed}
    left = tuple(
        (sp, so, tp, to, deadlines.get((sp, so), d))
        for sp, so, tp, to, d in move.leases
        if (sp, so) not in gone
    )
    if left:
        return replace(move, leases=left)
    return replace(move, leases=(), phase="done", phase_ms=cmd.now_ms)


def carried_tuples(raw: Any) -> tuple[Any, ...]:
    """JSON lists back to tuples (a command's or a snapshot's)."""
    return tuple(tuple(int(x) for x in item) for item in raw or ())


def check_move(
    machine: ManagerMachine, queue: str, target: str, partitions: tuple[int, ...] = ()
) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """(source cluster, GLOBAL partitions moved, their source local indexes)
    of a move of ``queue`` (or of its ``partitions`` only) to ``target``; both
    tuples are () for a whole-queue move (``partitions`` naming every
    partition is one). The errors name the field (nothing is written when
    one is raised)."""
    if not queue:
        raise errors.InvalidArgument("queue", "a queue name is required")
    if not target:
        raise errors.InvalidArgument("to", "a target cluster is required")
    placed = machine.queue(queue)
    if placed is None:
        raise errors.NotFound(f"queue: {queue!r} is not managed by this manager")
    record = machine.cluster(target)
    if record is None:
        raise errors.NotFound(f"to: cluster {target!r} is not registered")
    chosen = check_partitions(placed.partitions, partitions)
    homes = [placed.partitions[g] for g in chosen]
    clusters = list(dict.fromkeys(h.cluster for h in homes))
    if clusters == [target]:
        raise errors.InvalidArgument("to", f"queue {queue!r} is already on cluster {target!r}")
    if len(clusters) != 1:
        field = "partitions" if partitions else "queue"
        raise errors.InvalidArgument(
            field, f"{queue!r}'s partitions {list(chosen)} live on clusters {clusters}; "
            "a move takes partitions of one cluster: name them with --partitions",
        )  # fmt: skip
    if target in placed.clusters():
        raise errors.FailedPrecondition(
            f"to: cluster {target!r} already holds partitions of {queue!r}; a move needs a "
            "target without the queue (a cluster's queue cannot grow partitions)"
        )
    if record.draining:
        raise errors.FailedPrecondition(f"to: cluster {target!r} is draining")
    if record.health == "down":
        raise errors.FailedPrecondition(f"to: cluster {target!r} is down")
    mine = machine.move(queue)
    if mine is not None and mine.phase == "leases":
        raise errors.FailedPrecondition(
            f"queue: {queue!r} was just moved; its carried leases are still followed "
            f"({len(mine.leases)} left): move it again once its move is done"
        )
    running = [m for m in machine.active_moves() if m.phase in FENCING]
    if running:
        m = running[0]
        raise errors.FailedPrecondition(
            f"queue: a move is running ({m.queue} {m.source} -> {m.target}, {m.phase}); "
            "one at a time: wait for it or cancel it"
        )
    if len(chosen) == len(placed.partitions):
        return clusters[0], (), ()
    return clusters[0], chosen, tuple(h.local for h in homes)


def check_partitions(homes: tuple[Any, ...], partitions: tuple[int, ...]) -> tuple[int, ...]:
    """The GLOBAL partitions a move names, sorted (every one when none is
    named); InvalidArgument("partitions") when out of range or repeated."""
    if not partitions:
        return tuple(range(len(homes)))
    for p in partitions:
        if not 0 <= p < len(homes):
            raise errors.InvalidArgument("partitions", f"{p} is out of range 0..{len(homes) - 1}")
    if len(set(partitions)) != len(partitions):
        raise errors.InvalidArgument("partitions", "names a partition twice")
    return tuple(sorted(partitions))


def homes_after(move: QueueMove, homes: tuple[Any, ...]) -> tuple[Any, ...]:
    """A queue's partition homes after ``move``'s cut-over: every one on the
    target with its local index (a whole move), or the moved ones on the
    target's partitions 0.. in order (a partial move), the rest unchanged."""
    if not move.partitions:
        return tuple(replace(h, cluster=move.target) for h in homes)
    at = {g: i for i, g in enumerate(move.partitions)}
    return tuple(
        replace(h, cluster=move.target, local=at[g]) if g in at else h for g, h in enumerate(homes)
    )


def next_phase(move: QueueMove | None, cmd: SetMovePhase) -> QueueMove:
    if move is None:
        raise errors.NotFound(f"queue: {cmd.queue!r} has no move")
    if cmd.phase not in PHASES:
        raise errors.InvalidArgument("phase", f"must be one of {PHASES}")
    if move.phase != cmd.expect or cmd.phase not in NEXT.get(move.phase, ()):
        if cmd.phase == "cancelling" and move.phase in ("done", "leases"):
            raise errors.FailedPrecondition(
                f"queue: {cmd.queue!r} was already cut over to {move.target}; a finished "
                "move cannot be cancelled (move it back instead)"
            )
        raise errors.FailedPrecondition(
            f"queue: {cmd.queue!r}'s move is {move.phase}, not {cmd.expect}"
        )
    return replace(move, phase=cmd.phase, phase_ms=cmd.now_ms)
