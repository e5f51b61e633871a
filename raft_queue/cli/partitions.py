"""``raftq partitions ...``: where a queue's partitions live and how far they reach."""

from __future__ import annotations

import time
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import click

from raft_queue.cli import operations as ops
from raft_queue.cli.output import Column, json_option, print_json, print_line, print_objects

if TYPE_CHECKING:
    from raft_queue.cli.main import Session

PARTITION_COLUMNS: list[Column] = [
    ("partition", attrgetter("partition")),
    ("leader", lambda p: p.leader or "-"),
    ("leader address", lambda p: p.leader_address or "-"),
    ("replicas", lambda p: ",".join(p.replicas)),
    ("earliest", attrgetter("earliest_offset")),
    ("latest", attrgetter("latest_offset")),
    ("messages", attrgetter("messages")),
    ("in flight", attrgetter("in_flight")),
    ("epoch", attrgetter("epoch")),
    ("commit index", attrgetter("commit_index")),
    # Splits (docs/semantics.md): state, the partition it came from, its key range.
    ("state", lambda p: p.state + (" (gated)" if p.gated else "")),
    ("parent", lambda p: p.parent if p.parent >= 0 else "-"),
    ("keys", lambda p: f"h%{p.hash_modulus}={p.hash_residue}" if p.hash_modulus else "-"),
]


throttle_option = click.option(
    "--throttle",
    metavar="BYTES/S",
    default=None,
    help="Limit each new replica's catch-up (snapshot + log) to this rate, e.g. 10MB/s "
    "(default: the cluster's move_throttle_bytes_per_s, 0 = none).",
)


@click.group()
def partitions() -> None:
    """Partition placement and offsets."""


@partitions.command("describe")
@click.argument("queue", required=False)
@json_option
@click.pass_obj
def describe(session: Session, queue: str | None, as_json: bool) -> None:
    """Leader, replicas and [earliest, latest) offsets of each partition of
    QUEUE (of every queue when QUEUE is left out)."""
    names = [queue] if queue else [q.name for q in session.client.list_queues()]
    infos = {name: session.client.partitions(name) for name in names}
    if as_json:
        print_json(infos[queue] if queue else infos)
        return
    for name, parts in infos.items():
        print_objects(PARTITION_COLUMNS, parts, title=f"partitions of {name}")


@partitions.command("move")
@click.argument("queue")
@click.argument("partition", type=click.IntRange(min=0))
@click.option("--from", "from_node", required=True, help="Node whose replica moves.")
@click.option("--to", "to_node", required=True, help="Node that takes it (alive, holds none).")
@click.option("--port", "to_port", type=click.IntRange(0, 65535), default=0,
              help="Raft port on --to (default: its lowest free one).")  # fmt: skip
@click.option("--wait/--no-wait", default=True, show_default=True, help="Until the move is done.")
@throttle_option
@click.option("--move-timeout", type=float, default=600.0, show_default=True)
@json_option
@click.pass_obj
def move(session: Session, queue: str, partition: int, from_node: str, to_node: str,
         to_port: int, wait: bool, throttle: str | None, move_timeout: float,
         as_json: bool) -> None:  # fmt: skip
    """Replace PARTITION's replica on --from by a new one on --to (add, catch up, remove)."""
    rate = ops.parse_rate(throttle)
    info = session.client.move_partition(queue, partition, from_node, to_node, to_port,
                                         throttle_bytes_per_s=rate)  # fmt: skip
    started = time.monotonic()
    if wait:

        def show(m: Any) -> None:
            if not as_json:
                print_line(f"{queue}/{partition} -> {to_node}: {ops.move_progress(m)}",
                           stderr=True)  # fmt: skip

        ops.wait_moved(session, queue, partition, move_timeout, on_poll=show)
    elapsed = time.monotonic() - started
    if as_json:
        print_json({**ops.message_json(info), "done": wait, "elapsed_s": round(elapsed, 3)})
    elif wait:
        print_line(f"moved {queue}/{partition} from {from_node} to {to_node} in {elapsed:.1f} s")
    else:
        print_objects(ops.MOVE_COLUMNS, [info], title="move started")


@partitions.command("cancel")
@click.argument("queue")
@click.argument("partition", type=click.IntRange(min=0))
@json_option
@click.pass_obj
def cancel(session: Session, queue: str, partition: int, as_json: bool) -> None:
    """Cancel PARTITION's move (refused once it removes the old replica)."""
    info = session.client.cancel_move(queue, partition)
    if as_json:
        print_json(ops.message_json(info))
    else:
        print_line(f"cancelling the move of {queue}/{partition} to {info.to_node}")


@partitions.command("status")
@json_option
@click.pass_obj
def status(session: Session, as_json: bool) -> None:
    """Moves in flight: phase, catch-up (new replica's log index / leader's),
    bytes sent under a throttle, elapsed time."""
    moves = ops.list_moves(session)
    if as_json:
        print_json([ops.message_json(m) for m in moves])
        return
    print_objects(ops.MOVE_COLUMNS, moves, title=f"moves in flight: {len(moves)}")


@partitions.command("rebalance")
@click.option("--dry-run/--execute", default=True, show_default=True,
              help="Show the plan, or run it (moves one at a time).")  # fmt: skip
@click.option("--max-moves", type=click.IntRange(min=0), default=0, help="0: no limit.")
@throttle_option
@click.option("--move-timeout", type=float, default=600.0, show_default=True)
@json_option
@click.pass_obj
def rebalance(session: Session, dry_run: bool, max_moves: int, throttle: str | None,
              move_timeout: float, as_json: bool) -> None:  # fmt: skip
    """Even out replicas and preferred leaders (core/planner.py plan_rebalance)."""
    rate = ops.parse_rate(throttle)
    plan = ops.get_plan(session, "rebalance", max_moves=max_moves)
    if dry_run:
        ops.show_plan(plan, as_json, "rebalance plan")
        return
    done = ops.execute_plan(session, plan, move_timeout, as_json, throttle=rate)
    ops.report_executed(plan, done, as_json)


@click.group()
def leaders() -> None:
    """Partition leadership."""


@leaders.command("balance")
@click.option("--dry-run/--execute", default=False, show_default=True)
@json_option
@click.pass_obj
def balance(session: Session, dry_run: bool, as_json: bool) -> None:
    """Even out preferred leaders by reordering replicas (plan_leaders; no data moves)."""
    plan = ops.get_plan(session, "leaders")
    if dry_run:
        ops.show_plan(plan, as_json, "leader plan")
        return
    ops.report_executed(plan, ops.execute_plan(session, plan, 60.0, as_json), as_json)
