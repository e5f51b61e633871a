"""``raftq controller list|add|remove``: the metadata group's voters.

A change is recorded by the metadata leader and made by it through Raft
membership change, one at a time (server/control/controllers.py); the command waits
until it is finished unless ``--no-wait``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from raft_queue.cli.operations import message_json
from raft_queue.cli.output import Column, json_option, print_json, print_line, print_objects
from raft_queue.errors import Unavailable

if TYPE_CHECKING:
    from raft_queue.cli.main import Session

POLL_S = 0.5

CONTROLLER_COLUMNS: list[Column] = [
    ("node", lambda c: c.node),
    ("raft address", lambda c: c.raft_address),
    ("leader", lambda c: c.leader),
]


@click.group()
def controller() -> None:
    """Voters of the metadata group (the cluster's controllers)."""


@controller.command("list")
@json_option
@click.pass_obj
def list_(session: Session, as_json: bool) -> None:
    """The voters, their leader and the change in flight."""
    show(session.client.list_controllers(), as_json)


@controller.command("add")
@click.argument("node_id")
@click.option("--wait/--no-wait", default=True, show_default=True)
@click.option("--timeout", "timeout_s", type=float, default=120.0, show_default=True)
@json_option
@click.pass_obj
def add(session: Session, node_id: str, wait: bool, timeout_s: float, as_json: bool) -> None:
    """Make NODE_ID (registered, alive) a voter: it starts a metadata replica,
    catches up, and joins the group."""
    change(session, "add", node_id, wait, timeout_s, as_json)


@controller.command("remove")
@click.argument("node_id")
@click.option("--wait/--no-wait", default=True, show_default=True)
@click.option("--timeout", "timeout_s", type=float, default=120.0, show_default=True)
@json_option
@click.pass_obj
def remove(session: Session, node_id: str, wait: bool, timeout_s: float, as_json: bool) -> None:
    """Take NODE_ID out of the voters (refused for the last one, or when the
    rest would not be a live majority). The node keeps serving as a non-voter."""
    change(session, "remove", node_id, wait, timeout_s, as_json)


def change(session: Session, action: str, node_id: str, wait: bool, timeout_s: float,
           as_json: bool) -> None:  # fmt: skip
    result = session.client.change_controller(action, node_id)
    if wait:
        result = wait_changed(session, action, node_id, timeout_s)
    if as_json:
        print_json({**message_json(result), "done": wait})
    elif wait:
        print_line(f"{action} {node_id}: done")
        show(result, False)
    else:
        print_line(f"{action} {node_id}: started ({result.change or 'recorded'})")


def wait_changed(session: Session, action: str, node_id: str, timeout_s: float) -> Any:
    """Until no change is in flight and NODE_ID is (add) or is not (remove) a voter."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = session.client.list_controllers()
        except Unavailable:
            result = None  # e.g. the metadata leader just left
        if result is not None and not result.change:
            voters = {c.node for c in result.controllers}
            if (node_id in voters) == (action == "add"):
                return result
        if time.monotonic() > deadline:
            raise Unavailable(f"controller {action} {node_id} not finished after {timeout_s} s")
        time.sleep(POLL_S)


def show(result: Any, as_json: bool) -> None:
    if as_json:
        print_json(message_json(result))
        return
    print_objects(CONTROLLER_COLUMNS, list(result.controllers), title="controllers")
    if result.change:
        print_line(f"change in flight: {result.change}")
