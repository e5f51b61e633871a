"""``raftq partitions move/cancel/status/rebalance``, ``raftq leaders balance``
and the steps behind ``raftq node drain/remove``.

Every call goes to the metadata leader (any node answers NotLeader with its
address, which the SDK follows). A move is recorded by the leader and run by
its mover (server/control/mover.py); ``--wait`` and plan execution poll ListMoves
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

from raft_queue.cli.output import Column, print_json, print_line, print_objects
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
    ("sent", lambda m: _sent(m)),
    ("throttle", lambda m: f"{human_bytes(m.throttle_bytes_per_s)}/s" if m.throttle_bytes_per_s
     else "-"),
    ("elapsed", lambda m: f"{max(0, time.time() * 1000 - m.started_ms) / 1000:.1f} s"),
]  # fmt: skip
STEP_COLUMNS: list[Column] = [
    ("step", lambda s: s.kind),
    ("queue", lambda s: s.queue),
    ("partition", lambda s: s.partition),
    ("from", lambda s: s.from_node or "-"),
    ("to", lambda s: f"{s.to_node}:{s.to_port}" if s.kind == "move" else s.to_node),
]


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3}  # fmt: skip


def parse_rate(value: str | None) -> int:
    """``--throttle``: bytes per second, e.g. ``5000000``, ``5MB/s``, ``512KiB``;
    None or ``0``: no limit of the command's own (the cluster default holds)."""
    if value is None:
        return 0
    text = value.strip().lower().removesuffix("/s").replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number) :]
    try:
        rate = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise click.BadParameter(
            f"{value!r}: bytes per second, e.g. 5000000, 5MB/s or 512KiB/s", param_hint="--throttle"
        ) from None
    if rate < 0:
        raise click.BadParameter("must be >= 0", param_hint="--throttle")
    return int(rate)


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _sent(m: Any) -> str:
    if not m.bytes_sent and not m.snapshot_bytes:
        return "-"
    total = f" of {human_bytes(m.snapshot_bytes)} snapshot" if m.snapshot_bytes else ""
    return f"{human_bytes(m.bytes_sent)}{total}"


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
    return list(session.client.list_moves().moves)


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
    return session.client.plan(kind, node=node, max_moves=max_moves)


def show_plan(plan: Any, as_json: bool, title: str) -> None:
    if as_json:
        print_json({**message_json(plan), "executed": False})
        return
    print_objects(STEP_COLUMNS, plan.steps, title=f"{title}: {len(plan.steps)} steps")
    for u in plan.unplaced:
        print_line(f"unplaced (no alive node can take it): {u}", stderr=True)
    if plan.more:
        print_line("more moves are needed: run again after this plan", stderr=True)


def execute_plan(session: Session, plan: Any, move_timeout_s: float, as_json: bool,
                 throttle: int = 0) -> int:  # fmt: skip
    """Run the steps in order, one at a time (each move's catch-up limited to
    ``throttle`` bytes/s; 0: the cluster default); returns the number executed."""
    client = session.client
    with Progress(console=Console(stderr=True), disable=as_json) as bar:
        task = bar.add_task("executing", total=len(plan.steps))
        for step in plan.steps:
            label = f"{step.kind} {step.queue}/{step.partition} -> {step.to_node}"
            bar.update(task, description=label)
            if step.kind == "leader":
                client.transfer_leader(step.queue, step.partition, step.to_node)
            else:
                client.move_partition(step.queue, step.partition, step.from_node, step.to_node,
                                      step.to_port, throttle_bytes_per_s=throttle)  # fmt: skip

                def show(m: Any, label: str = label) -> None:
                    bar.update(task, description=f"{label}: {move_progress(m)}")

                wait_moved(session, step.queue, step.partition, move_timeout_s, on_poll=show)
            bar.advance(task)
    return len(plan.steps)


def move_progress(m: Any) -> str:
    """One line: phase, log catch-up and bytes sent (under a throttle)."""
    parts = [m.phase]
    if m.leader_index:
        parts.append(f"log {m.match_index}/{m.leader_index}")
    if m.bytes_sent or m.snapshot_bytes:
        parts.append(f"sent {_sent(m)}")
    if m.throttle_bytes_per_s:
        parts.append(f"at <= {human_bytes(m.throttle_bytes_per_s)}/s")
    return ", ".join(parts)


def report_executed(plan: Any, count: int, as_json: bool) -> None:
    if as_json:
        print_json({**message_json(plan), "executed": True, "steps_done": count})
    else:
        print_line(f"{count} steps executed")
