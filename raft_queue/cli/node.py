"""``raftq node``: run one node process in the foreground (``--config``), or
operate on a node of a running cluster (``drain``, ``remove``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from raft_queue.cli import operations as ops
from raft_queue.cli.output import json_option, print_line

if TYPE_CHECKING:
    from raft_queue.cli.main import Session


@click.group(invoke_without_command=True)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True),
    help="Node TOML file (see configs/): run that node.",
)
@click.option("--node", "node_id", default="", help="Node id, when the file describes several.")
@click.option("--log-level", default="INFO", show_default=True)
@click.pass_context
def node(ctx: click.Context, config_path: str | None, node_id: str, log_level: str) -> None:
    """Run a raft_queue node until SIGINT/SIGTERM (--config), or drain/remove one."""
    if ctx.invoked_subcommand is not None:
        return
    if not config_path:
        raise click.UsageError("--config is required to run a node")
    from raft_queue.server.main import run

    run(config_path, node_id, log_level)


def set_state(session: Session, node_id: str, state: str) -> None:
    session.client.set_node_state(node_id, state)


@node.command("drain")
@click.argument("node_id")
@click.option("--dry-run/--execute", default=False, show_default=True)
@click.option("--throttle", metavar="BYTES/S", default=None,
              help="Limit each new replica's catch-up, e.g. 10MB/s.")  # fmt: skip
@click.option("--move-timeout", type=float, default=600.0, show_default=True)
@json_option
@click.pass_obj
def drain(session: Session, node_id: str, dry_run: bool, throttle: str | None,
          move_timeout: float, as_json: bool) -> None:  # fmt: skip
    """Mark NODE_ID draining, then move its preferred leaderships and replicas
    off it, one at a time (plan_drain). Then ``raftq node remove`` it."""
    if dry_run:
        ops.show_plan(ops.get_plan(session, "drain", node_id), as_json, f"drain {node_id}")
        return
    rate = ops.parse_rate(throttle)
    set_state(session, node_id, "draining")
    plan = ops.get_plan(session, "drain", node_id)
    done = ops.execute_plan(session, plan, move_timeout, as_json, throttle=rate)
    ops.report_executed(plan, done, as_json)


@node.command("remove")
@click.argument("node_id")
@click.pass_obj
def remove(session: Session, node_id: str) -> None:
    """Mark NODE_ID removed (refused while it holds a replica: drain it first)."""
    set_state(session, node_id, "removed")
    print_line(f"node {node_id} removed")


@node.command("undrain")
@click.argument("node_id")
@click.pass_obj
def undrain(session: Session, node_id: str) -> None:
    """Make a draining node alive again (it takes replicas again)."""
    set_state(session, node_id, "alive")
    print_line(f"node {node_id} alive")
