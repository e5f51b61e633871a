"""``raftq partitions ...``: where a queue's partitions live and how far they reach."""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

import click

from raft_queue.cli.output import Column, json_option, print_json, print_objects

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
]


@click.group()
def partitions() -> None:
    """Partition placement and offsets."""


@partitions.command("describe")
@click.argument("queue")
@json_option
@click.pass_obj
def describe(session: Session, queue: str, as_json: bool) -> None:
    """Leader, replicas and [earliest, latest) offsets of each partition of QUEUE."""
    infos = session.client.partitions(queue)
    if as_json:
        print_json(infos)
        return
    print_objects(PARTITION_COLUMNS, infos, title=f"partitions of {queue}")
