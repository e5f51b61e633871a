"""A queue's move between clusters, as the manager's replicated state keeps
it (pure; ``manager/moves.py`` drives it, docs/operations.md "Moving a queue
between clusters").

Phases, each entered by one committed command, so a new manager leader
picks the move up where the log says it is:

- ``starting`` (StartMove): the target's queue is to be created and the
  source's fenced;
- ``fenced``: the source refuses sends and leases nothing; its unfinished
  records are being copied to the target;
- ``done`` (FinishMove, the cut-over): the mapping names the target;
- ``cancelling`` (before the cut-over only): the source is to be unfenced and
  the target's copy dropped; then ``cancelled``.

One move runs at a time (manager-wide): a move is heavy on both clusters, and
one at a time keeps the fence windows apart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from raft_queue import errors

if TYPE_CHECKING:
    from raft_queue.manager.state import ManagerMachine

PHASES = ("starting", "fenced", "done", "cancelling", "cancelled")
ACTIVE = ("starting", "fenced", "cancelling")
#: phase -> the phases it may go to
NEXT = {
    "starting": ("fenced", "cancelling"),
    "fenced": ("done", "cancelling"),
    "cancelling": ("cancelled",),
}


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

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE


@dataclass(frozen=True, slots=True)
class StartMove:
    queue: str
    target: str
    now_ms: int


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


def check_move(machine: ManagerMachine, queue: str, target: str) -> str:
    """The source cluster of a move of ``queue`` to ``target``; the errors
    name the field (nothing is written when one is raised)."""
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
    clusters = placed.clusters()
    if clusters == [target]:
        raise errors.InvalidArgument("to", f"queue {queue!r} is already on cluster {target!r}")
    if len(clusters) != 1:
        raise errors.FailedPrecondition(
            f"queue: {queue!r} spans clusters {clusters}; moving part of a queue is not built"
        )
    if record.draining:
        raise errors.FailedPrecondition(f"to: cluster {target!r} is draining")
    if record.health == "down":
        raise errors.FailedPrecondition(f"to: cluster {target!r} is down")
    running = machine.active_moves()
    if running:
        m = running[0]
        raise errors.FailedPrecondition(
            f"queue: a move is running ({m.queue} {m.source} -> {m.target}, {m.phase}); "
            "one at a time: wait for it or cancel it"
        )
    return clusters[0]


def next_phase(move: QueueMove | None, cmd: SetMovePhase) -> QueueMove:
    if move is None:
        raise errors.NotFound(f"queue: {cmd.queue!r} has no move")
    if cmd.phase not in PHASES:
        raise errors.InvalidArgument("phase", f"must be one of {PHASES}")
    if move.phase != cmd.expect or cmd.phase not in NEXT.get(move.phase, ()):
        if cmd.phase == "cancelling" and move.phase == "done":
            raise errors.FailedPrecondition(
                f"queue: {cmd.queue!r} was already cut over to {move.target}; a finished "
                "move cannot be cancelled (move it back instead)"
            )
        raise errors.FailedPrecondition(
            f"queue: {cmd.queue!r}'s move is {move.phase}, not {cmd.expect}"
        )
    return replace(move, phase=cmd.phase, phase_ms=cmd.now_ms)
