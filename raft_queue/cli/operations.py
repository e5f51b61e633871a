"""``raftq partitions move/cancel/status/rebalance``, ``raftq leaders balance``
and the steps behind ``raftq node drain/remove``.

Every call goes to the metadata leader (any node answers NotLeader with its
address, which the SDK follows). A move is recorded by the leader and run by
its mover (server/mover.py); ``--wait`` and plan execution poll ListMoves
until the partition's move is gone. Plans (rebalance, drain, leaders) are
computed by the leader (core/planner.py) and executed here one step at a
time, so a plan runs as long as this command does (Ctrl-C stops after the
current step is recorded; the move in flight still completes).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click
from google.protobuf import json_format
from rich.console import Console
from rich.progress import Progress

from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.cli.output import Column, print_json, print_line, print_objects
from raft_queue.client.calls import Call
from raft_queue.errors import Unavailable

if TYPE_CHECKING:
    from raft_queue.cli.main import Session

POLL_S = 0.5

MOVE_COLUMNS: list[Column] = [
    ("queue", lambda m: m.queue),
    ("partition", lambda m: m.partition),
    ("from", lambda m: m.from_node),
    ("to", lambda m: f"{m.to_node}:{m.to_port}"),
    ("phase", lambda m: m.phase),
    ("caught up", lambda m: f"{m.match_index}/{m.leader_index}" if m.leader_index else "-"),
    ("elapsed", lambda m: f"{max(0, time.time() * 1000 - m.started_ms) / 1000:.1f} s"),
]
STEP_COLUMNS: list[Column] = [
    ("step", lambda s: s.kind),
    ("queue", lambda s: s.queue),
    ("partition", lambda s: s.partition),
    ("from", lambda s: s.from_node or "-"),
    ("to", lambda s: f"{s.to_node}:{s.to_port}" if s.kind == "move" else s.to_node),
]


def admin(session: Session, rpc: str, request: Any, mutating: bool = True) -> Any:
    """One AdminService call through the SDK's routing, retries and error
    mapping (the SDK has no public admin surface for these yet)."""
    call = Call(rpc, request, admin=True, mutating=mutating, idempotent=not mutating)
    return session.client._call(call)


def message_json(msg: Any) -> Any:
    """A protobuf message as a JSON value, every field shown."""
    try:
        return json_format.MessageToDict(
            msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    except TypeError:  # older protobuf
        return json_format.MessageToDict(
            msg, preserving_proto_field_name=True, including_default_value_fields=True
        )


def list_moves(session: Session) -> list[Any]:
    return list(admin(session, "ListMoves", admin_pb2.ListMovesRequest(), mutating=False).moves)


def wait_moved(session: Session, queue: str, partition: int, timeout_s: float,
               on_poll: Any = None) -> None:  # fmt: skip
    """Until the move of ``queue/partition`` is no longer in flight."""
    deadline = time.monotonic() + timeout_s
    while True:
        moves = [m for m in list_moves(session) if (m.queue, m.partition) == (queue, partition)]
        if not moves:
            return
        if on_poll is not None:
            on_poll(moves[0])
        if time.monotonic() > deadline:
            phase = moves[0].phase
            raise Unavailable(f"move of {queue}/{partition} still {phase} after {timeout_s} s")
        time.sleep(POLL_S)


def get_plan(session: Session, kind: str, node: str = "", max_moves: int = 0) -> Any:
    req = admin_pb2.PlanRequest(kind=kind, node=node, max_moves=max_moves)
    return admin(session, "Plan", req, mutating=False)


def show_plan(plan: Any, as_json: bool, title: str) -> None:
    if as_json:
        print_json({**message_json(plan), "executed": False})
        return
    print_objects(STEP_COLUMNS, plan.steps, title=f"{title}: {len(plan.steps)} steps")
    for u in plan.unplaced:
        print_line(f"unplaced (no alive node can take it): {u}", stderr=True)
    if plan.more:
        print_line("more moves are needed: run again after this plan", stderr=True)


def execute_plan(session: Session, plan: Any, move_timeout_s: float, as_json: bool) -> int:
    """Run the steps in order, one at a time; returns the number executed."""
    with Progress(console=Console(stderr=True), disable=as_json) as bar:
        task = bar.add_task("executing", total=len(plan.steps))
        for step in plan.steps:
            label = f"{step.kind} {step.queue}/{step.partition} -> {step.to_node}"
            bar.update(task, description=label)
            if step.kind == "leader":
                admin(session, "TransferLeader", admin_pb2.TransferLeaderRequest(
                    queue=step.queue, partition=step.partition, to_node=step.to_node))  # fmt: skip
            else:
                admin(session, "MovePartition", admin_pb2.MovePartitionRequest(
                    queue=step.queue, partition=step.partition, from_node=step.from_node,
                    to_node=step.to_node, to_port=step.to_port))  # fmt: skip
                wait_moved(session, step.queue, step.partition, move_timeout_s)
            bar.advance(task)
    return len(plan.steps)


def report_executed(plan: Any, count: int, as_json: bool) -> None:
    if as_json:
        print_json({**message_json(plan), "executed": True, "steps_done": count})
    else:
        print_line(f"{count} steps executed")


def reject_throttle(throttle: int | None) -> None:
    if throttle is not None:
        raise click.UsageError(
            "--throttle is not implemented: pysyncobj has no rate limit on snapshot "
            "transfer (moves already run one at a time); see docs/operations.md"
        )
